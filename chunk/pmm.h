// The physical memory manager of one GPU (nvidia-uvm's uvm_pmm_gpu). The
// rules in full, and what each was measured to do: docs/pmm.md.
//
// 2 MiB root chunks come from a RootChunkSource (the backend). A root chunk
// splits into 32 chunks of 64 KiB, and a 64 KiB chunk into 16 chunks of 4 KiB;
// when the last child of a split chunk is freed, the children merge back into
// their parent at once, so a root chunk whose memory is all free is whole
// again. Fully free root chunks stay cached until trim() gives them back.
//
// Runs. The chunks of one allocation are physically contiguous, but for a
// stitched run (below): a GPU sees a multi-chunk object through one view of
// its physical memory (on CUDA, the physical window) only where they are, and
// the driver cannot map below 2 MiB. A run goes best fit: in the shortest
// free run of roots that holds it, or in the split chunk whose longest free
// run fits it most tightly,
// else on whole parents split for it; packing into the roots in use lets the
// backend's other handles drain.
//
// Runs of up to kShortRun roots, and roots split for 64K and 4K chunks, come
// only from roots grown for short runs; a long run may take any adjacent free
// roots. A small object in a long run's root would keep that run's whole
// driver handle (cuda/root_pool.h keeps the same two kinds apart).
//
// Stitched runs. A long run of 2M chunks whose caller can map several runs
// as one (alloc's may_stitch: a kernel-mapped runtime object) and that no
// held run fits takes, before any free root moves or the PMM grows, whole
// release spans (driver allocations) of held roots that are each free or the
// holder's pending, longest first while they fit, and grows only the rest,
// as one long run (never a short one: its roots would share a pooled
// allocation) whose spans are whole too; where they are not, or no span
// serves, the run goes the usual way. Whole spans, because a piece is mapped
// elsewhere only by its driver allocations whole (cuda/root_pool.h). A
// training step's freed activation of 786 MiB that the next, larger request
// could not use then serves it in part (bench/results/2026-12-02-h200-stitched).
//
// Pending roots (pend below) are a holder's (a stream's): allocated for
// everyone else, free for the holder's 2M runs; a root is pending or free or
// allocated, never two of them.
//
// Where no run fits, the PMM grows rather than failing, but first gives back
// as many whole free roots as it would otherwise hold above its peak need
// (the most it needed at a growth since the last trim) plus the growth slack
// (set_growth_slack): only those whose memory goes back with them
// (RootChunkSource::release_span), those of the shortest free runs first.
// Kept beside the new ones, free roots too short for the run would raise what
// it holds above what it needs. Moves stop at half the peak need until the
// need rises again, so that a workload with a request fitting no free run at
// each step's peak settles instead of moving memory every step. Under a
// release threshold (set_release_threshold) every whole free root goes back
// before a growth. OUT_OF_MEMORY means the source has no such run either,
// even with the whole free roots back.
//
// No operation scans the chunks: free roots are a RunBitmap (runs binned by
// length), split chunks sit in lists by their longest free run with a mask of
// the non-empty lists, and a run inside a split chunk is found with shifts.
//
// Chunks are named by their physical address; the chunk size is given back
// on free, as in the driver (a chunk does not carry its object).
//
// Thread safety: every method may be called concurrently (one lock per PMM).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "common/bitmap.h"
#include "common/run_bitmap.h"
#include "common/sizes.h"
#include "uvm/uvm.h"

