// uvm.torch's C++ side, built against the installed PyTorch at
// uvm.torch.enable() (python/uvm/torch.py): an allocator of PyTorch's over
// the library's C symbols (integrations/torch/uvm_torch_alloc.c), with what
// the Python-only CUDAPluggableAllocator leaves out:
//  - a refused allocation is an exception, never a NULL tensor: out of
//    memory throws c10::OutOfMemoryError, which reaches Python as
//    torch.cuda.OutOfMemoryError with the library's OOM report as its
//    message; any other refusal (a stream not adopted, no manager) throws
//    c10::Error (RuntimeError) with the status;
//  - torch.cuda.empty_cache() trims (the reset hook);
//  - Tensor.record_stream reaches the library (uvm_mem_record_use);
//  - torch.cuda.MemPool works, and allocations inside use_mem_pool(pool)
//    are charged to the client registered for that pool;
//  - a CUDA graph's pool (beginAllocateToPool: torch.cuda.graph, graph
//    trees, and MemPools of no uvm.torch client) is a private pool of the
//    library's (uvm_pool_create): the capture's allocations go there and its
//    memory stays the graph's until releasePool (uvm.h, Private pools);
//  - PyTorch's memory statistics are the library's (UVM_WITH_STATS):
//    torch.cuda.memory_stats, memory_allocated, max_memory_allocated,
//    memory_reserved, max_memory_reserved, reset_peak_memory_stats from the
//    runtimes' allocator's figures (uvm_runtime_memory_stats); cacheInfo
//    (cuDNN's benchmark workspace) from the library's largest free block;
//    checkPoolLiveAllocations (CUDA graph trees) from the blocks handed out
//    inside each pool; a CUDA IPC share of a tensor refused with why;
//  - a graph pool's checkpoints (UVM_WITH_CHECKPOINT: getCheckpointState,
//    setCheckpointPoolState, what CUDA graph trees of
//    torch.compile(mode="reduce-overhead") ask to record a graph after
//    replaying others): a checkpoint is the set of blocks live in the pool;
//    a block freed while a checkpoint that holds it lives is kept (counted
//    as freed, its memory the pool's), and setting the checkpoint hands the
//    kept blocks out again at their addresses and frees the ones it lacks;
//  - a CUDA graph captured while the thread allocates in a sleepable
//    uvm.torch client sleeps and wakes with the client: its pool's blocks
//    are the client's objects (not a private pool's, which the library
//    keeps awake), and a block freed in the pool stays the pool's (kept,
//    counted as freed) for the pool's later allocations on its stream
//    until the graph's pool is released; the graph replays after the wake
//    at the same addresses;
//  - the MemPool options of UVM_WITH_OPTIONS: a MemPool made with an
//    allocator of the user's (torch.cuda.MemPool(allocator)) takes its
//    blocks from that allocator, which the pool's blocks keep alive, and
//    gives them back to it once the stream's work queued before the free is
//    done (an event), or at empty_cache; use_on_oom pools serve an
//    allocation the library refused; no_split is accepted (every block is an
//    object of its own: nothing is split); set_per_process_memory_fraction
//    is the runtimes' limit on the GPU (uvm_runtime_set_memory_limit) on
//    the bytes the library handed out (a user allocator's are its own);
//  - torch.cuda.memory._snapshot() lists every block handed out, with its
//    pool and, after _record_memory_history, the stack that allocated it
//    (UVM_WITH_SNAPSHOT, UVM_WITH_HISTORY); no trace of events is kept.
// The optional parts follow PyTorch's allocator interface, which changes
// between versions: python/uvm/torch.py builds with as many as compile.
// The C symbols come in as addresses from Python (ctypes), so this links
// nothing of ours.
//
// Why allocate() is our own rather than PyTorch's: CUDAPluggableAllocator's
// allocate/raw_alloc call its malloc(), which calls the alloc function and
// records the result in its map without looking at it
// (torch/csrc/cuda/CUDAPluggableAllocator.cpp, malloc: `void* r =
// alloc_fn_(size, device, stream); ... allocation_metadata_.emplace(r, ...)`),
// and allocate() wraps whatever came back in a DataPtr. A NULL becomes a
// tensor over address 0 (the crash comes later, wherever the tensor is
// used), and an exception has to travel out of a std::function through
// PyTorch's bookkeeping. Here the refusal is decided and thrown in the
// allocator's own allocate(), PyTorch's Allocator interface, as the native
// caching allocator throws its OutOfMemoryError from its allocate()
// (c10/cuda/CUDACachingAllocator.cpp); the blocks are in a map of ours, and
// the deleter is ours, so nothing of the pluggable allocator's malloc/free
// path is used.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <sys/types.h>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace {

using MallocFn = void *(*)(ssize_t, int, void *);
using FreeFn = void (*)(void *, size_t, int, void *);
using RecordFn = int (*)(void *, void *);
using EmptyFn = uint64_t (*)();
using MessageFn = size_t (*)(char *, size_t);
using SetClientFn = void *(*)(void *);
using LastStatusFn = int (*)();
using StatusStringFn = const char *(*)(int);

// uvm_runtime_memory_stats_t (integrations/torch/uvm_torch_alloc.c).
struct RuntimeStat {
    int64_t current, peak, allocated, freed;
};
struct RuntimeStats {
    RuntimeStat allocations, allocated_bytes, requested_bytes, reserved_bytes;
    uint64_t num_ooms;
};
using MemoryStatsFn = int (*)(int, RuntimeStats *);
using PoolMallocFn = void *(*)(ssize_t, int, void *, void *);
using PoolCreateFn = void *(*)(int);
using PoolDestroyFn = int (*)(void *);
using ResetFn = void (*)(int);
using GpuMemoryFn = int (*)(int, uint64_t *, uint64_t *, uint64_t *);
using PeerFn = int (*)(int, int);
using NewPeakFn = int (*)();
using KeepFn = int (*)(void *, int, int);
using FreeKeptFn = void (*)(void *, int, void *);
using SetLimitFn = int (*)(int, uint64_t);

MallocFn g_malloc;
FreeFn g_free;
RecordFn g_record;
EmptyFn g_empty;
MessageFn g_message;
SetClientFn g_set_client;
LastStatusFn g_last_status;
StatusStringFn g_status_string;
MemoryStatsFn g_memory_stats;
ResetFn g_reset_peaks;
ResetFn g_reset_accumulated;
ResetFn g_sample_reserved;
GpuMemoryFn g_gpu_memory;
PeerFn g_enable_peer;
NewPeakFn g_new_peak;
PoolMallocFn g_malloc_to_pool;
PoolCreateFn g_pool_create;
PoolDestroyFn g_pool_destroy;
KeepFn g_keep;            // uvm_runtime_keep: a kept block out of (1) or back into (0) the figures
FreeKeptFn g_free_kept;   // uvm_runtime_free_kept: a kept block freed, not counted again
SetLimitFn g_set_limit;   // uvm_runtime_set_memory_limit: set_per_process_memory_fraction
int g_oom_status = -1;  // UVM_ERR_OUT_OF_MEMORY's value (uvm.Status.OUT_OF_MEMORY)
bool g_trace;           // UVM_TORCH_TRACE: say each refusal on stderr before raising it

