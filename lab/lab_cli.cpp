// uvm-lab: the page-size lab from the command line (lab/page_size_sim.h).
// Runs a workload, or a trace file, under each page-size policy and prints a
// table; --sweep runs growing footprints and writes an SVG of the L2 TLB miss
// rate against the footprint, one line per policy.
//
//   uvm-lab --workload random --footprint-mib 256 --accesses 1000000
//   uvm-lab --workload chase --sweep 1:1024 --svg reach.svg
//   uvm-lab --trace my.trace --policy 4k,2m
//   uvm-lab --workload growing --footprint-mib 512 --gpu-mib 256   (out of core)
//
// The machine model's default is an example for teaching, not a measured
// GPU; --machine h100|h200 takes the presets calibrated on those GPUs, and
// every part can be set after it (--sms --l1 E:W --l2 E:W --pwc N
// --latency L1:L2:WALK in ns). --costs GPU charges pinning and migration at
// that GPU's calibrated costs (lab/calibration.csv).
//
//   uvm-lab --validate all                      the cost model against the measurements
//   uvm-lab --machine h100 --compare-chase bench/results/2026-11-23-h100-lab-calibration/pointer_chase_cg.csv
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "lab/page_size_chase.h"
#include "lab/page_size_costs.h"
#include "lab/page_size_sim.h"
#include "lab/page_size_workloads.h"

using namespace uvm::lab;

namespace {

constexpr uint64_t kBase = 1ull << 40, M = 1ull << 20;

struct Options {
    MachineModel model;
    WorkloadParams work;
    std::vector<Policy> policies{Policy::Fixed4K, Policy::Fixed64K, Policy::Fixed2M, Policy::Adaptive,
                                 Policy::Mosaic};
    std::string trace;
    uint64_t gpu_memory = 0;
    uint64_t sweep_lo = 0, sweep_hi = 0;  // MiB
    std::string svg;
    std::string machine = "example";
    std::string calibration;   // the calibration file (default: the one built in)
    std::string costs_device;  // --costs: charge pinning and migration as this GPU's
    std::string validate;      // --validate: the cost model against this GPU's rows ("all": every GPU)
    std::string chase;         // --compare-chase: the model against this chase CSV
};

const char *policy_name(Policy p) {
    switch (p) {
        case Policy::Fixed4K: return "4K";
        case Policy::Fixed64K: return "64K";
        case Policy::Fixed2M: return "2M";
        case Policy::Adaptive: return "adaptive";
        case Policy::Mosaic: return "mosaic";
    }
    return "?";
}

bool parse_pair(const char *s, uint32_t *a, uint32_t *b) {
    return std::sscanf(s, "%u:%u", a, b) == 2;
}

bool parse(int argc, char **argv, Options *o) {
    machine_preset("example", &o->model);
    o->work.processors = 132;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : nullptr;
        if (!v && a != "--help")
            return false;
        if (a == "--machine") {  // first: the flags after it change parts of it
            o->machine = argv[++i];
            if (!machine_preset(o->machine, &o->model))
                return false;
        } else if (a == "--calibration") {
            o->calibration = argv[++i];
        } else if (a == "--costs") {
            o->costs_device = argv[++i];
        } else if (a == "--validate") {
            o->validate = argv[++i];
        } else if (a == "--compare-chase") {
            o->chase = argv[++i];
        } else if (a == "--workload") {
            const std::string w = argv[++i];
            static const std::pair<const char *, Pattern> names[] = {
                {"sequential", Pattern::Sequential}, {"random", Pattern::Random},     {"strided", Pattern::Strided},
                {"chase", Pattern::PointerChase},    {"graph", Pattern::GraphWalk},   {"growing", Pattern::GrowingSet}};
            bool found = false;
            for (const auto &n : names)
                if (w == n.first) {
                    o->work.pattern = n.second;
                    found = true;
                }
            if (!found)
                return false;
        } else if (a == "--footprint-mib") {
            o->work.footprint = std::strtoull(argv[++i], nullptr, 10) * M;
        } else if (a == "--accesses") {
            o->work.accesses = std::strtoull(argv[++i], nullptr, 10);
        } else if (a == "--stride") {
            o->work.stride = std::strtoull(argv[++i], nullptr, 0);
        } else if (a == "--gpu-mib") {
            o->gpu_memory = std::strtoull(argv[++i], nullptr, 10) * M;
        } else if (a == "--trace") {
            o->trace = argv[++i];
        } else if (a == "--svg") {
            o->svg = argv[++i];
        } else if (a == "--sweep") {
            unsigned lo, hi;
            if (std::sscanf(argv[++i], "%u:%u", &lo, &hi) != 2 || lo == 0 || hi < lo)
                return false;
            o->sweep_lo = lo;
            o->sweep_hi = hi;
        } else if (a == "--sms") {
            o->model.sms = static_cast<uint32_t>(std::strtoul(argv[++i], nullptr, 10));
            o->work.processors = o->model.sms;
        } else if (a == "--l1") {
            if (!parse_pair(argv[++i], &o->model.l1.entries, &o->model.l1.ways))
                return false;
        } else if (a == "--l2") {
            if (!parse_pair(argv[++i], &o->model.l2.entries, &o->model.l2.ways))
                return false;
        } else if (a == "--pwc") {
            o->model.pwc_entries = static_cast<uint32_t>(std::strtoul(argv[++i], nullptr, 10));
        } else if (a == "--latency") {
            if (std::sscanf(argv[++i], "%lf:%lf:%lf", &o->model.l1_hit_ns, &o->model.l2_hit_ns,
                            &o->model.walk_ref_ns) != 3)
                return false;
        } else if (a == "--policy") {
            o->policies.clear();
            std::string list = argv[++i];
            for (size_t at = 0; at <= list.size();) {
                const size_t comma = std::min(list.find(',', at), list.size());
                const std::string p = list.substr(at, comma - at);
                if (p == "4k")
                    o->policies.push_back(Policy::Fixed4K);
                else if (p == "64k")
                    o->policies.push_back(Policy::Fixed64K);
                else if (p == "2m")
                    o->policies.push_back(Policy::Fixed2M);
                else if (p == "adaptive")
                    o->policies.push_back(Policy::Adaptive);
                else if (p == "mosaic")
                    o->policies.push_back(Policy::Mosaic);
                else
                    return false;
                at = comma + 1;
            }
        } else {
            return false;
        }
    }
    return o->work.footprint >= 4096 && o->work.accesses > 0;
}

