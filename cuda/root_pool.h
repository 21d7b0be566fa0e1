// The root chunks of one GPU on the CUDA driver: device memory from
// cuMemCreate, mapped into the GPU's *physical window* (a VA reservation twice
// the size of the GPU's memory), where a root chunk's physical address is its
// offset. The window is every vidmem object's GPU view: the PMM places a
// multi-chunk object on a contiguous run, so its kernel mapping (and a user
// mapping whose address the manager picks) is a range of the window, with no
// driver call.
//
// Handles of bounded size. The driver's cost is per handle, about 28 us for
// creating, mapping and granting access whatever its size (H100, see
// ../shared/reference/h100-growth-floor.md), but a handle goes back to the
// driver only whole, when the last of its root chunks comes back from the PMM
// (trim): one live object keeps its whole handle. So growth is bounded both
// ways: a run of more than kMaxPooledHandle gets a handle of exactly its size
// (as cudaMalloc gives a large block its own allocation), and smaller runs
// come from pooled handles that double from 2 MiB up to kMaxPooledHandle
// (8 MiB). The two kinds are kept apart: a run of up to 4 root chunks only
// ever gets root chunks of pooled handles, a longer one only of exact ones,
// as the PMM keeps them apart (chunk/pmm.h), so a small object never keeps a
// large run's handle. A few scattered live objects then keep at most 8 MiB each, and
// the last growth overshoots the need by at most 6 MiB, where 1 GiB handles
// kept up to a GiB per live object (measured: 16 MiB live pinned 7 GiB after
// trim, H100). The price is paid once, at growth: 16 GiB of small objects
// take about 2,000 handles, some 60 ms. The PMM prefers chunks in the roots
// already in use and lowest addresses first, so that handles drain; trim()
// starts the growth at 2 MiB again.
//
// Remappable root chunks. The driver maps a handle only whole, from offset 0,
// so a root chunk inside a large handle cannot be mapped on its own anywhere
// else. Root chunks asked for as remappable are each their own 2 MiB handle
// (the old layout, at 28 us each), for the objects that ask to be placed at a
// user address of the caller's choosing. They are made exportable (POSIX
// fds), and other processes' exported roots are imported into the window
// beside them, as remappable roots of one chunk that the PMM never sees.
//
// Thread safety: none; the backend's per-GPU lock covers every call.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/bitmap.h"
#include "cuda/driver_api.h"
#include "mmu/range_allocator.h"
#include "uvm/uvm.h"

namespace uvm::cuda {

class RootPool {
public:
    // Pooled handles grow from kFirstHandle by doubling up to
    // kMaxPooledHandle; a larger run gets a handle of its own size.
    static constexpr uint64_t kFirstHandle = 2ull << 20;
    static constexpr uint64_t kMaxPooledHandle = 8ull << 20;

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
    // it was the last one out.
    void free(uint64_t phys);
    // Start growth small again.
    void trim() { next_handle_ = kFirstHandle; }

    // Sharing with other processes. A remappable root chunk's handle as a
    // POSIX fd (remappable handles are made exportable); NOT_SUPPORTED for a
    // root chunk in a pooled handle.
    uvm_status_t export_root(uint64_t phys, int *fd);
    // Other processes' exported root chunks (`fds`, which stay the caller's)
    // imported and mapped side by side from *phys, accessible to `access`.
    uvm_status_t import(const int *fds, size_t count, const std::vector<CUmemAccessDesc> &access, uint64_t *phys);
    void release_import(uint64_t phys, size_t count);

    // Grant `access` over every handle (one call per handle).
    uvm_status_t grant(const std::vector<CUmemAccessDesc> &access);
    // The root chunk's own handle where it is remappable, else 0.
    CUmemGenericAllocationHandle own_handle(uint64_t phys) const;
    bool is_given(uint64_t phys) const;

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
        bool exact = false;  // made for one run longer than a pooled handle
    };
    Bitmap &ready_of(const Handle &h) { return h.remappable ? ready_remappable_ : h.exact ? ready_exact_ : ready_; }
    const Bitmap &ready_of(const Handle &h) const {
        return h.remappable ? ready_remappable_ : h.exact ? ready_exact_ : ready_;
    }

    uvm_status_t grow_pooled(size_t count, const std::vector<CUmemAccessDesc> &access, size_t *at);
    uvm_status_t grow_remappable(size_t count, const std::vector<CUmemAccessDesc> &access, size_t *at);
    uvm_status_t make_handle(uint64_t phys, uint64_t size, bool remappable, Handle **out);
    uvm_status_t set_access(uint64_t phys, uint64_t size, const std::vector<CUmemAccessDesc> &access);
    void release(Handle *h);

    const DriverApi *api_;
    CUdevice device_;
    CUdeviceptr window_ = 0;
    uint64_t window_size_ = 0;
    std::unique_ptr<mmu::RangeAllocator> window_space_;
    std::vector<Handle *> roots_;  // by phys / 2 MiB: the handle holding it
    Bitmap ready_;                 // made and not given, in pooled handles
    Bitmap ready_exact_;           // the same, in handles made for one long run
    Bitmap ready_remappable_;      // the same, in remappable handles
    uint64_t next_handle_ = kFirstHandle;
    uint64_t handle_count_ = 0;
    uint64_t handle_bytes_ = 0;
    uint64_t imported_bytes_ = 0;
};

// Errors of the driver as statuses (OUT_OF_MEMORY kept apart); the failed
// call is named on stderr where UVM_DEBUG is set.
uvm_status_t to_status(CUresult r, const char *what);

}  // namespace uvm::cuda
