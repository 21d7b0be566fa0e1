// The page-size lab's GPU experiment: one thread chases pointers through
// vidmem over growing footprints, one element every `stride` bytes in a
// random cycle, and times each step with clock64(). Where the footprint
// passes what a TLB level reaches, the time per step jumps: the knees give
// the TLB sizes (entries = reach / page size) and the plateaus the cost of
// an L1 hit, an L2 hit and a walk, which calibrate the simulator
// (docs/page-size-lab.md).
//
// cudaMalloc'd vidmem is mapped in 2 MiB pages on Hopper, so a 2 MiB stride
// touches one page per step. The same chase then runs through host memory
// the GPU reaches by zero-copy (pinned with cudaHostRegister), once on 4 KiB
// pages and once on 2 MiB transparent huge pages (madvise).
//
//   nvcc -O2 -arch=sm_90 -o lab_pointer_chase bench/lab_pointer_chase.cu
//   ./lab_pointer_chase [max_vidmem_mib [max_host_mib [stride_kib ...]]]   (CSV on stdout)
//   LAB_COUNTS=64,128,... ./lab_pointer_chase ...   (those element counts at each stride)
//   LAB_LOAD=cg   loads that skip the SM's L1 data cache (ld.global.cg): every
//                 step then reaches the L2 cache, which is physically tagged,
//                 so every step needs a translation and the data-cache knee
//                 moves out to the L2's 50 MiB (default: ca, ordinary loads)
//   LAB_REPS=n    n timed chases per point, each over a fresh random cycle;
//                 the row gives the median and the extremes (default 1)
#include <cuda_runtime.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <algorithm>
#include <vector>

#define CHECK(x)                                                                          \
    do {                                                                                  \
        cudaError_t e_ = (x);                                                             \
        if (e_ != cudaSuccess) {                                                          \
            std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                 \
            std::exit(1);                                                                 \
        }                                                                                 \
    } while (0)

// Where element k lives (in 8-byte words): at k strides, plus a different
// 128-byte line within the stride for each k, so that elements a power of two
// apart do not all fall in one set of the data caches.
__device__ uint64_t position(uint64_t k, uint64_t words_per_step) {
    return k * words_per_step + (k * 16) % words_per_step;
}

// buf[position(k)] holds the position of the next element.
__global__ void link(uint64_t *buf, const uint64_t *order, uint64_t count, uint64_t words_per_step) {
    const uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x;
    if (i < count)
        buf[position(order[i], words_per_step)] = position(order[(i + 1) % count], words_per_step);
}

template <bool L2_ONLY>
__device__ uint64_t load(const uint64_t *p) {
    if (L2_ONLY)
        return __ldcg(p);
    return *p;
}

template <bool L2_ONLY>
__global__ void chase(const uint64_t *buf, uint64_t steps, uint64_t *cycles, uint64_t *sink) {
    uint64_t at = 0;  // element 0 is at position 0
    for (uint64_t i = 0; i < steps; ++i)  // warm: every translation once
        at = load<L2_ONLY>(buf + at);
    const long long start = clock64();
    for (uint64_t i = 0; i < steps; ++i)
        at = load<L2_ONLY>(buf + at);
    const long long end = clock64();
    *cycles = uint64_t(end - start);
    *sink = at;  // keeps the chain alive
}