struct Result {
    Stats stats;
    TimeSplit time;
};

// One workload (or the trace) under one policy.
bool run(const Options &o, const CostModel &costs, Policy policy, uint64_t footprint, Result *out,
         std::string *error) {
    Simulator sim(o.model, policy);
    if (!sim.valid()) {
        *error = "the machine model is not valid (entries must be a non-zero multiple of ways)";
        return false;
    }
    sim.set_costs(costs);
    sim.set_gpu_memory(o.gpu_memory);
    if (!o.trace.empty()) {
        TraceReader reader;
        if (!reader.open(o.trace) || !replay(reader, sim, error)) {
            if (error->empty())
                *error = reader.error();
            return false;
        }
    } else {
        // The object is rounded to 2 MiB so that every policy can place it.
        const uint64_t size = (footprint + 2 * M - 1) & ~(2 * M - 1);
        if (sim.allocate(kBase, size) != UVM_OK) {
            *error = "cannot place the workload's object";
            return false;
        }
        WorkloadParams w = o.work;
        w.footprint = footprint;
        Workload work(w, kBase);
        Access a;
        while (work.next(&a))
            sim.access(a);
    }
    out->stats = sim.stats();
    out->time = sim.time();
    return true;
}

// ns/access and walk ns % are translation's; pin ms and move ms the costs of
// pinning the pages and of migrating them (with --costs; 0 without).
void print_table(const std::vector<std::pair<Policy, Result>> &rows) {
    std::printf("%-9s %10s %8s %8s %10s %12s %10s %10s %8s %10s %10s %10s %10s %10s %10s\n", "policy", "accesses",
                "L1 miss", "L2 miss", "walks", "walk reads", "PT KiB", "alloc MiB", "touched", "faults", "moved MiB",
                "ns/access", "walk ns %", "pin ms", "move ms");
    for (const auto &r : rows) {
        const Stats &s = r.second.stats;
        const TimeSplit &t = r.second.time;
        const double per = s.accesses ? t.translation() / double(s.accesses) : 0;
        std::printf("%-9s %10" PRIu64 " %7.2f%% %7.2f%% %10" PRIu64 " %12" PRIu64 " %10.1f %10.1f %7.1f%% %10" PRIu64
                    " %10.1f %10.2f %9.1f%% %10.2f %10.2f\n",
                    policy_name(r.first), s.accesses, 100 * s.l1_miss_rate(), 100 * s.l2_miss_rate(), s.l2_misses,
                    s.walk_refs, double(s.page_table_bytes) / 1024, double(s.allocated_bytes) / double(M),
                    s.allocated_bytes ? 100.0 * double(s.touched_bytes) / double(s.allocated_bytes) : 0, s.faults,
                    double(s.bytes_migrated_in) / double(M), per,
                    t.translation() > 0 ? 100 * t.walks / t.translation() : 0, t.mapping / 1e6, t.migration / 1e6);
    }
}

