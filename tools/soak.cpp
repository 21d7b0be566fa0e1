// uvm-soak: a long random workload with data checks, for the reliability
// runs (docs/reliability.md). N threads (16 by default) allocate objects of
// every backing and many sizes on every GPU, fill them with a pattern on the
// copy engine (synchronously and on their own streams), map them on peers and
// copy through the peer mappings, evict and restore evictable ones, and read
// every byte back through a CPU-mapped staging object before freeing it. A few
// shared objects are read by every thread throughout. At the end everything
// is freed, the manager destroyed, and what the driver still holds is
// compared with what it held before: handles, reservations, mappings,
// registrations, allocations, streams and events made and released (CUDA),
// and each GPU's free memory.
//
// Usage: uvm-soak [--seconds N] [--threads N] [--backend auto|sim|cuda]
//                 [--max-object-mib N] [--budget-mib N] [--json FILE]
// Every object belongs to one client whose vidmem budget per GPU is
// --budget-mib (512 by default): allocations over it evict the client's own
// evictable objects, so the eviction paths run without filling the GPU.
// Exit 0 only when every check held.
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "uvm/uvm.h"
#if defined(UVM_HAVE_CUDA)
#include "cuda/driver_api.h"
#endif

namespace {

constexpr uint64_t K = 1024, M = 1024 * 1024;

struct Options {
    double seconds = 10;
    unsigned threads = 16;
    uvm_backend_kind_t backend = UVM_BACKEND_AUTO;
    uint64_t max_object = 64 * M;
    uint64_t budget = 512 * M;  // the soak client's vidmem budget per GPU: pressure without filling the GPU
    const char *json = nullptr;
};

struct Counters {
    std::atomic<uint64_t> allocs{0}, frees{0}, out_of_memory{0}, fills{0}, async_fills{0}, peer_copies{0},
        evictions{0}, restores{0}, verified_bytes{0}, shared_reads{0}, mismatches{0}, failures{0};
};

std::mutex g_report_lock;

// The failed call was the thread's last: its message says why.
void report_failure(Counters &c, const char *what) {
    if (c.failures++ >= 20)
        return;  // the first ones say enough
    std::lock_guard<std::mutex> guard(g_report_lock);
    std::fprintf(stderr, "uvm-soak: %s failed: %s\n", what, uvm_last_error_message());
}

uint8_t pattern_byte(uint32_t seed, uint64_t i) { return static_cast<uint8_t>((i * 2654435761u >> 13) ^ seed); }

class Worker {
public:
    Worker(uvm_manager_t *mgr, uvm_client_t *client, uint32_t gpus, const Options &o, Counters &c, unsigned id,
           const std::vector<std::pair<uvm_mem_t *, uint32_t>> &shared)
        : mgr_(mgr), client_(client), gpus_(gpus), opt_(o), c_(c), rng_(0x5eed0000u + id), id_(id),
          shared_(shared) {}

    void run(std::chrono::steady_clock::time_point end) {
        // A CPU-mapped staging object to write patterns from and read back into.
        if (!make_staging())
            return;
        if (uvm_stream_create(mgr_, id_ % gpus_, nullptr, &stream_) != UVM_OK)
            stream_ = nullptr;
        while (std::chrono::steady_clock::now() < end) {
            const uint32_t op = rng_() % 100;
            if (op < 40 || live_.empty())
                alloc_and_fill();
            else if (op < 55)
                verify_and_free(pick());
            else if (op < 65)
                peer_read(pick());
            else if (op < 75)
                evict_and_restore(pick());
            else if (op < 85)
                read_shared();
            else
                verify(pick());
            if (live_.size() > 12)
                verify_and_free(0);
        }
        while (!live_.empty())
            verify_and_free(0);
        if (stream_)
            check(uvm_stream_destroy(mgr_, stream_), "stream_destroy");
        check(uvm_mem_free(mgr_, staging_), "free staging");
    }

private:
    struct Obj {
        uvm_mem_t *mem;
        uint64_t size;
        uint32_t gpu;
        uint32_t seed;
        bool vidmem;
        bool evictable;
    };

