// Shared fixture of the object tests: a manager on each backend under test.
#pragma once

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "api/handles.h"
#include "backend/fault_injection.h"
#include "common/alloc_params.h"
#include "sim/sim_backend.h"
#include "uvm/uvm.h"
#if defined(UVM_HAVE_CUDA)
#include "cuda/driver_api.h"
#endif

namespace uvm_test {

// The backends the object tests run over. "cuda" skips where there is no GPU.
inline std::vector<std::string> backend_names() { return {"sim", "sim_coherent", "cuda"}; }

using uvm::alloc_params;

inline uvm_manager_params_t sim_params(uint32_t gpus, uint64_t vidmem) {
    uvm_manager_params_t p;
    std::memset(&p, 0, sizeof(p));
    p.backend = UVM_BACKEND_SIM;
    p.sim.gpu_count = gpus;
    p.sim.vidmem_size = vidmem;
    return p;
}

// A manager of `gpus` simulated GPUs of `vidmem` bytes each (small ones, for
// pressure), or null with a test failure.
// A manager on a sim backend of `params`, behind a backend that fails the
// calls the test tells it to (*faults: fail_call, fail_one_in); null where
// either cannot be made.
inline uvm_manager_t *faulty_sim(const uvm_sim_params_t &params, uvm::backend::FaultInjectingBackend **faults) {
    std::unique_ptr<uvm::backend::Backend> sim;
    EXPECT_EQ(uvm::sim::create_sim_backend(params, &sim), UVM_OK);
    if (!sim)
        return nullptr;
    auto faulty = std::make_unique<uvm::backend::FaultInjectingBackend>(std::move(sim));
    *faults = faulty.get();
    uvm_manager_t *mgr = nullptr;
    EXPECT_EQ(uvm::create_manager(std::move(faulty), &mgr), UVM_OK);
    return mgr;
}

inline uvm_manager_t *small_sim(uint32_t gpus, uint64_t vidmem) {
    uvm_manager_params_t p = sim_params(gpus, vidmem);
    uvm_manager_t *m = nullptr;
    EXPECT_EQ(uvm_manager_create(&p, &m), UVM_OK);
    return m;
}

// A call of the report family into a string, asking for the size first.
// A client's accounts, as uvm_client_info gives them.
inline uvm_client_info_t client_info(uvm_manager_t *mgr, uvm_client_t *client) {
    uvm_client_info_t i;
    std::memset(&i, 0, sizeof(i));
    EXPECT_EQ(uvm_client_info(mgr, client, &i), UVM_OK);
    return i;
}

// An allocation charged to `client` (null: the default client); its status.
inline uvm_status_t alloc_in_client(uvm_manager_t *mgr, uvm_client_t *client, uvm_backing_t backing, uint64_t size,
                                    uint32_t flags, uvm_mem_t **out, uint32_t gpu = 0) {
    uvm_mem_alloc_params_t p = alloc_params(backing, size, gpu, 0, flags);
    p.client = client;
    return uvm_mem_alloc(mgr, &p, out);
}

// An object of `client` (null: the default client) tagged `tag`, on GPU `gpu`.
inline uvm_mem_t *alloc_owned(uvm_manager_t *mgr, uvm_backing_t backing, uint64_t size, uvm_client_t *client,
                              const char *tag = nullptr, uint32_t flags = 0, uint32_t gpu = 0) {
    uvm_mem_alloc_params_t p = alloc_params(backing, size, gpu, 0, flags);
    p.client = client;
    p.tag = tag;
    uvm_mem_t *m = nullptr;
    EXPECT_EQ(uvm_mem_alloc(mgr, &p, &m), UVM_OK);
    return m;
}

template <typename F>
inline std::string fetch(F &&call) {
    size_t needed = 0;
    EXPECT_EQ(call(nullptr, 0, &needed), UVM_ERR_BUFFER_TOO_SMALL);
    // The text may change between two calls (an object's age gains a digit):
    // a buffer too small says what it needs now, and the next try has that.
    for (int tries = 0; tries < 4; ++tries) {
        std::string out(needed, '\0');
        size_t again = 0;
        const uvm_status_t s = call(&out[0], out.size(), &again);
        if (s == UVM_OK) {
            EXPECT_GT(again, 0u);
            EXPECT_LE(again, needed);
            out.resize(again ? again - 1 : 0);
            return out;
        }
        EXPECT_EQ(s, UVM_ERR_BUFFER_TOO_SMALL);
        EXPECT_GT(again, needed);
        needed = again;
    }
    ADD_FAILURE() << "the text grew at every try";
    return std::string();
}

inline uvm_status_t make_manager(const std::string &name, uvm_manager_t **out) {
    uvm_manager_params_t p = sim_params(2, 1ull << 30);
    if (name == "cuda")
        p.backend = UVM_BACKEND_CUDA;
    p.sim.cpu_coherent = name == "sim_coherent";
    return uvm_manager_create(&p, out);
}

// An address range nobody holds now, aligned to `align`.
inline void *unused_range(uint64_t size, uint64_t align) {
    void *p = mmap(nullptr, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return nullptr;
    munmap(p, size + align);
    return reinterpret_cast<void *>((reinterpret_cast<uintptr_t>(p) + align - 1) & ~(uintptr_t)(align - 1));
}

#if defined(UVM_HAVE_CUDA)
// A PTX kernel loaded on GPU `gpu`'s primary context, which is left current.
struct PtxKernel {
    CUdevice device = 0;
    CUcontext context = nullptr;
    CUmodule module = nullptr;
    CUfunction function = nullptr;
};
inline void load_ptx_kernel(const uvm::cuda::DriverApi *api, int gpu, const char *ptx, const char *name,
                            PtxKernel *out) {
    ASSERT_EQ(api->cuDeviceGet(&out->device, gpu), CUDA_SUCCESS);
    ASSERT_EQ(api->cuDevicePrimaryCtxRetain(&out->context, out->device), CUDA_SUCCESS);
    ASSERT_EQ(api->cuCtxSetCurrent(out->context), CUDA_SUCCESS);
    ASSERT_EQ(api->cuModuleLoadData(&out->module, ptx), CUDA_SUCCESS);
    ASSERT_EQ(api->cuModuleGetFunction(&out->function, out->module, name), CUDA_SUCCESS);
}
#endif

inline uint8_t pattern(uint64_t i, uint32_t seed) { return static_cast<uint8_t>((i * 131 + seed * 17 + (i >> 12)) & 0xFF); }

// Fill `size` bytes of `mem` with pattern(i, seed), through a sysmem object
// on the copy engine of GPU 0.
inline uvm_status_t write_pattern(uvm_manager_t *mgr, uvm_mem_t *mem, uint64_t size, uint32_t seed) {
    const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_SYSMEM, size, 0, 0, 0);
    uvm_mem_t *host = nullptr;
    uvm_status_t s = uvm_mem_alloc(mgr, &p, &host);
    if (s != UVM_OK)
        return s;
    void *cpu = nullptr;
    s = uvm_mem_map_cpu_kernel(mgr, host);
    if (s == UVM_OK)
        s = uvm_mem_cpu_kernel_address(mgr, host, 0, &cpu);
    if (s == UVM_OK) {
        for (uint64_t i = 0; i < size; ++i)
            static_cast<uint8_t *>(cpu)[i] = pattern(i, seed);
        s = uvm_mem_map_gpu_phys(mgr, host, 0);
    }
    uvm_mem_span_t d{mem, 0, UVM_VIEW_PHYSICAL}, src{host, 0, UVM_VIEW_PHYSICAL};
    if (s == UVM_OK)
        s = uvm_mem_copy(mgr, 0, &d, &src, size);
    uvm_mem_free(mgr, host);
    return s;
}

// One call of a sequence under an injected failure (the fault-injecting
// backend's walks): a failure must be the backend's, and is remembered
// (the sequence stops there).
struct Steps {
    bool failed = false;
    bool operator()(uvm_status_t status) {
        if (status != UVM_OK) {
            EXPECT_EQ(status, UVM_ERR_BACKEND);
            failed = true;
        }
        return status == UVM_OK;
    }
};

// Bytes of `mem` read through `view` (its physical view by default) that
// differ from pattern(i, seed) (seed UINT32_MAX: from zero); UINT64_MAX
// where they cannot be read.
// Stitched objects (chunk/pmm.h): managers made while one of these lives
// see UVM_STITCH as `value` says (nullptr: unset, which stitches), whatever
// the environment had; the variable as it was after.
class StitchingSwitch {
public:
    explicit StitchingSwitch(const char *value) {
        const char *v = std::getenv("UVM_STITCH");
        had_ = v != nullptr;
        if (had_)
            was_ = v;
        if (value)
            setenv("UVM_STITCH", value, 1);
        else
            unsetenv("UVM_STITCH");
    }
    ~StitchingSwitch() {
        if (had_)
            setenv("UVM_STITCH", was_.c_str(), 1);
        else
            unsetenv("UVM_STITCH");
    }
    StitchingSwitch(const StitchingSwitch &) = delete;
    StitchingSwitch &operator=(const StitchingSwitch &) = delete;

private:
    bool had_ = false;
    std::string was_;
};
struct StitchingOn : StitchingSwitch {
    StitchingOn() : StitchingSwitch("1") {}
};
struct StitchingOff : StitchingSwitch {
    StitchingOff() : StitchingSwitch("0") {}
};
struct StitchingUnset : StitchingSwitch {
    StitchingUnset() : StitchingSwitch(nullptr) {}
};

// Three 16 MiB kernel-mapped objects side by side on GPU 0, the outer two
// freed: 32 MiB of free roots around *middle, in no run that long.
inline void two_holes(uvm_manager_t *mgr, uvm_mem_t **middle) {
    uvm_mem_t *outer[2] = {};
    const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, 16ull << 20, 0, 0, UVM_MEM_GPU_MAPPED);
    ASSERT_EQ(uvm_mem_alloc(mgr, &a, &outer[0]), UVM_OK);
    ASSERT_EQ(uvm_mem_alloc(mgr, &a, middle), UVM_OK);
    ASSERT_EQ(uvm_mem_alloc(mgr, &a, &outer[1]), UVM_OK);
    for (uvm_mem_t *m : outer)
        ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
}