namespace uvm::chunk {

// Where root chunks come from, and go back to.
class RootChunkSource {
public:
    virtual ~RootChunkSource() = default;
    // `count` new root chunks side by side from the 2 MiB-aligned physical
    // address *phys, below the PMM's limit. Each goes back on its own.
    virtual uvm_status_t alloc_root_chunks(size_t count, uint64_t *phys) = 0;
    virtual void free_root_chunk(uint64_t phys) = 0;
    // The root chunks whose memory goes back with the given one's, given out
    // (one driver allocation): [*first, *first + *count * 2 MiB), `phys`
    // among them. Fixed while any of them is given, but for a shrink
    // (Pmm::with_roots_still). Itself by default.
    virtual void release_span(uint64_t phys, uint64_t *first, size_t *count) const {
        *first = phys;
        *count = 1;
    }
};

// States of a chunk (nvidia-uvm's uvm_pmm_gpu_chunk_state_t, less the PMA
// and temporarily-pinned states that have no meaning here).
enum class ChunkState : uint8_t {
    Free = 0,
    IsSplit,
    Pinned,     // allocated, not evictable
    Evictable,  // allocated, may be evicted to sysmem
};
constexpr int kChunkStates = 4;

// The statistics' per-size arrays are the public ones (uvm_gpu_stats_t).
static_assert(kIndex4K == UVM_CHUNK_INDEX_4K && kIndex64K == UVM_CHUNK_INDEX_64K && kIndex2M == UVM_CHUNK_INDEX_2M &&
              kSizeIndexCount == UVM_CHUNK_SIZE_COUNT);

struct PmmStats {
    uint64_t root_chunks = 0;
    uint64_t bytes_free[kSizeIndexCount] = {};    // by SizeIndex
    uint64_t bytes_pinned[kSizeIndexCount] = {};
    uint64_t bytes_evictable[kSizeIndexCount] = {};
    uint64_t chunks_split[kSizeIndexCount] = {};  // split 64K and 2M chunks
    uint64_t largest_free_block = 0;              // contiguous free bytes among held roots
    uint64_t roots_grown = 0;                     // root chunks taken from the source, ever
    uint64_t roots_moved = 0;                     // of the free ones given back, those given back to grow
};

// `more` added into *sum (the largest free block is the larger one).
void add_stats(PmmStats *sum, const PmmStats &more);

// Who may take back pending roots (Pmm::pend); slot -1: nobody.
// `hint`: where an allocation of its would best go, the first of a run it
// made pending earlier of just the length asked for (the same sizes recur in
// training steps: an exact run keeps the joined ones whole); taken where
// those roots are all still its pending ones, else ignored.
struct PmmHolder {
    int slot = -1;
    uint32_t gen = 0;
    uint64_t hint = UINT64_MAX;
};

class Pmm {
public:
    // `phys_limit`: the GPU's physical size; every root chunk lies below it.
    Pmm(RootChunkSource *source, uint64_t phys_limit);
    ~Pmm();
    Pmm(const Pmm &) = delete;
    Pmm &operator=(const Pmm &) = delete;

    // Allocate a physically contiguous run of `count` chunks of `size` (4K,
    // 64K or 2M) into out[0..count) (out[i] = out[0] + i * size).
    // All or nothing: on failure nothing is held and the source got back any
    // root chunk it gave during the call. OUT_OF_MEMORY when neither the held
    // chunks nor the source have such a run; INVALID_ARGUMENT for a bad size
    // or count 0.
    // `grown`, where given, gets the root chunks the call took from the
    // source, for undo_alloc. `may_grow` false: only what is held (no call to
    // the source, nothing given back); OUT_OF_MEMORY where that has no run.
    // `holder`: for 2M chunks, that holder's pending roots may be taken too
    // (theirs first, then free roots, then both joined, before growing).
    // Runs of up to this many roots are short (see the top): a pooled CUDA
    // handle (cuda/root_pool.h).
    static constexpr size_t kShortRun = kShortRunRoots;
    // `may_stitch`: for a long run of 2M chunks (more than kShortRun) that
    // no held run fits, the chunks may be several runs instead (stitched, see
    // the top), out[] then naming each chunk where it is.
    uvm_status_t alloc(uint64_t size, size_t count, bool evictable, uint64_t *out,
                       std::vector<uint64_t> *grown = nullptr, bool may_grow = true, PmmHolder holder = PmmHolder(),
                       bool may_stitch = false);

