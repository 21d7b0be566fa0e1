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
//   uvm-lab --serve 8080                        the lab in a browser (lab_server.h), on loopback
//   uvm-lab --validate all                      the cost model against the measurements
//   uvm-lab --machine h100 --compare-chase bench/results/2026-11-23-h100-lab-calibration/pointer_chase_cg.csv
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>
#include <vector>

#include "lab/lab_options.h"
#include "lab/lab_run.h"
#include "lab/lab_server.h"
#include "lab/page_size_chase.h"
#include "lab/page_size_costs.h"
#include "lab/page_size_sim.h"
#include "lab/page_size_workloads.h"

using namespace uvm::lab;

namespace {

constexpr uint64_t M = 1ull << 20;

// The cost model against one GPU's measurements of more than one size:
// measured, fitted on every size, fitted without the row's size (leave-one-out).
void print_validation(const std::string &device, const std::vector<Validation> &v) {
    std::printf("# %s\n%-14s %10s %8s %14s %14s %8s %14s %8s\n", device.c_str(), "quantity", "bytes", "page",
                "measured us", "model us", "error", "held-out us", "error");
    for (const Validation &r : v)
        std::printf("%-14s %10" PRIu64 " %8" PRIu64 " %14.1f %14.1f %+7.1f%% %14.1f %+7.1f%%\n", r.quantity.c_str(),
                    r.bytes, r.page_bytes, r.measured_us, r.model_us, 100 * r.error(), r.held_out_us,
                    100 * r.held_out_error());
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
bool report(const LabOptions &o, std::string *error) {
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
                        describe_curve(c.pin_4k, "4K page", 4096).c_str(), describe_curve(c.pin_2m, "2M page", 2 * M).c_str(),
                        c.create_us, c.map_us, describe_curve(c.set_access, "2 MiB handle", 2 * M).c_str(),
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
bool write_svg(const std::string &path, const std::vector<uint64_t> &footprints, const LabOptions &o,
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
    LabOptions o;
    const int refused = parse_command_line(argc, argv, &o);
    if (refused >= 0)
        return refused;
    std::string error;
    if (!o.serve_port.empty())
        return serve_lab(o.bind, static_cast<uint16_t>(std::stoul(o.serve_port)), o.calibration);
    if (!o.validate.empty() || !o.chase.empty()) {
        if (!report(o, &error)) {
            std::fprintf(stderr, "uvm-lab: %s\n", error.c_str());
            return 1;
        }
        return 0;
    }
    LabOutcome r;
    try {
        if (!compute(o, &r, &error)) {
            std::fprintf(stderr, "uvm-lab: %s\n", error.c_str());
            return 1;
        }
    } catch (const std::bad_alloc &) {
        std::fprintf(stderr, "uvm-lab: this machine's memory does not hold the simulation of %" PRIu64
                             " MiB: a smaller --footprint-mib or --sweep\n",
                     (o.sweep_hi ? o.sweep_hi : o.work.footprint >> 20));
        return 1;
    }
    std::printf("%s\n", model_line(o).c_str());
    if (o.sweep_hi == 0) {
        print_table(stdout, r.rows);
        return 0;
    }
    print_sweep(stdout, o, r);
    if (!o.svg.empty() && !write_svg(o.svg, r.footprints, o, r.miss_rates)) {
        std::fprintf(stderr, "uvm-lab: cannot write %s\n", o.svg.c_str());
        return 1;
    }
    return 0;
}
