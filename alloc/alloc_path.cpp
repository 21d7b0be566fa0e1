// The allocation path (alloc_path.h): one request, checked once, offered to
// the sources in order.
#include "alloc/alloc_path.h"

#include "common/enum_value.h"

#include "observe/report.h"
#include "pressure/client.h"
#include "pressure/residency.h"
#include "pressure/sleep.h"
#include "stream/stream.h"
#include "uvm/manager.h"
#include "uvm/mem.h"

namespace uvm {
namespace alloc {

namespace {

// One request on its way through the sources.
struct Request {
    Manager &mgr;
    const uvm_mem_alloc_params_t &params;
    const std::shared_ptr<Stream> &stream;
    CheckedAlloc checked;  // the one check, and the one pick of the chunk size
    uint32_t shape = 0;
    std::shared_ptr<PrivatePool> pool;  // kToPool: the stream's private pool
    bool took_private = false;          // the memory is a run of `pool`'s
    // UVM_MEM_ZERO while the stream captures: memory not the stream's is
    // zeroed on the stream too (a graph then zeroes it at each launch).
    bool zero_on_stream = false;
    // Resolved before the first source whose rule says so (resolve()).
    bool resolved = false;
    std::shared_ptr<Client> client;
    SleepGate gate;  // held until the handle is out: no sleep begins meanwhile
    chunk::Pmm *client_pmm = nullptr;

    Request(Manager &m, const uvm_mem_alloc_params_t &p, const std::shared_ptr<Stream> &s)
        : mgr(m), params(p), stream(s) {}

    // The shape of a checked request.
    void describe(bool wants_address) {
        const uint32_t flags = params.flags;
        const bool vidmem = params.backing == UVM_BACKING_VIDMEM;
        shape = (vidmem ? kVidmem : 0u) | (checked.alloc_size == checked.chunk_size ? kOneChunk : 0u) |
                (!flags && !params.tag ? kPlain : 0u) |
                (flags == UVM_MEM_GPU_MAPPED && !params.tag && !params.client ? kMappedOnly : 0u) |
                (stream ? kOnStream : 0u) | (wants_address ? kWantsAddress : 0u) |
                (mgr.tracing.on() ? kTraced : 0u) | ((flags & UVM_MEM_ZERO) ? kZero : 0u);
        // Runs the stream gives its GPU's PMM as pending roots are never in its pool.
        if (vidmem && stream && Streams::pendable(*stream, run_wanted()))
            shape |= kPendable;
    }

    // Whether the request may go to a private pool: it names one, or its
    // stream allocates to one. One load where neither.
    bool may_go_to_pool() const {
        return params.pool || (stream && stream->to_private_pool.load(std::memory_order_relaxed));
    }

    // A request to a private pool: the one it names, or its stream's. The
    // stream's takes what it can hold (vidmem of its GPU, not evictable nor
    // remappable); one the request names that cannot hold it refuses it.
    __attribute__((noinline)) uvm_status_t describe_pool() {
        const uint32_t kept = UVM_MEM_EVICTABLE | UVM_MEM_DISCARDABLE | UVM_MEM_USER_MAPPABLE;
        if (params.pool) {
            pool = mgr.streams().private_pools().lookup(params.pool);
            if (!pool)
                return UVM_ERR_INVALID_HANDLE;
            if (!stream || !(shape & kVidmem) || params.gpu != pool->gpu || (params.flags & kept)) {
                pool.reset();
                return UVM_ERR_INVALID_ARGUMENT;
            }
            shape |= kToPool;
            return UVM_OK;
        }
        {
            std::lock_guard<std::mutex> guard(stream->lock);
            pool = stream->private_pool;
        }
        if (pool && (shape & kVidmem) && params.gpu == pool->gpu && !(params.flags & kept))
            shape |= kToPool;
        else
            pool.reset();
        return UVM_OK;
    }