    bool check(uvm_status_t s, const char *what) {
        if (s != UVM_OK)
            report_failure(c_, what);
        return s == UVM_OK;
    }

    bool make_staging() {
        uvm_mem_alloc_params_t a;
        std::memset(&a, 0, sizeof(a));
        a.backing = UVM_BACKING_SYSMEM;
        a.size = opt_.max_object;
        if (!check(uvm_mem_alloc(mgr_, &a, &staging_), "alloc staging"))
            return false;
        void *p = nullptr;
        if (!check(uvm_mem_map_cpu_kernel(mgr_, staging_), "map staging") ||
            !check(uvm_mem_cpu_kernel_address(mgr_, staging_, 0, &p), "staging address"))
            return false;
        cpu_ = static_cast<uint8_t *>(p);
        for (uint32_t g = 0; g < gpus_; ++g)
            check(uvm_mem_map_gpu_phys(mgr_, staging_, g), "map staging on GPU");
        return true;
    }

    size_t pick() { return rng_() % live_.size(); }

    uint64_t random_size() {
        static const uint64_t sizes[] = {4 * K, 12 * K, 64 * K, 200 * K, 1 * M, 2 * M, 3 * M + 4 * K, 8 * M};
        uint64_t s = sizes[rng_() % (sizeof(sizes) / sizeof(sizes[0]))];
        if (rng_() % 16 == 0)
            s = opt_.max_object;
        return std::min(s, opt_.max_object);
    }

    // Copy size bytes from staging to the object (or back), on `gpu`.
    uvm_status_t move(const Obj &o, uint32_t gpu, bool to_object, bool async) {
        uvm_mem_span_t obj{o.mem, 0, UVM_VIEW_PHYSICAL}, stage{staging_, 0, UVM_VIEW_PHYSICAL};
        if (!async || !stream_ || gpu != id_ % gpus_)
            return to_object ? uvm_mem_copy(mgr_, gpu, &obj, &stage, o.size)
                             : uvm_mem_copy(mgr_, gpu, &stage, &obj, o.size);
        uvm_status_t s = to_object ? uvm_mem_copy_async(mgr_, gpu, &obj, &stage, o.size, stream_)
                                   : uvm_mem_copy_async(mgr_, gpu, &stage, &obj, o.size, stream_);
        if (s == UVM_OK)
            s = uvm_stream_synchronize(mgr_, stream_);
        return s;
    }

    void alloc_and_fill() {
        Obj o;
        uvm_mem_alloc_params_t a;
        std::memset(&a, 0, sizeof(a));
        o.vidmem = rng_() % 4 != 0;
        a.backing = o.vidmem ? UVM_BACKING_VIDMEM : UVM_BACKING_SYSMEM;
        o.gpu = rng_() % gpus_;
        a.gpu = o.gpu;
        a.size = o.size = random_size();
        o.evictable = o.vidmem && rng_() % 2;
        a.flags = (o.evictable ? UVM_MEM_EVICTABLE : 0) | (rng_() % 3 == 0 ? UVM_MEM_GPU_MAPPED : 0);
        a.client = client_;
        const uvm_status_t s = uvm_mem_alloc(mgr_, &a, &o.mem);
        if (s == UVM_ERR_OUT_OF_MEMORY) {
            c_.out_of_memory++;  // a full GPU is part of the workload: eviction is tried first
            return;
        }
        if (!check(s, "alloc"))
            return;
        c_.allocs++;
        o.seed = static_cast<uint32_t>(rng_());
        uvm_status_t mapped = o.vidmem ? UVM_OK : uvm_mem_map_gpu_phys(mgr_, o.mem, o.gpu);
        if (mapped == UVM_ERR_ALREADY_MAPPED)
            mapped = UVM_OK;  // allocated GPU-mapped: the kernel mapping made it
        if (!check(mapped, "map sysmem on its GPU")) {
            check(uvm_mem_free(mgr_, o.mem), "free");
            return;
        }
        for (uint64_t i = 0; i < o.size; ++i)
            cpu_[i] = pattern_byte(o.seed, i);
        const bool async = rng_() % 2;
        const uvm_status_t filled = move(o, o.gpu, true, async);
        if (filled == UVM_ERR_OUT_OF_MEMORY) {
            c_.out_of_memory++;  // evicted by another thread's allocation, and no room to come back now
            check(uvm_mem_free(mgr_, o.mem), "free");
            return;
        }
        if (!check(filled, "fill")) {
            check(uvm_mem_free(mgr_, o.mem), "free");
            return;
        }
        (async ? c_.async_fills : c_.fills)++;
        live_.push_back(o);
    }