using Base = torch::cuda::CUDAPluggableAllocator::CUDAPluggableAllocator;
using PoolId = c10::cuda::MempoolId_t;
using UserAllocator = std::shared_ptr<c10::cuda::CUDACachingAllocator::CUDAAllocator>;

std::string oom_report() {
    std::string text(g_message(nullptr, 0) + 4096, '\0');
    const size_t n = g_message(&text[0], text.size());
    text.resize(n ? std::min(n - 1, text.size()) : 0);
    return text;
}

// A size as PyTorch's allocator writes it in its messages (format_size in
// c10/cuda/CUDACachingAllocator.cpp), with snprintf (see raise_refusal).
std::string format_size(uint64_t size) {
    char text[64];
    if (size <= 1024)
        std::snprintf(text, sizeof(text), "%llu bytes", static_cast<unsigned long long>(size));
    else if (size <= 1048576)
        std::snprintf(text, sizeof(text), "%.2f KiB", static_cast<double>(size) / 1024.0);
    else if (size <= 1073741824ull)
        std::snprintf(text, sizeof(text), "%.2f MiB", static_cast<double>(size) / 1048576.0);
    else
        std::snprintf(text, sizeof(text), "%.2f GiB", static_cast<double>(size) / 1073741824.0);
    return text;
}

// PyTorch's allocator refuses more than an exabyte before it asks the driver.
constexpr uint64_t kOneExaByte = 1152921504606846976ull;

// Raise what a NULL from the library means, for the calling thread (its
// last status and OOM report are thread-local, so this runs on the thread
// that asked).
[[noreturn]] void raise_refusal(size_t size, int device) {
    const int status = g_last_status();
    const char *text = g_status_string ? g_status_string(status) : "?";
    if (g_trace) {
        std::fprintf(stderr, "uvm.torch: %zu bytes on GPU %d refused (status %d, %s): raising %s\n", size, device,
                     status, text, status == g_oom_status ? "torch.cuda.OutOfMemoryError" : "RuntimeError");
        std::fflush(stderr);
    }
    // The message is made with snprintf, never with c10::str: iostream code
    // instantiated in this extension (built by the system's compiler) runs
    // against the locale facets of the libstdc++ the process loaded, and where
    // the two differ, formatting a number crashes (SIGSEGV in
    // std::ostream::_M_insert<unsigned long>, measured on the H100 machine).
    // The error's own what() is built inside libc10, by PyTorch's toolchain.
    char head[512];
    const c10::SourceLocation where{__func__, __FILE__, static_cast<uint32_t>(__LINE__)};
    if (status == g_oom_status) {
        // PyTorch's own words first (what its callers and tests match on),
        // then the library's report: who holds what.
        uint64_t total = 0, free_bytes = 0, largest = 0;
        RuntimeStats st{};
        if (g_gpu_memory)
            g_gpu_memory(device, &total, &free_bytes, &largest);
        if (g_memory_stats)
            g_memory_stats(device, &st);
        const int64_t unallocated = st.reserved_bytes.current - st.allocated_bytes.current;
        std::snprintf(head, sizeof(head),
                      "CUDA out of memory. Tried to allocate %s. GPU %d has a total capacity of %s of which %s is "
                      "free. Of the allocated memory %s is allocated by uvm, and %s is reserved by uvm but "
                      "unallocated (its largest free block: %s).\n",
                      format_size(size).c_str(), device, format_size(total).c_str(), format_size(free_bytes).c_str(),
                      format_size(static_cast<uint64_t>(std::max<int64_t>(st.allocated_bytes.current, 0))).c_str(),
                      format_size(static_cast<uint64_t>(std::max<int64_t>(unallocated, 0))).c_str(),
                      format_size(largest).c_str());
        throw c10::OutOfMemoryError(where, std::string(head) + oom_report());
    }
    std::snprintf(head, sizeof(head), "uvm: %zu bytes on GPU %d not allocated: %s (status %d)", size, device, text,
                  status);
    throw c10::Error(where, std::string(head));
}

void uvm_delete(void *ptr);

// One block as the library handed it out: what its free needs.
struct Block {
    size_t size;
    int device;
    cudaStream_t stream;
    PoolId pool{0, 0};  // the pool it was handed out in (beginAllocateToPool), {0, 0}: none
#ifdef UVM_WITH_OPTIONS
    UserAllocator owner;  // the MemPool's own allocator it came from; null: the library's
#endif
#ifdef UVM_WITH_HISTORY
    std::shared_ptr<c10::GatheredContext> context;  // the stack that allocated it (_record_memory_history)
#endif
};

// Whether a block came from a MemPool's own allocator (UVM_WITH_OPTIONS):
// the library never keeps such a block for a checkpoint or a graph pool.
inline bool from_user_allocator(const Block &block) {
#ifdef UVM_WITH_OPTIONS
    return block.owner != nullptr;
#else
    (void)block;
    return false;
#endif
}

// A pool being allocated to (beginAllocateToPool): its device, and which
// streams' allocations go there (PyTorch's filter: the capture's streams, or
// the thread that entered use_mem_pool).
struct PoolRoute {
    int device;
    PoolId pool;
    std::function<bool(cudaStream_t)> filter;
};

// PyTorch's pluggable allocator for its defaults (every CUDAAllocator call
// that this does not override keeps the pluggable allocator's behaviour in
// each PyTorch version), with allocation, free and the MemPool calls ours.
struct UvmAllocator : Base {
    UvmAllocator(std::function<void *(size_t, int, cudaStream_t)> a, std::function<void(void *, size_t, int, cudaStream_t)> f)
        : Base(std::move(a), std::move(f)) {}

    c10::DataPtr allocate(size_t size) override {
        c10::DeviceIndex device = -1;
        C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
        void *p = take(size, device, c10::cuda::getCurrentCUDAStream(device));
        return {p, p, &uvm_delete, c10::Device(c10::DeviceType::CUDA, device)};
    }
    c10::DeleterFnPtr raw_deleter() const override { return &uvm_delete; }
    void *raw_alloc(size_t size) override {
        c10::DeviceIndex device = -1;
        C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
        return take(size, device, c10::cuda::getCurrentCUDAStream(device));
    }
    void *raw_alloc_with_stream(size_t size, cudaStream_t stream) override {
        c10::DeviceIndex device = -1;
        C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
        return take(size, device, stream);
    }
    void raw_delete(void *ptr) override { give_back(ptr); }

#ifdef UVM_WITH_POOLS
    void createOrIncrefPool(c10::DeviceIndex, PoolId id, UserAllocator allocator) override {
        std::lock_guard<std::mutex> guard(pools_lock);
        pool_uses[id]++;
#ifdef UVM_WITH_OPTIONS
        if (allocator)
            pool_allocators[id] = std::move(allocator);
#else
        (void)allocator;
#endif
    }
    int getPoolUseCount(c10::DeviceIndex, PoolId id) override {
        std::lock_guard<std::mutex> guard(pools_lock);
        auto it = pool_uses.find(id);
        return it == pool_uses.end() ? 0 : it->second;
    }
#endif
    std::string name() override { return "uvm"; }
    // A copy between GPUs asks this first (at::cuda::get_p2p_access). The
    // pluggable allocator's enables the runtime's peer access, which reaches
    // cudaMalloc memory only; the library's handles need their own grant, as
    // PyTorch's expandable segments do (addPeerAccess).
    void enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) override {
        Base::enablePeerAccess(dev, dev_to_access);
        const int status = g_enable_peer(dev, dev_to_access);
        TORCH_CHECK(status == 0, "uvm: GPU ", static_cast<int>(dev), " not given access to GPU ",
                    static_cast<int>(dev_to_access), "'s memory: ", g_status_string(status));
    }

