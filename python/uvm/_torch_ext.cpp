// uvm.torch's C++ side, built against the installed PyTorch at
// uvm.torch.enable() (python/uvm/torch.py): PyTorch's own pluggable
// allocator over the library's C symbols (integrations/torch/uvm_torch_alloc.c),
// with what the Python-only CUDAPluggableAllocator leaves out:
//  - out of memory throws c10::OutOfMemoryError, which reaches Python as
//    torch.cuda.OutOfMemoryError, its message the library's OOM report
//    (PyTorch does not check a NULL from a pluggable allocator);
//  - torch.cuda.empty_cache() trims (the reset hook);
//  - Tensor.record_stream reaches the library (uvm_mem_record_use);
//  - torch.cuda.MemPool works, and allocations inside use_mem_pool(pool)
//    are charged to the client registered for that pool.
// The C symbols come in as addresses from Python (ctypes), so this links
// nothing of ours.
#include <pybind11/pybind11.h>

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/Exception.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <sys/types.h>
#include <utility>
#include <vector>

namespace {

using MallocFn = void *(*)(ssize_t, int, void *);
using FreeFn = void (*)(void *, size_t, int, void *);
using RecordFn = int (*)(void *, void *);
using EmptyFn = uint64_t (*)();
using MessageFn = size_t (*)(char *, size_t);
using SetClientFn = void *(*)(void *);

MallocFn g_malloc;
FreeFn g_free;
RecordFn g_record;
EmptyFn g_empty;
MessageFn g_message;
SetClientFn g_set_client;

using Base = torch::cuda::CUDAPluggableAllocator::CUDAPluggableAllocator;
using PoolId = c10::cuda::MempoolId_t;

// The pluggable allocator, with the MemPool calls PyTorch's own refuses.
struct UvmAllocator : Base {
    UvmAllocator(std::function<void *(size_t, int, cudaStream_t)> a, std::function<void(void *, size_t, int, cudaStream_t)> f)
        : Base(std::move(a), std::move(f)) {}
#ifdef UVM_WITH_POOLS
    void createOrIncrefPool(c10::DeviceIndex, PoolId id,
                            std::shared_ptr<c10::cuda::CUDACachingAllocator::CUDAAllocator>) override {
        std::lock_guard<std::mutex> guard(pools_lock);
        pool_uses[id]++;
    }
    int getPoolUseCount(c10::DeviceIndex, PoolId id) override {
        std::lock_guard<std::mutex> guard(pools_lock);
        auto it = pool_uses.find(id);
        return it == pool_uses.end() ? 0 : it->second;
    }
#endif
    std::string name() override { return "uvm"; }

    std::mutex pools_lock;
    std::map<PoolId, int> pool_uses;
    std::map<PoolId, void *> pool_clients;  // uvm_client_t * per pool (register_pool)
};

std::shared_ptr<UvmAllocator> g_allocator;
thread_local std::vector<void *> t_saved_clients;  // what use_mem_pool replaced, innermost last

std::string oom_report() {
    std::string text(g_message(nullptr, 0) + 4096, '\0');
    const size_t n = g_message(&text[0], text.size());
    text.resize(n ? std::min(n - 1, text.size()) : 0);
    return text;
}

void *alloc_or_throw(size_t size, int device, cudaStream_t stream) {
    void *p = g_malloc(static_cast<ssize_t>(size), device, stream);
    if (!p && size > 0) {
        TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory (uvm). Tried to allocate ", size,
                         " bytes on GPU ", device, ".\n", oom_report());
    }
    return p;
}

void install(uintptr_t malloc_fn, uintptr_t free_fn, uintptr_t record_fn, uintptr_t empty_fn,
             uintptr_t message_fn, uintptr_t set_client_fn) {
    TORCH_CHECK(!g_allocator, "uvm.torch: the allocator is installed already");
    g_malloc = reinterpret_cast<MallocFn>(malloc_fn);
    g_free = reinterpret_cast<FreeFn>(free_fn);
    g_record = reinterpret_cast<RecordFn>(record_fn);
    g_empty = reinterpret_cast<EmptyFn>(empty_fn);
    g_message = reinterpret_cast<MessageFn>(message_fn);
    g_set_client = reinterpret_cast<SetClientFn>(set_client_fn);
    auto allocator = std::make_shared<UvmAllocator>(
        alloc_or_throw, [](void *ptr, size_t size, int device, cudaStream_t stream) { g_free(ptr, size, device, stream); });
    allocator->set_reset_fn([] { g_empty(); });
    allocator->set_record_stream_fn([](void *ptr, cudaStream_t stream) { g_record(ptr, stream); });
    UvmAllocator *raw = allocator.get();
    allocator->set_begin_allocate_to_pool([raw](int, PoolId id, std::function<bool(cudaStream_t)>) {
        void *client = nullptr;
        {
            std::lock_guard<std::mutex> guard(raw->pools_lock);
            raw->pool_uses[id]++;
            auto it = raw->pool_clients.find(id);
            client = it == raw->pool_clients.end() ? nullptr : it->second;
        }
        t_saved_clients.push_back(g_set_client(client));
    });
    allocator->set_end_allocate_to_pool_fn([](int, PoolId) {
        if (!t_saved_clients.empty()) {
            g_set_client(t_saved_clients.back());
            t_saved_clients.pop_back();
        }
    });
    allocator->set_release_pool([raw](int, PoolId id) {
        std::lock_guard<std::mutex> guard(raw->pools_lock);
        auto it = raw->pool_uses.find(id);
        if (it != raw->pool_uses.end() && --it->second <= 0) {
            raw->pool_uses.erase(it);
            raw->pool_clients.erase(id);
        }
    });
    allocator->init(0);
    torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator(allocator);
    g_allocator = allocator;
}

void register_pool(uint64_t first, uint64_t second, uintptr_t client) {
    TORCH_CHECK(g_allocator, "uvm.torch: not enabled");
    std::lock_guard<std::mutex> guard(g_allocator->pools_lock);
    g_allocator->pool_clients[PoolId{static_cast<c10::cuda::CaptureId_t>(first), static_cast<c10::cuda::CaptureId_t>(second)}] =
        reinterpret_cast<void *>(client);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("install", &install);
    m.def("register_pool", &register_pool);
#ifdef UVM_WITH_POOLS
    m.attr("pools") = true;
#else
    m.attr("pools") = false;
#endif
}
