// The root chunks of one GPU on the CUDA driver: device memory from
// cuMemCreate, mapped into the GPU's *physical window* (a VA reservation twice
// the size of the GPU's memory), where a root chunk's physical address is its
// offset. The window is every vidmem object's GPU view: the PMM places a
// multi-chunk object on a contiguous run, so its kernel mapping (and a user
// mapping whose address the manager picks) is a range of the window, with no
// driver call.
//
// Handles of bounded size. The driver's cost is per handle, whatever its
// size, but a handle goes back to the driver only whole, when the last of its
// root chunks comes back from the PMM (trim): one live object keeps its whole
// handle. So growth is bounded both ways: a run of more than
// kMaxPooledHandle gets handles of its own, side by side in the window, each
// of at most kMaxExactHandle (32 MiB), and smaller runs come from pooled
// handles that double from 2 MiB up to kMaxPooledHandle (8 MiB). The two
// kinds are kept apart: a run of up to 4 root chunks only ever gets root
// chunks of pooled handles, a longer one only of exact ones, as the PMM keeps
// them apart (chunk/pmm.h), so a small object never keeps a large run's
// handle. A few scattered live objects then keep at most 8 MiB each, and the
// last growth overshoots the need by at most 6 MiB. A long run's roots may
// serve later long runs of any length, so a long-lived object cut from a
// freed long run keeps at most the 32 MiB handles it touches, not the whole
// run. The price is more handles to make at growth. The PMM prefers chunks
// in the roots already in use and lowest addresses first, so that handles
// drain; trim() starts the growth at 2 MiB again. What each bound was
// measured to do: docs/cuda_backend.md.
//
// Remappable root chunks. The driver maps a handle only whole, from offset 0,
// so a root chunk inside a large handle cannot be mapped on its own anywhere
// else. Root chunks asked for as remappable are each their own 2 MiB handle
// (the old layout), for the objects that ask to be placed at a user address
// of the caller's choosing. They are made exportable (POSIX
// fds), and other processes' exported roots are imported into the window
// beside them, as remappable roots of one chunk that the PMM never sees.
//
// Stitched views. A stitched object (chunk/pmm.h) is several runs of whole
// handles; its kernel view maps each handle again, side by side, in a range
// reserved for it (whole_handles names them; cuda_placement.cpp). Its roots
// are then neither offloaded nor shrunk: the view would keep the old memory.
//
// Offloaded root chunks (client sleep, backend/offload_capability.h). offload()
// unmaps and releases whole handles whose every root the PMM holds is in the
// list: the driver has the memory back, but the given roots keep their window
// range taken in window_space_, so their phys (the kernel address of every
// object in them, and the peers' view) stays theirs and nothing else is placed
// there; the handle's roots nobody held go back to the window. An offloaded
// root has no handle (roots_ null) and a bit in offloaded_; free() of one only
// gives its window range back. restore() backs the list again at the same
// phys: adjacent roots coalesce into runs, one handle per run of up to
// kMaxRestoredHandle, mapped at its window range and granted to the usual
// access list. 64 MiB because the driver's cost is per handle, whatever its
// size: few handles keep a wake within its time target
// (docs/cuda_backend.md), and a larger cap would save little more while a
// live root would keep more of the driver's memory. A restored handle is a
// kind of its own: its roots are the sleeping client's only, so a root the
// PMM frees there is *parked* (never ready, never handed out by alloc to
// anyone), and the handle goes back to the driver with its last root, as an
// exact handle does. So a later offload of that client's roots never finds a
// handle shared with another holder. A restored root is in a handle of many,
// so it is no longer remappable (own_handle is 0: it cannot be mapped at a
// caller's address or exported again). alloc_owned() makes handles of the
// same kind for a sleepable client's growth, so that its first sleep gives
// back as few handles as its later ones (each handle costs the driver about
// 35 us to give back, whatever its size: 5,120 handles of 2 MiB 0.2 s, 160 of
// 64 MiB 0.01 s, measured on an H200).
//
// Shrinking a handle (compaction, backend::OffloadCapability::root_span_shrink).
// A few live root chunks keep their whole pooled or exact handle, and the
// driver gives memory back only by the handle. shrink() copies each run of a
// handle's given roots into a new handle (made at a free window range),
// then unmaps the old handle, maps the new ones at the runs' ranges and
// releases the old one with its ready roots' memory: the given roots keep
// their phys, so every view of them stays. The new handles are of the old
// one's kind (pooled or exact), holding given roots only.
//
// Thread safety: none; the backend's per-GPU lock covers every call.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/bitmap.h"
#include "common/sizes.h"
#include "cuda/driver_api.h"
#include "mmu/range_allocator.h"
#include "uvm/uvm.h"

namespace uvm::cuda {

class RootPool {
public:
    // Pooled handles grow from kFirstHandle by doubling up to
    // kMaxPooledHandle; a larger run gets handles of its own of up to
    // kMaxExactHandle.
    static constexpr uint64_t kFirstHandle = 2ull << 20;
    // The short run's bound: the PMM gives a run of up to that many roots
    // only pooled roots, a longer one only exact ones.
    static constexpr uint64_t kMaxPooledHandle = kShortRunBytes;
    // The largest handle of a long run (grow_pooled).
    static constexpr uint64_t kMaxExactHandle = 32ull << 20;
    // The largest handle restore() makes for a run of offloaded roots.
    static constexpr uint64_t kMaxRestoredHandle = 64ull << 20;