    // The client, and for a sleepable client's vidmem its own roots and its
    // gate (ASLEEP while it sleeps or goes to sleep).
    uvm_status_t resolve() {
        resolved = true;
        if (params.client && !(client = mgr.clients().lookup(params.client)))
            return dead_client(params.client);
        if (!client || !(shape & kVidmem))
            return UVM_OK;
        uvm_status_t status = gate.enter(client.get());
        if (status == UVM_OK)
            client_pmm = uvm::client_pmm(mgr, client.get(), params.gpu, &status);
        if (status == UVM_OK && client_pmm) {
            if (params.pool)
                return UVM_ERR_INVALID_ARGUMENT;  // its memory is its own roots', never a pool's
            shape = (shape | kClientRoots) & ~kToPool;
            pool.reset();
        }
        return status;
    }

    ReusedRun run_wanted() const {
        ReusedRun want;
        want.gpu = params.gpu;
        want.chunk_size = checked.chunk_size;
        want.count = checked.alloc_size / checked.chunk_size;
        want.evictable = (params.flags & (UVM_MEM_EVICTABLE | UVM_MEM_DISCARDABLE)) != 0;
        want.remappable = (params.flags & UVM_MEM_USER_MAPPABLE) && want.chunk_size == UVM_PAGE_SIZE_2M;
        return want;
    }
};

// A new object until it is handed out: charged to its client, and given
// back unless committed. Memory that came from the stream's pool may still
// be written by earlier work on it: it goes back there, not to the PMM.
class Charge {
public:
    Charge(Request &req, std::shared_ptr<Mem> &mem) : req_(req), mem_(mem) {}
    ~Charge() {
        if (!committed_ && mem_)
            give_back();
    }
    Charge(const Charge &) = delete;
    Charge &operator=(const Charge &) = delete;

    // Over the client's budget: nobody's again (the destructor gives it back).
    uvm_status_t charge() {
        return req_.client ? charge_new_object(req_.mgr, *mem_, std::move(req_.client)) : UVM_OK;
    }
    void commit() { committed_ = true; }

private:
    void give_back() {
        std::lock_guard<Mutex> guard(mem_->lock);
        mem_->pool.reset();
        ReusedRun run;
        if (req_.stream && mem_detach_run(req_.mgr, *mem_, &run)) {
            if (!req_.took_private || !PrivatePools::put(*req_.pool, run, req_.stream))
                req_.mgr.streams().pool_put(*req_.stream, run);
        } else {
            mem_release(req_.mgr, *mem_);
        }
    }

