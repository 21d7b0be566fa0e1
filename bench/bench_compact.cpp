// A fragmenting workload, and what compaction (uvm_gpu_compact) does to it:
// steps of many tensors whose sizes change from step to step (as a runtime's
// activations do with its batch shapes), a few of each step long-lived and
// left scattered among the rest, as the pool of pytorch#159674 grew from
// 9.2 to 14.4 GiB while its live tensors grew from 9.1 to 9.6 GiB. Runs the
// same seeded workload without compaction and with a compaction (releasing
// the roots it empties) every N steps, and prints, for each, what the
// manager held from the driver against what was live (uvm_gpu_stats), at
// the peak and at the end, the requests that found no memory, and what the
// compactions cost. Objects are plain vidmem (no mapping), so on CUDA they
// move too; the copies run on the copy engine.
//
// --chunk-kib forces every object's chunk size (4, 64 or 2048; 0: adaptive),
// --max-mib caps the tensors' sizes (the page-size lab's exercise 8).
//
//   bench_compact [--steps N] [--every N] [--gpu-mib N (sim)] [--fill PERCENT] [--seed N]
//                 [--chunk-kib N] [--max-mib N] [--only plain|trim|compact]
//
// --only runs that one alone (to profile it, e.g. under UVM_DRIVER_PROFILE).
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "uvm/uvm.h"

