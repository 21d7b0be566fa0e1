// PyTorch's CUDA caching allocator as a peer: the raw_alloc/raw_delete pair,
// served from its cache after the first call. Built where PyTorch's C++
// headers and libraries are found (UVM_TORCH_DIR); skips without a GPU.
//
//   torch_raw_alloc_delete/<size>
#include <benchmark/benchmark.h>

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

namespace {

bool torch_ready() {
    static const bool ready = [] {
        try {
            const int n = c10::cuda::device_count();
            if (n < 1)
                return false;
            c10::cuda::CUDACachingAllocator::init(n);
            return true;
        } catch (...) {
            return false;
        }
    }();
    return ready;
}

void torch_raw_alloc_delete(benchmark::State &state) {
    if (!torch_ready())
        return state.SkipWithError("no CUDA GPU for PyTorch");
    const size_t size = static_cast<size_t>(state.range(0));
    c10::cuda::CUDACachingAllocator::raw_delete(c10::cuda::CUDACachingAllocator::raw_alloc(size));  // warm
    for (auto _ : state) {
        void *p = c10::cuda::CUDACachingAllocator::raw_alloc(size);
        benchmark::DoNotOptimize(p);
        c10::cuda::CUDACachingAllocator::raw_delete(p);
    }
    c10::cuda::CUDACachingAllocator::emptyCache();
}

}  // namespace

BENCHMARK(torch_raw_alloc_delete)->Arg(4 << 10)->Arg(64 << 10)->Arg(2 << 20);

BENCHMARK_MAIN();
