#include "lab/page_size_sim.h"

#include <algorithm>

#include "common/assert.h"
#include "common/sizes.h"

namespace uvm::lab {

namespace {

constexpr uint64_t k4K = kPageSize4K, k64K = kPageSize64K, k2M = kPageSize2M;
constexpr uint32_t k4KPer2M = static_cast<uint32_t>(k2M / k4K);

// Code 3 is a translation of a coalesced region (MachineModel::coalesce_bytes).
uint32_t size_code(uint64_t page_size) {
    return page_size > k2M ? 3 : page_size == k2M ? 2 : page_size == k64K ? 1 : 0;
}
uint64_t size_of_code(uint64_t code, uint64_t coalesce) {
    return code == 3 ? coalesce : code == 2 ? k2M : code == 1 ? k64K : k4K;
}

bool shape_ok(const TlbShape &s) { return s.entries > 0 && s.ways > 0 && s.entries % s.ways == 0; }

}  // namespace

// A set-associative array of translations, LRU within a set. A tag is the
// page number shifted by 2 with the page-size code in the low bits, plus 1 (0
// is an empty way); the set is the page number modulo the sets.
struct Simulator::Tlb {
    uint32_t sets, ways;
    uint64_t coalesce;  // the span of a code-3 translation
    bool random;        // replace a random way (an empty one first) rather than the least recent
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    std::vector<uint64_t> tags;
    std::vector<uint64_t> stamps;
    uint64_t clock = 0;

    Tlb(const TlbShape &s, uint64_t coalesce_bytes, bool random_replacement)
        : sets(s.entries / s.ways), ways(s.ways), coalesce(coalesce_bytes), random(random_replacement),
          tags(s.entries, 0), stamps(s.entries, 0) {}

    // True on a hit; on a miss the key is filled in over the least recent way.
    bool lookup_or_fill(uint64_t key, uint64_t set_key) {
        const size_t base = static_cast<size_t>(set_key % sets) * ways;
        const uint64_t tag = key + 1;
        size_t victim = base;
        for (size_t w = base; w < base + ways; ++w) {
            if (tags[w] == tag) {
                stamps[w] = ++clock;
                return true;
            }
            if (stamps[w] < stamps[victim])
                victim = w;
        }
        if (random && tags[victim] != 0) {  // every way full: a random one (xorshift64)
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            victim = base + static_cast<size_t>(rng % ways);
        }
        tags[victim] = tag;
        stamps[victim] = ++clock;
        return false;
    }