#ifdef UVM_WITH_STATS
    // PyTorch's figures, the library's (uvm_torch_alloc.c says what each is).
    // Only the aggregate ("all") is kept: the library has no small and
    // large pools.
    c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
        RuntimeStats st{};
        g_memory_stats(device, &st);
        c10::CachingDeviceAllocator::DeviceStats out;
        const auto all = static_cast<size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE);
        auto put = [&](c10::CachingDeviceAllocator::StatArray &a, const RuntimeStat &r) {
            a[all].current = r.current;
            a[all].peak = r.peak;
            a[all].allocated = r.allocated;
            a[all].freed = r.freed;
        };
        put(out.allocation, st.allocations);
        put(out.active, st.allocations);  // handed out is active: freed memory is never another's
        put(out.allocated_bytes, st.allocated_bytes);
        put(out.active_bytes, st.allocated_bytes);
        put(out.requested_bytes, st.requested_bytes);
        put(out.reserved_bytes, st.reserved_bytes);
        out.num_ooms = static_cast<int64_t>(st.num_ooms);
        return out;
    }
    void resetAccumulatedStats(c10::DeviceIndex device) override { g_reset_accumulated(device); }
    void resetPeakStats(c10::DeviceIndex device) override { g_reset_peaks(device); }
    void cacheInfo(c10::DeviceIndex device, size_t *largestBlock) override {
        // cuDNN's benchmark sizes its workspace by this: what could be had
        // without growing, or the driver's free memory, whichever is more.
        uint64_t total = 0, free_bytes = 0, largest = 0;
        g_gpu_memory(device, &total, &free_bytes, &largest);
        *largestBlock = static_cast<size_t>(std::max(largest, free_bytes));
    }
    // Graph trees ask whether a pool's live blocks are exactly the tensors
    // they expect alive (torch/_inductor/cudagraph_trees.py, check_memory_pool).
    bool checkPoolLiveAllocations(c10::DeviceIndex device, PoolId pool,
                                  const std::unordered_set<void *> &expected) override {
        std::lock_guard<std::mutex> guard(blocks_lock);
        size_t live = 0;
        for (const auto &entry : blocks) {
            if (entry.second.device != device || entry.second.pool != pool)
                continue;
            if (!expected.count(entry.first))
                return false;
            live++;
        }
        return live == expected.size();
    }
    // torch.multiprocessing shares a CUDA tensor through CUDA IPC
    // (cudaIpcGetMemHandle), which memory from cuMemCreate does not support:
    // said plainly rather than failing inside the driver.
    c10::cuda::CUDACachingAllocator::ShareableHandle shareIpcHandle(void *) override {
        TORCH_CHECK(false, kNoIpc);
    }
    std::shared_ptr<void> getIpcDevPtr(std::string) override { TORCH_CHECK(false, kNoIpc); }
    static constexpr const char *kNoIpc =
        "uvm: this CUDA tensor cannot be shared with another process through CUDA IPC "
        "(torch.multiprocessing): its memory is the library's, driver allocations (cuMemCreate) mapped in "
        "one window, which cudaIpcGetMemHandle cannot export. Share it through the library instead: "
        "uvm_mem_export / Mem.export(sock) in this process and mgr.import_mem(sock) in the other "
        "(docs/integrations.md, \"Tensors shared between processes\").";
#endif