// The cost model against one GPU's measured composites: measured, fitted on
// every size, fitted without the row's size.
void print_validation(const std::string &device, const std::vector<Validation> &v) {
    std::printf("# %s\n%-14s %10s %8s %14s %14s %8s %14s %8s\n", device.c_str(), "quantity", "bytes", "page",
                "measured us", "model us", "error", "held-out us", "error");
    for (const Validation &r : v)
        std::printf("%-14s %10" PRIu64 " %8" PRIu64 " %14.1f %14.1f %+7.1f%% %14.1f %+7.1f%%\n", r.quantity.c_str(),
                    r.bytes, r.page_bytes, r.measured_us, r.model_us, 100 * r.error(), r.held_out_us,
                    100 * r.held_out_error());
}

// A fitted curve in words: "call + per unit [, past the knee each unit costs
// more by 2 x bend per unit]", with the per-unit cost at the knee and at the
// largest size a student is likely to ask about (1 GiB).
std::string describe(const CostCurve &c, const char *unit, uint64_t unit_bytes) {
    char text[256];
    const double gib_units = double(1ull << 30) / double(unit_bytes);
    if (c.bend_us > 0)
        std::snprintf(text, sizeof text, "%.1f us + %.4g us per %s to a knee at %.0f MiB, rising to %.4g us per %s at 1 GiB",
                      c.call_us, c.per_unit_us, unit, c.knee_units * double(unit_bytes) / double(M),
                      c.marginal_at(gib_units), unit);
    else
        std::snprintf(text, sizeof text, "%.1f us + %.4g us per %s (no bend)", c.call_us, c.per_unit_us, unit);
    return text;
}

// The leave-one-out figures in one line: how many rows the held-out fit
// predicts within 10%, and the worst miss.
void print_loo_summary(const std::vector<Validation> &v) {
    size_t within = 0;
    const Validation *worst = nullptr;
    for (const Validation &r : v) {
        if (std::fabs(r.held_out_error()) <= 0.10)
            ++within;
        if (!worst || std::fabs(r.held_out_error()) > std::fabs(worst->held_out_error()))
            worst = &r;
    }
    std::printf("# leave-one-out: %zu of %zu within 10%%", within, v.size());
    if (worst)
        std::printf("; worst %s at %" PRIu64 " bytes, %" PRIu64 "-byte pages, %+.1f%%", worst->quantity.c_str(),
                    worst->bytes, worst->page_bytes, 100 * worst->held_out_error());
    std::printf("\n");
}