    // Read the object back into staging (on `gpu`) and compare every byte.
    bool verify_on(const Obj &o, uint32_t gpu) {
        std::memset(cpu_, 0, o.size);
        const uvm_status_t s = move(o, gpu, false, rng_() % 2);
        if (s == UVM_ERR_OUT_OF_MEMORY) {
            c_.out_of_memory++;  // evicted, and no room to come back now
            return true;
        }
        if (!check(s, "read back"))
            return false;
        for (uint64_t i = 0; i < o.size; ++i) {
            if (cpu_[i] != pattern_byte(o.seed, i)) {
                c_.mismatches++;
                std::lock_guard<std::mutex> guard(g_report_lock);
                std::fprintf(stderr, "uvm-soak: thread %u: byte %" PRIu64 " of a %" PRIu64 "-byte %s object "
                             "on GPU %u reads %u, wrote %u\n", id_, i, o.size, o.vidmem ? "vidmem" : "sysmem",
                             o.gpu, cpu_[i], pattern_byte(o.seed, i));
                return false;
            }
        }
        c_.verified_bytes += o.size;
        return true;
    }

    void verify(size_t i) { verify_on(live_[i], live_[i].gpu); }

    void verify_and_free(size_t i) {
        verify(i);
        check(uvm_mem_free(mgr_, live_[i].mem), "free");
        c_.frees++;
        live_.erase(live_.begin() + static_cast<long>(i));
    }

    // Through a peer: map the object's vidmem on another GPU and copy there.
    void peer_read(size_t i) {
        const Obj &o = live_[i];
        if (gpus_ < 2 || !o.vidmem)
            return;
        const uint32_t peer = (o.gpu + 1) % gpus_;
        uvm_gpu_info_t gi;
        if (uvm_gpu_info(mgr_, peer, &gi) != UVM_OK || !((gi.peer_mask >> o.gpu) & 1u))
            return;
        uvm_status_t s = uvm_mem_map_gpu_phys(mgr_, o.mem, peer);
        if (s == UVM_ERR_OUT_OF_MEMORY) {
            c_.out_of_memory++;
            return;
        }
        if (!check(s, "map on peer"))
            return;
        if (verify_on(o, peer))
            c_.peer_copies++;
        check(uvm_mem_unmap_gpu_phys(mgr_, o.mem, peer), "unmap on peer");
    }

    void evict_and_restore(size_t i) {
        const Obj &o = live_[i];
        if (!o.evictable)
            return;
        uvm_status_t s = uvm_mem_evict(mgr_, o.mem);
        if (s == UVM_ERR_OUT_OF_MEMORY || s == UVM_ERR_NO_HOST_MEMORY) {
            c_.out_of_memory++;
            return;
        }
        if (!check(s, "evict"))
            return;
        c_.evictions++;
        if (rng_() % 2) {
            s = uvm_mem_make_resident(mgr_, o.mem);
            if (s == UVM_ERR_OUT_OF_MEMORY)
                c_.out_of_memory++;
            else if (check(s, "make_resident"))
                c_.restores++;
        }
    }