#ifdef UVM_WITH_OPTIONS
    // set_per_process_memory_fraction: the runtimes' limit on the GPU, that
    // fraction of its memory (1 or more: none; 0: nothing more).
    void setMemoryFraction(double fraction, c10::DeviceIndex device) override {
        uint64_t total = 0;
        TORCH_CHECK(g_gpu_memory(device, &total, nullptr, nullptr) == 0, "uvm: no GPU ", static_cast<int>(device));
        const uint64_t limit =
            fraction >= 1.0 ? 0 : std::max<uint64_t>(1, static_cast<uint64_t>(fraction * static_cast<double>(total)));
        TORCH_CHECK(g_set_limit(device, limit) == 0, "uvm: no GPU ", static_cast<int>(device));
        std::lock_guard<std::mutex> guard(pools_lock);
        fractions[device] = fraction;
    }
    double getMemoryFraction(c10::DeviceIndex device) override {
        std::lock_guard<std::mutex> guard(pools_lock);
        auto it = fractions.find(device);
        return it == fractions.end() ? 1.0 : it->second;
    }
    void setUseOnOOM(c10::DeviceIndex device, PoolId id, bool use_on_oom) override {
        std::lock_guard<std::mutex> guard(pools_lock);
        if (use_on_oom)
            on_oom.insert(std::make_pair(static_cast<int>(device), id));
        else
            on_oom.erase(std::make_pair(static_cast<int>(device), id));
    }
    // Blocks are never split: each is an object of the library's own.
    void setNoSplit(c10::DeviceIndex, PoolId) override {}

    // A user allocator's block, freed: given back to it once the work its
    // stream had queued is done (PyTorch's allocator gives such blocks back
    // at empty_cache, after a synchronisation).
    struct UserFree {
        void *ptr;
        Block block;
        cudaEvent_t done;  // null: only at empty_cache (freed while a graph captured)
    };
    void free_user_block(void *ptr, Block block) {
        cudaEvent_t done = nullptr;
        if (c10::cuda::currentStreamCaptureStatusMayInitCtx() == c10::cuda::CaptureStatus::None) {
            c10::cuda::CUDAGuard on(static_cast<c10::DeviceIndex>(block.device));
            if (cudaEventCreateWithFlags(&done, cudaEventDisableTiming) != cudaSuccess ||
                cudaEventRecord(done, block.stream) != cudaSuccess) {
                if (done)
                    cudaEventDestroy(done);
                done = nullptr;
                (void)cudaGetLastError();
            }
        }
        {
            std::lock_guard<std::mutex> guard(user_lock);
            user_frees.push_back(UserFree{ptr, std::move(block), done});
        }
        if (done)  // not while a capture is under way (no event then)
            give_back_user_blocks(false);
    }
    // Give back the user blocks whose work is done (all of them, waiting,
    // where `wait`), outside the lock: a user's free may synchronise.
    void give_back_user_blocks(bool wait) {
        std::vector<UserFree> ready;
        {
            std::lock_guard<std::mutex> guard(user_lock);
            for (auto it = user_frees.begin(); it != user_frees.end();) {
                bool done = wait;
                if (!done && it->done) {
                    const cudaError_t queried = cudaEventQuery(it->done);
                    done = queried == cudaSuccess;
                    if (queried == cudaErrorNotReady)
                        (void)cudaGetLastError();  // still queued: not an error to leave behind
                }
                if (done) {
                    ready.push_back(std::move(*it));
                    it = user_frees.erase(it);
                } else {
                    ++it;
                }
            }
        }
        for (UserFree &f : ready) {
            try {  // one failure leaves the others to go back
                c10::cuda::CUDAGuard on(static_cast<c10::DeviceIndex>(f.block.device));
                if (f.done) {
                    cudaEventSynchronize(f.done);
                    cudaEventDestroy(f.done);
                } else {
                    cudaDeviceSynchronize();
                }
                f.block.owner->raw_delete(f.ptr);
            } catch (const std::exception &e) {
                std::fprintf(stderr, "uvm.torch: %p not given back to its MemPool's allocator: %s\n", f.ptr, e.what());
            }
        }
    }
    // A block for an allocation the library refused, from the use_on_oom
    // pools of `device` (a user allocator's, or a graph pool's private
    // pool); null where none gives one. Fills the block's pool and owner.
    void *take_on_oom(size_t size, int device, cudaStream_t stream, Block &block) {
        std::vector<std::pair<PoolId, UserAllocator>> users;
        std::vector<std::pair<PoolId, void *>> privates;
        {
            std::lock_guard<std::mutex> guard(pools_lock);
            for (const auto &entry : on_oom) {
                if (entry.first != device)
                    continue;
                auto a = pool_allocators.find(entry.second);
                if (a != pool_allocators.end())
                    users.emplace_back(entry.second, a->second);
                else if (void *pool = private_pool_locked(device, entry.second))
                    privates.emplace_back(entry.second, pool);
            }
        }
        for (auto &u : users)
            if (void *p = u.second->raw_alloc_with_stream(size, stream)) {
                block.pool = u.first;
                block.owner = u.second;
                return p;
            }
        for (auto &pp : privates)
            if (void *p = g_malloc_to_pool(static_cast<ssize_t>(size), device, stream, pp.second)) {
                block.pool = pp.first;
                return p;
            }
        return nullptr;
    }
    std::map<c10::DeviceIndex, double> fractions;      // getMemoryFraction (pools_lock)
    std::set<std::pair<int, PoolId>> on_oom;          // setUseOnOOM (pools_lock)
    std::map<PoolId, UserAllocator> pool_allocators;  // MemPool(allocator) (pools_lock)
    std::mutex user_lock;
    std::vector<UserFree> user_frees;  // user blocks freed, not yet given back (user_lock)
#endif

#ifdef UVM_WITH_CHECKPOINT
    // A graph pool's checkpoint: the blocks live in it when it was taken.
    struct PoolState : c10::cuda::CUDACachingAllocator::AllocatorState {
        int device = -1;
        PoolId pool{0, 0};
        std::unordered_map<void *, Block> live;
    };
    // What a pool keeps for its checkpoints: the checkpoints taken (alive
    // while graph trees hold them) and the blocks freed since that one of
    // them holds.
    struct Kept {
        std::vector<std::weak_ptr<PoolState>> states;
        std::unordered_map<void *, Block> blocks;
    };
    using KeptBlocks = std::vector<std::pair<void *, Block>>;

    std::shared_ptr<c10::cuda::CUDACachingAllocator::AllocatorState> getCheckpointState(c10::DeviceIndex device,
                                                                                        PoolId id) override {
        checkpoints_taken++;
        auto state = std::make_shared<PoolState>();
        state->device = device;
        state->pool = id;
        KeptBlocks unneeded;
        {
            std::lock_guard<std::mutex> guard(blocks_lock);
            for (const auto &entry : blocks)
                if (entry.second.device == device && entry.second.pool == id)
                    state->live.emplace(entry.first, entry.second);
            Kept &k = kept[std::make_pair(static_cast<int>(device), id)];
            unneeded_locked(k, unneeded);
            k.states.push_back(state);
        }
        release_kept(unneeded);
        return state;
    }

    // The pool back to the checkpoint: the blocks live now that it lacks are
    // freed (their storages' deleters are dropped by PyTorch: ptrs_freed),
    // its blocks freed since are live again at their addresses, each with a
    // DataPtr whose deleter is ours (dataptrs_allocd). Refused, changing
    // nothing, where a block of the checkpoint is neither live nor kept.
    c10::cuda::CUDACachingAllocator::CheckpointDelta setCheckpointPoolState(
        c10::DeviceIndex device, std::shared_ptr<c10::cuda::CUDACachingAllocator::AllocatorState> pps) override {
        auto state = std::dynamic_pointer_cast<PoolState>(pps);
        // Messages by snprintf, as raise_refusal says why.
        char why[160];
        std::snprintf(why, sizeof(why), "uvm: not a checkpoint of this allocator's pool on GPU %d",
                      static_cast<int>(device));
        TORCH_CHECK(state && state->device == device, std::string(why));
        checkpoints_set++;
        c10::cuda::CUDACachingAllocator::CheckpointDelta delta;
        KeptBlocks freed, back, unneeded;
        {
            std::lock_guard<std::mutex> guard(blocks_lock);
            Kept &k = kept[std::make_pair(static_cast<int>(device), state->pool)];
            for (const auto &entry : state->live) {
                if (blocks.count(entry.first) || k.blocks.count(entry.first))
                    continue;
                std::snprintf(why, sizeof(why), "uvm: block %p of the checkpoint is no longer its pool's", entry.first);
                TORCH_CHECK(false, std::string(why));
            }
            for (auto it = blocks.begin(); it != blocks.end();) {
                if (it->second.device == device && it->second.pool == state->pool && !state->live.count(it->first)) {
                    delta.ptrs_freed.push_back(it->first);
                    freed.emplace_back(it->first, it->second);
                    k.blocks.emplace(it->first, it->second);
                    it = blocks.erase(it);
                } else {
                    ++it;
                }
            }
            for (const auto &entry : state->live) {
                auto kb = k.blocks.find(entry.first);
                if (blocks.count(entry.first) || kb == k.blocks.end())
                    continue;
                back.emplace_back(kb->first, kb->second);
                blocks.emplace(kb->first, kb->second);
                k.blocks.erase(kb);
                delta.dataptrs_allocd.emplace_back(entry.first, entry.first, &uvm_delete,
                                                   c10::Device(c10::DeviceType::CUDA, device));
            }
            unneeded_locked(k, unneeded);
        }
        for (const auto &b : freed)
            g_keep(b.first, b.second.device, 1);
        for (const auto &b : back)
            g_keep(b.first, b.second.device, 0);
        release_kept(unneeded);
        return delta;
    }

    // Whether a block of a pool just freed is kept for a checkpoint that
    // holds it (then it is filed with the pool's kept blocks).
    // blocks_lock held.
    bool keep_locked(void *ptr, const Block &block) {
        auto it = kept.find(std::make_pair(block.device, block.pool));
        if (it == kept.end())
            return false;
        for (const auto &weak : it->second.states) {
            auto state = weak.lock();
            if (state && state->live.count(ptr)) {
                it->second.blocks.emplace(ptr, block);
                return true;
            }
        }
        return false;
    }

    // The kept blocks that no living checkpoint holds, into `out`; the dead
    // checkpoints dropped. blocks_lock held.
    static void unneeded_locked(Kept &k, KeptBlocks &out) {
        std::vector<std::shared_ptr<PoolState>> alive;
        for (const auto &weak : k.states)
            if (auto state = weak.lock())
                alive.push_back(std::move(state));
        k.states.assign(alive.begin(), alive.end());
        for (auto it = k.blocks.begin(); it != k.blocks.end();) {
            const bool held = std::any_of(alive.begin(), alive.end(),
                                          [&](const std::shared_ptr<PoolState> &s) { return s->live.count(it->first); });
            if (held) {
                ++it;
            } else {
                out.emplace_back(it->first, it->second);
                it = k.blocks.erase(it);
            }
        }
    }

    // Kept blocks freed for good (counted as freed when they were kept).
    static void release_kept(const KeptBlocks &blocks) {
        for (const auto &b : blocks)
            g_free_kept(b.first, b.second.device, b.second.stream);
    }

    // A released pool's kept blocks, all of them, and its checkpoints forgotten.
    void release_pool_kept(int device, PoolId id) {
        KeptBlocks all;
        {
            std::lock_guard<std::mutex> guard(blocks_lock);
            auto it = kept.find(std::make_pair(device, id));
            if (it == kept.end())
                return;
            for (const auto &b : it->second.blocks)
                all.emplace_back(b.first, b.second);
            kept.erase(it);
        }
        release_kept(all);
    }

    std::map<std::pair<int, PoolId>, Kept> kept;  // pools checkpointed: what each keeps (blocks_lock)
    std::atomic<uint64_t> checkpoints_taken{0}, checkpoints_set{0};  // checkpoint_counts()
