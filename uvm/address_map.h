// A GPU's kernel addresses -> the object mapped there (uvm_mem_lookup_gpu_kernel):
// a radix table read without a lock, as a page table is walked.
//
// The address space (below 2^52) is split into 2 MiB slots, reached through
// two levels of directories (2 TiB and 2 GiB). A slot holds either the one
// object that covers it whole, or, where objects share it, a table of 32
// slots of 64 KiB, whose slots in turn may hold a table of 16 slots of
// 4 KiB. Every object is at least 4 KiB aligned and sized, so an object
// takes about size / 2 MiB slots plus at most 94 at its two ends. Tables are
// made on first use (published with a compare-and-swap) and kept until the
// map goes, so a reader never meets freed memory: no lock, no hazard
// pointers. A slot's (handle, base) pair is read as a seqlock reads: the
// handle, the base, the handle again.
//
// Writers are the object's own mapping and unmapping (under its lock);
// objects never overlap in one address space, so two writers never own one
// slot, and an erase clears only slots that still name its handle.
#pragma once

#include <atomic>
#include <cstdint>

namespace uvm {

class AddressMap {
public:
    AddressMap() = default;
    ~AddressMap();
    AddressMap(const AddressMap &) = delete;
    AddressMap &operator=(const AddressMap &) = delete;

    static constexpr uint64_t kLimit = uint64_t{1} << 52;  // addresses from here up are not kept

    // Record [base, base + size) as the object `handle`; handle 0 makes the
    // tables it needs only, so that a later insert cannot fail. Host
    // allocation failure (a new table) is false and leaves nothing recorded.
    bool insert(uint64_t base, uint64_t size, uint64_t handle);
    // Forget [base, base + size) where it still names `handle`.
    void erase(uint64_t base, uint64_t size, uint64_t handle);
    // The object holding `address`: true with its handle and base.
    bool find(uint64_t address, uint64_t *handle, uint64_t *base) const;

    struct Slot;
    struct Table;

private:
    static constexpr unsigned kRootBits = 11;  // bits 51..41
    static constexpr unsigned kMidBits = 10;   // bits 40..31
    static constexpr unsigned kLeafBits = 10;  // bits 30..21: 2 MiB slots
    struct Mid;
    Table *leaf_for(uint64_t address, bool create);
    std::atomic<Mid *> root_[1u << kRootBits] = {};
};

}  // namespace uvm
