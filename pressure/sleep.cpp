#include "pressure/sleep.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "backend/offload_capability.h"
#include "common/assert.h"
#include "common/enum_value.h"
#include "common/host_guarded.h"
#include "common/sizes.h"
#include "pressure/client.h"
#include "pressure/gpu_pressure.h"
#include "pressure/residency.h"
#include "stream/stream.h"
#include "uvm/events.h"
#include "uvm/manager.h"
#include "uvm/mem.h"

namespace uvm {

ClientRoots::ClientRoots(Manager &mgr, uint32_t gpu)
    : mgr_(mgr), gpu_(gpu), pmm_(std::make_unique<chunk::Pmm>(this, mgr.gpu(gpu).info.phys_space)) {}

ClientRoots::~ClientRoots() {
    pmm_.reset();  // gives every root back through free_root_chunk
    std::lock_guard<std::mutex> guard(lock_);
    release_reserve();
    UVM_ASSERT(backed_.empty() && offloaded_.empty());
}

void ClientRoots::release_reserve() {
    for (uint64_t phys : reserve_)
        mgr_.backend().root_chunk_free(gpu_, phys);
    events::held_changed(mgr_, gpu_, -static_cast<int64_t>(reserve_.size() * kRootChunkSize));
    reserve_.clear();
    next_growth_ = 1;
}

uvm_status_t ClientRoots::alloc_root_chunks(size_t count, uint64_t *phys) {
    std::lock_guard<std::mutex> guard(lock_);
    if (!offloaded_.empty())
        return UVM_ERR_OUT_OF_MEMORY;  // asleep: nothing grows (allocations wait at the gate)
    size_t grow = std::max(count, next_growth_);
    try {
        // So that nothing fails once the backend gave (nor when a root comes
        // back into the reserve: free_root_chunk).
        backed_.reserve(backed_.size() + count);
        reserve_.reserve(backed_.size() + reserve_.size() + grow);
    } catch (const std::bad_alloc &) {
        return UVM_ERR_NO_HOST_MEMORY;
    }
    // From the reserve: `count` adjacent roots (it is sorted).
    for (size_t i = 0; i + count <= reserve_.size(); ++i) {
        if (reserve_[i + count - 1] != reserve_[i] + (count - 1) * kRootChunkSize)
            continue;
        *phys = reserve_[i];
        backed_.insert(backed_.end(), reserve_.begin() + static_cast<std::ptrdiff_t>(i),
                       reserve_.begin() + static_cast<std::ptrdiff_t>(i + count));
        reserve_.erase(reserve_.begin() + static_cast<std::ptrdiff_t>(i),
                       reserve_.begin() + static_cast<std::ptrdiff_t>(i + count));
        return UVM_OK;
    }
    // The client's alone (on CUDA in long driver handles that hold nobody
    // else's memory: a sleep gives back few of them). A run beyond the
    // request where the driver has it, else the request.
    backend::OffloadCapability *off = mgr_.backend().offload();
    UVM_ASSERT(off);  // a client is sleepable only where the backend can offload
    uvm_status_t status = off->root_chunks_alloc_owned(gpu_, grow, phys);
    if (status == UVM_ERR_OUT_OF_MEMORY && grow > count) {
        grow = count;
        status = off->root_chunks_alloc_owned(gpu_, grow, phys);
    }
    if (status != UVM_OK)
        return status;
    next_growth_ = std::min(next_growth_ * 2, kMaxGrowth);
    for (size_t i = 0; i < count; ++i)
        backed_.push_back(*phys + i * kRootChunkSize);
    for (size_t i = count; i < grow; ++i)
        reserve_.push_back(*phys + i * kRootChunkSize);
    std::sort(reserve_.begin(), reserve_.end());
    events::held_changed(mgr_, gpu_, static_cast<int64_t>(grow * kRootChunkSize));
    return UVM_OK;
}

uint64_t ClientRoots::trim() {
    uint64_t before = 0;
    {
        std::lock_guard<std::mutex> guard(lock_);
        before = released_bytes_;
    }
    (void)pmm_->trim();  // its whole free roots into the reserve (free_root_chunk)
    std::lock_guard<std::mutex> guard(lock_);
    for (size_t i = 0; i < reserve_.size();)
        if (release_whole_span(reserve_[i]) == 0)
            ++i;  // its span still holds a root of the client's: it stays, for the client's next growth
    next_growth_ = 1;
    return released_bytes_ - before;
}

uint64_t ClientRoots::release_whole_span(uint64_t phys) {
    uint64_t first = 0;
    size_t n = 0;
    mgr_.backend().root_chunk_span(gpu_, phys, &first, &n);
    const auto at = std::lower_bound(reserve_.begin(), reserve_.end(), first);
    if (static_cast<size_t>(reserve_.end() - at) < n)
        return 0;
    for (size_t k = 0; k < n; ++k)
        if (at[static_cast<std::ptrdiff_t>(k)] != first + k * kRootChunkSize)
            return 0;
    for (size_t k = 0; k < n; ++k)
        mgr_.backend().root_chunk_free(gpu_, first + k * kRootChunkSize);
    reserve_.erase(at, at + static_cast<std::ptrdiff_t>(n));
    const uint64_t bytes = n * kRootChunkSize;
    released_bytes_ += bytes;
    events::held_changed(mgr_, gpu_, -static_cast<int64_t>(bytes));
    return bytes;
}

uint64_t ClientRoots::reserve_bytes() const {
    std::lock_guard<std::mutex> guard(lock_);
    return reserve_.size() * kRootChunkSize;
}

void ClientRoots::free_root_chunk(uint64_t phys) {
    std::lock_guard<std::mutex> guard(lock_);
    auto take = [&](std::vector<uint64_t> &from) {
        auto it = std::find(from.begin(), from.end(), phys);
        if (it == from.end())
            return false;
        *it = from.back();
        from.pop_back();
        return true;
    };
    if (take(backed_)) {
        // Into the reserve (within its capacity), and back with its span's
        // last root (ClientRoots, in sleep.h).
        UVM_ASSERT(reserve_.size() < reserve_.capacity());
        reserve_.insert(std::upper_bound(reserve_.begin(), reserve_.end(), phys), phys);
        (void)release_whole_span(phys);
        return;
    }
    // An offloaded root (its objects freed while the client slept): only its
    // address goes back, its memory went at the sleep.
    const bool offloaded = take(offloaded_);
    UVM_ASSERT(offloaded);
    (void)offloaded;
    mgr_.backend().root_chunk_free(gpu_, phys);
}

uvm_status_t ClientRoots::offload() {
    const std::shared_lock<std::shared_mutex> moving(mgr_.gpu(gpu_).pressure->roots_moving);
    std::lock_guard<std::mutex> guard(lock_);
    if (backed_.empty()) {
        release_reserve();  // it holds nothing: it goes back, not asleep
        return UVM_OK;
    }
    backend::OffloadCapability *off = mgr_.backend().offload();
    UVM_ASSERT(off);  // a client is sleepable only where the backend can offload
    // The reserve's roots go with the backed ones: they share driver handles
    // (root_chunks_alloc_owned), which go back only whole. Offloaded, they
    // then go for good (root_chunk_free of an offloaded root gives its
    // address back): the reserve holds nothing, so it goes back, not asleep,
    // and only once nothing can fail.
    try {
        offloaded_.reserve(offloaded_.size() + backed_.size());
        going_.reserve(backed_.size() + reserve_.size());
    } catch (const std::bad_alloc &) {
        return UVM_ERR_NO_HOST_MEMORY;
    }
    going_.assign(backed_.begin(), backed_.end());
    going_.insert(going_.end(), reserve_.begin(), reserve_.end());
    const uvm_status_t status = off->root_chunks_offload(gpu_, going_.data(), going_.size());
    if (status != UVM_OK)
        return status;
    const uint64_t bytes = backed_.size() * kRootChunkSize;
    offloaded_.insert(offloaded_.end(), backed_.begin(), backed_.end());
    backed_.clear();
    events::held_changed(mgr_, gpu_, -static_cast<int64_t>(bytes));
    release_reserve();
    return UVM_OK;
}

uvm_status_t ClientRoots::restore() {
    const std::shared_lock<std::shared_mutex> moving(mgr_.gpu(gpu_).pressure->roots_moving);
    std::lock_guard<std::mutex> guard(lock_);
    if (offloaded_.empty())
        return UVM_OK;
    try {
        backed_.reserve(backed_.size() + offloaded_.size());
        reserve_.reserve(backed_.size() + offloaded_.size() + reserve_.size());  // see free_root_chunk
    } catch (const std::bad_alloc &) {
        return UVM_ERR_NO_HOST_MEMORY;
    }
    // Sorted, so that the backend sees adjacent roots side by side (on CUDA
    // one driver handle per run).
    std::sort(offloaded_.begin(), offloaded_.end());
    const uvm_status_t status = mgr_.backend().offload()->root_chunks_restore(gpu_, offloaded_.data(), offloaded_.size());
    if (status != UVM_OK)
        return status;
    const uint64_t bytes = offloaded_.size() * kRootChunkSize;
    backed_.insert(backed_.end(), offloaded_.begin(), offloaded_.end());
    offloaded_.clear();
    events::held_changed(mgr_, gpu_, static_cast<int64_t>(bytes));
    return UVM_OK;
}

uint64_t ClientRoots::offloaded_bytes() const {
    std::lock_guard<std::mutex> guard(lock_);
    return offloaded_.size() * kRootChunkSize;
}

uint64_t ClientRoots::held_bytes() const {
    std::lock_guard<std::mutex> guard(lock_);
    return backed_.size() * kRootChunkSize;
}

void SleepState::release() {
    std::unique_lock<std::shared_mutex> exclusive(gate);
    backup.release();
    host_bytes = 0;
    for (uint32_t g = 0; g < UVM_MAX_GPUS; ++g) {
        images[g] = SleepImage{};
        std::lock_guard<std::mutex> guard(roots_lock);
        roots[g].reset();  // its PMM gives every root back (offloaded ones: their addresses)
    }
}

bool SleepState::holds_anything() const {
    for (uint32_t g = 0; g < UVM_MAX_GPUS; ++g)
        if (roots[g])
            return true;
    return backup.held() != 0;
}

chunk::Pmm *client_pmm(Manager &mgr, Client *client, uint32_t gpu, uvm_status_t *status) {
    *status = UVM_OK;
    if (!client || !client->sleep)
        return nullptr;
    SleepState &s = *client->sleep;
    std::lock_guard<std::mutex> guard(s.roots_lock);
    if (!s.roots[gpu]) {
        try {
            s.roots[gpu] = std::make_unique<ClientRoots>(mgr, gpu);
        } catch (const std::bad_alloc &) {
            *status = UVM_ERR_NO_HOST_MEMORY;
            return nullptr;
        }
    }
    return &s.roots[gpu]->pmm();
}

namespace {

// Every sleepable client's roots of `gpu` that exist, with their lock held.
template <typename F>
void for_each_client_roots(Manager &mgr, uint32_t gpu, F &&f) {
    for (const auto &c : mgr.clients().all()) {
        if (!c->sleep)
            continue;
        std::lock_guard<std::mutex> guard(c->sleep->roots_lock);
        if (c->sleep->roots[gpu])
            f(*c->sleep->roots[gpu]);
    }
}

}  // namespace

void client_roots_stats(Manager &mgr, uint32_t gpu, chunk::PmmStats *sum) {
    for_each_client_roots(mgr, gpu, [&](ClientRoots &roots) {
        // Offloaded roots are the driver's memory: their chunks (an asleep
        // object's, the free rest of a root) are held by nobody. A client's
        // roots on a GPU are all offloaded or none (offload and restore are
        // all or nothing), and none moves while the caller reads.
        if (roots.offloaded_bytes())
            return;
        chunk::add_stats(sum, roots.pmm().stats());
        // The reserve is held free memory of 2M: cached, as the PMM's free roots.
        const uint64_t reserve = roots.reserve_bytes();
        sum->root_chunks += reserve / kRootChunkSize;
        sum->bytes_free[2] += reserve;
    });
}

uint64_t client_roots_trim(Manager &mgr, uint32_t gpu) {
    uint64_t bytes = 0;
    for_each_client_roots(mgr, gpu, [&](ClientRoots &roots) { bytes += roots.trim(); });
    return bytes;
}

uvm_status_t SleepGate::enter(Client *client) {
    if (!client || !client->sleep)
        return UVM_OK;
    lock_ = std::shared_lock<std::shared_mutex>(client->sleep->gate);
    if (client->sleep->asleep.load()) {
        lock_.unlock();
        return UVM_ERR_ASLEEP;
    }
    return UVM_OK;
}

void sleep_object_released(Manager &mgr, Mem &mem) {
    UVM_ASSERT(mem.asleep && mem.client && mem.client->sleep);
    if (mem.sleep_uncharged)
        mem.client->sleep->asleep_bytes[mem.owner] -= mem.alloc_size;
    else if (!mem.evicted)
        uncharge_client(mgr, mem);  // asleep, but still (or again) in the budget
    mem.sleep_uncharged = false;
    mem.asleep = false;
}

bool sleep_params_valid(const uvm_sleep_params_t &params) {
    auto known = [](const uvm_sleep_mode_t &m) {
        const int v = enum_value(m);  // any int a C caller put there
        return v >= UVM_SLEEP_DEFAULT && v <= UVM_SLEEP_DISCARD;
    };
    if (!known(params.mode) || !known(params.tags_mode) || (params.tag_count && !params.tags))
        return false;
    for (uint32_t i = 0; i < params.tag_count; ++i)
        if (!params.tags[i])
            return false;
    return true;
}

namespace {

// The client's live vidmem objects, by GPU and physical address (the order
// of the sleep image, and of the roots).
std::vector<std::shared_ptr<Mem>> vidmem_of(Manager &mgr, const Client &c) {
    std::vector<std::shared_ptr<Mem>> all = mgr.live_objects();
    std::vector<std::shared_ptr<Mem>> mine;
    for (auto &m : all)
        if (m->client.get() == &c && m->is_vidmem())
            mine.push_back(std::move(m));
    // The chunk addresses are read without the locks: only for the order.
    std::sort(mine.begin(), mine.end(), [](const std::shared_ptr<Mem> &a, const std::shared_ptr<Mem> &b) {
        const uint64_t pa = a->chunks.size() ? a->chunks[0] : 0, pb = b->chunks.size() ? b->chunks[0] : 0;
        return a->owner != b->owner ? a->owner < b->owner : pa < pb;
    });
    return mine;
}

// Whether `mem`'s bytes are kept: its own mode, else its tag's, else the sleep's.
bool keeps(const Mem &mem, const uvm_sleep_params_t &params) {
    if (mem.sleep_mode != UVM_SLEEP_DEFAULT)
        return mem.sleep_mode == UVM_SLEEP_KEEP;
    uvm_sleep_mode_t mode = params.mode;
    if (mem.tag && params.tags_mode != UVM_SLEEP_DEFAULT)
        for (uint32_t i = 0; i < params.tag_count; ++i)
            if (std::strcmp(params.tags[i], mem.tag) == 0)
                mode = params.tags_mode;
    return mode != UVM_SLEEP_DISCARD;
}

// Copy every asleep, kept object of GPU `gpu` between its chunks and the
// image (to host: `out`), or zero the discarded ones on the way in. The
// objects are read under their locks into pieces, and pieces side by side
// both in vidmem and in the image are one copy: a model's many small
// tensors sit packed in the client's roots, and each copy costs a driver
// round trip. The copies run with the client's roots held backed (no root
// goes back meanwhile, should an asleep object be freed), not under the
// objects' locks.
uvm_status_t move_image(Manager &mgr, SleepState &s, const std::vector<std::shared_ptr<Mem>> &objects, uint32_t gpu,
                        bool out) {
    struct Piece {
        uint64_t phys, offset, size;
        bool kept;
    };
    std::vector<Piece> runs;
    for (const auto &m : objects) {
        if (m->owner != gpu)
            continue;
        std::lock_guard<uvm::Mutex> guard(m->lock);
        if (m->gone() || !m->asleep || m->evicted || (out && !m->sleep_kept))
            continue;
        const Piece p{m->chunks[0], m->sleep_offset, m->alloc_size, m->sleep_kept};
        Piece *last = runs.empty() ? nullptr : &runs.back();
        if (last && last->kept == p.kept && last->phys + last->size == p.phys &&
            (!p.kept || last->offset + last->size == p.offset))
            last->size += p.size;
        else
            runs.push_back(p);
    }
    if (runs.empty())
        return UVM_OK;
    backend::Backend &b = mgr.backend();
    const SleepImage &image = s.images[gpu];
    const std::unique_lock<std::mutex> backed = s.roots[gpu]->hold_backed();
    for (const Piece &r : runs) {
        if (!r.kept) {
            const uvm_status_t status = b.ce_memset(gpu, backend::CeAddress::vid(r.phys), 0, r.size);  // discarded: back zeroed
            if (status != UVM_OK)
                return status;
            continue;
        }
        // A copy per piece of the backup it spans, each once that piece is
        // ready (a first sleep's are made ready meanwhile).
        for (uint64_t done = 0; done < r.size;) {
            uint64_t dma = 0, contiguous = 0;
            uvm_status_t status = s.backup.at(gpu, image.base + r.offset + done, &dma, &contiguous);
            const uint64_t n = std::min(r.size - done, contiguous);
            const backend::CeAddress vid = backend::CeAddress::vid(r.phys + done), sys = backend::CeAddress::sys(dma);
            if (status == UVM_OK)
                status = out ? b.ce_copy(gpu, sys, vid, n) : b.ce_copy(gpu, vid, sys, n);
            if (status != UVM_OK)
                return status;
            done += n;
        }
    }
    return UVM_OK;
}

// Wake's and a failed sleep's last step: every object awake again, the
// images gone (the backup itself is the caller's to keep or cut).
void end_sleep(Manager &mgr, SleepState &s, const std::vector<std::shared_ptr<Mem>> &objects) {
    for (const auto &m : objects) {
        std::lock_guard<uvm::Mutex> guard(m->lock);
        m->asleep = false;
        m->sleep_kept = false;
    }
    for (uint32_t g = 0; g < mgr.gpu_count(); ++g) {
        s.images[g] = SleepImage{};
        s.asleep_bytes[g].store(0);
    }
    s.host_bytes.store(0);
}

// Charge (wake: `charged`) or uncharge (sleep) the first `count` objects,
// where they are resident and asleep, to their client's budget, and count
// them as given back or not. A charge that fails undoes the ones before it.
// Takes no host memory. Each object says which it is (sleep_uncharged), so
// that a free racing with the sleep or the wake settles its own account.
uvm_status_t set_charged(Manager &mgr, SleepState &s, const std::vector<std::shared_ptr<Mem>> &objects, size_t count,
                         bool charged) {
    for (size_t i = 0; i < count; ++i) {
        Mem &m = *objects[i];
        uvm_status_t status = UVM_OK;
        {
            std::lock_guard<uvm::Mutex> guard(m.lock);
            if (m.gone() || !m.asleep || m.evicted || m.sleep_uncharged != charged)
                continue;  // an evicted object's memory left the budget when it went
            if (charged)
                status = host_guarded([&] { return charge_client(mgr, m, nullptr); });
            else
                uncharge_client(mgr, m);
            if (status == UVM_OK) {
                m.sleep_uncharged = !charged;
                if (charged)
                    s.asleep_bytes[m.owner] -= m.alloc_size;
                else
                    s.asleep_bytes[m.owner] += m.alloc_size;
            }
        }
        if (status != UVM_OK) {
            set_charged(mgr, s, objects, i, false);
            return status;
        }
    }
    return UVM_OK;
}

// Offload the roots of every GPU in `gpus` (a bitmask); undone GPU by GPU
// on failure by the caller. Whole free roots go too, as they are: the wake
// gives their addresses back before it restores the rest (restore_gpus), and
// a sleep that fails restores them with the rest, as they were. (Trimmed
// before the offload, they would be gone should it fail; trimmed after, the
// trim's own host allocation could fail once the memory went.)
uvm_status_t offload_gpus(Manager &mgr, SleepState &s, uint64_t gpus, uint64_t *done) {
    *done = 0;
    for (uint32_t g = 0; g < mgr.gpu_count(); ++g) {
        if (!((gpus >> g) & 1u) || !s.roots[g])
            continue;
        const uvm_status_t status = s.roots[g]->offload();
        if (status != UVM_OK)
            return status;
        *done |= uint64_t{1} << g;
    }
    return UVM_OK;
}

// Restore the roots of every GPU in `gpus`, making room as an allocation
// does (streams' finished memory, then eviction of evictable objects). A
// wake (`trim`) first gives back the addresses of the whole free roots (those
// free at the sleep, and those whose objects were freed since); a failed
// sleep's undo restores every root as it was.
uvm_status_t restore_gpus(Manager &mgr, SleepState &s, uint64_t gpus, bool trim, uint64_t *done) {
    *done = 0;
    for (uint32_t g = 0; g < mgr.gpu_count(); ++g) {
        if (!((gpus >> g) & 1u) || !s.roots[g])
            continue;
        ClientRoots &roots = *s.roots[g];
        if (trim)
            roots.trim();
        uvm_status_t status = roots.restore();
        // The memory must be the driver's free memory: whole free roots that
        // the GPU's PMMs (and threads' caches) keep, and what making room
        // frees into them, go back to it before each try.
        auto give_back_and_restore = [&] {
            if (give_back_free_roots(mgr, g) == 0)
                mgr.backend().trim(g);  // what the backend keeps goes back all the same
            return roots.restore();
        };
        if (status == UVM_ERR_OUT_OF_MEMORY)
            status = host_guarded([&] {
                uvm_status_t st = give_back_and_restore();
                if (st == UVM_ERR_OUT_OF_MEMORY)
                    st = retry_with_room(mgr, true, g, RoomNeed{roots.offloaded_bytes(), 0}, nullptr, nullptr,
                                         give_back_and_restore);
                return st;
            });
        if (status != UVM_OK)
            return status;
        *done |= uint64_t{1} << g;
    }
    return UVM_OK;
}

// Sleep's last step: out of the budget, counted as given back.
void fall_asleep(Manager &mgr, SleepState &s, const std::vector<std::shared_ptr<Mem>> &objects) {
    set_charged(mgr, s, objects, objects.size(), false);
    s.asleep = true;
}

uint64_t all_gpus(const Manager &mgr) { return (uint64_t{1} << mgr.gpu_count()) - 1u; }

}  // namespace

uvm_status_t client_sleep(Manager &mgr, Client &c, const uvm_sleep_params_t &params) {
    if (!c.sleep || !mgr.backend().offload())
        return UVM_ERR_NOT_SUPPORTED;
    SleepState &s = *c.sleep;
    std::unique_lock<std::shared_mutex> gate(s.gate);  // no allocation of the client in flight
    if (s.asleep.load())
        return UVM_OK;
    // Objects freed while work still used them hold chunks of the client's
    // roots until that work is done: it must be, before the memory goes.
    uvm_status_t status = host_guarded([&] { return mgr.streams().settle_retiring(&c); });
    if (status != UVM_OK)
        return status;
    const std::vector<std::shared_ptr<Mem>> objects = vidmem_of(mgr, c);

    // 1. Every object asleep (calls needing its memory say ASLEEP from now,
    // eviction passes it by), once it can go and its stream work is done;
    // the kept bytes' places in each GPU's image.
    uint64_t image_size[UVM_MAX_GPUS] = {};
    for (const auto &m : objects) {
        std::lock_guard<uvm::Mutex> guard(m->lock);
        if (m->gone())
            continue;
        if (m->exported || m->imported) {
            status = UVM_ERR_BUSY;  // another process maps its memory
            break;
        }
        m->users.for_each([&](const std::shared_ptr<Stream> &user) {
            if (status == UVM_OK)
                status = host_guarded([&] { return mgr.streams().synchronize(*user); });
        });
        if (status != UVM_OK)
            break;
        m->asleep = true;
        m->sleep_kept = !m->evicted && keeps(*m, params);
        if (m->sleep_kept) {
            // Packed in the objects' order (by address), so that neighbours
            // in vidmem are neighbours in the image: one copy (move_image).
            m->sleep_offset = image_size[m->owner];
            image_size[m->owner] += m->alloc_size;
        }
    }
    // 2. The images laid out end to end in the backup, which grows by what
    // it lacks (made ready meanwhile by other threads), and filled.
    uint64_t kept = 0;
    for (uint32_t g = 0; g < mgr.gpu_count(); ++g) {
        s.images[g] = SleepImage{kept, image_size[g]};
        kept += image_size[g];
    }
    const uint64_t had = s.backup.held();
    if (status == UVM_OK)
        status = s.backup.start_growth(kept > had ? kept - had : 0, s.pin_threads.load());
    if (status == UVM_OK) {
        s.host_bytes = kept;
        for (uint32_t g = 0; status == UVM_OK && g < mgr.gpu_count(); ++g)
            if (image_size[g])
                status = host_guarded([&] { return move_image(mgr, s, objects, g, true); });
        // A failed piece comes first: a copy that waited on it failed for it.
        const uvm_status_t grown = s.backup.finish_growth();  // undone on failure
        if (grown != UVM_OK)
            status = grown;
    }
    // 3. The roots' memory back to the driver.
    uint64_t offloaded = 0;
    if (status == UVM_OK)
        status = host_guarded([&] { return offload_gpus(mgr, s, all_gpus(mgr), &offloaded); });
    if (status != UVM_OK) {
        // Back as it was: the GPUs offloaded so far restored and refilled.
        // Their memory went back a moment ago; should another process have
        // taken it meanwhile, the client stays asleep, intact, and says why.
        uint64_t restored = 0;
        const uvm_status_t undo = host_guarded([&] { return restore_gpus(mgr, s, offloaded, false, &restored); });
        for (uint32_t g = 0; undo == UVM_OK && g < mgr.gpu_count(); ++g)
            if ((offloaded >> g) & 1u)
                (void)host_guarded([&] { return move_image(mgr, s, objects, g, false); });  // best effort: the failure being reported comes first
        if (undo != UVM_OK) {
            s.backup.commit_growth();  // it holds the kept bytes
            fall_asleep(mgr, s, objects);
            return status;
        }
        s.backup.undo_growth();  // as it was
        end_sleep(mgr, s, objects);
        return status;
    }
    s.backup.commit_growth();
    fall_asleep(mgr, s, objects);
    return UVM_OK;
}

uvm_status_t client_wake(Manager &mgr, Client &c) {
    if (!c.sleep)
        return UVM_ERR_NOT_SUPPORTED;
    SleepState &s = *c.sleep;
    std::unique_lock<std::shared_mutex> gate(s.gate);
    if (!s.asleep.load())
        return UVM_OK;
    const std::vector<std::shared_ptr<Mem>> objects = vidmem_of(mgr, c);
    // 1. Back into the budget (evicting the client's own evictable objects
    // where it must, as a restore does).
    uvm_status_t status = set_charged(mgr, s, objects, objects.size(), true);
    if (status != UVM_OK)
        return status;
    // 2. The memory, under the same addresses.
    uint64_t restored = 0;
    status = host_guarded([&] { return restore_gpus(mgr, s, all_gpus(mgr), true, &restored); });
    // 3. The bytes.
    for (uint32_t g = 0; status == UVM_OK && g < mgr.gpu_count(); ++g)
        status = host_guarded([&] { return move_image(mgr, s, objects, g, false); });
    if (status != UVM_OK) {
        uint64_t again = 0;
        // Should the memory not go back again, the roots stay held: the
        // client is asleep all the same, and the next wake finds them backed.
        (void)offload_gpus(mgr, s, restored, &again);
        set_charged(mgr, s, objects, objects.size(), false);
        return status;
    }
    end_sleep(mgr, s, objects);
    s.asleep = false;
    if (s.host_policy.load() == UVM_SLEEP_HOST_RELEASE)
        s.backup.shrink_to(s.host_reserve.load(), s.pin_threads.load());  // the host's memory back, but the reserve
    return UVM_OK;
}

bool sleep_policy_valid(const uvm_sleep_policy_t &policy) {
    const int host = enum_value(policy.host);
    return (host == UVM_SLEEP_HOST_KEEP || host == UVM_SLEEP_HOST_RELEASE) &&
           policy.pin_threads <= SleepBackup::kMaxThreads && policy.host_reserve <= UINT64_MAX - kPageSize4K;
}

uvm_status_t client_set_sleep_policy(Manager &mgr, Client &c, const uvm_sleep_policy_t &policy) {
    (void)mgr;
    if (!c.sleep)
        return UVM_ERR_NOT_SUPPORTED;
    SleepState &s = *c.sleep;
    std::unique_lock<std::shared_mutex> gate(s.gate);  // as a sleep: the backup is ours alone
    const uint64_t reserve = align_up(policy.host_reserve, kPageSize4K);
    SleepBackup &b = s.backup;
    const uint64_t held = b.held();
    uvm_status_t status = UVM_OK;
    if (s.asleep.load()) {
        // The images are in it: it only grows now, and is cut at the wake.
        if (reserve > held)
            status = b.grow(reserve - held, policy.pin_threads);
    } else if (reserve != held) {
        // Exactly the reserve: the whole pieces beyond it go back, and what
        // is missing then (a part of the last piece cut, or more) is made
        // ready first, so that a failure leaves the backup as it was. The
        // pieces about to go count against the limit no more.
        uint64_t keep = 0;
        const size_t first = b.pieces_within(reserve, &keep), end = b.pieces();
        if (reserve > keep)
            status = b.grow(reserve - keep, policy.pin_threads, held - keep);
        if (status == UVM_OK)
            b.release_pieces(first, end, policy.pin_threads);
    }
    if (status != UVM_OK)
        return status;
    s.host_policy = static_cast<uint32_t>(enum_value(policy.host));
    s.host_reserve = reserve;
    s.pin_threads = policy.pin_threads;
    return UVM_OK;
}

}  // namespace uvm
