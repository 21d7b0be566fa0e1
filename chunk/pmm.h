// The physical memory manager of one GPU (nvidia-uvm's uvm_pmm_gpu).
//
// 2 MiB root chunks come from a RootChunkSource (the backend). A root chunk
// splits into 32 chunks of 64 KiB, and a 64 KiB chunk into 16 chunks of 4 KiB;
// when the last child of a split chunk is freed, the children merge back into
// their parent at once, so a root chunk whose memory is all free is whole
// again. Fully free root chunks stay cached until trim() gives them back.
//
// No operation scans the chunks: each size keeps a list of the places it can
// allocate from (free root chunks; split roots with a free 64K child; split
// 64K chunks with a free 4K child), and a split chunk keeps a bitmask of its
// free children, so alloc and free are O(1) per chunk.
//
// Chunks are named by their physical address; the chunk size is given back
// on free, as in the driver (a chunk does not carry its object).
//
// Thread safety: every method may be called concurrently (one lock per PMM).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "uvm/uvm.h"

namespace uvm::chunk {

// Where root chunks come from, and go back to.
class RootChunkSource {
public:
    virtual ~RootChunkSource() = default;
    // A 2 MiB-aligned physical address of a new root chunk, below the PMM's limit.
    virtual uvm_status_t alloc_root_chunk(uint64_t *phys) = 0;
    virtual void free_root_chunk(uint64_t phys) = 0;
};

// States of a chunk (nvidia-uvm's uvm_pmm_gpu_chunk_state_t, less the PMA
// and temporarily-pinned states that have no meaning here).
enum class ChunkState : uint8_t {
    Free = 0,
    IsSplit,
    Pinned,     // allocated, not evictable
    Evictable,  // allocated, may be evicted to sysmem
};

struct PmmStats {
    uint64_t root_chunks = 0;
    uint64_t bytes_free[3] = {0, 0, 0};      // by size index (4K, 64K, 2M)
    uint64_t bytes_pinned[3] = {0, 0, 0};
    uint64_t bytes_evictable[3] = {0, 0, 0};
    uint64_t chunks_split[3] = {0, 0, 0};    // split 64K and 2M chunks
    uint64_t largest_free_block = 0;         // contiguous free bytes among held roots
};

class Pmm {
public:
    // `phys_limit`: the GPU's physical size; every root chunk lies below it.
    Pmm(RootChunkSource *source, uint64_t phys_limit);
    ~Pmm();
    Pmm(const Pmm &) = delete;
    Pmm &operator=(const Pmm &) = delete;

    // Allocate `count` chunks of `size` (4K, 64K or 2M) into out[0..count).
    // All or nothing: on failure nothing is held and the source got back any
    // root chunk it gave during the call. OUT_OF_MEMORY when the source is
    // exhausted; INVALID_ARGUMENT for a bad size or count 0.
    // `grown`, where given, gets the root chunks the call took from the
    // source, for undo_alloc.
    uvm_status_t alloc(uint64_t size, size_t count, bool evictable, uint64_t *out,
                       std::vector<uint64_t> *grown = nullptr);

    // Undo a successful alloc (when a later step of the caller fails): free
    // the chunks and give the roots it grew back to the source, so the PMM
    // is as it was before the alloc.
    void undo_alloc(uint64_t size, const uint64_t *phys, size_t count,
                    const std::vector<uint64_t> &grown);

    // Free chunks of `size`. INVALID_ARGUMENT, and nothing freed, when any of
    // them is not an allocated chunk of that size.
    uvm_status_t free(uint64_t size, const uint64_t *phys, size_t count);

    // Give every fully free root chunk back to the source; returns bytes released.
    uint64_t trim();

    PmmStats stats() const;

    // State of the chunk of `size` at `phys`; Free for memory not held.
    ChunkState state(uint64_t phys, uint64_t size) const;

    // Walk everything and check every invariant (lists, masks, counters).
    // For tests: O(chunks).
    bool check_invariants() const;

private:
    struct RootChunk;
    struct Chunk64K;
    struct ListNode {
        ListNode *prev;
        ListNode *next;
    };

    uvm_status_t alloc_one(int size_index, bool evictable, uint64_t *out);
    bool is_allocated(uint64_t size, uint64_t phys) const;
    void free_one(int size_index, uint64_t phys);
    void free_64k_child(RootChunk *root, uint32_t index);
    void release_whole_roots(const std::vector<uint64_t> &roots);
    uvm_status_t take_root(RootChunk **out);
    uvm_status_t take_64k(Chunk64K **out);
    RootChunk *root_of(uint64_t phys) const;
    void account(int size_index, ChunkState from, ChunkState to);

    static void list_init(ListNode *head);
    static void list_push(ListNode *head, ListNode *node);
    static void list_remove(ListNode *node);
    static bool list_empty(const ListNode *head);

    RootChunkSource *source_;
    mutable std::mutex lock_;
    std::vector<RootChunk *> roots_;  // by phys / 2 MiB; null where not held
    ListNode free_roots_;             // RootChunk in state Free
    ListNode roots_with_free_64k_;    // split RootChunk with a free 64K child
    ListNode chunks_with_free_4k_;    // split Chunk64K with a free 4K child
    uint64_t root_count_ = 0;
    uint64_t bytes_[4][3] = {};       // by ChunkState and size index
    uint64_t split_[3] = {};
    // Roots that alloc() took from the source in the current call, so that a
    // failed multi-chunk allocation can give them back.
    std::vector<uint64_t> grown_in_call_;
};

}  // namespace uvm::chunk
