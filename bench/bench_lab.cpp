// The page-size simulator's replay rate (issue 14 asks at least 10 million
// accesses per second on one core): accesses that hit, and random accesses
// over 1 GiB that miss the TLBs, at 4K and 2M pages.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "lab/page_size_sim.h"

namespace {

constexpr uint64_t kBase = 1ull << 40, kSize = 1ull << 30;

uvm::lab::MachineModel model() {
    uvm::lab::MachineModel m;
    m.sms = 132;
    m.l1 = {16, 16};
    m.l2 = {2048, 16};
    m.pwc_entries = 64;
    return m;
}

void replay(benchmark::State &state, uvm::lab::Policy policy, bool random) {
    uvm::lab::Simulator sim(model(), policy);
    if (sim.allocate(kBase, kSize) != UVM_OK) {
        state.SkipWithError("allocate");
        return;
    }
    std::mt19937_64 rng(1);
    std::vector<uvm::lab::Access> trace(1 << 16);
    for (size_t i = 0; i < trace.size(); ++i) {
        trace[i].address = kBase + (random ? rng() % kSize : (i * 64) % kSize);
        trace[i].size = 8;
        trace[i].processor = static_cast<uint32_t>(i % 132);
    }
    for (auto _ : state)
        for (const auto &a : trace)
            sim.access(a);
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * trace.size()));
    state.counters["l2_miss_rate"] = sim.stats().l2_miss_rate();
}

}  // namespace

BENCHMARK_CAPTURE(replay, sequential_4k, uvm::lab::Policy::Fixed4K, false);
BENCHMARK_CAPTURE(replay, random_4k, uvm::lab::Policy::Fixed4K, true);
BENCHMARK_CAPTURE(replay, random_2m, uvm::lab::Policy::Fixed2M, true);
BENCHMARK_CAPTURE(replay, random_mosaic, uvm::lab::Policy::Mosaic, true);
BENCHMARK_MAIN();