    // The shared objects hold pattern_byte(index, i) for ever: any thread reads them.
    void read_shared() {
        if (shared_.empty())
            return;
        const size_t k = rng_() % shared_.size();
        Obj o{shared_[k].first, 1 * M, shared_[k].second, static_cast<uint32_t>(k + 1), true, false};
        const uint32_t on = rng_() % gpus_;
        if (on != o.gpu) {
            uvm_gpu_info_t gi;
            if (uvm_gpu_info(mgr_, on, &gi) != UVM_OK || !((gi.peer_mask >> o.gpu) & 1u))
                return;
        }
        if (verify_on(o, on))
            c_.shared_reads++;
    }

    uvm_manager_t *mgr_;
    uvm_client_t *client_;
    uint32_t gpus_;
    const Options &opt_;
    Counters &c_;
    std::mt19937_64 rng_;
    unsigned id_;
    const std::vector<std::pair<uvm_mem_t *, uint32_t>> &shared_;
    uvm_mem_t *staging_ = nullptr;
    uint8_t *cpu_ = nullptr;
    uvm_stream_t *stream_ = nullptr;
    std::vector<Obj> live_;
};

// Each GPU's free memory, through a manager of its own (made and destroyed).
std::vector<uint64_t> gpu_free(uvm_backend_kind_t backend) {
    std::vector<uint64_t> out;
    uvm_manager_params_t p;
    std::memset(&p, 0, sizeof(p));
    p.backend = backend;
    uvm_manager_t *m = nullptr;
    if (uvm_manager_create(&p, &m) != UVM_OK)
        return out;
    uint32_t n = 0;
    uvm_gpu_count(m, &n);
    for (uint32_t g = 0; g < n; ++g) {
        uvm_gpu_info_t gi;
        out.push_back(uvm_gpu_info(m, g, &gi) == UVM_OK ? gi.memory_free : 0);
    }
    uvm_manager_destroy(m);
    return out;
}

bool parse(int argc, char **argv, Options *o) {
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : nullptr;
        if (a == "--seconds" && v)
            o->seconds = std::atof(argv[++i]);
        else if (a == "--threads" && v)
            o->threads = static_cast<unsigned>(std::atoi(argv[++i]));
        else if (a == "--max-object-mib" && v)
            o->max_object = std::strtoull(argv[++i], nullptr, 10) * M;
        else if (a == "--budget-mib" && v)
            o->budget = std::strtoull(argv[++i], nullptr, 10) * M;
        else if (a == "--json" && v)
            o->json = argv[++i];
        else if (a == "--backend" && v) {
            const std::string b = argv[++i];
            o->backend = b == "sim" ? UVM_BACKEND_SIM : b == "cuda" ? UVM_BACKEND_CUDA : UVM_BACKEND_AUTO;
        } else {
            std::fprintf(stderr, "usage: uvm-soak [--seconds N] [--threads N] [--backend auto|sim|cuda] "
                                 "[--max-object-mib N] [--budget-mib N] [--json FILE]\n");
            return false;
        }
    }
    return o->threads > 0 && o->seconds > 0 && o->max_object >= 64 * K;
}

}  // namespace