namespace {

constexpr uint64_t K = 1ull << 10, M = 1ull << 20;

void check(uvm_status_t s, const char *what) {
    if (s != UVM_OK) {
        std::fprintf(stderr, "bench_compact: %s: %s\n", what, uvm_status_string(s));
        std::exit(1);
    }
}

struct Options {
    int steps = 60;
    int every = 5;  // compact every N steps (the "with" run)
    uint64_t gpu_mib = 2048;
    int fill = 60;  // peak live, in percent of the GPU's memory
    uint32_t seed = 1;
    uint64_t chunk_kib = 0;
    uint64_t max_mib = 16;
    bool verbose = false;  // --only: each compaction's result too
};

enum class Mode { Plain, Trim, Compact };
const char *const kModeNames[] = {"plain", "trim", "compact"};

struct Outcome {
    uint64_t peak_live = 0, peak_held = 0;
    double end_ratio_sum = 0, end_ratio_max = 0;  // held / live after each step's frees (and trim or compaction)
    double alloc_ratio_sum = 0;  // held / the live objects' chunks (held_live_bytes): less the rounding to chunks
    int end_ratios = 0;
    uint64_t end_live = 0, end_held = 0;
    uint64_t ooms = 0, allocs = 0;
    uint64_t compactions = 0, moved = 0, released = 0;
    double compact_seconds = 0;
};

uvm_gpu_stats_t stats(uvm_manager_t *mgr) {
    uvm_gpu_stats_t s;
    check(uvm_gpu_stats(mgr, 0, &s), "uvm_gpu_stats");
    return s;
}

Outcome run(const Options &o, Mode mode) {
    uvm_manager_params_t p;
    std::memset(&p, 0, sizeof(p));
    p.backend = UVM_BACKEND_AUTO;
    p.sim.gpu_count = 1;
    p.sim.vidmem_size = o.gpu_mib * M;
    uvm_manager_t *mgr = nullptr;
    check(uvm_manager_create(&p, &mgr), "uvm_manager_create");
    uvm_gpu_info_t gi;
    check(uvm_gpu_info(mgr, 0, &gi), "uvm_gpu_info");
    const uint64_t target = gi.memory_total / 100 * static_cast<uint64_t>(o.fill);

    struct Tensor {
        uvm_mem_t *mem;
        uint64_t size;
        int dies;  // the step after which it is freed (INT32_MAX: long-lived)
    };
    std::vector<Tensor> live;
    uint64_t live_bytes = 0;
    std::mt19937_64 rng(o.seed);
    Outcome out;
    for (int step = 0; step < o.steps; ++step) {
        // This step's shapes: one scale for all its tensors, changing per step.
        const double scale = std::exp2(std::uniform_real_distribution<double>(-2.0, 2.0)(rng));
        // Allocate up to the fill target; sizes log-uniform around 1 MiB times the scale.
        while (live_bytes < target) {
            const double lg = std::uniform_real_distribution<double>(std::log2(64.0 * K), std::log2(double(o.max_mib) * M))(rng);
            const uint64_t size = std::max<uint64_t>(4 * K, static_cast<uint64_t>(std::exp2(lg) * scale) & ~(4 * K - 1));
            const double fate = std::uniform_real_distribution<double>(0, 1)(rng);
            const int dies = fate < 0.03 ? INT32_MAX : fate < 0.25 ? step + 1 : step;
            uvm_mem_alloc_params_t a;
            std::memset(&a, 0, sizeof(a));
            a.size = size;
            a.backing = UVM_BACKING_VIDMEM;
            a.chunk_size = o.chunk_kib * K;
            uvm_mem_t *m = nullptr;
            out.allocs++;
            const uvm_status_t s = uvm_mem_alloc(mgr, &a, &m);
            if (s == UVM_ERR_OUT_OF_MEMORY) {
                out.ooms++;
                break;  // the step goes on with what it has
            }
            check(s, "uvm_mem_alloc");
            live.push_back({m, size, dies});
            live_bytes += size;
        }
        const uvm_gpu_stats_t s = stats(mgr);
        out.peak_live = std::max(out.peak_live, live_bytes);
        out.peak_held = std::max(out.peak_held, s.held_bytes);
        // The step ends: its short-lived tensors go, in no particular order.
        std::shuffle(live.begin(), live.end(), rng);
        for (size_t i = 0; i < live.size();) {
            if (live[i].dies <= step) {
                check(uvm_mem_free(mgr, live[i].mem), "uvm_mem_free");
                live_bytes -= live[i].size;
                live[i] = live.back();
                live.pop_back();
            } else {
                ++i;
            }
        }
        if (mode == Mode::Trim && (step + 1) % o.every == 0) {
            const auto t0 = std::chrono::steady_clock::now();
            uint64_t released = 0;
            check(uvm_gpu_trim(mgr, 0, &released), "uvm_gpu_trim");
            out.compact_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            out.compactions++;
            out.released += released;
        }
        if (mode == Mode::Compact && (step + 1) % o.every == 0) {
            uvm_compact_result_t r;
            const auto t0 = std::chrono::steady_clock::now();
            check(uvm_gpu_compact(mgr, 0, UVM_COMPACT_RELEASE, &r), "uvm_gpu_compact");
            const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            out.compact_seconds += seconds;
            if (o.verbose)  // each call's result, to see what held the rest
                std::printf("#   step %d: live %.1f MiB; %.1f ms, moved %" PRIu64 " (%.1f MiB), pinned %" PRIu64 ", busy %" PRIu64
                            ", kept %" PRIu64 "; held %.1f -> %.1f MiB, whole free %.1f -> %.1f MiB, largest free "
                            "%.1f -> %.1f MiB, released %.1f MiB\n",
                            step, double(live_bytes) / M, 1e3 * seconds, r.objects_moved, double(r.bytes_moved) / M, r.objects_pinned,
                            r.objects_busy, r.objects_kept, double(r.held_before) / M, double(r.held_after) / M,
                            double(r.free_whole_before) / M, double(r.free_whole_after) / M,
                            double(r.largest_free_before) / M, double(r.largest_free_after) / M,
                            double(r.bytes_released) / M);
            out.compactions++;
            out.moved += r.bytes_moved;
            out.released += r.bytes_released;
        }
        const uvm_gpu_stats_t after = stats(mgr);
        if (live_bytes && (step + 1) % o.every == 0) {
            const double ratio = double(after.held_bytes) / double(live_bytes);
            out.end_ratio_sum += ratio;
            out.end_ratio_max = std::max(out.end_ratio_max, ratio);
            out.alloc_ratio_sum += double(after.held_bytes) / double(std::max<uint64_t>(after.held_live_bytes, 1));
            out.end_ratios++;
        }
    }
    const uvm_gpu_stats_t s = stats(mgr);
    out.end_live = live_bytes;
    out.end_held = s.held_bytes;
    for (const Tensor &t : live)
        check(uvm_mem_free(mgr, t.mem), "uvm_mem_free");
    check(uvm_manager_destroy(mgr), "uvm_manager_destroy");
    return out;
}

}  // namespace