    RootPool(const DriverApi *api, CUdevice device);
    ~RootPool();  // every root chunk must have come back
    RootPool(const RootPool &) = delete;
    RootPool &operator=(const RootPool &) = delete;

    // Reserve the window for a GPU of `memory_total` bytes.
    uvm_status_t init(uint64_t memory_total);
    CUdeviceptr window() const { return window_; }
    uint64_t window_size() const { return window_size_; }
    bool in_window(uint64_t va) const { return va >= window_ && va < window_ + window_size_; }

    // `count` adjacent root chunks from *phys, made accessible to the GPUs of
    // `access` (the owner and the peers granted so far). OUT_OF_MEMORY when
    // the driver has not that much memory, or the window no such hole.
    uvm_status_t alloc(size_t count, bool remappable, const std::vector<CUmemAccessDesc> &access, uint64_t *phys);
    // A root chunk back from the PMM; its handle goes back to the driver when
    // it was the last one out, unless `keep_empty` (a capture is under way:
    // unmapping would break it): then the handle stays, its roots ready for
    // alloc, until release_empty().
    void free(uint64_t phys, bool keep_empty = false);
    // Whether free(phys) would give its handle back.
    bool frees_handle(uint64_t phys) const;
    // Handles kept by free(keep_empty) since the last release_empty (some
    // may be in use again), and their release where still empty.
    uint64_t kept_empty() const { return kept_empty_; }
    // `keep(first, size)`: a handle to keep all the same (a stitched view
    // maps it: cuda_placement.cpp), still counted in kept_empty().
    void release_empty(const std::function<bool(uint64_t, uint64_t)> &keep = nullptr);
    // The root chunks of the handle holding a given one.
    void span(uint64_t phys, uint64_t *first, size_t *count) const;
    // Start growth small again (offloaded roots stay as they are: they are
    // the client's, not cached).
    void trim() { next_handle_ = kFirstHandle; }

    // Give back the memory of the given root chunks at phys[0..count), keeping
    // their window ranges: each handle holding one is unmapped and released.
    // All or nothing: INVALID_ARGUMENT for one that is not given (or listed
    // twice); NOT_SUPPORTED where one is imported, exported, `pinned`
    // (mapped elsewhere, the backend knows where), or its handle holds a
    // given root not in the list.
    uvm_status_t offload(const uint64_t *phys, size_t count, const std::function<bool(uint64_t)> &pinned);
    // Back offloaded root chunks again at their phys, one handle per run of
    // adjacent ones (up to kMaxRestoredHandle), each accessible to `access`.
    // All or nothing: INVALID_ARGUMENT for one not offloaded (or listed
    // twice); a driver failure (OUT_OF_MEMORY above all) undoes the call.
    uvm_status_t restore(const uint64_t *phys, size_t count, const std::vector<CUmemAccessDesc> &access);
    // `count` adjacent root chunks from *phys for one holder alone, all given:
    // handles as restore() makes them (up to kMaxRestoredHandle, a freed root
    // parked until its handle's last one comes back), each accessible to
    // `access`. OUT_OF_MEMORY (nothing taken) where the driver or the window
    // has not that much.
    uvm_status_t alloc_owned(size_t count, const std::vector<CUmemAccessDesc> &access, uint64_t *phys);
    bool is_offloaded(uint64_t phys) const;
    uint64_t offloaded_bytes() const { return offloaded_.count() * kRootChunkSize; }

    // Give back the memory of the ready roots of the handle that is the span
    // [first, first + count * 2 MiB) (INVALID_ARGUMENT where none is, or it
    // has no given root) while its given roots keep their window ranges:
    // each run of given roots is copied (`copy`, window address to window
    // address) into a new handle mapped at a free window range first, then
    // the old handle is unmapped, the new ones are mapped at the runs' ranges
    // with `access`, and the old one is released. *released: its ready
    // roots' bytes; *copied: the given ones'. Nothing done, OK and both 0,
    // where every root of it is given. NOT_SUPPORTED for a handle of one
    // holder (restored, owned), a remappable, exported or imported one. A
    // failure before the swap gives back what it made and leaves the handle
    // as it was; one in the swap maps the old handle back (or, where the
    // driver refuses that, the new ones, and the shrink is done after all);
    // only where it refuses both are the given roots left unmapped (BACKEND,
    // both handles kept, the bytes in both). The caller makes sure nothing
    // touches the given roots meanwhile.
    using Copy = std::function<uvm_status_t(CUdeviceptr dst, CUdeviceptr src, uint64_t size)>;
    uvm_status_t shrink(uint64_t first, size_t count, const std::vector<CUmemAccessDesc> &access, const Copy &copy,
                        uint64_t *released, uint64_t *copied);