// --validate and --compare-chase; false (with why) on bad input.
bool report(const Options &o, std::string *error) {
    if (!o.validate.empty()) {
        std::vector<Measurement> rows;
        if (load_calibration(o.calibration, &rows, error) != UVM_OK)
            return false;
        std::vector<std::string> devices = calibration_devices(rows);
        if (o.validate != "all")
            devices = {o.validate};
        for (const std::string &d : devices) {
            std::vector<Validation> v;
            CostModel c;
            if (validate_costs(rows, d, &v, error, &c) != UVM_OK)
                return false;
            print_validation(d, v);
            std::printf("# fitted (every term non-negative): pin on 4K pages %s; pin on 2M pages %s; create %.2f us, "
                        "map %.2f us; set_access %s; growth's interleave %.1f us + %.2f us per handle; copy in %.2f us "
                        "+ 1 / %.2f GB/s, out %.2f us + 1 / %.2f GB/s\n",
                        describe(c.pin_4k, "4K page", 4096).c_str(), describe(c.pin_2m, "2M page", 2 * M).c_str(),
                        c.create_us, c.map_us, describe(c.set_access, "2 MiB handle", 2 * M).c_str(),
                        c.interleave.call_us, c.interleave.per_unit_us, c.copy_h2d.call_us,
                        1e-3 / c.copy_h2d.per_unit_us, c.copy_d2h.call_us, 1e-3 / c.copy_d2h.per_unit_us);
            print_loo_summary(v);
        }
    }
    if (!o.chase.empty()) {
        std::ifstream in(o.chase);
        std::vector<ChaseRow> rows;
        double ghz = 0;
        if (!in) {
            *error = "cannot open " + o.chase;
            return false;
        }
        if (read_chase(in, &rows, &ghz, error) != UVM_OK) {
            *error = o.chase + ": " + *error;
            return false;
        }
        if (model_chase(o.model, ghz, "cg", &rows) != UVM_OK) {
            *error = "the machine model is not valid";
            return false;
        }
        std::printf("# %s against the '%s' model (cycles per step; the model anchored at the median of each series' five smallest counts)\n"
                    "%-12s %10s %10s %12s %12s %8s\n",
                    o.chase.c_str(), o.machine.c_str(), "memory", "stride KiB", "elements", "measured", "model",
                    "error");
        for (const ChaseRow &r : rows)
            std::printf("%-12s %10" PRIu64 " %10" PRIu64 " %12.1f %12.1f %+7.1f%%\n", r.memory.c_str(), r.stride >> 10,
                        r.elements, r.cycles, r.model_cycles, 100 * (r.model_cycles / r.cycles - 1));
    }
    return true;
}

// An SVG line chart: L2 TLB miss rate (y, 0-100%) against footprint (x, log2).
bool write_svg(const std::string &path, const std::vector<uint64_t> &footprints, const Options &o,
               const std::vector<std::vector<double>> &rates) {
    FILE *f = std::fopen(path.c_str(), "w");
    if (!f)
        return false;
    const double W = 720, H = 420, L = 70, R = 130, T = 30, B = 50;
    const double pw = W - L - R, ph = H - T - B;
    static const char *colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"};
    std::fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                    "font-family=\"sans-serif\" font-size=\"12\">\n", W, H);
    std::fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    std::fprintf(f, "<text x=\"%.0f\" y=\"18\" font-size=\"14\">L2 TLB miss rate against footprint</text>\n", L);
    const size_t n = footprints.size();
    auto x = [&](size_t i) { return L + (n > 1 ? pw * double(i) / double(n - 1) : pw / 2); };
    auto y = [&](double rate) { return T + ph * (1 - rate); };
    for (int g = 0; g <= 4; ++g) {
        const double rate = g / 4.0;
        std::fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L, y(rate),
                     L + pw, y(rate));
        std::fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%d%%</text>\n", L - 6, y(rate) + 4, g * 25);
    }
    for (size_t i = 0; i < n; ++i)
        std::fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%" PRIu64 "</text>\n", x(i), T + ph + 18,
                     footprints[i] / M);
    std::fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">footprint (MiB)</text>\n", L + pw / 2,
                 H - 8);
    for (size_t p = 0; p < rates.size(); ++p) {
        std::string points;
        for (size_t i = 0; i < n; ++i)
            points += std::to_string(x(i)) + "," + std::to_string(y(rates[p][i])) + " ";
        const char *c = colors[p % 5];
        std::fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"%s\"/>\n", c,
                     points.c_str());
        std::fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"%s\">%s</text>\n", L + pw + 10, T + 16.0 + 18.0 * double(p),
                     c, policy_name(o.policies[p]));
    }
    std::fprintf(f, "</svg>\n");
    std::fclose(f);
    return true;
}

}  // namespace

