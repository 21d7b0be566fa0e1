// The model against the GPU's pointer chase (page_size_chase.h).
#include "lab/page_size_chase.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <tuple>

#include "lab/page_size_workloads.h"

namespace uvm::lab {

namespace {

constexpr uint64_t kBase = 1ull << 40;
constexpr uint64_t k2M = 2ull << 20;

// Translation ns per timed step of one chase.
double chase_ns(const MachineModel &model, Policy policy, uint64_t stride, uint64_t elements) {
    Simulator sim(model, policy);
    const uint64_t footprint = stride * elements;
    if (sim.allocate(kBase, (footprint + k2M - 1) & ~(k2M - 1)) != UVM_OK)
        return 0;
    const uint64_t steps = elements < 16384 ? 16384 : elements;
    WorkloadParams w;
    w.pattern = Pattern::PointerChase;
    w.footprint = footprint;
    w.stride = stride;
    w.accesses = 2 * steps;
    Workload work(w, kBase);
    Access a;
    for (uint64_t i = 0; i < steps && work.next(&a); ++i)
        sim.access(a);
    const double warm = sim.time().translation();
    while (work.next(&a))
        sim.access(a);
    return (sim.time().translation() - warm) / double(steps);
}

}  // namespace

uvm_status_t read_chase(std::istream &in, std::vector<ChaseRow> *rows, double *clock_ghz, std::string *error) {
    std::vector<ChaseRow> out;
    double mhz = 0;
    std::string line;
    for (uint64_t number = 1; std::getline(in, line); ++number) {
        if (line.empty() || line.rfind("memory,", 0) == 0)
            continue;
        if (line[0] == '#') {
            const size_t at = line.find("SM clock ");
            if (at != std::string::npos)
                mhz = std::strtod(line.c_str() + at + 9, nullptr);
            continue;
        }
        char memory[32], load[8];
        unsigned long long stride_kib = 0, footprint = 0, elements = 0;
        double cycles = 0;
        if (std::sscanf(line.c_str(), "%31[^,],%7[^,],%llu,%llu,%llu,%lf", memory, load, &stride_kib, &footprint,
                        &elements, &cycles) != 6 ||
            stride_kib == 0 || elements < 2 || !(cycles > 0)) {
            if (error)
                *error = "line " + std::to_string(number) +
                         ": expected memory,load,stride_kib,footprint_mib,elements,cycles_per_step,...";
            return UVM_ERR_INVALID_ARGUMENT;
        }
        ChaseRow r;
        r.memory = memory;
        r.load = load;
        r.stride = stride_kib << 10;
        r.elements = elements;
        r.cycles = cycles;
        out.push_back(r);
    }
    if (!(mhz > 0)) {
        if (error)
            *error = "no '# ..., SM clock N MHz' line";
        return UVM_ERR_INVALID_ARGUMENT;
    }
    *rows = std::move(out);
    *clock_ghz = mhz / 1000;
    return UVM_OK;
}

uvm_status_t model_chase(const MachineModel &model, double clock_ghz, const std::string &load,
                         std::vector<ChaseRow> *rows) {
    if (!Simulator(model, Policy::Fixed2M).valid() || !(clock_ghz > 0))
        return UVM_ERR_INVALID_ARGUMENT;
    std::vector<ChaseRow> kept;
    for (const ChaseRow &r : *rows)
        if (r.load == load)
            kept.push_back(r);
    // The anchor of each series: the median of (measured - model) over its
    // five smallest element counts, where translation adds least: one
    // noisy first row does not shift the whole series.
    std::map<std::tuple<std::string, uint64_t>, std::vector<std::pair<uint64_t, double>>> firsts;
    std::vector<double> ns(kept.size());
    for (size_t i = 0; i < kept.size(); ++i) {
        const ChaseRow &r = kept[i];
        // The GPU maps registered host memory in 4K pages, THP or not (the
        // chase: 4K and THP rows cost alike at large counts).
        const Policy policy = r.memory.rfind("host", 0) == 0 ? Policy::Fixed4K : Policy::Fixed2M;
        ns[i] = chase_ns(model, policy, r.stride, r.elements);
        firsts[std::make_tuple(r.memory, r.stride)].emplace_back(r.elements, r.cycles - ns[i] * clock_ghz);
    }
    std::map<std::tuple<std::string, uint64_t>, double> anchor;
    for (auto &f : firsts) {
        std::sort(f.second.begin(), f.second.end());
        std::vector<double> d;
        for (size_t i = 0; i < f.second.size() && i < 5; ++i)
            d.push_back(f.second[i].second);
        std::sort(d.begin(), d.end());
        anchor[f.first] = d[d.size() / 2];
    }
    for (size_t i = 0; i < kept.size(); ++i)
        kept[i].model_cycles = anchor[std::make_tuple(kept[i].memory, kept[i].stride)] + ns[i] * clock_ghz;
    *rows = std::move(kept);
    return UVM_OK;
}

}  // namespace uvm::lab
