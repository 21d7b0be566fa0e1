// Sleep and wake of a client (uvm_client_sleep / uvm_client_wake) against
// the copy engine's own rates measured in the same run: a sleepable client
// holds --gib GiB of "weights" in objects of --object-mib MiB (or
// --object-kib KiB); each round puts it to sleep (every byte kept) and
// wakes it. For each: the seconds, the rate, the rate against a plain
// 64 MiB copy between vidmem and pinned host memory (uvm_mem_copy, the same
// path: D2H for sleep, H2D for wake), how much the driver's free memory rose
// against the client's bytes, the host memory the client's backup holds
// after the wake and the process's resident memory then. The first round
// pays for making the backup ready (allocating and pinning it) unless a
// reserve was made ready ahead (--reserve-gib, timed on its own line);
// with --host keep (the default) later rounds find it ready, with --host
// release each round pays again and the resident memory falls back at each
// wake. --pin-threads sets the threads that pin (0: the library's default).
// Every object's first and last words are checked after each wake.
// --interleave-mib N allocates N MiB for another client after each of the
// client's objects, as a training step's activations grow beside its
// weights, so that the client's memory is not one run of the GPU's. Runs on
// the default backend.
//
//   bench_sleep [--gib G] [--object-mib M | --object-kib K] [--rounds R] [--interleave-mib N]
//               [--host keep|release] [--reserve-gib G] [--pin-threads N]
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>


#include "common/resident_memory.h"
#include "uvm/uvm.h"

namespace {

constexpr uint64_t M = 1ull << 20;

void check(uvm_status_t s, const char *what) {
    if (s != UVM_OK) {
        std::fprintf(stderr, "bench_sleep: %s: %s\n", what, uvm_status_string(s));
        std::exit(1);
    }
}

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

uint64_t resident_mib() { return uvm::resident_bytes() / M; }

uvm_gpu_stats_t stats(uvm_manager_t *mgr) {
    uvm_gpu_stats_t s;
    check(uvm_gpu_stats(mgr, 0, &s), "uvm_gpu_stats");
    return s;
}

uvm_mem_t *alloc(uvm_manager_t *mgr, uvm_backing_t backing, uint64_t size, uvm_client_t *client) {
    uvm_mem_alloc_params_t p;
    std::memset(&p, 0, sizeof(p));
    p.size = size;
    p.backing = backing;
    p.client = client;
    uvm_mem_t *m = nullptr;
    check(uvm_mem_alloc(mgr, &p, &m), "uvm_mem_alloc");
    return m;
}

// Seconds of one copy of `bytes` between `vid` and pinned host memory
// `host` (to host: `out`), the best of three.
double copy_seconds(uvm_manager_t *mgr, uvm_mem_t *vid, uvm_mem_t *host, uint64_t bytes, bool out) {
    uvm_mem_span_t v{vid, 0, UVM_VIEW_PHYSICAL}, h{host, 0, UVM_VIEW_PHYSICAL};
    double best = 1e9;
    for (int i = 0; i < 3; ++i) {
        const double t = now_s();
        check(out ? uvm_mem_copy(mgr, 0, &h, &v, bytes) : uvm_mem_copy(mgr, 0, &v, &h, bytes), "uvm_mem_copy");
        best = std::min(best, now_s() - t);
    }
    return best;
}

}  // namespace

