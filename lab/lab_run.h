// One run of the page-size lab as the `uvm-lab` command describes it: its
// options (parsed from command-line words by lab_options.h) and its results
// (a table of one row per policy, or a sweep of L2 TLB miss rates over
// footprints). The
// command line prints them; the browser lab (lab_server.h) turns the query
// string into the same words and sends the same results as JSON, so that the
// page shows exactly the numbers the command prints.
//
// Thread safety: none needed; everything here is a value or works on the
// caller's values.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "lab/page_size_costs.h"
#include "lab/page_size_sim.h"
#include "lab/page_size_workloads.h"

namespace uvm::lab {

struct LabOptions {
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
    std::string serve_port;    // --serve: the browser lab on this port (0: any free one)
    std::string bind = "127.0.0.1";  // --bind: where --serve listens (loopback unless asked)
};

const char *policy_name(Policy p);

struct PolicyResult {
    Policy policy = Policy::Fixed4K;
    Stats stats;
    TimeSplit time;
};

struct LabOutcome {
    std::vector<PolicyResult> rows;                // without a sweep: one per policy
    std::vector<uint64_t> footprints;              // with a sweep: bytes of each point
    std::vector<std::vector<double>> miss_rates;   // [policy][point], the L2 TLB's
    bool costed = false;                           // costs_device given: `costs` holds its fit
    CostModel costs;
};

// Runs the workload (or the trace) under every policy, or the sweep; false
// with why where the costs cannot be loaded, the model is not valid, or the
// trace has a bad line.
bool compute(const LabOptions &o, LabOutcome *out, std::string *why);

// The line every run prints first: the machine model and the costs.
std::string model_line(const LabOptions &o);

// The command's table and sweep, as printed.
void print_table(FILE *f, const std::vector<PolicyResult> &rows);
void print_sweep(FILE *f, const LabOptions &o, const LabOutcome &r);

// The same results as JSON (lab_server.h's /api/run).
std::string outcome_json(const LabOptions &o, const LabOutcome &r);

// `v` as a JSON string, quoted and escaped.
std::string json_string(const std::string &v);

// A fitted curve in words (uvm-lab --validate, the page's costs).
std::string describe_curve(const CostCurve &c, const char *unit, uint64_t unit_bytes);

}  // namespace uvm::lab
