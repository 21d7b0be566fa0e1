// The page-size lab's calibration run (docs/page-size-lab.md, "Calibration"):
// times the driver calls whose cost depends on the page size or the number of
// pages, on GPU 0, and prints them as rows of the lab's calibration file
// (lab/calibration.csv; tools/lab_calibrate.sh merges them in).
//
// Each quantity is timed at several sizes so that the lab's cost model can be
// fitted on some and checked on the others (lab/page_size_costs.h):
//   host_register / host_unregister  pinning host memory for DMA, on 4 KiB
//                                    pages and on 2 MiB transparent huge pages
//   mem_create / mem_release         one 2 MiB vidmem handle
//   mem_create_run                   N 2 MiB handles created back to back, none
//                                    released between them, timed whole (growth
//                                    costs ~2.5-4.3 us a handle more than its
//                                    calls timed one at a time: whether creating
//                                    from fresh memory is that difference)
//   mem_map / mem_unmap              one 2 MiB handle at a reserved address
//   set_access                       one cuMemSetAccess over N mapped 2 MiB handles
//   growth                           reserve + N x (create + map) + one set_access
//                                    (what growing a pool by N x 2 MiB costs)
//   map_object                       cuMemMap + cuMemSetAccess of a held 2 MiB
//                                    handle at a new address (mapping an object)
//   copy_h2d / copy_d2h              one pinned copy of a page (what a fault
//                                    that migrates a page of that size moves)
//
//   lab_calibrate [reps]     (CSV rows on stdout; nothing without a GPU: exit 2)
//
// Every handle, reservation and registration is released before the next
// measurement; the program checks every driver call and stops at the first
// failure (exit 1) after releasing what it holds.
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "cuda/driver_api.h"

namespace {

constexpr uint64_t kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024;

const uvm::cuda::DriverApi *api = nullptr;
CUdevice device;
std::string device_name;
std::string today;

bool ok(CUresult r, const char *what) {
    if (r == CUDA_SUCCESS)
        return true;
    std::fprintf(stderr, "lab_calibrate: %s: %s\n", what, uvm::cuda::driver_error_string(r));
    return false;
}

double now_us() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One row: the median and extremes of `samples` (microseconds).
void row(const char *quantity, uint64_t bytes, uint64_t page_bytes, std::vector<double> samples) {
    std::sort(samples.begin(), samples.end());
    std::printf("%s,%s,%s,%llu,%llu,%zu,%.3f,%.3f,%.3f\n", device_name.c_str(), today.c_str(), quantity,
                (unsigned long long)bytes, (unsigned long long)page_bytes, samples.size(),
                samples[samples.size() / 2], samples.front(), samples.back());
    std::fflush(stdout);
}

CUmemAllocationProp vidmem_prop() {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    return prop;
}

CUmemAccessDesc read_write() {
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return access;
}

// AnonHugePages of this process, in bytes.
uint64_t anon_huge_bytes() {
    FILE *f = std::fopen("/proc/self/smaps_rollup", "r");
    if (!f)
        return 0;
    char line[256];
    uint64_t kib = 0;
    while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "AnonHugePages: %llu kB", (unsigned long long *)&kib) == 1)
            break;
    std::fclose(f);
    return kib * kKiB;
}