inline uint64_t wrong_bytes(uvm_manager_t *mgr, uvm_mem_t *mem, uint64_t size, uint32_t seed,
                            uvm_gpu_view_t view = UVM_VIEW_PHYSICAL) {
    const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_SYSMEM, size, 0, 0, 0);
    uvm_mem_t *host = nullptr;
    if (uvm_mem_alloc(mgr, &p, &host) != UVM_OK)
        return UINT64_MAX;
    void *cpu = nullptr;
    uvm_mem_span_t d{host, 0, UVM_VIEW_PHYSICAL}, src{mem, 0, view};
    uint64_t bad = UINT64_MAX;
    if (uvm_mem_map_gpu_phys(mgr, host, 0) == UVM_OK && uvm_mem_copy(mgr, 0, &d, &src, size) == UVM_OK &&
        uvm_mem_map_cpu_kernel(mgr, host) == UVM_OK && uvm_mem_cpu_kernel_address(mgr, host, 0, &cpu) == UVM_OK) {
        bad = 0;
        for (uint64_t i = 0; i < size; ++i)
            bad += static_cast<uint8_t *>(cpu)[i] != (seed == UINT32_MAX ? 0 : pattern(i, seed));
    }
    uvm_mem_free(mgr, host);
    return bad;
}

class ManagerTest : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        const uvm_status_t s = make_manager(GetParam(), &mgr_);
        if (GetParam() == "cuda" && (s == UVM_ERR_NO_DEVICE || s == UVM_ERR_NOT_SUPPORTED))
            GTEST_SKIP() << "no CUDA GPU here: " << uvm_status_string(s);
        ASSERT_EQ(s, UVM_OK) << uvm_status_string(s);
        ASSERT_EQ(uvm_gpu_count(mgr_, &gpus_), UVM_OK);
        ASSERT_GE(gpus_, 1u);
        for (uint32_t g = 0; g < gpus_; ++g) {
            uvm_gpu_info_t gi;
            ASSERT_EQ(uvm_gpu_info(mgr_, g, &gi), UVM_OK);
            free_at_start_.push_back(gi.memory_free);
        }
        note_baseline("start");
    }
    void TearDown() override {
        if (!mgr_)
            return;
        // No device memory leaks: once the pools are trimmed, every GPU has at
        // least as much free as when the test began (the driver may give
        // managed pages back late, so more is possible; less is a leak).
        for (uint32_t g = 0; g < gpus_ && g < free_at_start_.size(); ++g) {
            uvm_gpu_info_t gi;
            ASSERT_EQ(uvm_gpu_trim(mgr_, g, nullptr), UVM_OK);
            ASSERT_EQ(uvm_gpu_info(mgr_, g, &gi), UVM_OK);
            EXPECT_GE(gi.memory_free, free_at_start_[g]) << "GPU " << g << " memory not given back: "
                                                         << memory_account(g, gi.memory_free);
            if (memory_log())
                std::fprintf(stderr, "[memory] %s GPU %u at the end: %s\n", test_name().c_str(), g,
                             memory_account(g, gi.memory_free).c_str());
        }
        EXPECT_EQ(uvm_manager_destroy(mgr_), UVM_OK) << "objects leaked by the test";
    }

    // UVM_TEST_MEMORY_LOG=1: every baseline and end of the leak check on
    // stderr, for a GPU run that must tell the library's leaks from the driver's.
    static bool memory_log() {
        const char *v = std::getenv("UVM_TEST_MEMORY_LOG");
        return v && *v && std::strcmp(v, "0") != 0;
    }
    static std::string test_name() {
        const ::testing::TestInfo *t = ::testing::UnitTest::GetInstance()->current_test_info();
        return t ? std::string(t->test_suite_name()) + "." + t->name() : std::string("?");
    }
    // What a shortfall of GPU `g`'s free memory is made of: the driver
    // memory the manager still holds (its handles, after the trim) and, on
    // CUDA, the driver objects alive now against the baseline. Nothing held
    // and every object released means the driver kept the memory for itself.
    std::string memory_account(uint32_t g, uint64_t free_now) {
        uvm_gpu_stats_t gs;
        std::memset(&gs, 0, sizeof(gs));
        uvm_gpu_stats(mgr_, g, &gs);
        const int64_t delta = static_cast<int64_t>(free_now) - static_cast<int64_t>(free_at_start_[g]);
        std::string text = "free " + std::to_string(free_now) + " against " + std::to_string(free_at_start_[g]) +
                           " at the baseline (" + std::to_string(delta / 1024) + " KiB); the manager holds " +
                           std::to_string(gs.held_bytes) + " bytes of it in driver allocations";
#if defined(UVM_HAVE_CUDA)
        if (on_cuda()) {
            const uvm::cuda::DriverAudit now = uvm::cuda::driver_audit();
            const uvm::cuda::DriverAudit &was = audit_at_baseline_;
            text += "; driver objects alive since the baseline: handles " + std::to_string(now.handles - was.handles) +
                    ", mappings " + std::to_string(now.mappings - was.mappings) + ", host registrations " +
                    std::to_string(now.registrations - was.registrations) + ", driver allocations " +
                    std::to_string(now.allocations - was.allocations) + ", streams " +
                    std::to_string(now.streams - was.streams) + ", events " + std::to_string(now.events - was.events) +
                    ", modules " + std::to_string(now.modules - was.modules);
        }
#endif
        return text;
    }
    // The leak check's baseline was just taken (`when`): the driver objects
    // alive then, and the figures where UVM_TEST_MEMORY_LOG asks for them.
    void note_baseline(const char *when) {
#if defined(UVM_HAVE_CUDA)
        if (on_cuda())
            audit_at_baseline_ = uvm::cuda::driver_audit();
#endif
        if (!memory_log())
            return;
        for (uint32_t g = 0; g < gpus_ && g < free_at_start_.size(); ++g)
            std::fprintf(stderr, "[memory] %s GPU %u baseline (%s): free %llu\n", test_name().c_str(), g, when,
                         static_cast<unsigned long long>(free_at_start_[g]));
    }

    bool on_cuda() const { return GetParam() == "cuda"; }

    // Take the leak check's baseline again, after a warm-up cycle that freed
    // all it took: the driver's one-time state for a feature (the managed
    // memory machinery, for one) is not the test's to give back.
    void rebaseline_free_memory() {
        for (uint32_t g = 0; g < gpus_; ++g) {
            uvm_gpu_info_t gi;
            ASSERT_EQ(uvm_gpu_trim(mgr_, g, nullptr), UVM_OK);
            ASSERT_EQ(uvm_gpu_info(mgr_, g, &gi), UVM_OK);
            free_at_start_[g] = gi.memory_free;
        }
        note_baseline("again");
    }

    // The CUDA driver sets up its stream machinery the first time a context
    // gets a stream of its own, and keeps 2 MiB of device memory for it after
    // the stream goes (measured on an H100). With a second GPU's context in
    // the process, the tests of four streams with waits between them came
    // 2 MiB short on GPU 0 (the H100 pair), with no handle of the manager's
    // left: the warm-up runs every stream path the tests take, on as many
    // streams as they use, each from a thread of its own, then takes the
    // baseline again. A stream path that leaked on every use would still
    // fail the check, and the check's message says whose memory is missing.
    void warm_up_streams(int count = 4) {
        std::vector<uvm_stream_t *> ss(static_cast<size_t>(count), nullptr);
        for (uvm_stream_t *&s : ss)
            ASSERT_EQ(uvm_stream_create(mgr_, 0, nullptr, &s), UVM_OK);
        // Each stream's own allocations, memsets and a copy, as the tests' threads make them.
        std::vector<std::thread> threads;
        std::atomic<int> failures{0};
        for (uvm_stream_t *s : ss)
            threads.emplace_back([&, s] {
                const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 2 * 1024 * 1024);
                uvm_mem_t *a = nullptr, *b = nullptr;
                uint64_t address = 0;
                failures += uvm_mem_alloc_gpu(mgr_, &p, s, &a, &address) != UVM_OK;
                failures += uvm_mem_alloc_async(mgr_, &p, s, &b) != UVM_OK;
                if (a && b) {
                    uvm_mem_span_t da{a, 0, UVM_VIEW_PHYSICAL}, db{b, 0, UVM_VIEW_PHYSICAL};
                    failures += uvm_mem_memset_async(mgr_, 0, &da, 1, 64 * 1024, s) != UVM_OK;
                    failures += uvm_mem_copy_async(mgr_, 0, &db, &da, 64 * 1024, s) != UVM_OK;
                }
                for (uvm_mem_t *m : {a, b})
                    if (m)
                        failures += uvm_mem_free_async(mgr_, m, s) != UVM_OK;
            });
        for (std::thread &t : threads)
            t.join();
        ASSERT_EQ(failures.load(), 0);
        // Waits between streams: an object used on each stream, freed on the
        // last (every other stream's fence, an event each, waited for there).
        uvm_mem_t *m = alloc(UVM_BACKING_VIDMEM, 64 * 1024);
        uvm_mem_span_t d{m, 0, UVM_VIEW_PHYSICAL};
        for (uvm_stream_t *s : ss) {
            ASSERT_EQ(uvm_mem_memset_async(mgr_, 0, &d, 0, 64 * 1024, s), UVM_OK);
            ASSERT_EQ(uvm_mem_record_use(mgr_, m, s), UVM_OK);
        }
        EXPECT_EQ(read_back(m, 4096).size(), 4096u);  // a synchronous copy through registered host memory
        ASSERT_EQ(uvm_mem_free_async(mgr_, m, ss.back()), UVM_OK);
        uvm_mem_t *n = alloc(UVM_BACKING_VIDMEM, 64 * 1024);
        ASSERT_EQ(uvm_mem_record_use(mgr_, n, ss.front()), UVM_OK);
        ASSERT_EQ(uvm_mem_free(mgr_, n), UVM_OK);  // takes a fence: an event recorded on the stream
        for (uvm_stream_t *s : ss) {
            ASSERT_EQ(uvm_stream_synchronize(mgr_, s), UVM_OK);
            ASSERT_EQ(uvm_stream_destroy(mgr_, s), UVM_OK);
        }
        rebaseline_free_memory();
    }

    // A free address for GPU user mappings. The CUDA driver places GPU
    // mappings only inside its own VA heap (cuMemAddressReserve ignores a
    // hint outside it), so there the address comes from the driver.
    uint64_t gpu_user_range(uint64_t size, uint64_t align) {
#if defined(UVM_HAVE_CUDA)
        if (on_cuda()) {
            const uint64_t p = uvm::cuda::reservable_gpu_address(size, align);
            EXPECT_NE(p, 0u) << "the driver reserves no address range";
            return p;
        }
#endif
        return reinterpret_cast<uint64_t>(unused_range(size, align));
    }
    // GPU user mappings the backend can make (docs/cuda_backend.md). On CUDA:
    // vidmem at an address the manager picks (a view of the physical window),
    // of any chunk size; at the caller's address only remappable vidmem (2M
    // chunks, UVM_MEM_USER_MAPPABLE), for the driver maps handles whole and
    // 2 MiB at a time; host memory where it is shareable (UVM_MEM_USER_MAPPABLE),
    // through its CPU mapping at the same address.
    bool gpu_user_supported(uvm_mem_t *mem, uint64_t address) {
        const uvm_mem_info_t i = info(mem);
        if (!on_cuda())
            return true;
        if (i.backing == UVM_BACKING_SYSMEM)
            return (i.flags & UVM_MEM_USER_MAPPABLE) != 0;
        if (i.backing != UVM_BACKING_VIDMEM)
            return false;
        if (i.user_address != 0)
            return true;  // a later GPU joins the mapping the object has
        return address == 0 || (i.chunk_size == UVM_PAGE_SIZE_2M && (i.flags & UVM_MEM_USER_MAPPABLE));
    }
    // Map `mem` in `gpu`'s user space; where the backend cannot, check that it
    // says so and return false.
    bool map_gpu_user(uvm_mem_t *mem, uint32_t gpu, uint64_t address) {
        const bool supported = gpu_user_supported(mem, address);
        const uvm_status_t s = uvm_mem_map_gpu_user(mgr_, mem, gpu, address);
        if (supported) {
            EXPECT_EQ(s, UVM_OK) << uvm_status_string(s);
            return s == UVM_OK;
        }
        EXPECT_EQ(s, UVM_ERR_NOT_SUPPORTED) << uvm_status_string(s);
        return false;
    }

    uvm_mem_t *alloc(uvm_backing_t backing, uint64_t size, uint32_t gpu = 0, uint64_t chunk = 0,
                     uint32_t flags = 0) {
        const uvm_mem_alloc_params_t p = alloc_params(backing, size, gpu, chunk, flags);
        uvm_mem_t *mem = nullptr;
        const uvm_status_t s = uvm_mem_alloc(mgr_, &p, &mem);
        EXPECT_EQ(s, UVM_OK) << "alloc of " << size << " bytes: " << uvm_status_string(s);
        return mem;
    }
    uvm_mem_info_t info(uvm_mem_t *mem) {
        uvm_mem_info_t i;
        std::memset(&i, 0, sizeof(i));
        EXPECT_EQ(uvm_mem_info(mgr_, mem, &i), UVM_OK);
        return i;
    }
    uvm_manager_stats_t manager_stats() {
        uvm_manager_stats_t s;
        std::memset(&s, 0, sizeof(s));
        EXPECT_EQ(uvm_manager_stats(mgr_, &s), UVM_OK);
        return s;
    }
    uvm_gpu_stats_t stats(uint32_t gpu) {
        uvm_gpu_stats_t s;
        EXPECT_EQ(uvm_gpu_stats(mgr_, gpu, &s), UVM_OK);
        return s;
    }
    bool peers() {
        uvm_gpu_info_t gi;
        return gpus_ > 1 && uvm_gpu_info(mgr_, 1, &gi) == UVM_OK && (gi.peer_mask & 1u);
    }
    uint8_t *cpu(uvm_mem_t *mem) {
        void *p = nullptr;
        if (uvm_mem_cpu_kernel_address(mgr_, mem, 0, &p) == UVM_ERR_NOT_MAPPED)
            EXPECT_EQ(uvm_mem_map_cpu_kernel(mgr_, mem), UVM_OK);
        EXPECT_EQ(uvm_mem_cpu_kernel_address(mgr_, mem, 0, &p), UVM_OK);
        return static_cast<uint8_t *>(p);
    }
    // The first `size` bytes of `mem`, copied through its physical view into
    // a fresh sysmem object on GPU `gpu`'s copy engine.
    std::vector<uint8_t> read_back(uvm_mem_t *mem, uint64_t size, uint32_t gpu = 0) {
        uvm_mem_t *host = alloc(UVM_BACKING_SYSMEM, size);
        EXPECT_EQ(uvm_mem_map_gpu_phys(mgr_, host, gpu), UVM_OK);
        EXPECT_EQ(copy(gpu, host, UVM_VIEW_PHYSICAL, mem, UVM_VIEW_PHYSICAL, size), UVM_OK);
        std::vector<uint8_t> bytes(cpu(host), cpu(host) + size);
        EXPECT_EQ(uvm_mem_free(mgr_, host), UVM_OK);
        return bytes;
    }
    uvm_status_t copy(uint32_t gpu, uvm_mem_t *dst, uvm_gpu_view_t dst_view, uvm_mem_t *src,
                      uvm_gpu_view_t src_view, uint64_t size, uint64_t dst_off = 0, uint64_t src_off = 0) {
        uvm_mem_span_t d{dst, dst_off, dst_view}, s{src, src_off, src_view};
        return uvm_mem_copy(mgr_, gpu, &d, &s, size);
    }

    uvm_manager_t *mgr_ = nullptr;
    uint32_t gpus_ = 0;
    std::vector<uint64_t> free_at_start_;
#if defined(UVM_HAVE_CUDA)
    uvm::cuda::DriverAudit audit_at_baseline_;
#endif
};

}  // namespace uvm_test
