// A GPU's kernel addresses -> the object mapped there (uvm_mem_lookup_gpu_kernel):
// a radix table read without a lock, as a page table is walked.
//
// The address space (below 2^52) is split into 2 MiB slots, reached through
// two levels of directories (2 TiB and 2 GiB). A slot holds either the name
// of the one range that covers it whole, or, where ranges share it, a table
// of 32 slots of 64 KiB, whose slots in turn may hold a table of 16 slots of
// 4 KiB. Every range is at least 4 KiB aligned and sized, so a range takes
// about size / 2 MiB slots plus at most 94 at its two ends.
//
// A range is named once, when it is mapped (reserve), and its name's cell
// says which object it is now: naming it for another object, or for none
// (a parked object's range, found by nobody), is one store whatever its
// size (name), so an object kept whole for reuse costs the same at every
// size. Only reserve and erase walk the slots.
//
// Tables and cells are made on first use (published with a compare-and-swap)
// and kept until the map goes, so a reader never meets freed memory: no
// lock, no hazard pointers. A cell is read as a seqlock reads: the handle,
// the range, the handle again; a reader checks the address is inside the
// range it read, so a cell reused for another range meanwhile is never
// taken for the old one.
//
// Writers are the object's own mapping, unmapping and naming (under its
// lock); ranges never overlap in one address space, so two writers never own
// one slot, and an erase clears only slots that still hold its name.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

namespace uvm {

class AddressMap {
public:
    AddressMap() = default;
    ~AddressMap();
    AddressMap(const AddressMap &) = delete;
    AddressMap &operator=(const AddressMap &) = delete;

    static constexpr uint64_t kLimit = uint64_t{1} << 52;  // addresses from here up are not kept
    // The name of a range from kLimit up: naming and erasing it do nothing.
    static constexpr uint32_t kUnkept = UINT32_MAX;

    // Record [base, base + size) under a new name, of no object yet (found
    // by nobody until named). Its name (never 0), or 0 where host memory
    // for a table or cell could not be had (nothing recorded).
    uint32_t reserve(uint64_t base, uint64_t size);
    // The range `name` is the object `handle` from now (0: nobody's). O(1).
    void name(uint32_t name, uint64_t handle);
    // Forget the range `name` (its slots, then the name itself).
    void erase(uint32_t name);
    // The object holding `address`: true with its handle and the range's base.
    bool find(uint64_t address, uint64_t *handle, uint64_t *base) const;

    struct Slot;
    struct Table;
    struct Cell;

private:
    static constexpr unsigned kRootBits = 11;  // bits 51..41
    static constexpr unsigned kMidBits = 10;   // bits 40..31
    static constexpr unsigned kLeafBits = 10;  // bits 30..21: 2 MiB slots
    static constexpr unsigned kCellBits = 10;  // cells per block
    static constexpr unsigned kBlocks = 1u << 12;  // up to 4M ranges at once
    struct Mid;
    Table *leaf_for(uint64_t address, bool create);
    bool walk_range(uint64_t base, uint64_t size, uint64_t value, bool set);
    Cell *cell(uint32_t name) const;
    std::atomic<Mid *> root_[1u << kRootBits] = {};
    std::atomic<Cell *> blocks_[kBlocks] = {};
    std::mutex names_lock_;           // free_names_ and next_name_
    std::vector<uint32_t> free_names_;
    uint32_t next_name_ = 1;          // 0 is no name
};

}  // namespace uvm