    // As alloc, but for compaction (compact/compact.h): nothing is taken from
    // the source, and no chunk of the run lies in a root chunk set in `avoid`
    // (bit phys / 2 MiB: the memory being emptied, and what is sparser).
    // OUT_OF_MEMORY where the held memory has no such run. Undone by free().
    uvm_status_t alloc_avoiding(uint64_t size, size_t count, bool evictable, const Bitmap &avoid, uint64_t *out);

    // Undo a successful alloc (when a later step of the caller fails): free
    // the chunks and give the roots it grew back to the source, so the PMM
    // is as it was before the alloc.
    // `holder`: the alloc's; 2M chunks go back pending to it (they may have
    // been its pending roots, whose work may not be done).
    void undo_alloc(uint64_t size, const uint64_t *phys, size_t count,
                    const std::vector<uint64_t> &grown, PmmHolder holder = PmmHolder());

    // Free chunks of `size`. INVALID_ARGUMENT, and nothing freed, when any of
    // them is not an allocated chunk of that size.
    uvm_status_t free(uint64_t size, const uint64_t *phys, size_t count);

    // Free whole root chunks (2 MiB chunks) and give them back to the source
    // at once, not cached: for memory that other processes may still hold
    // (an exported object's), which must never be handed out again here.
    // INVALID_ARGUMENT, and nothing done, as for free().
    uvm_status_t free_and_release(const uint64_t *phys, size_t count);

    // Give every fully free root chunk back to the source; returns bytes released.
    uint64_t trim();
    // Keep at most `bytes` of whole free root chunks from now on: a root that
    // comes free beyond that goes back to the source at once. Gives back
    // what is above it now; returns those bytes.
    uint64_t set_release_threshold(uint64_t bytes);
    // Hold up to `bytes` (in whole roots) more than the peak need before a
    // growth moves free roots (see the top); UVM_GROWTH_SLACK_DEFAULT by
    // default, UINT64_MAX: never move, grow beside them.
    void set_growth_slack(uint64_t bytes);

    PmmStats stats() const;

    // Bytes of one root chunk by state; all zero for a root not held (a held
    // one's add up to 2 MiB).
    struct RootUsage {
        uint32_t free = 0;
        uint32_t pinned = 0;
        uint32_t evictable = 0;
    };
    // Every root's usage, by phys / 2 MiB, in one view taken under the lock:
    // what-if views ("were these chunks freed", pressure/fits.h) start from
    // it. Changes nothing. O(chunks), as stats().
    std::vector<RootUsage> root_usage() const;

    // Run `fn(used)` with the lock held, `used` being the bytes allocated
    // (pending ones included) in the root chunks [first, first + count * 2
    // MiB); 0 for roots not held. No chunk is allocated or freed until `fn`
    // returns: for a step that needs those roots to stay as they are while
    // it works on their memory (compaction shrinking a driver allocation,
    // compact/). `fn` may call the source, as a growth does under the lock,
    // and nothing of this PMM. Where it returns OK, the roots' release spans
    // are asked of the source again (a shrink cuts them). Returns what `fn`
    // returns.
    uvm_status_t with_roots_still(uint64_t first, size_t count, const std::function<uvm_status_t(uint64_t used)> &fn);

    // State of the chunk of `size` at `phys`; Free for memory not held.
    ChunkState state(uint64_t phys, uint64_t size) const;
    // Whether the root chunk holding `phys` has a pinned chunk allocated in
    // it (eviction can then never make it whole). O(chunks of one root).
    bool root_has_pinned(uint64_t phys) const;