// Pinning `bytes` of host memory placed on 4 KiB pages or on THP.
bool host_register(uint64_t bytes, bool huge, int reps) {
    std::vector<double> reg, unreg;
    for (int r = 0; r < reps; ++r) {
        const uint64_t span = bytes + 2 * kMiB;
        void *raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (raw == MAP_FAILED) {
            std::fprintf(stderr, "lab_calibrate: mmap of %llu bytes failed\n", (unsigned long long)span);
            return false;
        }
        char *p = reinterpret_cast<char *>((reinterpret_cast<uintptr_t>(raw) + 2 * kMiB - 1) & ~uintptr_t(2 * kMiB - 1));
        madvise(p, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
        const uint64_t huge_before = anon_huge_bytes();
        for (uint64_t i = 0; i < bytes; i += 4 * kKiB)
            p[i] = 1;  // placed now, on the pages asked for
        const uint64_t huge_placed = anon_huge_bytes() - huge_before;
        if (huge && huge_placed < bytes * 9 / 10) {
            // The row would not be about 2 MiB pages: say so and skip it.
            std::fprintf(stderr, "lab_calibrate: only %llu of %llu bytes on THP (THP off or fragmented)\n",
                         (unsigned long long)huge_placed, (unsigned long long)bytes);
            munmap(raw, span);
            return true;
        }
        double t0 = now_us();
        const bool registered = ok(api->cuMemHostRegister(p, bytes, CU_MEMHOSTREGISTER_DEVICEMAP), "cuMemHostRegister");
        double t1 = now_us();
        if (registered) {
            reg.push_back(t1 - t0);
            t0 = now_us();
            api->cuMemHostUnregister(p);
            t1 = now_us();
            unreg.push_back(t1 - t0);
        }
        munmap(raw, span);
        if (!registered)
            return false;
    }
    const uint64_t page = huge ? 2 * kMiB : 4 * kKiB;
    row("host_register", bytes, page, reg);
    row("host_unregister", bytes, page, unreg);
    return true;
}

// One 2 MiB handle: create/release, and map/unmap at a reserved address.
bool handle_calls(int reps) {
    const CUmemAllocationProp prop = vidmem_prop();
    std::vector<double> create, release, map, unmap;
    CUdeviceptr va = 0;
    if (!ok(api->cuMemAddressReserve(&va, 2 * kMiB, 2 * kMiB, 0, 0), "cuMemAddressReserve"))
        return false;
    bool good = true;
    for (int r = 0; r < reps && good; ++r) {
        CUmemGenericAllocationHandle h;
        double t0 = now_us();
        good = ok(api->cuMemCreate(&h, 2 * kMiB, &prop, 0), "cuMemCreate");
        double t1 = now_us();
        if (!good)
            break;
        create.push_back(t1 - t0);
        t0 = now_us();
        good = ok(api->cuMemMap(va, 2 * kMiB, 0, h, 0), "cuMemMap");
        t1 = now_us();
        if (good) {
            map.push_back(t1 - t0);
            t0 = now_us();
            api->cuMemUnmap(va, 2 * kMiB);
            t1 = now_us();
            unmap.push_back(t1 - t0);
        }
        t0 = now_us();
        api->cuMemRelease(h);
        t1 = now_us();
        release.push_back(t1 - t0);
    }
    api->cuMemAddressFree(va, 2 * kMiB);
    if (!good)
        return false;
    row("mem_create", 2 * kMiB, 2 * kMiB, create);
    row("mem_release", 2 * kMiB, 2 * kMiB, release);
    row("mem_map", 2 * kMiB, 2 * kMiB, map);
    row("mem_unmap", 2 * kMiB, 2 * kMiB, unmap);
    return true;
}

// `count` 2 MiB handles created back to back and none released until all are
// made ("mem_create_run"): growth's creates, without its maps and its
// cuMemSetAccess, against "mem_create"'s one handle created and released.
bool create_run(uint64_t count, int reps) {
    const CUmemAllocationProp prop = vidmem_prop();
    std::vector<double> samples;
    for (int r = 0; r < reps; ++r) {
        std::vector<CUmemGenericAllocationHandle> handles;
        handles.reserve(count);
        bool good = true;
        const double t0 = now_us();
        for (uint64_t i = 0; i < count && good; ++i) {
            CUmemGenericAllocationHandle h;
            good = ok(api->cuMemCreate(&h, 2 * kMiB, &prop, 0), "cuMemCreate");
            if (good)
                handles.push_back(h);
        }
        const double t1 = now_us();
        for (CUmemGenericAllocationHandle h : handles)
            api->cuMemRelease(h);
        if (!good)
            return false;
        samples.push_back(t1 - t0);
    }
    row("mem_create_run", count * 2 * kMiB, 2 * kMiB, samples);
    return true;
}

// `count` 2 MiB handles mapped side by side in a fresh reservation; `timed`
// runs over them (set_access, growth) and everything is released after.
struct Run {
    CUdeviceptr va = 0;
    std::vector<CUmemGenericAllocationHandle> handles;
    uint64_t mapped = 0;
    void release() {
        for (uint64_t i = 0; i < mapped; ++i)
            api->cuMemUnmap(va + i * 2 * kMiB, 2 * kMiB);
        for (CUmemGenericAllocationHandle h : handles)
            api->cuMemRelease(h);
        if (va)
            api->cuMemAddressFree(va, handles.capacity() * 2 * kMiB);
        handles.clear();
        mapped = 0;
        va = 0;
    }
    // Reserve, create and map `count` handles; false (and released) on failure.
    bool build(uint64_t count) {
        handles.reserve(count);
        if (!ok(api->cuMemAddressReserve(&va, count * 2 * kMiB, 2 * kMiB, 0, 0), "cuMemAddressReserve")) {
            va = 0;
            return false;
        }
        const CUmemAllocationProp prop = vidmem_prop();
        for (uint64_t i = 0; i < count; ++i) {
            CUmemGenericAllocationHandle h;
            if (!ok(api->cuMemCreate(&h, 2 * kMiB, &prop, 0), "cuMemCreate")) {
                release();
                return false;
            }
            handles.push_back(h);
            if (!ok(api->cuMemMap(va + i * 2 * kMiB, 2 * kMiB, 0, h, 0), "cuMemMap")) {
                release();
                return false;
            }
            ++mapped;
        }
        return true;
    }
};

// One cuMemSetAccess over `count` mapped 2 MiB handles, timed alone
// ("set_access"), or with the reservation and the handles made and mapped
// before it ("growth": what growing a pool by `count` handles costs).
bool set_access(uint64_t count, int reps, bool with_build) {
    std::vector<double> samples;
    const CUmemAccessDesc access = read_write();
    for (int r = 0; r < reps; ++r) {
        Run run;
        double t0 = now_us();
        if (!run.build(count))
            return false;
        if (!with_build)
            t0 = now_us();
        const bool good = ok(api->cuMemSetAccess(run.va, count * 2 * kMiB, &access, 1), "cuMemSetAccess");
        const double t1 = now_us();
        run.release();
        if (!good)
            return false;
        samples.push_back(t1 - t0);
    }
    row(with_build ? "growth" : "set_access", count * 2 * kMiB, 2 * kMiB, samples);
    return true;
}

// Mapping a held 2 MiB handle at a new address: cuMemMap + cuMemSetAccess.
bool map_object(int reps) {
    const CUmemAllocationProp prop = vidmem_prop();
    const CUmemAccessDesc access = read_write();
    CUmemGenericAllocationHandle h;
    if (!ok(api->cuMemCreate(&h, 2 * kMiB, &prop, 0), "cuMemCreate"))
        return false;
    std::vector<double> samples;
    bool good = true;
    for (int r = 0; r < reps && good; ++r) {
        CUdeviceptr va = 0;
        if (!(good = ok(api->cuMemAddressReserve(&va, 2 * kMiB, 2 * kMiB, 0, 0), "cuMemAddressReserve")))
            break;
        const double t0 = now_us();
        good = ok(api->cuMemMap(va, 2 * kMiB, 0, h, 0), "cuMemMap");
        const bool mapped = good;
        good = good && ok(api->cuMemSetAccess(va, 2 * kMiB, &access, 1), "cuMemSetAccess");
        const double t1 = now_us();
        if (good)
            samples.push_back(t1 - t0);
        if (mapped)
            api->cuMemUnmap(va, 2 * kMiB);
        api->cuMemAddressFree(va, 2 * kMiB);
    }
    api->cuMemRelease(h);
    if (!good)
        return false;
    row("map_object", 2 * kMiB, 2 * kMiB, samples);
    return true;
}

// One synchronous pinned copy of `bytes` each way (a page's migration).
bool copies(const std::vector<uint64_t> &sizes, int reps) {
    const uint64_t most = *std::max_element(sizes.begin(), sizes.end());
    void *host = nullptr;
    CUdeviceptr dev = 0;
    CUstream stream = nullptr;
    bool good = ok(api->cuMemAlloc(&dev, most), "cuMemAlloc");
    void *raw = good ? mmap(nullptr, most, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) : MAP_FAILED;
    good = good && raw != MAP_FAILED;
    if (good) {
        host = raw;
        std::memset(host, 1, most);
        good = ok(api->cuMemHostRegister(host, most, 0), "cuMemHostRegister");
        if (!good) {
            munmap(raw, most);
            host = nullptr;
        }
    }
    good = good && ok(api->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    for (uint64_t bytes : sizes) {
        for (int dir = 0; dir < 2 && good; ++dir) {
            std::vector<double> samples;
            for (int r = 0; r < reps + 3 && good; ++r) {  // the first three warm the path
                const CUdeviceptr h = reinterpret_cast<CUdeviceptr>(host);
                const double t0 = now_us();
                good = ok(api->cuMemcpyAsync(dir == 0 ? dev : h, dir == 0 ? h : dev, bytes, stream), "cuMemcpyAsync") &&
                       ok(api->cuStreamSynchronize(stream), "cuStreamSynchronize");
                const double t1 = now_us();
                if (r >= 3)
                    samples.push_back(t1 - t0);
            }
            if (good)
                row(dir == 0 ? "copy_h2d" : "copy_d2h", bytes, bytes, samples);
        }
    }
    if (stream)
        api->cuStreamDestroy(stream);
    if (host) {
        api->cuMemHostUnregister(host);
        munmap(host, most);
    }
    if (dev)
        api->cuMemFree(dev);
    return good;
}

}  // namespace

int main(int argc, char **argv) {
    const int reps = argc > 1 ? std::max(3, std::atoi(argv[1])) : 7;
    api = uvm::cuda::driver_api();
    int count = 0;
    if (!api || api->cuInit(0) != CUDA_SUCCESS || api->cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
        std::fprintf(stderr, "lab_calibrate: no CUDA GPU; nothing measured\n");
        return 2;
    }
    CUcontext ctx;
    char name[256] = {};
    if (!ok(api->cuDeviceGet(&device, 0), "cuDeviceGet") || !ok(api->cuDeviceGetName(name, sizeof name, device), "cuDeviceGetName") ||
        !ok(api->cuDevicePrimaryCtxRetain(&ctx, device), "cuDevicePrimaryCtxRetain") ||
        !ok(api->cuCtxSetCurrent(ctx), "cuCtxSetCurrent"))
        return 1;
    device_name = name;
    std::replace(device_name.begin(), device_name.end(), ',', ' ');
    char date[32];
    const std::time_t t = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&t));
    today = date;

    bool good = true;
    // Every power of two from 16 MiB to 1 GiB, so that a knee in pinning has
    // sizes on both sides and a held-out size is interpolated (the lab's
    // leave-one-out validation), not extrapolated.
    for (uint64_t bytes : {16 * kMiB, 32 * kMiB, 64 * kMiB, 128 * kMiB, 256 * kMiB, 512 * kMiB, 1 * kGiB})
        for (bool huge : {false, true})
            good = good && host_register(bytes, huge, bytes >= kGiB ? 3 : reps);
    good = good && handle_calls(reps * 7);
    for (uint64_t n : {1, 16, 128, 512})
        good = good && set_access(n, n >= 512 ? 3 : reps, false);
    for (uint64_t n : {16, 128, 512})
        good = good && set_access(n, n >= 512 ? 3 : reps, true);
    for (uint64_t n : {16, 128, 512})
        good = good && create_run(n, n >= 512 ? 3 : reps);
    good = good && map_object(reps * 7);
    good = good && copies({4 * kKiB, 64 * kKiB, 2 * kMiB, 64 * kMiB}, reps * 3);
    api->cuDevicePrimaryCtxRelease(device);
    return good ? 0 : 1;
}