// One sweep of footprints over `base` (memory of `max_mib`), printed as CSV rows.
static void sweep(const char *memory, uint64_t *base, uint64_t max_mib, const std::vector<uint64_t> &strides_kib,
                  int clock_khz, uint64_t *cycles, uint64_t *sink) {
    std::mt19937_64 rng(42);
    const char *load_env = std::getenv("LAB_LOAD");
    const bool l2_only = load_env && std::strcmp(load_env, "cg") == 0;
    const char *reps_env = std::getenv("LAB_REPS");
    const uint64_t reps = reps_env && std::strtoull(reps_env, nullptr, 10) > 0 ? std::strtoull(reps_env, nullptr, 10) : 1;
    // LAB_COUNTS="64,96,128,...": those element counts at each stride (a finer
    // sweep than doubling the footprint), where they fit in the memory.
    std::vector<uint64_t> counts;
    if (const char *list = std::getenv("LAB_COUNTS"))
        for (const char *p = list; *p;) {
            char *end = nullptr;
            counts.push_back(std::strtoull(p, &end, 10));
            p = *end ? end + 1 : end;
        }
    for (uint64_t stride_kib : strides_kib) {
        const uint64_t stride = stride_kib << 10;
        std::vector<uint64_t> plan = counts;
        if (plan.empty())
            for (uint64_t mib = 2; mib <= max_mib; mib *= 2)
                plan.push_back((mib << 20) / stride);
        for (uint64_t count : plan) {
            const uint64_t mib = (count * stride) >> 20;
            if (count < 2 || count * stride > (max_mib << 20))
                continue;
            std::vector<double> per(reps);
            for (uint64_t r = 0; r < reps; ++r) {
                // A random single cycle (Sattolo) through the elements, fresh each repetition.
                std::vector<uint64_t> order(count);
                for (uint64_t i = 0; i < count; ++i)
                    order[i] = i;
                for (uint64_t i = count - 1; i > 0; --i)
                    std::swap(order[i], order[rng() % i]);
                uint64_t *order_d = nullptr;
                CHECK(cudaMalloc(&order_d, count * 8));
                CHECK(cudaMemcpy(order_d, order.data(), count * 8, cudaMemcpyHostToDevice));
                link<<<unsigned((count + 255) / 256), 256>>>(base, order_d, count, stride / 8);
                CHECK(cudaGetLastError());
                CHECK(cudaDeviceSynchronize());
                CHECK(cudaFree(order_d));
                const uint64_t steps = count < 16384 ? 16384 : count;
                if (l2_only)
                    chase<true><<<1, 1>>>(base, steps, cycles, sink);
                else
                    chase<false><<<1, 1>>>(base, steps, cycles, sink);
                CHECK(cudaGetLastError());
                uint64_t c = 0;
                CHECK(cudaMemcpy(&c, cycles, 8, cudaMemcpyDeviceToHost));
                per[r] = double(c) / double(steps);
            }
            std::sort(per.begin(), per.end());
            const double median = per[reps / 2];
            std::printf("%s,%s,%llu,%llu,%llu,%.1f,%.1f,%.1f,%.1f,%llu\n", memory, l2_only ? "cg" : "ca",
                        (unsigned long long)stride_kib, (unsigned long long)mib, (unsigned long long)count, median,
                        median * 1e6 / double(clock_khz), per.front(), per.back(), (unsigned long long)reps);
            std::fflush(stdout);
        }
    }
}

int main(int argc, char **argv) {
    const uint64_t max_mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 8192;
    const uint64_t host_mib = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1024;
    std::vector<uint64_t> strides_kib;
    for (int i = 3; i < argc; ++i)
        strides_kib.push_back(std::strtoull(argv[i], nullptr, 10));
    if (strides_kib.empty())
        strides_kib = {32768, 2048, 64};
    int clock_khz = 0;
    CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("# %s, SM clock %d MHz\n", prop.name, clock_khz / 1000);
    std::printf("memory,load,stride_kib,footprint_mib,elements,cycles_per_step,ns_per_step,cycles_min,cycles_max,reps\n");
    uint64_t *buf = nullptr, *cycles = nullptr, *sink = nullptr;
    CHECK(cudaMalloc(&cycles, 8));
    CHECK(cudaMalloc(&sink, 8));
    CHECK(cudaMalloc(&buf, max_mib << 20));
    sweep("vidmem", buf, max_mib, strides_kib, clock_khz, cycles, sink);
    CHECK(cudaFree(buf));
    // Host memory through zero-copy, on small and on huge pages.
    for (int huge = 0; huge < 2 && host_mib; ++huge) {
        const size_t bytes = host_mib << 20;
        void *host = mmap(nullptr, bytes + (2u << 20), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (host == MAP_FAILED)
            break;
        char *aligned = reinterpret_cast<char *>((reinterpret_cast<uintptr_t>(host) + (2u << 20) - 1) &
                                                 ~uintptr_t((2u << 20) - 1));
        madvise(aligned, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
        for (size_t i = 0; i < bytes; i += 4096)
            aligned[i] = 0;  // placed now, on the pages asked for
        CHECK(cudaHostRegister(aligned, bytes, cudaHostRegisterMapped));
        uint64_t *device = nullptr;
        CHECK(cudaHostGetDevicePointer(reinterpret_cast<void **>(&device), aligned, 0));
        sweep(huge ? "host_2m_thp" : "host_4k", device, host_mib, {64}, clock_khz, cycles, sink);
        CHECK(cudaHostUnregister(aligned));
        munmap(host, bytes + (2u << 20));
    }
    CHECK(cudaFree(cycles));
    CHECK(cudaFree(sink));
    return 0;
}