#endif

#ifdef UVM_WITH_SNAPSHOT
    // Every block handed out, as a segment of one block each (what
    // torch.cuda.memory._snapshot() and torch.cuda._memory_viz read), in
    // `pool` only where one is named. No trace of events is kept.
    c10::cuda::CUDACachingAllocator::SnapshotInfo snapshot(PoolId pool, bool) override {
        c10::cuda::CUDACachingAllocator::SnapshotInfo info;
        info.device_traces.resize(static_cast<size_t>(c10::cuda::device_count()));
        std::lock_guard<std::mutex> guard(blocks_lock);
        for (const auto &entry : blocks) {
            const Block &b = entry.second;
            if (pool != PoolId{0, 0} && b.pool != pool)
                continue;
            c10::cuda::CUDACachingAllocator::SegmentInfo seg;
            seg.device = b.device;
            seg.address = static_cast<int64_t>(reinterpret_cast<uintptr_t>(entry.first));
            seg.stream = b.stream;
            seg.total_size = static_cast<int64_t>(b.size);
            seg.requested_size = static_cast<int64_t>(b.size);
            seg.allocated_size = static_cast<int64_t>(b.size);
            seg.active_size = static_cast<int64_t>(b.size);
            seg.is_large = b.size > (1u << 20);
            seg.owner_private_pool_id = b.pool;
            c10::cuda::CUDACachingAllocator::BlockInfo block;
            block.size = static_cast<int64_t>(b.size);
            block.requested_size = static_cast<int64_t>(b.size);
            block.allocated = true;
            block.active = true;
#ifdef UVM_WITH_HISTORY
            block.context_when_allocated = b.context;
            seg.context_when_allocated = b.context;
#endif
            seg.blocks.push_back(block);
            info.segments.push_back(std::move(seg));
        }
        return info;
    }
#endif

#ifdef UVM_WITH_HISTORY
    // _record_memory_history: the stack of each allocation from now on is
    // kept with its block (no trace of events: the snapshot's traces stay empty).
    void recordHistory(bool enabled, c10::cuda::CUDACachingAllocator::CreateContextFn recorder, size_t,
                       c10::cuda::CUDACachingAllocator::RecordContext when, bool,
                       const std::vector<std::string> &) override {
        std::lock_guard<std::mutex> guard(blocks_lock);
        history_recorder = enabled && when != c10::cuda::CUDACachingAllocator::RecordContext::NEVER ? recorder : nullptr;
    }
    c10::cuda::CUDACachingAllocator::CreateContextFn history_recorder = nullptr;