    // Pending roots. A holder (a stream: stream/stream.h) gives back whole
    // root chunks, allocated, that queued work of its own may still use:
    // they stay allocated for everyone else, but the holder's own
    // allocations of 2M chunks take them again at once, in any run, joined
    // with adjacent pending and free roots (its work is ordered after its
    // frees), as cudaMallocAsync's pool serves its stream. unpend() makes
    // them free once that work is done. Trim and the release threshold
    // never see them. At most kMaxHolders holders; a holder that is removed
    // (its pending roots come free) and a stale Holder name nothing.
    using Holder = PmmHolder;
    static constexpr int kMaxHolders = 64;
    // A new holder; slot -1 when all are in use.
    Holder add_holder();
    // Its pending roots come free (its work must be done), then it is gone.
    void remove_holder(Holder holder);
    // The root chunks [first, first + count * 2 MiB), allocated, become
    // `holder`'s, pending until unpend(holder, seq or more).
    // INVALID_ARGUMENT, and nothing done, for a stale holder or any root not
    // allocated (pending ones included).
    uvm_status_t pend(Holder holder, uint64_t first, size_t count, uint64_t seq);
    // `holder`'s pending roots of seq <= upto come free; returns their bytes.
    uint64_t unpend(Holder holder, uint64_t upto);
    uint64_t pending_bytes(Holder holder) const;

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

    // Lists of split chunks by the longest run of free children they have
    // (1 .. children - 1), with bit r of `nonempty` set while list r has any.
    template <unsigned Children>
    struct RunLists {
        ListNode lists[Children];
        uint64_t nonempty = 0;
    };

    struct HolderState {
        bool used = false;
        uint32_t gen = 0;
        Bitmap roots;        // its pending roots
        Bitmap short_roots;  // of those, the ones not `large`
        uint64_t bytes = 0;
        uint64_t hint = UINT64_MAX;  // the current alloc's (lock held)
        // Every pend() since the last unpend() that covered it, in the order
        // made (seq order, but for undo_alloc's: pend_roots): unpend(upto)
        // pops the ones up to `upto` from the front and looks only
        // at their roots, so that its cost is what it gives back, not what
        // the holder still has pending (a stream with gigabytes pending and
        // a fence done every few frees walked them all each time). Roots the
        // holder took back since (or pended again, under a later seq) are
        // skipped: a root is the entry's while it is pending under its seq.
        struct Pended {
            size_t at;
            size_t count;
            uint64_t seq;
        };
        std::deque<Pended> pended;
        bool unlisted = false;  // a pending root has no entry: unpend walks them all
    };
    static RootUsage usage_of(const RootChunk &root);  // lock held
    void note_spans(size_t base, size_t count);         // lock held
    bool pended_under(size_t i, int slot, uint64_t seq) const;
    HolderState *holder_state(Holder holder);
    void pend_roots(HolderState &h, int slot, size_t at, size_t count, uint64_t seq);
    void reclaim_pending(size_t at, size_t count);

    uvm_status_t alloc_run(SizeIndex size_index, size_t count, ChunkState to, uint64_t *first);
    uvm_status_t free_locked(uint64_t size, const uint64_t *phys, size_t count);
    uvm_status_t take_roots(size_t count, RootChunk **first, HolderState *holder = nullptr);
    uvm_status_t grow_roots(size_t count, bool large, size_t *base);
    uvm_status_t stitch(size_t count, ChunkState to, uint64_t *out);
    // The most pieces of one stitched run: each is mapped on its own.
    static constexpr size_t kMaxStitchPieces = 128;
    size_t find_best_run_avoiding(const RunBitmap &free, size_t count) const;
    template <typename F>
    void for_each_short_range(size_t at, size_t count, F f) const;  // f(first, count) of the non-large roots
    void mark_roots_free(size_t at, size_t count);
    void mark_roots_taken(size_t at, size_t count);
    // The buddy step below a split chunk of size Parent, written once for
    // roots (64K children) and 64K chunks (4K children): Buddy<Parent> says
    // what differs between the two (pmm.cpp).
    template <SizeIndex Parent>
    struct Buddy;
    template <SizeIndex Parent>
    uvm_status_t alloc_children(size_t count, ChunkState to, uint64_t *first);
    template <SizeIndex Parent>
    void split(typename Buddy<Parent>::Chunk *chunk);
    template <SizeIndex Parent>
    void take_children(typename Buddy<Parent>::Chunk *chunk, uint32_t index, uint32_t count, ChunkState to);
    template <SizeIndex Parent>
    void free_children(typename Buddy<Parent>::Chunk *chunk, uint64_t bits, bool relist_now);
    template <SizeIndex Parent>
    void free_child_run(uint64_t first, size_t count, bool relist_now);
    bool is_allocated(uint64_t size, uint64_t phys) const;
    void free_one(SizeIndex size_index, uint64_t phys, bool relist_now);
    void free_run(SizeIndex size_index, uint64_t first, size_t count);
    void make_root_free(RootChunk *root);
    void release_whole_root(uint64_t phys);
    void release_whole_roots(const std::vector<uint64_t> &roots);
    void make_room(size_t roots);
    std::vector<uint64_t> free_root_list() const;
    RootChunk *root_of(uint64_t phys) const;
    void account(SizeIndex size_index, ChunkState from, ChunkState to);
    template <unsigned Children, typename Chunk>
    void relist(RunLists<Children> &lists, Chunk *chunk, uint64_t free_mask);
    // The first chunk of the best list whose root `avoid_` does not name.
    template <unsigned Children, typename Chunk, typename Phys>
    Chunk *best_fit(RunLists<Children> &lists, uint32_t count, Phys &&phys);