int main(int argc, char **argv) {
    Options o;
    if (!parse(argc, argv, &o)) {
        std::fprintf(stderr,
                     "usage: uvm-lab [--workload sequential|random|strided|chase|graph|growing] [--footprint-mib N]\n"
                     "               [--accesses N] [--stride BYTES] [--trace FILE] [--policy 4k,64k,2m,adaptive,mosaic]\n"
                     "               [--gpu-mib N] [--sweep LO:HI --svg FILE] [--sms N] [--l1 E:W] [--l2 E:W]\n"
                     "               [--pwc N] [--latency L1:L2:WALK] [--machine example|h100|h200]\n"
                     "               [--costs GPU] [--calibration FILE]\n"
                     "       uvm-lab --validate GPU|all [--calibration FILE]   (the cost model against the GPU)\n"
                     "       uvm-lab --compare-chase CSV [--machine ...]        (the TLB model against the chase)\n");
        return 2;
    }
    std::string error;
    if (!o.validate.empty() || !o.chase.empty()) {
        if (!report(o, &error)) {
            std::fprintf(stderr, "uvm-lab: %s\n", error.c_str());
            return 1;
        }
        return 0;
    }
    CostModel costs;
    if (!o.costs_device.empty() && load_costs(o.calibration, o.costs_device, &costs, &error) != UVM_OK) {
        std::fprintf(stderr, "uvm-lab: %s\n", error.c_str());
        return 1;
    }
    std::printf("# model: %u SMs, L1 %u entries %u-way, L2 %u entries %u-way, page-walk cache %u, "
                "%.1f/%.1f/%.1f ns, coalescing %" PRIu64 " MiB (machine '%s'%s)%s%s\n",
                o.model.sms, o.model.l1.entries, o.model.l1.ways, o.model.l2.entries, o.model.l2.ways,
                o.model.pwc_entries, o.model.l1_hit_ns, o.model.l2_hit_ns, o.model.walk_ref_ns,
                o.model.coalesce_bytes / M, o.machine.c_str(),
                o.machine == "example" ? ": round numbers for teaching, not a measured GPU" : "",
                o.costs_device.empty() ? "" : "; costs of ", o.costs_device.c_str());
    if (o.sweep_hi == 0) {
        std::vector<std::pair<Policy, Result>> rows;
        for (Policy p : o.policies) {
            Result r;
            if (!run(o, costs, p, o.work.footprint, &r, &error)) {
                std::fprintf(stderr, "uvm-lab: %s\n", error.c_str());
                return 1;
            }
            rows.push_back({p, r});
        }
        print_table(rows);
        return 0;
    }
    std::vector<uint64_t> footprints;
    for (uint64_t mib = o.sweep_lo; mib <= o.sweep_hi; mib *= 2)
        footprints.push_back(mib * M);
    std::vector<std::vector<double>> rates(o.policies.size());
    std::printf("%-12s", "footprint");
    for (Policy p : o.policies)
        std::printf(" %10s", policy_name(p));
    std::printf("   (L2 TLB miss rate)\n");
    for (uint64_t fp : footprints) {
        std::printf("%8" PRIu64 " MiB", fp / M);
        for (size_t p = 0; p < o.policies.size(); ++p) {
            Result r;
            if (!run(o, costs, o.policies[p], fp, &r, &error)) {
                std::fprintf(stderr, "uvm-lab: %s\n", error.c_str());
                return 1;
            }
            rates[p].push_back(r.stats.l2_miss_rate());
            std::printf(" %9.2f%%", 100 * r.stats.l2_miss_rate());
        }
        std::printf("\n");
    }
    if (!o.svg.empty() && !write_svg(o.svg, footprints, o, rates)) {
        std::fprintf(stderr, "uvm-lab: cannot write %s\n", o.svg.c_str());
        return 1;
    }
    return 0;
}
