// The page-size lab's simulator (docs/page-size-lab.md, issue 14; begun):
// replays memory accesses against the objects they fall in, under a page-size
// policy, through a model of a GPU's address translation:
//
//   per-SM L1 TLB -> shared L2 TLB -> page walk (page-walk cache for the
//   upper levels) over the manager's own page tree (mmu/page_tree.h)
//
// and counts what each page size costs and buys: TLB misses, walks and the
// memory references they make, page-table bytes, and bytes allocated against
// bytes touched (internal fragmentation).
//
// Policies: a fixed page size (4K, 64K, 2M); the manager's adaptive rule (by
// object size: 4K below 64 KiB, 64K below 2 MiB, 2M from there); and a mixed
// policy after Mosaic (Ausavarungnirun et al., MICRO 2017): objects get 4K
// pages placed in 2 MiB-contiguous frames, and a frame whose 512 pages are
// all allocated is coalesced into one 2M page; freeing any of it splinters
// the frame back into 4K pages.
//
// The TLB sizes and latencies are the caller's (MachineModel); the presets
// calibrated on the H100 and H200 are machine_preset's (below).
//
// Thread safety: none; one simulator per thread.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <unordered_map>
#include <memory>
#include <string>
#include <vector>

#include "mmu/page_tree.h"
#include "lab/page_size_costs.h"
#include "uvm/uvm.h"

namespace uvm::lab {

enum class Policy { Fixed4K, Fixed64K, Fixed2M, Adaptive, Mosaic };

// A set-associative TLB level (entries a multiple of ways).
struct TlbShape {
    uint32_t entries = 0;
    uint32_t ways = 0;
};

struct MachineModel {
    uint32_t sms = 1;           // L1 TLBs, one per SM; an access's processor picks one
    TlbShape l1;                // per SM
    TlbShape l2;                // shared
    uint32_t pwc_entries = 0;   // page-walk cache: PDE0 tables found without walking the upper levels
    double l1_hit_ns = 0;       // every access pays it
    double l2_hit_ns = 0;       // paid by an L1 miss
    double walk_ref_ns = 0;     // each memory reference a walk makes
    // Coalesced translations: 0 (none), or a power of two above 2 MiB (up to
    // 512 MiB). One TLB entry then covers an aligned region of that size
    // made of 2M pages of one object, as if the region were one page: the
    // driver maps a large allocation's 2M pages physically contiguous, and
    // the H100's and H200's TLBs behave as if they used that (the lab's
    // pointer chase, docs/page-size-lab.md). Not applied to Mosaic's frames.
    uint64_t coalesce_bytes = 0;
    // TLB replacement: the least recently used way (false), or a random one
    // (true; deterministic). A chase through more pages than a TLB holds
    // misses every time under LRU and gradually more under random
    // replacement, which is what the H100's chase shows.
    bool random_replacement = false;
};

// A named machine: "example" (round numbers for teaching, no real GPU),
// "h100" or "h200" (calibrated from the lab's pointer chase on those GPUs;
// docs/page-size-lab.md says how). False for another name.
bool machine_preset(const std::string &name, MachineModel *out);

struct Access {
    uint64_t address = 0;
    uint32_t size = 1;
    bool write = false;
    uint32_t processor = 0;  // SM (or CPU/GPU id) issuing it
};

struct Stats {
    uint64_t accesses = 0;
    uint64_t l1_misses = 0;
    uint64_t l2_misses = 0;    // = walks
    uint64_t pwc_hits = 0;
    uint64_t walk_refs = 0;    // memory references the walks made
    uint64_t unmapped = 0;     // accesses outside every live object (not counted above)
    uint64_t allocated_bytes = 0;   // live objects, rounded up to their page size
    uint64_t touched_bytes = 0;     // 4 KiB pages of live objects touched at least once
    uint64_t page_table_bytes = 0;  // the page tree's tables for the live objects
    uint64_t coalesced_frames = 0;  // Mosaic: 2 MiB frames mapped as one page now
    // Out of core (set_gpu_memory): pages start in host memory and move in
    // whole on first touch, least recently used out when the GPU is full.
    uint64_t faults = 0;
    uint64_t bytes_migrated_in = 0;
    uint64_t bytes_migrated_out = 0;
    double l1_miss_rate() const { return accesses ? double(l1_misses) / double(accesses) : 0; }
    double l2_miss_rate() const { return accesses ? double(l2_misses) / double(accesses) : 0; }
};

// Modelled time, split by cause (ns). mapping: pinning each object's pages
// as it is allocated; migration: the copies of out-of-core faults and
// evictions (both from the CostModel, zero without one).
struct TimeSplit {
    double l1 = 0, l2 = 0, walks = 0, mapping = 0, migration = 0;
    double translation() const { return l1 + l2 + walks; }
    double total() const { return l1 + l2 + walks + mapping + migration; }
};

class Simulator {
public:
    // INVALID_ARGUMENT (through valid()) for a model with a TLB whose entries
    // are not a non-zero multiple of its ways, or no SM.
    Simulator(const MachineModel &model, Policy policy);
    ~Simulator();
    Simulator(const Simulator &) = delete;
    Simulator &operator=(const Simulator &) = delete;
    bool valid() const { return valid_; }