    // Sharing with other processes. A remappable root chunk's handle as a
    // POSIX fd (remappable handles are made exportable); NOT_SUPPORTED for a
    // root chunk in a pooled handle.
    uvm_status_t export_root(uint64_t phys, int *fd);
    // Other processes' exported root chunks (`fds`, which stay the caller's)
    // imported and mapped side by side from *phys, accessible to `access`.
    uvm_status_t import(const int *fds, size_t count, const std::vector<CUmemAccessDesc> &access, uint64_t *phys);
    void release_import(uint64_t phys, size_t count);

    // The handles that make up the run of given root chunks [phys, phys +
    // count * 2 MiB), in order, each as (handle, bytes): for a view of the
    // run elsewhere (a stitched object's, cuda_placement.cpp), which the
    // driver maps only by whole handles. NOT_SUPPORTED where a handle reaches
    // past the run, or a root of it is not given, imported or offloaded.
    uvm_status_t whole_handles(uint64_t phys, size_t count,
                               std::vector<std::pair<CUmemGenericAllocationHandle, uint64_t>> *out) const;

    // Grant `access` over every handle (one call per handle).
    uvm_status_t grant(const std::vector<CUmemAccessDesc> &access);
    // The root chunk's own handle where it is remappable, else 0.
    CUmemGenericAllocationHandle own_handle(uint64_t phys) const;
    bool is_given(uint64_t phys) const;  // backed and the PMM's (or imported)

    // The longest run alloc(count, false) could give now, in root chunks,
    // were the roots set in `given_back` (the PMM's whole free ones) freed
    // first: a ready run in pooled handles that stay, or a new handle, which
    // the driver places anywhere: as large as its free memory
    // (`driver_free`, cuMemGetInfo) plus the handles the give-back would
    // release, aligned down to 2 MiB, and the window's largest hole then.
    // Changes nothing.
    uint64_t largest_free_run(const Bitmap &given_back, uint64_t driver_free) const;
    uint64_t ready_bytes() const;    // made, not given to the PMM
    uint64_t handle_count() const { return handle_count_; }
    uint64_t handle_bytes() const { return handle_bytes_; }
    // Bytes this process holds from the driver: its own handles, not the
    // other processes' roots imported here (the driver counts those for
    // their exporter).
    uint64_t held_bytes() const { return handle_bytes_ - imported_bytes_; }

private:
    struct Handle {
        CUmemGenericAllocationHandle handle = 0;
        uint64_t phys = 0;
        uint64_t size = 0;
        uint32_t given = 0;  // root chunks of it the PMM holds (an import: 1 until released)
        bool remappable = false;
        bool imported = false;
        bool exact = false;     // made for one run longer than a pooled handle
        bool restored = false;  // one holder's (restore(), alloc_owned()): freed roots are parked, never handed out again
        bool exported = false;  // export_root has given it to another process
    };
    Bitmap &ready_of(const Handle &h) { return h.remappable ? ready_remappable_ : h.exact ? ready_exact_ : ready_; }
    const Bitmap &ready_of(const Handle &h) const {
        return h.remappable ? ready_remappable_ : h.exact ? ready_exact_ : ready_;
    }

    uvm_status_t grow_pooled(size_t count, const std::vector<CUmemAccessDesc> &access, size_t *at);
    // What grow_handles makes: a long run's handles (ready, exact), remappable
    // roots (ready, one each), or one holder's (given, freed roots parked).
    enum class Grown { kExact, kRemappable, kOwned };
    uvm_status_t grow_handles(size_t count, uint64_t handle_size, Grown kind,
                              const std::vector<CUmemAccessDesc> &access, size_t *at);
    uvm_status_t make_handle(uint64_t phys, uint64_t size, bool remappable, Handle **out);
    uvm_status_t set_access(uint64_t phys, uint64_t size, const std::vector<CUmemAccessDesc> &access);
    void release(Handle *h);
    void drop(Handle *h);
    uvm_status_t sorted_roots(const uint64_t *phys, size_t count, bool offloaded, std::vector<size_t> *out) const;

    const DriverApi *api_;
    CUdevice device_;
    CUdeviceptr window_ = 0;
    uint64_t window_size_ = 0;
    std::unique_ptr<mmu::RangeAllocator> window_space_;
    std::vector<Handle *> roots_;  // by phys / 2 MiB: the handle holding it
    Bitmap ready_;                 // made and not given, in pooled handles
    Bitmap ready_exact_;           // the same, in handles made for one long run
    Bitmap ready_remappable_;      // the same, in remappable handles
    Bitmap parked_;                // freed by the PMM in restored handles: never handed out
    Bitmap offloaded_;             // given, with no handle: their window range kept
    uint64_t next_handle_ = kFirstHandle;
    uint64_t kept_empty_ = 0;
    uint64_t handle_count_ = 0;
    uint64_t handle_bytes_ = 0;
    uint64_t imported_bytes_ = 0;
};

// Errors of the driver as statuses (OUT_OF_MEMORY kept apart); the failed
// call is named on stderr where UVM_DEBUG is set.
uvm_status_t to_status(CUresult r, const char *what);

}  // namespace uvm::cuda