int main(int argc, char **argv) {
    double gib = 0, reserve_gib = 0;
    uint64_t object_kib = 64 * 1024, rounds = 3, interleave_mib = 0, pin_threads = 0;
    uvm_sleep_host_t host_policy = UVM_SLEEP_HOST_KEEP;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--host")) {
            if (std::strcmp(argv[i + 1], "keep") && std::strcmp(argv[i + 1], "release")) {
                std::fprintf(stderr, "bench_sleep: --host is keep or release, not '%s'\n", argv[i + 1]);
                return 2;
            }
            host_policy = std::strcmp(argv[i + 1], "release") ? UVM_SLEEP_HOST_KEEP : UVM_SLEEP_HOST_RELEASE;
        } else if (!std::strcmp(argv[i], "--reserve-gib")) {
            reserve_gib = std::strtod(argv[i + 1], nullptr);
        } else if (!std::strcmp(argv[i], "--pin-threads")) {
            pin_threads = std::strtoull(argv[i + 1], nullptr, 0);
        }
        if (!std::strcmp(argv[i], "--gib"))
            gib = std::strtod(argv[i + 1], nullptr);
        else if (!std::strcmp(argv[i], "--object-mib"))
            object_kib = std::strtoull(argv[i + 1], nullptr, 0) * 1024;
        else if (!std::strcmp(argv[i], "--object-kib"))
            object_kib = std::strtoull(argv[i + 1], nullptr, 0);
        else if (!std::strcmp(argv[i], "--rounds"))
            rounds = std::strtoull(argv[i + 1], nullptr, 0);
        else if (!std::strcmp(argv[i], "--interleave-mib"))
            interleave_mib = std::strtoull(argv[i + 1], nullptr, 0);
    }
    uvm_manager_params_t p;
    std::memset(&p, 0, sizeof(p));
    p.backend = UVM_BACKEND_AUTO;
    uvm_manager_t *mgr = nullptr;
    check(uvm_manager_create(&p, &mgr), "uvm_manager_create");
    uvm_backend_kind_t kind;
    check(uvm_manager_backend(mgr, &kind), "uvm_manager_backend");
    uvm_gpu_info_t gi;
    check(uvm_gpu_info(mgr, 0, &gi), "uvm_gpu_info");
    if (gib <= 0)
        gib = kind == UVM_BACKEND_CUDA ? 10 : 1;
    const uint64_t object = object_kib * 1024;
    const size_t count = static_cast<size_t>(gib * 1024 * 1024 / static_cast<double>(object_kib));
    const uint64_t bytes = count * object;
    std::printf("backend %s, GPU 0: %s, %" PRIu64 " MiB; a sleepable client of %zu x %" PRIu64
                " KiB = %.2f GiB, %" PRIu64 " MiB of another client's after each\n\n",
                kind == UVM_BACKEND_CUDA ? "cuda" : "sim", gi.name, gi.memory_total / M, count, object_kib,
                static_cast<double>(bytes) / (1ull << 30), interleave_mib);

    // The copy engine's own rates, 64 MiB at a time (its full speed, whatever
    // the objects' size), pinned host memory.
    const uint64_t probe_size = 64 * M;
    uvm_mem_t *probe = alloc(mgr, UVM_BACKING_VIDMEM, probe_size, nullptr);
    uvm_mem_t *host = alloc(mgr, UVM_BACKING_SYSMEM, probe_size, nullptr);
    check(uvm_mem_map_gpu_phys(mgr, host, 0), "uvm_mem_map_gpu_phys");
    const double d2h = static_cast<double>(probe_size) / copy_seconds(mgr, probe, host, probe_size, true) / 1e9;
    const double h2d = static_cast<double>(probe_size) / copy_seconds(mgr, probe, host, probe_size, false) / 1e9;
    check(uvm_mem_free(mgr, probe), "uvm_mem_free");
    check(uvm_mem_free(mgr, host), "uvm_mem_free");
    std::printf("copy engine, 64 MiB to pinned host: %.2f GB/s; from it: %.2f GB/s\n\n", d2h, h2d);

    uvm_client_t *client = nullptr;
    check(uvm_client_create_sleepable(mgr, "weights", &client), "uvm_client_create_sleepable");
    // The backup's policy, and its reserve made ready ahead (timed: what a
    // runtime pays once, when it makes the client, instead of at the sleep).
    uvm_sleep_policy_t policy;
    std::memset(&policy, 0, sizeof(policy));
    policy.host = host_policy;
    policy.host_reserve = static_cast<uint64_t>(reserve_gib * (1ull << 30));
    policy.pin_threads = static_cast<uint32_t>(pin_threads);
    const uint64_t rss_start = resident_mib();
    const double reserve_t = now_s();
    check(uvm_client_set_sleep_policy(mgr, client, &policy), "uvm_client_set_sleep_policy");
    const double reserve_s = now_s() - reserve_t;
    std::printf("host policy %s, reserve %.2f GiB made ready in %.3f s (%.2f GB/s), pin threads %" PRIu64
                " (0: the default); resident %" PRIu64 " MiB before it, %" PRIu64 " MiB after\n\n",
                host_policy == UVM_SLEEP_HOST_RELEASE ? "release" : "keep", reserve_gib, reserve_s,
                reserve_s > 0 ? static_cast<double>(policy.host_reserve) / reserve_s / 1e9 : 0.0, pin_threads,
                rss_start, resident_mib());
    std::vector<uvm_mem_t *> weights, others;
    for (size_t i = 0; i < count; ++i) {
        weights.push_back(alloc(mgr, UVM_BACKING_VIDMEM, object, client));
        if (interleave_mib)
            others.push_back(alloc(mgr, UVM_BACKING_VIDMEM, interleave_mib * M, nullptr));
        uvm_mem_span_t d{weights.back(), 0, UVM_VIEW_PHYSICAL};
        check(uvm_mem_memset(mgr, 0, &d, static_cast<uint8_t>(i * 7 + 1), object), "uvm_mem_memset");
    }
    // Words read back through a small pinned buffer.
    uvm_mem_t *peek = alloc(mgr, UVM_BACKING_SYSMEM, 4096, nullptr);
    check(uvm_mem_map_gpu_phys(mgr, peek, 0), "uvm_mem_map_gpu_phys");
    check(uvm_mem_map_cpu_kernel(mgr, peek), "uvm_mem_map_cpu_kernel");
    void *peek_cpu = nullptr;
    check(uvm_mem_cpu_kernel_address(mgr, peek, 0, &peek_cpu), "uvm_mem_cpu_kernel_address");
    auto wrong_words = [&] {
        uint64_t wrong = 0;
        for (size_t i = 0; i < count; ++i)
            for (uint64_t at : {uint64_t{0}, object - 4096}) {
                uvm_mem_span_t d{peek, 0, UVM_VIEW_PHYSICAL}, s{weights[i], at, UVM_VIEW_PHYSICAL};
                check(uvm_mem_copy(mgr, 0, &d, &s, 4096), "uvm_mem_copy");
                const uint8_t want = static_cast<uint8_t>(i * 7 + 1);
                for (uint64_t b = 0; b < 4096; ++b)
                    wrong += static_cast<const uint8_t *>(peek_cpu)[b] != want;
            }
        return wrong;
    };

    std::printf("| round | sleep s | sleep GB/s | vs D2H copy | driver free rise / client bytes | wake s | "
                "wake GB/s | vs H2D copy | wrong bytes | backup MiB after wake | resident MiB before sleep / "
                "after wake |\n");
    std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    uint64_t total_wrong = 0;
    for (uint64_t r = 1; r <= rounds; ++r) {
        const uint64_t free_before = stats(mgr).driver_free_bytes;
        const uint64_t rss_before = resident_mib();
        double t = now_s();
        check(uvm_client_sleep(mgr, client, nullptr), "uvm_client_sleep");
        const double sleep_s = now_s() - t;
        const uint64_t free_asleep = stats(mgr).driver_free_bytes;
        t = now_s();
        check(uvm_client_wake(mgr, client), "uvm_client_wake");
        const double wake_s = now_s() - t;
        const uint64_t rss_after = resident_mib();
        uvm_client_info_t ci;
        check(uvm_client_info(mgr, client, &ci), "uvm_client_info");
        const uint64_t wrong = wrong_words();
        total_wrong += wrong;
        const double rise = free_asleep > free_before ? static_cast<double>(free_asleep - free_before) : 0.0;
        std::printf("| %" PRIu64 " | %.3f | %.2f | %.2f | %.4f | %.3f | %.2f | %.2f | %" PRIu64 " | %" PRIu64
                    " | %" PRIu64 " / %" PRIu64 " |\n",
                    r, sleep_s, static_cast<double>(bytes) / sleep_s / 1e9,
                    static_cast<double>(bytes) / sleep_s / 1e9 / d2h, rise / static_cast<double>(bytes), wake_s,
                    static_cast<double>(bytes) / wake_s / 1e9, static_cast<double>(bytes) / wake_s / 1e9 / h2d, wrong,
                    ci.sleep_host_held / M, rss_before, rss_after);
    }
    for (uvm_mem_t *m : weights)
        check(uvm_mem_free(mgr, m), "uvm_mem_free");
    for (uvm_mem_t *m : others)
        check(uvm_mem_free(mgr, m), "uvm_mem_free");
    check(uvm_mem_free(mgr, peek), "uvm_mem_free");
    check(uvm_client_destroy(mgr, client), "uvm_client_destroy");
    check(uvm_manager_destroy(mgr), "uvm_manager_destroy");
    return total_wrong ? 1 : 0;
}