    static void list_init(ListNode *head);
    static void list_push(ListNode *head, ListNode *node);
    static void list_remove(ListNode *node);
    static bool list_empty(const ListNode *head);

    RootChunkSource *source_;
    mutable std::mutex lock_;
    std::vector<RootChunk *> roots_;  // by phys / 2 MiB; null where not held
    RunBitmap free_roots_;            // by phys / 2 MiB: held root chunks in state Free
    RunBitmap free_short_;            // of those, the ones grown for short runs (not `large`)
    RunLists<32> split_roots_;        // split RootChunk by longest free 64K run
    RunLists<16> split_64k_;          // split Chunk64K by longest free 4K run
    uint64_t root_count_ = 0;
    uint64_t bytes_[kChunkStates][kSizeIndexCount] = {};  // by ChunkState and SizeIndex
    uint64_t split_[kSizeIndexCount] = {};
    // Roots that alloc() took from the source in the current call, so that a
    // failed multi-chunk allocation can give them back.
    std::vector<uint64_t> grown_in_call_;
    bool may_grow_ = false;  // the current call may take roots from the source (lock held)
    HolderState *taking_for_ = nullptr;  // the current 2M alloc's holder (lock held)
    const Bitmap *avoid_ = nullptr;      // alloc_avoiding's roots (lock held)
    std::vector<HolderState> holders_;   // kMaxHolders
    uint64_t release_threshold_ = UINT64_MAX;  // free root bytes kept (lock held)
    uint64_t need_peak_ = 0;  // root chunks: the peak need (make_room), since the last trim
    // Roots moved since the peak need last rose: at most need_peak_ /
    // kMoveBudgetDiv, then growth goes beside the free roots (see the top).
    uint64_t moved_since_peak_ = 0;
    static constexpr uint64_t kMoveBudgetDiv = 2;
    // Root chunks held above it before a growth moves free ones.
    uint64_t growth_slack_ = UVM_GROWTH_SLACK_DEFAULT / (2ull << 20);
    uint64_t roots_grown_ = 0;
    uint64_t roots_moved_ = 0;
    struct FreeSpan {
        size_t run;    // the length of the free run it is in
        size_t count;  // its roots
        size_t first;
        bool operator<(const FreeSpan &o) const {
            return run != o.run ? run < o.run : count != o.count ? count < o.count : first < o.first;
        }
    };
    std::vector<FreeSpan> spans_;  // make_room's (lock held)
    Bitmap stitch_usable_;         // stitch()'s free roots and the holder's pending ones (lock held)
    uint64_t release_above_threshold();
};

}  // namespace uvm::chunk