int main(int argc, char **argv) {
    Options opt;
    if (!parse(argc, argv, &opt))
        return 2;
    uvm_manager_params_t p;
    std::memset(&p, 0, sizeof(p));
    p.backend = opt.backend;
    p.sim.gpu_count = 2;
    p.sim.vidmem_size = 512 * M;  // small enough that eviction runs
#if defined(UVM_HAVE_CUDA)
    const uvm::cuda::DriverAudit audit_start = uvm::cuda::driver_audit();
#endif
    const std::vector<uint64_t> free_start = gpu_free(opt.backend);
    uvm_manager_t *mgr = nullptr;
    uvm_status_t s = uvm_manager_create(&p, &mgr);
    if (s != UVM_OK) {
        std::fprintf(stderr, "uvm-soak: no manager: %s\n", uvm_last_error_message());
        return 1;
    }
    uvm_backend_kind_t kind;
    uvm_manager_backend(mgr, &kind);
    uint32_t gpus = 0;
    uvm_gpu_count(mgr, &gpus);
    uvm_gpu_info_t g0;
    uvm_gpu_info(mgr, 0, &g0);

    Counters c;
    uvm_client_t *client = nullptr;
    s = uvm_client_create(mgr, "soak", &client);
    for (uint32_t g = 0; g < gpus && s == UVM_OK; ++g)
        s = uvm_client_set_budget(mgr, client, g, opt.budget);
    if (s != UVM_OK) {
        std::fprintf(stderr, "uvm-soak: no client: %s\n", uvm_last_error_message());
        return 1;
    }
    // Shared objects: 1 MiB of pattern k+1 on each GPU, read by everyone.
    std::vector<std::pair<uvm_mem_t *, uint32_t>> shared;
    {
        uvm_mem_t *stage = nullptr;
        uvm_mem_alloc_params_t a;
        std::memset(&a, 0, sizeof(a));
        a.size = 1 * M;
        void *cpu = nullptr;
        if (uvm_mem_alloc(mgr, &a, &stage) != UVM_OK || uvm_mem_map_cpu_kernel(mgr, stage) != UVM_OK ||
            uvm_mem_cpu_kernel_address(mgr, stage, 0, &cpu) != UVM_OK) {
            std::fprintf(stderr, "uvm-soak: no staging for the shared objects\n");
            return 1;
        }
        for (uint32_t g = 0; g < gpus; ++g)
            uvm_mem_map_gpu_phys(mgr, stage, g);
        for (uint32_t k = 0; k < 2 * gpus; ++k) {
            const uint32_t gpu = k % gpus;
            uvm_mem_t *m = nullptr;
            a.backing = UVM_BACKING_VIDMEM;
            a.gpu = gpu;
            for (uint64_t i = 0; i < 1 * M; ++i)
                static_cast<uint8_t *>(cpu)[i] = pattern_byte(k + 1, i);
            uvm_mem_span_t d{nullptr, 0, UVM_VIEW_PHYSICAL}, src{stage, 0, UVM_VIEW_PHYSICAL};
            s = uvm_mem_alloc(mgr, &a, &m);
            d.mem = m;
            if (s == UVM_OK)
                s = uvm_mem_copy(mgr, gpu, &d, &src, 1 * M);
            // Every peer reads it through a physical mapping of its own.
            for (uint32_t g = 0; g < gpus && s == UVM_OK; ++g) {
                uvm_gpu_info_t gi;
                if (g != gpu && uvm_gpu_info(mgr, g, &gi) == UVM_OK && ((gi.peer_mask >> gpu) & 1u))
                    s = uvm_mem_map_gpu_phys(mgr, m, g);
            }
            if (s != UVM_OK) {
                std::fprintf(stderr, "uvm-soak: shared object %u: %s\n", k, uvm_last_error_message());
                return 1;
            }
            shared.push_back({m, gpu});
        }
        uvm_mem_free(mgr, stage);
    }

    const auto t0 = std::chrono::steady_clock::now();
    const auto end = t0 + std::chrono::milliseconds(static_cast<int64_t>(opt.seconds * 1000));
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < opt.threads; ++t)
        threads.emplace_back([&, t] { Worker(mgr, client, gpus, opt, c, t, shared).run(end); });
    for (auto &t : threads)
        t.join();
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    uvm_gpu_stats_t gs0;
    uvm_gpu_stats(mgr, 0, &gs0);
    for (auto &sh : shared)
        if (uvm_mem_free(mgr, sh.first) != UVM_OK)
            c.failures++;
    if (uvm_client_destroy(mgr, client) != UVM_OK)
        c.failures++;
    uvm_manager_stats_t ms;
    uvm_manager_stats(mgr, &ms);
    const uint64_t objects_left = ms.objects;
    s = uvm_manager_destroy(mgr);
    const bool destroyed = s == UVM_OK;

    // What is left behind once the manager is gone.
    const std::vector<uint64_t> free_end = gpu_free(opt.backend);
    bool leak = !destroyed || objects_left != 0;
    std::string driver = "null";