#endif

    // A block of `size` bytes on `device`, ordered on `stream`; nullptr for
    // size 0 (as cudaMalloc(0) and the caching allocator); throws where the
    // library refuses.
    void *take(size_t size, int device, cudaStream_t stream) {
        if (size == 0)
            return nullptr;
        if (size >= kOneExaByte) {
            const c10::SourceLocation where{__func__, __FILE__, static_cast<uint32_t>(__LINE__)};
            throw c10::OutOfMemoryError(where, "CUDA out of memory. Tried to allocate more than 1EB memory.");
        }
        Block block{size, device, stream};
        void *private_pool = nullptr;
        void *graph_client = nullptr;  // a sleepable client's graph pool: its objects are that client's
        {
            std::lock_guard<std::mutex> guard(pools_lock);
            for (const PoolRoute &route : routes)
                if (route.device == device && (!route.filter || route.filter(stream))) {
                    block.pool = route.pool;
                    auto gc = graph_clients.find(route.pool);
                    if (gc != graph_clients.end()) {
                        Block kept;
                        if (void *again = take_graph_free_locked(route.pool, size, stream, &kept)) {
                            {
                                std::lock_guard<std::mutex> blocks_guard(blocks_lock);
                                blocks[again] = kept;
                            }
                            g_keep(again, device, 0);  // handed out again: allocated in the figures
                            return again;
                        }
                        graph_client = gc->second;
                        break;
                    }
#ifdef UVM_WITH_OPTIONS
                    auto a = pool_allocators.find(route.pool);
                    if (a != pool_allocators.end()) {
                        block.owner = a->second;
                        break;
                    }
#endif
                    private_pool = private_pool_locked(device, route.pool);
                    break;
                }
        }
        void *p = nullptr;
#ifdef UVM_WITH_OPTIONS
        if (block.owner) {
            if (c10::cuda::currentStreamCaptureStatusMayInitCtx() == c10::cuda::CaptureStatus::None)
                give_back_user_blocks(false);  // no event query while a capture is under way
            p = block.owner->raw_alloc_with_stream(size, stream);
            if (!p) {
                const c10::SourceLocation where{__func__, __FILE__, static_cast<uint32_t>(__LINE__)};
                char head[160];
                std::snprintf(head, sizeof(head),
                              "CUDA out of memory. Tried to allocate %s: the MemPool's own allocator returned none.",
                              format_size(size).c_str());
                throw c10::OutOfMemoryError(where, std::string(head));
            }
        }
#endif
        if (!p && graph_client) {
            void *previous = g_set_client(graph_client);
            p = g_malloc(static_cast<ssize_t>(size), device, stream);
            g_set_client(previous);
        } else if (!p) {
            p = private_pool ? g_malloc_to_pool(static_cast<ssize_t>(size), device, stream, private_pool)
                             : g_malloc(static_cast<ssize_t>(size), device, stream);
        }
#ifdef UVM_WITH_OPTIONS
        if (!p && block.pool == PoolId{0, 0} && g_last_status() == g_oom_status)
            p = take_on_oom(size, device, stream, block);
#endif
        if (!p)
            raise_refusal(size, device);
        const bool new_peak = g_new_peak && g_new_peak();
#ifdef UVM_WITH_HISTORY
        c10::cuda::CUDACachingAllocator::CreateContextFn recorder = nullptr;
        {
            std::lock_guard<std::mutex> guard(blocks_lock);
            recorder = history_recorder;
        }
        if (recorder)
            block.context = recorder();
#endif
        {
            std::lock_guard<std::mutex> guard(blocks_lock);
            blocks[p] = std::move(block);
        }
        // A new peak of allocated bytes: the library may have grown, so its
        // held bytes are read for the reserved peak, but never while a graph
        // captures (reading them asks the driver).
        if (new_peak && g_sample_reserved &&
            c10::cuda::currentStreamCaptureStatusMayInitCtx() == c10::cuda::CaptureStatus::None)
            g_sample_reserved(device);
        return p;
    }

    // Called from DataPtr deleters, that is from destructors: never throws.
    void give_back(void *ptr) noexcept {
        if (!ptr)
            return;
        Block block{};
        bool kept_now = false;  // kept for a checkpoint of its pool, not freed
        {
            std::lock_guard<std::mutex> guard(blocks_lock);
            auto it = blocks.find(ptr);
            if (it == blocks.end()) {
                std::fprintf(stderr, "uvm.torch: free of %p, which this allocator did not hand out: ignored\n", ptr);
                return;
            }
            block = it->second;
            blocks.erase(it);
#ifdef UVM_WITH_CHECKPOINT
            kept_now = block.pool != PoolId{0, 0} && !kept.empty() && !from_user_allocator(block) &&
                       keep_locked(ptr, block);
#endif
        }
        if (kept_now) {
            g_keep(ptr, block.device, 1);
            return;
        }
#ifdef UVM_WITH_OPTIONS
        if (block.owner) {  // never kept: the user allocator's, not the library's
            try {
                free_user_block(ptr, std::move(block));
            } catch (const std::exception &e) {  // from a destructor: said, never thrown
                std::fprintf(stderr, "uvm.torch: %p not given back to its MemPool's allocator: %s\n", ptr, e.what());
            }
            return;
        }
#endif
        if (block.pool != PoolId{0, 0} && keep_for_graph(ptr, block))
            return;  // freed in the figures, the graph pool's memory
        g_free(ptr, block.size, block.device, block.stream);
    }

    // Whether a block freed in a pool stays that pool's: a sleepable
    // client's graph pool keeps it (freed on its stream, for the pool's later
    // allocations there), until the pool is released; counted as freed here,
    // under the lock, so that no other thread hands it out or frees it
    // before it is counted. Never throws (from give_back).
    bool keep_for_graph(void *ptr, const Block &block) noexcept {
        std::lock_guard<std::mutex> guard(pools_lock);
        if (!graph_clients.count(block.pool))
            return false;
        try {
            graph_free[block.pool].push_back(GraphFree{ptr, block});
        } catch (const std::bad_alloc &) {
            return false;  // freed as any block
        }
        g_keep(ptr, block.device, 1);
        return true;
    }

    // The library's private pool (uvm_pool_t *) for PyTorch's pool `id` on
    // `device`, made at its first allocation; null for a pool of a
    // uvm.torch client (register_pool: the client's budget and sleep rule
    // its memory, which a private pool would keep) or where none can be
    // made (the allocation then goes as any other). pools_lock held.
    void *private_pool_locked(int device, PoolId id) {
        if (pool_clients.count(id) || graph_clients.count(id))
            return nullptr;
        const auto key = std::make_pair(device, id);
        auto it = private_pools.find(key);
        if (it != private_pools.end())
            return it->second;
        void *pool = g_pool_create(device);
        if (!pool)
            std::fprintf(stderr, "uvm.torch: no private pool for graph pool (%llu, %llu) on GPU %d: status %d\n",
                         static_cast<unsigned long long>(id.first), static_cast<unsigned long long>(id.second),
                         device, g_last_status());
        private_pools[key] = pool;  // null too: asked once
        return pool;
    }

    std::mutex blocks_lock;
    std::unordered_map<void *, Block> blocks;
    std::mutex pools_lock;
    std::vector<PoolRoute> routes;  // pools being allocated to, newest first
    std::map<PoolId, int> pool_uses;
    std::map<PoolId, void *> pool_clients;  // uvm_client_t * per pool (register_pool)
    std::map<std::pair<int, PoolId>, void *> private_pools;  // private_pool_locked

    // Graphs captured in a sleepable client. pools_lock for all three.
    std::set<void *> sleepable_clients;     // register_sleepable_client
    std::map<PoolId, void *> graph_clients;  // a graph pool begun in a sleepable client: that client
    struct GraphFree {
        void *ptr;
        Block block;
    };
    std::map<PoolId, std::vector<GraphFree>> graph_free;  // blocks freed in such a pool, kept for it

    // A block the sleepable graph pool `pool` keeps free for `size` bytes on
    // `stream` (the fewest bytes over, at most a quarter more), out of its
    // free list; null where none. pools_lock held.
    void *take_graph_free_locked(PoolId pool, size_t size, cudaStream_t stream, Block *out) {
        auto it = graph_free.find(pool);
        if (it == graph_free.end())
            return nullptr;
        std::vector<GraphFree> &free = it->second;
        size_t best = free.size();
        for (size_t i = 0; i < free.size(); ++i) {
            const Block &b = free[i].block;
            if (b.stream != stream || b.size < size || b.size - size > size / 4)
                continue;
            if (best == free.size() || b.size < free[best].block.size)
                best = i;
        }
        if (best == free.size())
            return nullptr;
        void *p = free[best].ptr;
        *out = free[best].block;
        free.erase(free.begin() + static_cast<std::ptrdiff_t>(best));
        return p;
    }
};

