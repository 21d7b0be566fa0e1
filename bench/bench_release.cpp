// What the manager holds against what is live, as the driver counts it
// (uvm_gpu_stats: held_bytes, driver_free_bytes), in the cases where memory
// used to stay held: many objects, all but a few freed, trim; the same with
// a release threshold of 0 and no trim; a random mix of sizes at its peak.
// One line per case, in a table; the figures are the driver's (cuMemGetInfo
// on CUDA) beside the manager's own. Runs on the default backend.
//
//   bench_release [--objects N] [--keep-every K] [--mix-steps N]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "uvm/uvm.h"

namespace {

constexpr uint64_t M = 1ull << 20;

void check(uvm_status_t s, const char *what) {
    if (s != UVM_OK) {
        std::fprintf(stderr, "bench_release: %s: %s\n", what, uvm_status_string(s));
        std::exit(1);
    }
}

struct Point {
    uint64_t driver_used;  // the driver's free memory lost since the start
    uint64_t held, live;
};

struct Bench {
    uvm_manager_t *mgr = nullptr;
    uint64_t driver_free_at_start = 0;

    uvm_gpu_stats_t stats() {
        uvm_gpu_stats_t s;
        check(uvm_gpu_stats(mgr, 0, &s), "uvm_gpu_stats");
        return s;
    }
    Point point() {
        const uvm_gpu_stats_t s = stats();
        return {driver_free_at_start > s.driver_free_bytes ? driver_free_at_start - s.driver_free_bytes : 0,
                s.held_bytes, s.held_live_bytes};
    }
    uvm_mem_t *alloc(uint64_t size) {
        uvm_mem_alloc_params_t p;
        std::memset(&p, 0, sizeof(p));
        p.size = size;
        p.backing = UVM_BACKING_VIDMEM;
        uvm_mem_t *m = nullptr;
        check(uvm_mem_alloc(mgr, &p, &m), "uvm_mem_alloc");
        return m;
    }
};

double ms_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

void row(const char *name, const Point &peak, const Point &after, double grow_ms) {
    std::printf("| %s | %" PRIu64 " | %" PRIu64 " | %" PRIu64 " | %.3fx | %" PRIu64 " | %" PRIu64 " | %" PRIu64
                " | %" PRIu64 " | %.1f |\n",
                name, peak.live / M, peak.held / M, peak.driver_used / M,
                peak.live ? double(peak.driver_used) / double(peak.live) : 0.0, after.live / M, after.held / M,
                after.driver_used / M, after.driver_used > after.live ? (after.driver_used - after.live) / M : 0,
                grow_ms);
}

// Many 2 MiB objects, all but every `keep`th freed; then trim, or (threshold
// 0) nothing.
void scattered(Bench &b, size_t objects, size_t keep, bool threshold_zero) {
    check(uvm_gpu_set_release_threshold(b.mgr, 0, threshold_zero ? 0 : UINT64_MAX), "threshold");
    std::vector<uvm_mem_t *> mems;
    const auto t = std::chrono::steady_clock::now();
    for (size_t i = 0; i < objects; ++i)
        mems.push_back(b.alloc(2 * M));
    const double grow_ms = ms_since(t);
    const Point peak = b.point();
    for (size_t i = 0; i < objects; ++i)
        if (i % keep != keep - 1) {
            check(uvm_mem_free(b.mgr, mems[i]), "uvm_mem_free");
            mems[i] = nullptr;
        }
    if (!threshold_zero)
        check(uvm_gpu_trim(b.mgr, 0, nullptr), "uvm_gpu_trim");
    const Point after = b.point();
    const std::string name = std::to_string(objects) + " x 2 MiB, every " + std::to_string(keep) + "th kept, " +
                             (threshold_zero ? "release threshold 0, no trim" : "trim");
    row(name.c_str(), peak, after, grow_ms);
    for (uvm_mem_t *m : mems)
        if (m)
            check(uvm_mem_free(b.mgr, m), "uvm_mem_free");
    check(uvm_gpu_trim(b.mgr, 0, nullptr), "uvm_gpu_trim");
}

// Random sizes (log-uniform 4 KiB .. 64 MiB), a random live set of about
// `target` bytes, `steps` allocations and frees; the peak is the highest
// driver-used point against the live bytes at that point.
void mix(Bench &b, size_t steps, uint64_t target) {
    check(uvm_gpu_set_release_threshold(b.mgr, 0, UINT64_MAX), "threshold");
    std::mt19937_64 rng(42);
    std::uniform_real_distribution<double> lg(12.0, 26.0);
    std::vector<std::pair<uvm_mem_t *, uint64_t>> live;
    uint64_t live_bytes = 0, peak_live = 0;
    Point peak{0, 0, 0};
    const auto t = std::chrono::steady_clock::now();
    for (size_t i = 0; i < steps; ++i) {
        if (live_bytes < target || live.empty() || rng() % 2) {
            const uint64_t size = uint64_t(std::pow(2.0, lg(rng))) & ~uint64_t(4095);
            live.push_back({b.alloc(size), size});
            live_bytes += size;
        } else {
            const size_t k = rng() % live.size();
            check(uvm_mem_free(b.mgr, live[k].first), "uvm_mem_free");
            live_bytes -= live[k].second;
            live[k] = live.back();
            live.pop_back();
        }
        peak_live = std::max(peak_live, live_bytes);
        if (i % 64 == 0) {
            const Point p = b.point();
            if (p.driver_used > peak.driver_used)
                peak = p;
        }
    }
    const double ms = ms_since(t);
    for (auto &m : live)
        check(uvm_mem_free(b.mgr, m.first), "uvm_mem_free");
    check(uvm_gpu_trim(b.mgr, 0, nullptr), "uvm_gpu_trim");
    const Point after = b.point();
    std::printf("(mix: peak live %" PRIu64 " MiB over the run)\n", peak_live / M);
    row("random mix 4 KiB-64 MiB, all freed, trim", peak, after, ms);
}

}  // namespace