int main(int argc, char **argv) {
    Options o;
    int only = -1;  // every mode
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        const long v = std::strtol(argv[i + 1], nullptr, 10);
        if (a == "--only") {
            const std::string m = argv[i + 1];
            only = m == "plain" ? 0 : m == "trim" ? 1 : m == "compact" ? 2 : -2;
            o.verbose = true;
            if (only == -2) {
                std::fprintf(stderr, "bench_compact: --only takes plain, trim or compact, not '%s'\n", m.c_str());
                return 2;
            }
        } else if (a == "--steps")
            o.steps = static_cast<int>(v);
        else if (a == "--every")
            o.every = static_cast<int>(std::max(1L, v));
        else if (a == "--gpu-mib")
            o.gpu_mib = static_cast<uint64_t>(v);
        else if (a == "--fill")
            o.fill = static_cast<int>(v);
        else if (a == "--seed")
            o.seed = static_cast<uint32_t>(v);
        else if (a == "--chunk-kib")
            o.chunk_kib = static_cast<uint64_t>(v);
        else if (a == "--max-mib")
            o.max_mib = static_cast<uint64_t>(std::max(1L, v));
        else {
            std::fprintf(stderr, "usage: bench_compact [--steps N] [--every N] [--gpu-mib N] [--fill PERCENT] [--seed N] "
                                 "[--chunk-kib N] [--max-mib N] [--only plain|trim|compact]\n");
            return 2;
        }
    }
    std::printf("# bench_compact: %d steps, fill %d%%, seed %u, chunks %s, tensors up to %" PRIu64 " MiB; every %d steps: nothing (plain), uvm_gpu_trim "
                "(trim), uvm_gpu_compact with UVM_COMPACT_RELEASE (compact)\n",
                o.steps, o.fill, o.seed, o.chunk_kib ? (std::to_string(o.chunk_kib) + " KiB").c_str() : "adaptive",
                o.max_mib, o.every);
    std::printf("# held/live: what the manager holds from the driver over what is live, after those steps' frees "
                "and trim or compaction (mean, max); peak: at the steps' peaks\n");
    std::printf("# h/c: held over the live objects' chunks (their sizes rounded up to whole chunks), mean\n");
    std::printf("%-8s %9s %9s %9s %9s %9s %9s %9s %9s %11s %6s %10s %10s %9s\n", "run", "peak_live", "peak_held",
                "h/l_mean", "h/l_max", "h/c_mean", "end_live", "end_held", "end_h/l", "ooms/allocs", "calls", "moved_MiB",
                "freed_MiB", "ms/call");
    for (Mode mode : {Mode::Plain, Mode::Trim, Mode::Compact}) {
        if (only >= 0 && static_cast<int>(mode) != only)
            continue;
        const Outcome r = run(o, mode);
        std::printf("%-8s %9.1f %9.1f %9.3f %9.3f %9.3f %9.1f %9.1f %9.3f %4" PRIu64 "/%-6" PRIu64 " %6" PRIu64
                    " %10.1f %10.1f %9.2f\n",
                    kModeNames[static_cast<int>(mode)], double(r.peak_live) / M, double(r.peak_held) / M,
                    r.end_ratios ? r.end_ratio_sum / r.end_ratios : 0.0, r.end_ratio_max,
                    r.end_ratios ? r.alloc_ratio_sum / r.end_ratios : 0.0, double(r.end_live) / M,
                    double(r.end_held) / M, r.end_live ? double(r.end_held) / double(r.end_live) : 0.0, r.ooms,
                    r.allocs, r.compactions, double(r.moved) / M, double(r.released) / M,
                    r.compactions ? 1e3 * r.compact_seconds / double(r.compactions) : 0.0);
    }
    return 0;
}