// The installed allocator. Never destroyed: tensors are freed through it
// until the process ends, after static destructors (PyTorch's own reference,
// current_custom_allocator, among them) may have run.
UvmAllocator *g_allocator;
thread_local std::vector<void *> t_saved_clients;  // what use_mem_pool replaced, innermost last

// The DataPtr deleter: the installed allocator's free (never replaced once
// installed, and kept until the process ends).
void uvm_delete(void *ptr) {
    if (g_allocator)
        g_allocator->give_back(ptr);
}

void install(uintptr_t malloc_fn, uintptr_t free_fn, uintptr_t record_fn, uintptr_t empty_fn, uintptr_t message_fn,
             uintptr_t set_client_fn, uintptr_t last_status_fn, uintptr_t status_string_fn, int oom_status,
             const std::map<std::string, uintptr_t> &stats_fns) {
    TORCH_CHECK(!g_allocator, "uvm.torch: the allocator is installed already");
    TORCH_CHECK(malloc_fn && free_fn && message_fn && last_status_fn, "uvm.torch: a C symbol is missing");
    auto stats_fn = [&](const char *name) -> uintptr_t {
        auto it = stats_fns.find(name);
        TORCH_CHECK(it != stats_fns.end() && it->second, "uvm.torch: the C symbol ", name, " is missing");
        return it->second;
    };
    g_memory_stats = reinterpret_cast<MemoryStatsFn>(stats_fn("uvm_runtime_memory_stats"));
    g_reset_peaks = reinterpret_cast<ResetFn>(stats_fn("uvm_runtime_reset_peak_stats"));
    g_reset_accumulated = reinterpret_cast<ResetFn>(stats_fn("uvm_runtime_reset_accumulated_stats"));
    g_sample_reserved = reinterpret_cast<ResetFn>(stats_fn("uvm_runtime_sample_reserved"));
    g_gpu_memory = reinterpret_cast<GpuMemoryFn>(stats_fn("uvm_runtime_gpu_memory"));
    g_enable_peer = reinterpret_cast<PeerFn>(stats_fn("uvm_runtime_enable_peer_access"));
    g_new_peak = reinterpret_cast<NewPeakFn>(stats_fn("uvm_runtime_last_new_peak"));
    g_malloc_to_pool = reinterpret_cast<PoolMallocFn>(stats_fn("uvm_torch_malloc_to_pool"));
    g_pool_create = reinterpret_cast<PoolCreateFn>(stats_fn("uvm_runtime_pool_create"));
    g_pool_destroy = reinterpret_cast<PoolDestroyFn>(stats_fn("uvm_runtime_pool_destroy"));
    g_keep = reinterpret_cast<KeepFn>(stats_fn("uvm_runtime_keep"));
    g_free_kept = reinterpret_cast<FreeKeptFn>(stats_fn("uvm_runtime_free_kept"));
#ifdef UVM_WITH_OPTIONS
    g_set_limit = reinterpret_cast<SetLimitFn>(stats_fn("uvm_runtime_set_memory_limit"));
#endif
    g_malloc = reinterpret_cast<MallocFn>(malloc_fn);
    g_free = reinterpret_cast<FreeFn>(free_fn);
    g_record = reinterpret_cast<RecordFn>(record_fn);
    g_empty = reinterpret_cast<EmptyFn>(empty_fn);
    g_message = reinterpret_cast<MessageFn>(message_fn);
    g_set_client = reinterpret_cast<SetClientFn>(set_client_fn);
    g_last_status = reinterpret_cast<LastStatusFn>(last_status_fn);
    g_status_string = reinterpret_cast<StatusStringFn>(status_string_fn);
    g_oom_status = oom_status;
    const char *trace = std::getenv("UVM_TORCH_TRACE");
    g_trace = trace && *trace && std::strcmp(trace, "0") != 0;
    // The pluggable allocator's own alloc/free functions: unused, as every
    // path to them is overridden above; they go the same way all the same.
    auto allocator = std::make_shared<UvmAllocator>(
        [](size_t size, int device, cudaStream_t stream) { return g_allocator->take(size, device, stream); },
        [](void *ptr, size_t, int, cudaStream_t) { g_allocator->give_back(ptr); });
#ifdef UVM_WITH_OPTIONS
    allocator->set_reset_fn([] {
        g_allocator->give_back_user_blocks(true);
        g_empty();
    });
#else
    allocator->set_reset_fn([] { g_empty(); });
#endif
    allocator->set_record_stream_fn([](void *ptr, cudaStream_t stream) { g_record(ptr, stream); });
    UvmAllocator *raw = allocator.get();
    allocator->set_begin_allocate_to_pool([raw](int device, PoolId id, std::function<bool(cudaStream_t)> filter) {
        void *client = nullptr;
        void *previous = g_set_client(nullptr);  // the thread's client, for a graph begun in it
        {
            std::lock_guard<std::mutex> guard(raw->pools_lock);
            raw->routes.insert(raw->routes.begin(), PoolRoute{device, id, std::move(filter)});
            raw->pool_uses[id]++;
            auto it = raw->pool_clients.find(id);
            client = it == raw->pool_clients.end() ? nullptr : it->second;
            // A graph's pool (no client of its own) begun in a sleepable
            // client: the graph's memory is that client's, and sleeps with it.
            bool own_allocator = false;  // a MemPool of the user's allocator: its blocks are that allocator's
#ifdef UVM_WITH_OPTIONS
            own_allocator = raw->pool_allocators.count(id) != 0;
#endif
            if (!client && !own_allocator && previous && raw->sleepable_clients.count(previous)) {
                auto graph = raw->graph_clients.find(id);
                if (graph == raw->graph_clients.end() && !raw->private_pools.count(std::make_pair(device, id)))
                    graph = raw->graph_clients.emplace(id, previous).first;
                if (graph != raw->graph_clients.end())
                    client = graph->second;
            }
        }
        g_set_client(client);
        t_saved_clients.push_back(previous);
    });
    allocator->set_end_allocate_to_pool_fn([raw](int device, PoolId id) {
        {
            std::lock_guard<std::mutex> guard(raw->pools_lock);
            for (auto it = raw->routes.begin(); it != raw->routes.end(); ++it)
                if (it->device == device && it->pool == id) {
                    raw->routes.erase(it);
                    break;
                }
        }
        if (!t_saved_clients.empty()) {
            g_set_client(t_saved_clients.back());
            t_saved_clients.pop_back();
        }
    });
    allocator->set_release_pool([raw](int device, PoolId id) {
        // The last use of the pool gone (the graph destroyed): its private
        // pool's memory goes back once the GPU's streams are past the
        // graph's launches, as PyTorch frees a released pool's blocks.
        void *private_pool = nullptr;
        bool graph_pool = false;  // a sleepable client's graph pool
        std::vector<UvmAllocator::GraphFree> graph_free;
        {
            std::lock_guard<std::mutex> guard(raw->pools_lock);
            auto it = raw->pool_uses.find(id);
            if (it != raw->pool_uses.end() && --it->second <= 0) {
                raw->pool_uses.erase(it);
                raw->pool_clients.erase(id);
                graph_pool = raw->graph_clients.erase(id) != 0;
                auto kept = raw->graph_free.find(id);
                if (kept != raw->graph_free.end()) {
                    graph_free = std::move(kept->second);
                    raw->graph_free.erase(kept);
                }
#ifdef UVM_WITH_OPTIONS
                raw->pool_allocators.erase(id);  // its blocks keep the allocator while they live
                raw->on_oom.erase(std::make_pair(device, id));
#endif
                auto p = raw->private_pools.find(std::make_pair(device, id));
                if (p != raw->private_pools.end()) {
                    private_pool = p->second;
                    raw->private_pools.erase(p);
                }
            }
        }
#ifdef UVM_WITH_CHECKPOINT
        if (private_pool || graph_pool)
            raw->release_pool_kept(device, id);
#endif
        // The graph's launches may still use its pool's free blocks, on
        // streams the library does not know of: done first, as PyTorch
        // synchronizes before a released pool's memory serves others.
        if (!graph_free.empty() &&
            c10::cuda::currentStreamCaptureStatusMayInitCtx() == c10::cuda::CaptureStatus::None) {
            c10::cuda::CUDAGuard on(static_cast<c10::DeviceIndex>(device));
            (void)cudaDeviceSynchronize();
        }
        for (const auto &f : graph_free)  // counted as freed when kept
            g_free_kept(f.ptr, f.block.device, f.block.stream);
        if (private_pool && g_pool_destroy(private_pool) != 0)
            std::fprintf(stderr, "uvm.torch: graph pool (%llu, %llu) on GPU %d not released\n",
                         static_cast<unsigned long long>(id.first), static_cast<unsigned long long>(id.second),
                         device);
    });
    allocator->init(0);
    g_allocator = raw;  // before PyTorch can call it: its deleter and functions go through g_allocator
    try {
        torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator(allocator);
    } catch (...) {
        g_allocator = nullptr;
        throw;
    }
    new std::shared_ptr<UvmAllocator>(allocator);  // the reference that keeps it (above)
}