    Request &req_;
    std::shared_ptr<Mem> &mem_;
    bool committed_ = false;
};

// Zero bytes [phys, phys + size) of a new object on the request's stream.
uvm_status_t zero_on_stream(Request &req, uint64_t phys, uint64_t size) {
    Stream &stream = *req.stream;
    backend::CeAddress dst;
    dst.address = phys;
    std::lock_guard<std::mutex> guard(stream.lock);
    return req.mgr.backend_streams()->ce_memset_async(req.params.gpu, stream.backend, dst, 0, size);
}

// A run (`run`, of the stream's pool or a private pool's) as the new object's
// chunks; zeroed in the stream's order where asked. On failure the object
// gives the run back as it took it, and the run is the caller's again.
uvm_status_t from_run(Request &req, const ReusedRun &run, std::shared_ptr<Mem> *out) {
    uvm_status_t status = mem_alloc(req.mgr, req.checked, out, &run);
    if (status == UVM_OK && (req.shape & kZero)) {
        status = zero_on_stream(req, run.phys, run.chunk_size * run.count);
        if (status != UVM_OK) {
            {
                std::lock_guard<Mutex> mem_guard((*out)->lock);
                ReusedRun same;
                const bool detached = mem_detach_run(req.mgr, **out, &same);
                UVM_ASSERT(detached && same.phys == run.phys && same.count == run.count);
                (void)detached;
            }
            out->reset();  // after the unlock: the object goes with its last reference
        }
    }
    return status;
}

// A run of the stream's pool as the new object's chunks. Declined
// (OUT_OF_MEMORY) where the pool has none.
uvm_status_t from_stream_pool(Request &req, std::shared_ptr<Mem> *out) {
    ReusedRun run;
    if (!req.mgr.streams().pool_take(*req.stream, req.run_wanted(), &run))
        return UVM_ERR_OUT_OF_MEMORY;
    const uvm_status_t status = from_run(req, run, out);
    if (status != UVM_OK)
        req.mgr.streams().pool_put(*req.stream, run);
    return status;
}

// A run the stream's private pool holds free, freed on the stream or with
// its work done. Declined (OUT_OF_MEMORY) where it has none.
uvm_status_t from_private_pool(Request &req, std::shared_ptr<Mem> *out) {
    ReusedRun run;
    if (!PrivatePools::take(*req.pool, req.stream.get(), req.run_wanted(), &run))
        return UVM_ERR_OUT_OF_MEMORY;
    const uvm_status_t status = from_run(req, run, out);
    if (status == UVM_OK)
        req.took_private = true;
    else if (!PrivatePools::put(*req.pool, run, req.stream))
        req.mgr.streams().pool_put(*req.stream, run);  // the pool was destroyed meanwhile
    return status;
}

// The PMM's chunks; on the request's stream, its pending roots too where
// they may serve (not for UVM_MEM_ZERO: the zeroing is not in the stream's
// order there; nor to a private pool, which takes none of the stream's
// memory). While the stream captures, UVM_MEM_ZERO is done on the stream
// (Request::zero_on_stream).
uvm_status_t from_pmm(Request &req, std::shared_ptr<Mem> *out, chunk::Pmm::Holder *holder) {
    const bool pends = (req.shape & (kPendable | kZero | kClientRoots | kToPool)) == kPendable;
    // A runtime's long object (kernel-mapped, nothing else asked, none of a
    // private pool's) may be made of several runs rather than grow the GPU's
    // memory beside free roots (chunk/pmm.h, "Stitched runs").
    req.checked.may_stitch = req.mgr.stitching &&
                             (req.shape & (kVidmem | kMappedOnly | kToPool | kClientRoots)) == (kVidmem | kMappedOnly) &&
                             req.checked.chunk_size == kRootChunkSize && req.checked.count() > chunk::Pmm::kShortRun;
    if (pends && holder->slot < 0)
        *holder = req.mgr.streams().pend_holder(*req.stream, req.checked.alloc_size / req.checked.chunk_size);
    if (!req.zero_on_stream)
        return mem_alloc(req.mgr, req.checked, out, nullptr, req.client_pmm, holder->slot >= 0 ? holder : nullptr);
    uvm_mem_alloc_params_t unzeroed = req.params;
    unzeroed.flags &= ~static_cast<uint32_t>(UVM_MEM_ZERO);
    CheckedAlloc checked = req.checked;
    checked.params = &unzeroed;
    uvm_status_t status = mem_alloc(req.mgr, checked, out, nullptr, req.client_pmm, nullptr);
    if (status != UVM_OK)
        return status;
    Mem &mem = **out;
    mem.flags = req.params.flags;  // as allocated
    status = zero_on_stream(req, mem.chunks[0], mem.alloc_size);
    if (status != UVM_OK) {
        {
            std::lock_guard<Mutex> mem_guard(mem.lock);
            mem_release(req.mgr, mem);
        }
        out->reset();
    }
    return status;
}

// As cudaMalloc(0): no object, once the rest would have been accepted.
uvm_status_t allocate_nothing(Manager &mgr, const uvm_mem_alloc_params_t &params, uvm_mem_t **out,
                              uint64_t *gpu_address) {
    if (params.client && !mgr.clients().lookup(params.client))
        return dead_client(params.client);
    if (params.pool && !mgr.streams().private_pools().lookup(params.pool))
        return UVM_ERR_INVALID_HANDLE;
    uvm_mem_alloc_params_t one = params;
    one.size = 1;
    CheckedAlloc checked;
    uvm_status_t status = mem_check_alloc(mgr, one, &checked);
    if (status == UVM_OK && params.backing == UVM_BACKING_MANAGED && mgr.backend().kind() == UVM_BACKEND_SIM)
        // As for any size: managed memory is the CUDA backend's.
        status = fail(UVM_ERR_NOT_SUPPORTED, "backing UVM_BACKING_MANAGED: this backend has no managed memory");
    if (status == UVM_OK) {
        *out = nullptr;
        if (gpu_address)
            *gpu_address = 0;
    }
    return status;
}

// The shape as far as the parked sources read it, from the arguments and
// one pick of the chunk size (*chunk_size; none where the request is not
// for vidmem of the default placement on a valid GPU: those sources serve
// nothing else, and the full check says what is wrong).
inline uint32_t quick_shape(Manager &mgr, const uvm_mem_alloc_params_t &params, const std::shared_ptr<Stream> &stream,
                            bool wants_address, uint64_t *chunk_size) {
    const uint32_t flags = params.flags;
    uint32_t shape = (stream ? kOnStream : 0u) | (wants_address ? kWantsAddress : 0u) |
                     (mgr.tracing.on() ? kTraced : 0u) | ((flags & UVM_MEM_ZERO) ? kZero : 0u) |
                     (!flags && !params.tag ? kPlain : 0u) |
                     (flags == UVM_MEM_GPU_MAPPED && !params.tag && !params.client ? kMappedOnly : 0u);
    // A request that may go to a private pool takes nothing parked (the
    // full check says whether it does, and whether it may).
    if (params.pool || (stream && stream->to_private_pool.load(std::memory_order_relaxed)))
        shape |= kToPool;
    if (enum_value(params.backing) != UVM_BACKING_VIDMEM || params.size > kMaxObjectSize ||
        params.gpu >= mgr.gpu_count() || !default_placement(params.placement) ||
        pick_chunk_size(params.backing, params.size, params.chunk_size, mgr.gpu(params.gpu).info.page_sizes,
                        chunk_size) != UVM_OK) {
        *chunk_size = 0;
        return shape;
    }
    return shape | kVidmem | (params.size <= *chunk_size ? kOneChunk : 0u);
}

// The sources that need the full check and the client: out of line, so that
// the parked sources' path stays short.
__attribute__((noinline)) uvm_status_t allocate_from_rest(Manager &mgr, const uvm_mem_alloc_params_t &params,
                                                          const std::shared_ptr<Stream> &stream, uint64_t picked,
                                                          uvm_mem_t **out, uint64_t *gpu_address,
                                                          uint64_t *alloc_size) {
    Request req(mgr, params, stream);
    uvm_status_t status = mem_check_alloc(mgr, params, &req.checked, picked);
    if (status != UVM_OK) {
        if (status == UVM_ERR_OUT_OF_MEMORY)  // larger than the GPU: as any out-of-memory, reported
            note_oom(mgr, oom_request(params));
        // A bad client handle is said first, as for a request that would fit.
        return params.client && !mgr.clients().lookup(params.client) ? dead_client(params.client) : status;
    }
    req.describe(gpu_address != nullptr);
    if (req.may_go_to_pool()) {
        status = req.describe_pool();
        if (status != UVM_OK)
            return status;
    }
    if ((req.shape & (kVidmem | kOnStream | kZero)) == (kVidmem | kOnStream | kZero)) {
        status = mgr.streams().captures(*stream, &req.zero_on_stream);
        if (status != UVM_OK)
            return status;
    }

    std::shared_ptr<Mem> mem;
    SlotReservation slot(mgr);
    chunk::Pmm::Holder holder;  // the stream's pending roots, once looked up
    status = UVM_ERR_OUT_OF_MEMORY;
    for (const Rule &rule : kSources) {
        if (!rule.resolved)
            continue;  // the parked sources were asked before the check (allocate)
        if (!req.resolved) {
            status = req.resolve();
            if (status != UVM_OK)
                return status;
            // The handle's slot before any memory is taken: once the object
            // holds memory, nothing may fail.
            status = mgr.reserve_slot(&slot.ticket);
            if (status != UVM_OK)
                return status;
            status = UVM_ERR_OUT_OF_MEMORY;
        }
        if (!eligible(rule, req.shape))
            continue;
        switch (rule.source) {
            case Source::ThreadParked:
            case Source::StreamParked:
                UVM_ASSERT(!"a parked source needs nothing resolved");
                continue;
            case Source::StreamPool:
                status = from_stream_pool(req, &mem);
                break;
            case Source::PrivatePool:
                status = from_private_pool(req, &mem);
                break;
            case Source::Pmm:
                status = from_pmm(req, &mem, &holder);
                break;
            case Source::MadeRoom:
                status = retry_with_room(
                    mgr, (req.shape & kVidmem) != 0, params.gpu,
                    (req.shape & kVidmem) ? room_for_run(req.checked.alloc_size, req.checked.chunk_size) : RoomNeed{},
                    nullptr, nullptr, [&] { return from_pmm(req, &mem, &holder); });
                break;
        }
        if (status != UVM_ERR_OUT_OF_MEMORY)
            break;  // served, or refused for a reason no later source changes
    }
    if (status == UVM_OK) {
        mem->pool = req.pool;  // its memory is the pool's from now, wherever it came from
        Charge charge(req, mem);
        status = charge.charge();
        if (status == UVM_OK) {
            charge.commit();
            if (req.pool)
                PrivatePools::joined(*req.pool, mem->alloc_size);
        }
    }
    if (status == UVM_ERR_OUT_OF_MEMORY)
        note_oom(mgr, oom_request(params));
    if (status != UVM_OK)
        return status;
    if (stream) {
        UVM_ASSERT(mem->users.empty());
        mem->users.add(stream);  // a new object's first stream: held inline, no allocation
    }
    if (gpu_address) {
        // Before publication nobody has the object but another thread's
        // eviction (of an evictable one), which takes its lock.
        std::unique_lock<Mutex> guard(mem->lock, std::defer_lock);
        if (mem->evictable)
            guard.lock();
        const GpuMapping *mapping = mem->owner < mem->gpus.size() ? &mem->gpus[mem->owner] : nullptr;
        *gpu_address = mapping && mapping->kernel ? mapping->kernel_va : 0;
    }
    if (alloc_size)
        *alloc_size = mem->alloc_size;  // read before publication: another thread may free it by address after
    *out = publish_new_object(mgr, &slot, mem, (params.flags & UVM_MEM_GPU_MAPPED) != 0);
    return UVM_OK;
}

}  // namespace

uvm_status_t allocate(Manager &mgr, const uvm_mem_alloc_params_t &params, const std::shared_ptr<Stream> &stream,
                      uvm_mem_t **out, uint64_t *gpu_address, uint64_t *alloc_size) {
    if (params.size == 0) {
        if (alloc_size)
            *alloc_size = 0;
        return allocate_nothing(mgr, params, out, gpu_address);
    }
    // The parked sources first, on the shape the arguments give: they take an
    // object whole (its handle too), and need neither the full check (an
    // object of this chunk size and count was made under it) nor the client.
    uint64_t chunk_size = 0;
    const uint32_t shape = quick_shape(mgr, params, stream, gpu_address != nullptr, &chunk_size);
    for (const Rule &rule : kSources) {
        if (rule.resolved)
            break;  // the rest need the check: kSources lists the parked sources first
        if (!eligible(rule, shape))
            continue;
        // Both take an object of exactly the chunks asked for: one chunk from
        // the thread's park, `count` from the stream's (each asserts it).
        if (rule.source == Source::ThreadParked && mem_take_thread_parked(mgr, params, chunk_size, out)) {
            if (alloc_size)
                *alloc_size = chunk_size;
            return UVM_OK;
        }
        if (rule.source == Source::StreamParked) {
            const size_t count = (params.size + chunk_size - 1) / chunk_size;
            if (mgr.streams().alloc_parked(stream, params, chunk_size, count, (shape & kMappedOnly) != 0, out,
                                           gpu_address)) {
                if (alloc_size)
                    *alloc_size = chunk_size * count;
                return UVM_OK;
            }
        }
    }
    return allocate_from_rest(mgr, params, stream, chunk_size, out, gpu_address, alloc_size);
}

}  // namespace alloc
}  // namespace uvm