int main(int argc, char **argv) {
    size_t objects = 4096, keep = 512, steps = 20000;
    uint64_t mix_target = 8192 * M;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--objects"))
            objects = std::strtoull(argv[i + 1], nullptr, 0);
        else if (!std::strcmp(argv[i], "--keep-every"))
            keep = std::strtoull(argv[i + 1], nullptr, 0);
        else if (!std::strcmp(argv[i], "--mix-steps"))
            steps = std::strtoull(argv[i + 1], nullptr, 0);
        else if (!std::strcmp(argv[i], "--mix-mib"))
            mix_target = std::strtoull(argv[i + 1], nullptr, 0) * M;
    }
    Bench b;
    uvm_manager_params_t p;
    std::memset(&p, 0, sizeof(p));
    p.backend = UVM_BACKEND_AUTO;
    check(uvm_manager_create(&p, &b.mgr), "uvm_manager_create");
    uvm_backend_kind_t kind;
    check(uvm_manager_backend(b.mgr, &kind), "uvm_manager_backend");
    uvm_gpu_info_t gi;
    check(uvm_gpu_info(b.mgr, 0, &gi), "uvm_gpu_info");
    b.driver_free_at_start = b.stats().driver_free_bytes;
    std::printf("backend %s, GPU 0: %s, %" PRIu64 " MiB\n\n", kind == UVM_BACKEND_CUDA ? "cuda" : "sim", gi.name,
                gi.memory_total / M);
    std::printf("| case | peak live MiB | peak held MiB | peak driver-used MiB | driver-used / live | "
                "after: live MiB | held MiB | driver-used MiB | beyond live MiB | ms |\n");
    std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    scattered(b, objects, keep, false);
    scattered(b, objects, keep, true);
    mix(b, steps, mix_target);
    check(uvm_manager_destroy(b.mgr), "uvm_manager_destroy");
    return 0;
}