    // An object of `size` bytes at `base` (4 KiB aligned; the policy needs
    // the alignment of the page size it picks: MISALIGNED otherwise).
    // ADDRESS_IN_USE where it overlaps a live one.
    uvm_status_t allocate(uint64_t base, uint64_t size);
    // NOT_MAPPED for a base that starts no live object.
    uvm_status_t free(uint64_t base);
    void access(const Access &a);
    // Out-of-core mode: the GPU holds `bytes` of pages (0: everything is
    // resident, the default). A touch of a page not resident faults and moves
    // the whole page (the policy's page size) in: big pages move bytes that
    // are never touched (over-fetch).
    void set_gpu_memory(uint64_t bytes) { gpu_memory_ = bytes; }
    // What pinning and migrating pages cost (page_size_costs.h); before the
    // first allocate. Default: nothing, so that time() counts translation only.
    void set_costs(const CostModel &costs) { costs_ = costs; }

    uint64_t page_size_at(uint64_t address) const;  // 0 outside every object
    Stats stats() const;
    TimeSplit time() const;

private:
    struct Object {
        uint64_t size = 0;
        uint64_t page_size = 0;             // the policy's (Mosaic: 4K, frames coalesce)
        std::vector<uint64_t> touched;      // a bit per 4 KiB page
        uint64_t touched_pages = 0;
        uint64_t extent() const { return (size + page_size - 1) / page_size * page_size; }  // in whole pages
    };
    struct Tlb;

    uint64_t pick_page_size(uint64_t size) const;
    // The entry of `objects` whose object holds `address`, or end().
    template <typename Map>
    static auto holding(Map &objects, uint64_t address);
    std::pair<const uint64_t, Object> *object_at(uint64_t address);
    uint64_t page_size_of(const Object &o, uint64_t address) const;
    void translate(uint32_t processor, uint64_t address, uint64_t page_size);
    uint64_t tlb_span(const std::pair<const uint64_t, Object> &o, uint64_t address, uint64_t page_size) const;
    void invalidate(uint64_t base, uint64_t size);
    uvm_status_t map_pages(uint64_t base, uint64_t size, uint64_t page_size);
    void unmap_pages(uint64_t base, uint64_t size, uint64_t page_size);
    void mosaic_add(uint64_t base, uint64_t size);
    void mosaic_remove(uint64_t base, uint64_t size);
    void fault_in(uint64_t address, uint64_t page_size);
    void drop_resident(uint64_t base, uint64_t size);

    MachineModel model_;
    Policy policy_;
    bool valid_ = false;
    std::vector<std::unique_ptr<Tlb>> l1_;
    std::unique_ptr<Tlb> l2_;
    std::unique_ptr<Tlb> pwc_;
    std::map<uint64_t, Object> objects_;  // by base
    std::pair<const uint64_t, Object> *last_ = nullptr;  // the object of the last access
    std::unordered_map<uint64_t, uint32_t> frame_pages_;  // Mosaic: 4K pages allocated per 2 MiB frame
    mmu::PageTree tree_;
    uint64_t gpu_memory_ = 0;
    uint64_t resident_bytes_ = 0;
    std::list<uint64_t> lru_;  // resident page keys, most recent first
    std::unordered_map<uint64_t, std::list<uint64_t>::iterator> resident_;
    Stats stats_;
    CostModel costs_;
    double mapping_ns_ = 0, migration_ns_ = 0;
};

}  // namespace uvm::lab