#if defined(UVM_HAVE_CUDA)
    if (kind == UVM_BACKEND_CUDA) {
        const uvm::cuda::DriverAudit a = uvm::cuda::driver_audit();
        leak |= !a.balanced_with(audit_start);
        char buf[256];
        std::snprintf(buf, sizeof(buf),
                      "{\"handles\": %" PRId64 ", \"reservations\": %" PRId64 ", \"mappings\": %" PRId64
                      ", \"registrations\": %" PRId64 ", \"allocations\": %" PRId64 ", \"streams\": %" PRId64
                      ", \"events\": %" PRId64 "}",
                      a.handles - audit_start.handles, a.reservations - audit_start.reservations,
                      a.mappings - audit_start.mappings, a.registrations - audit_start.registrations,
                      a.allocations - audit_start.allocations, a.streams - audit_start.streams,
                      a.events - audit_start.events);
        driver = buf;
    }
#endif
    // The driver keeps a little per context for the stream machinery it set
    // up (2 MiB measured on an H100): more than that not given back is a leak.
    std::string free_delta = "[";
    for (size_t g = 0; g < free_start.size() && g < free_end.size(); ++g) {
        const int64_t d = static_cast<int64_t>(free_start[g]) - static_cast<int64_t>(free_end[g]);
        if (kind == UVM_BACKEND_CUDA && d > static_cast<int64_t>(4 * M))
            leak = true;
        free_delta += (g ? ", " : "") + std::to_string(d);
    }
    free_delta += "]";
    const bool ok = c.mismatches == 0 && c.failures == 0 && !leak;

    char summary[2048];
    std::snprintf(
        summary, sizeof(summary),
        "{\n  \"backend\": \"%s\", \"gpu\": \"%s\", \"gpus\": %u, \"threads\": %u, \"seconds\": %.1f,\n"
        "  \"allocs\": %" PRIu64 ", \"frees\": %" PRIu64 ", \"out_of_memory\": %" PRIu64 ", \"fills\": %" PRIu64
        ", \"async_fills\": %" PRIu64 ",\n  \"peer_copies\": %" PRIu64 ", \"evictions\": %" PRIu64
        ", \"restores\": %" PRIu64 ", \"manager_evictions_gpu0\": %" PRIu64 ", \"shared_reads\": %" PRIu64
        ",\n  \"verified_bytes\": %" PRIu64 ", \"mismatches\": %" PRIu64 ", \"failures\": %" PRIu64
        ",\n  \"objects_left\": %" PRIu64 ", \"destroy\": \"%s\", \"driver_objects_left\": %s,\n"
        "  \"gpu_free_bytes_lost\": %s,\n  \"result\": \"%s\"\n}\n",
        kind == UVM_BACKEND_CUDA ? "cuda" : "sim", g0.name, gpus, opt.threads, elapsed, c.allocs.load(),
        c.frees.load(), c.out_of_memory.load(), c.fills.load(), c.async_fills.load(), c.peer_copies.load(),
        c.evictions.load(), c.restores.load(), gs0.evictions, c.shared_reads.load(), c.verified_bytes.load(),
        c.mismatches.load(), c.failures.load(), objects_left, uvm_status_string(s), driver.c_str(),
        free_delta.c_str(), ok ? "pass" : "FAIL");
    std::fputs(summary, stdout);
    if (opt.json) {
        if (FILE *f = std::fopen(opt.json, "w")) {
            std::fputs(summary, f);
            std::fclose(f);
        }
    }
    return ok ? 0 : 1;
}