// A uvm.torch client that can sleep: graphs captured while a thread
// allocates in it are its memory (see the top of this file).
void register_sleepable_client(uintptr_t client) {
    TORCH_CHECK(g_allocator, "uvm.torch: not enabled");
    std::lock_guard<std::mutex> guard(g_allocator->pools_lock);
    g_allocator->sleepable_clients.insert(reinterpret_cast<void *>(client));
}

void register_pool(uint64_t first, uint64_t second, uintptr_t client) {
    TORCH_CHECK(g_allocator, "uvm.torch: not enabled");
    std::lock_guard<std::mutex> guard(g_allocator->pools_lock);
    g_allocator->pool_clients[PoolId{static_cast<c10::cuda::CaptureId_t>(first), static_cast<c10::cuda::CaptureId_t>(second)}] =
        reinterpret_cast<void *>(client);
}

// ---------------------------------------------------------------------------
// For the GPU harness (UVM_TORCH_NATIVE_BACKTRACE=1): where a process dies
// of a signal, the native stack on stderr before Python's faulthandler (which
// shows only the Python frames) and the default action. Installed after
// faulthandler, which it then hands the signal to.
// ---------------------------------------------------------------------------

constexpr int kCrashSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
struct sigaction g_previous[sizeof(kCrashSignals) / sizeof(kCrashSignals[0])];

void write_text(const char *s) {
    ssize_t unused = ::write(2, s, std::strlen(s));
    (void)unused;
}

void write_hex(uintptr_t v) {
    char buf[2 + 16 + 1];
    buf[0] = '0';
    buf[1] = 'x';
    for (int i = 0; i < 16; ++i)
        buf[2 + i] = "0123456789abcdef"[(v >> (60 - 4 * i)) & 0xf];
    buf[18] = '\0';
    write_text(buf);
}

void on_crash(int sig, siginfo_t *info, void *) {
    // Only async-signal-safe calls here (backtrace() was called once at
    // install, so it does not load libgcc now).
    write_text("uvm.torch: native stack at signal ");
    char num[12];
    int n = 0;
    for (int v = sig; v > 0 && n < 11; v /= 10)
        num[n++] = static_cast<char>('0' + v % 10);
    std::reverse(num, num + n);
    num[n] = '\0';
    write_text(num);
    write_text(" (address ");
    write_hex(reinterpret_cast<uintptr_t>(info ? info->si_addr : nullptr));
    write_text("):\n");
    void *frames[64];
    const int count = ::backtrace(frames, 64);
    ::backtrace_symbols_fd(frames, count, 2);
    write_text("uvm.torch: end of native stack\n");
    for (size_t i = 0; i < sizeof(kCrashSignals) / sizeof(kCrashSignals[0]); ++i)
        if (kCrashSignals[i] == sig)
            ::sigaction(sig, &g_previous[i], nullptr);
    // A fault comes back at once on return, now to the previous handler; a
    // signal that was sent (abort's raise) is sent again.
    if (!info || info->si_code <= 0)
        ::raise(sig);
}

bool native_backtrace_on_crash() {
    void *warm[1];
    ::backtrace(warm, 1);
    bool all = true;
    for (size_t i = 0; i < sizeof(kCrashSignals) / sizeof(kCrashSignals[0]); ++i) {
        struct sigaction action;
        std::memset(&action, 0, sizeof(action));
        action.sa_sigaction = on_crash;
        action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
        sigemptyset(&action.sa_mask);
        all = ::sigaction(kCrashSignals[i], &action, &g_previous[i]) == 0 && all;
    }
    return all;
}

}  // namespace

// Checkpoints of graph pools taken and set since the allocator was installed.
std::map<std::string, uint64_t> checkpoint_counts() {
    std::map<std::string, uint64_t> out{{"taken", 0}, {"set", 0}};
#ifdef UVM_WITH_CHECKPOINT
    if (g_allocator) {
        out["taken"] = g_allocator->checkpoints_taken.load();
        out["set"] = g_allocator->checkpoints_set.load();
    }
#endif
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("install", &install);
    m.def("checkpoint_counts", &checkpoint_counts);
    m.def("register_pool", &register_pool);
    m.def("register_sleepable_client", &register_sleepable_client);
    m.def("native_backtrace_on_crash", &native_backtrace_on_crash);
#ifdef UVM_WITH_POOLS
    m.attr("pools") = true;
#else
    m.attr("pools") = false;
#endif
    std::vector<std::string> features;
#ifdef UVM_WITH_POOLS
    features.push_back("pools");
#endif
#ifdef UVM_WITH_STATS
    features.push_back("stats");
#endif
#ifdef UVM_WITH_SNAPSHOT
    features.push_back("snapshot");
#endif
#ifdef UVM_WITH_HISTORY
    features.push_back("history");
#endif
#ifdef UVM_WITH_CHECKPOINT
    features.push_back("checkpoint");
#endif
#ifdef UVM_WITH_OPTIONS
    features.push_back("options");
#endif
    m.attr("features") = features;
}