    // Drop translations of pages that overlap [base, base + size).
    void invalidate(uint64_t base, uint64_t size) {
        for (size_t w = 0; w < tags.size(); ++w) {
            if (!tags[w])
                continue;
            const uint64_t key = tags[w] - 1;
            const uint64_t page = size_of_code(key & 3, coalesce);
            const uint64_t start = (key >> 2) * page;
            if (start < base + size && base < start + page)
                tags[w] = stamps[w] = 0;
        }
    }
};

Simulator::Simulator(const MachineModel &model, Policy policy) : model_(model), policy_(policy) {
    valid_ = model.sms > 0 && shape_ok(model.l1) && shape_ok(model.l2) &&
             (model.coalesce_bytes == 0 ||
              (model.coalesce_bytes > k2M && (model.coalesce_bytes & (model.coalesce_bytes - 1)) == 0 && model.coalesce_bytes <= (1ull << 29)));
    if (!valid_)
        return;
    for (uint32_t i = 0; i < model.sms; ++i)
        l1_.push_back(std::make_unique<Tlb>(model.l1, model.coalesce_bytes, model.random_replacement));
    l2_ = std::make_unique<Tlb>(model.l2, model.coalesce_bytes, model.random_replacement);
    if (model.pwc_entries)
        pwc_ = std::make_unique<Tlb>(TlbShape{model.pwc_entries, model.pwc_entries}, 0, false);
}

bool machine_preset(const std::string &name, MachineModel *out) {
    const bool hopper = name == "h100" || name == "h200";
    if (name != "example" && !hopper)
        return false;
    // The TLB shapes are the same: round numbers for the example, and what
    // the lab's chase reads for Hopper.
    MachineModel m;
    m.sms = 132;
    m.l1 = {16, 16};
    m.l2 = {2048, 16};
    m.pwc_entries = 64;
    if (hopper) {
        // Hopper, from the lab's chase (bench/results/2026-11-23-h{100,200}-lab-calibration):
        // an L1 miss that hits the L2 TLB costs ~9 cycles (4.5 ns at 1.98 GHz)
        // once 2 MiB-stride chases pass 16 x 32 MiB regions; far-apart pages
        // pass the L2 TLB's reach near 2,048 regions; walks are what the 4K
        // host-memory chase adds beyond that.
        m.l1_hit_ns = 0;
        m.l2_hit_ns = 4.5;
        m.walk_ref_ns = 120;
        m.coalesce_bytes = 32ull << 20;
        m.random_replacement = true;
    } else {
        m.l1_hit_ns = 1;
        m.l2_hit_ns = 10;
        m.walk_ref_ns = 100;
    }
    *out = m;
    return true;
}

Simulator::~Simulator() = default;

template <typename Map>
auto Simulator::holding(Map &objects, uint64_t address) {
    auto it = objects.upper_bound(address);
    if (it == objects.begin() || address - std::prev(it)->first >= std::prev(it)->second.extent())
        return objects.end();
    return std::prev(it);
}

uint64_t Simulator::pick_page_size(uint64_t size) const {
    switch (policy_) {
        case Policy::Fixed4K: return k4K;
        case Policy::Fixed64K: return k64K;
        case Policy::Fixed2M: return k2M;
        case Policy::Adaptive: return size < k64K ? k4K : size < k2M ? k64K : k2M;
        case Policy::Mosaic: return k4K;
    }
    return k4K;
}

uvm_status_t Simulator::map_pages(uint64_t base, uint64_t size, uint64_t page_size) {
    const size_t count = size / page_size;
    std::vector<mmu::Pte> ptes(count);
    for (size_t i = 0; i < count; ++i) {
        ptes[i].address = base + i * page_size;  // identity: the model needs no physical layout
        ptes[i].aperture = mmu::Aperture::Vid;
    }
    return tree_.map(base, page_size, ptes.data(), count);
}

void Simulator::unmap_pages(uint64_t base, uint64_t size, uint64_t page_size) {
    const uvm_status_t s = tree_.unmap(base, page_size, size / page_size);
    UVM_ASSERT(s == UVM_OK);
    (void)s;
}

uvm_status_t Simulator::allocate(uint64_t base, uint64_t size) {
    if (size == 0 || !is_aligned(base, k4K))
        return UVM_ERR_INVALID_ARGUMENT;
    const uint64_t page = pick_page_size(size);
    if (!is_aligned(base, page))
        return UVM_ERR_MISALIGNED;
    const uint64_t rounded = align_up(size, page);
    auto next = objects_.lower_bound(base);
    if ((next != objects_.end() && next->first < base + rounded) || holding(objects_, base) != objects_.end())
        return UVM_ERR_ADDRESS_IN_USE;
    const uvm_status_t s = map_pages(base, rounded, page);
    if (s != UVM_OK)
        return s;
    Object o;
    o.size = size;
    o.page_size = page;
    o.touched.assign((rounded / k4K + 63) / 64, 0);
    objects_.emplace(base, std::move(o));
    last_ = nullptr;
    stats_.allocated_bytes += rounded;
    mapping_ns_ += costs_.pin_us(rounded, page) * 1e3;
    if (policy_ == Policy::Mosaic)
        mosaic_add(base, rounded);
    return UVM_OK;
}

uvm_status_t Simulator::free(uint64_t base) {
    auto it = objects_.find(base);
    if (it == objects_.end())
        return UVM_ERR_NOT_MAPPED;
    const uint64_t rounded = it->second.extent();
    if (policy_ == Policy::Mosaic)
        mosaic_remove(base, rounded);  // splinters the frames first: the object is then in 4K pages
    unmap_pages(base, rounded, it->second.page_size);
    invalidate(base, rounded);
    drop_resident(base, rounded);
    stats_.allocated_bytes -= rounded;
    stats_.touched_bytes -= it->second.touched_pages * k4K;
    objects_.erase(it);
    last_ = nullptr;
    return UVM_OK;
}

// Mosaic: count the frame's allocated 4K pages; a frame that fills up is
// coalesced (its 512 PTEs replaced by one 2M PTE).
void Simulator::mosaic_add(uint64_t base, uint64_t size) {
    for (uint64_t at = base; at < base + size;) {
        const uint64_t frame = at & ~(k2M - 1);
        const uint64_t end = std::min(base + size, frame + k2M);
        uint32_t &pages = frame_pages_[frame];
        pages += static_cast<uint32_t>((end - at) / k4K);
        UVM_ASSERT(pages <= k4KPer2M);
        if (pages == k4KPer2M) {
            unmap_pages(frame, k2M, k4K);
            const uvm_status_t s = map_pages(frame, k2M, k2M);
            UVM_ASSERT(s == UVM_OK);
            (void)s;
            invalidate(frame, k2M);
            stats_.coalesced_frames++;
        }
        at = end;
    }
}

// Mosaic: a coalesced frame losing pages splinters back to 4K pages (the
// freed range's own PTEs are then removed by free()).
void Simulator::mosaic_remove(uint64_t base, uint64_t size) {
    for (uint64_t at = base; at < base + size;) {
        const uint64_t frame = at & ~(k2M - 1);
        const uint64_t end = std::min(base + size, frame + k2M);
        auto it = frame_pages_.find(frame);
        UVM_ASSERT(it != frame_pages_.end());
        if (it->second == k4KPer2M) {
            unmap_pages(frame, k2M, k2M);
            const uvm_status_t s = map_pages(frame, k2M, k4K);
            UVM_ASSERT(s == UVM_OK);
            (void)s;
            invalidate(frame, k2M);
            stats_.coalesced_frames--;
        }
        it->second -= static_cast<uint32_t>((end - at) / k4K);
        if (it->second == 0)
            frame_pages_.erase(it);
        at = end;
    }
}

void Simulator::invalidate(uint64_t base, uint64_t size) {
    for (auto &t : l1_)
        t->invalidate(base, size);
    l2_->invalidate(base, size);
    if (pwc_)
        pwc_->invalidate(base, size);
}

std::pair<const uint64_t, Simulator::Object> *Simulator::object_at(uint64_t address) {
    if (last_ && address >= last_->first && address - last_->first < last_->second.extent())
        return last_;  // accesses mostly stay in one object
    auto it = holding(objects_, address);
    if (it == objects_.end())
        return nullptr;
    last_ = &*it;
    return last_;
}

uint64_t Simulator::page_size_of(const Object &o, uint64_t address) const {
    if (policy_ != Policy::Mosaic)
        return o.page_size;
    auto f = frame_pages_.find(address & ~(k2M - 1));
    return f != frame_pages_.end() && f->second == k4KPer2M ? k2M : k4K;
}

// What one translation of `address` covers: its page, or with coalescing
// (MachineModel::coalesce_bytes) the aligned region of 2M pages around it
// where the whole region lies in the object (whose pages are contiguous).
uint64_t Simulator::tlb_span(const std::pair<const uint64_t, Object> &o, uint64_t address,
                             uint64_t page_size) const {
    const uint64_t span = model_.coalesce_bytes;
    if (span == 0 || page_size != k2M || policy_ == Policy::Mosaic)
        return page_size;
    const uint64_t region = address & ~(span - 1);
    return region >= o.first && region + span <= o.first + o.second.extent() ? span : page_size;
}

uint64_t Simulator::page_size_at(uint64_t address) const {
    auto it = holding(objects_, address);
    return it == objects_.end() ? 0 : page_size_of(it->second, address);
}

// One translation: L1 of the SM, then L2, then a walk. A walk reads one
// entry per level from the top (PDE4..PDE0, and the page table below a dual
// PDE0 for 4K and 64K pages); the page-walk cache holds where a 512 MiB
// region's PDE0 table is, so a hit reads only PDE0 (and the page table).
void Simulator::translate(uint32_t processor, uint64_t address, uint64_t page_size) {
    const uint64_t vpn = address / page_size;
    const uint64_t key = (vpn << 2) | size_code(page_size);
    if (l1_[processor % l1_.size()]->lookup_or_fill(key, vpn))
        return;
    stats_.l1_misses++;
    if (l2_->lookup_or_fill(key, vpn))
        return;
    stats_.l2_misses++;
    const uint64_t leaf_refs = page_size >= k2M ? 1 : 2;  // PDE0 (a leaf for 2M), then the page table
    const uint64_t region = address >> 29;                // what one PDE1 entry covers
    if (pwc_ && pwc_->lookup_or_fill(region << 2, region)) {
        stats_.pwc_hits++;
        stats_.walk_refs += leaf_refs;
    } else {
        stats_.walk_refs += 4 + leaf_refs;  // PDE4, PDE3, PDE2, PDE1
    }
}

// A page key: its base with the page-size code in the low bits.
static uint64_t page_key(uint64_t address, uint64_t page_size) {
    return (address & ~(page_size - 1)) | size_code(page_size);
}

void Simulator::fault_in(uint64_t address, uint64_t page_size) {
    const uint64_t key = page_key(address, page_size);
    auto it = resident_.find(key);
    if (it != resident_.end()) {
        lru_.splice(lru_.begin(), lru_, it->second);
        return;
    }
    stats_.faults++;
    stats_.bytes_migrated_in += page_size;
    migration_ns_ += costs_.migrate_in_us(page_size) * 1e3;
    while (resident_bytes_ + page_size > gpu_memory_ && !lru_.empty()) {
        const uint64_t victim = lru_.back();
        lru_.pop_back();
        resident_.erase(victim);
        const uint64_t size = size_of_code(victim & 3, 0);
        resident_bytes_ -= size;
        stats_.bytes_migrated_out += size;
        migration_ns_ += costs_.migrate_out_us(size) * 1e3;
    }
    lru_.push_front(key);
    resident_[key] = lru_.begin();
    resident_bytes_ += page_size;
}

// Pages of [base, base + size) leave the resident set (freed, or remapped
// at another page size by Mosaic: they fault in again at the new size).
void Simulator::drop_resident(uint64_t base, uint64_t size) {
    if (gpu_memory_ == 0)
        return;
    for (auto it = lru_.begin(); it != lru_.end();) {
        const uint64_t page = size_of_code(*it & 3, 0), start = *it & ~uint64_t(3);
        if (start < base + size && base < start + page) {
            resident_.erase(*it);
            resident_bytes_ -= page;
            it = lru_.erase(it);
        } else {
            ++it;
        }
    }
}

void Simulator::access(const Access &a) {
    auto *o = object_at(a.address);
    if (!o) {
        stats_.unmapped++;
        return;
    }
    stats_.accesses++;
    // The pages the access spans (an access across a page boundary translates twice).
    const uint64_t page_size = page_size_of(o->second, a.address);
    const uint64_t last = a.address + (a.size ? a.size - 1 : 0);
    for (uint64_t at = a.address; at <= last; at = (at / page_size + 1) * page_size) {
        translate(a.processor, at, tlb_span(*o, at, page_size));
        // Mosaic moves base pages in and out and coalesces in place: the
        // TLB sees 2M, the interconnect 4K.
        if (gpu_memory_)
            fault_in(at, policy_ == Policy::Mosaic ? k4K : page_size);
        if (at / page_size == last / page_size)
            break;
    }
    // Touched 4K pages, for internal fragmentation.
    const uint64_t end = std::min(last, o->first + o->second.extent() - 1);
    for (uint64_t p = (a.address - o->first) / k4K; p <= (end - o->first) / k4K; ++p) {
        uint64_t &word = o->second.touched[p / 64];
        if (!(word >> (p % 64) & 1)) {
            word |= uint64_t(1) << (p % 64);
            o->second.touched_pages++;
            stats_.touched_bytes += k4K;
        }
    }
}

Stats Simulator::stats() const {
    Stats s = stats_;
    s.page_table_bytes = tree_.info().table_bytes;
    return s;
}

TimeSplit Simulator::time() const {
    TimeSplit t;
    t.l1 = double(stats_.accesses) * model_.l1_hit_ns;
    t.l2 = double(stats_.l1_misses) * model_.l2_hit_ns;
    t.walks = double(stats_.walk_refs) * model_.walk_ref_ns;
    t.mapping = mapping_ns_;
    t.migration = migration_ns_;
    return t;
}

}  // namespace uvm::lab
