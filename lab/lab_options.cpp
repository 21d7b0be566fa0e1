// uvm-lab's options (lab_options.h), over CLI11.
#include "lab/lab_options.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include <CLI/CLI.hpp>

#include "tools/cli.h"

namespace uvm::lab {

namespace {

constexpr uint64_t M = 1ull << 20;

// The largest footprint: the simulator keeps about 8 bytes per 4 KiB page
// (8 GiB of host memory at 1 TiB), and a larger one ran out of host memory.
constexpr uint64_t kMaxFootprintMib = 1ull << 20;
constexpr const char *kFootprintWhy = " (the simulator keeps about 8 bytes of host memory per 4 KiB page)";

// A whole decimal (or 0x hex where `any_base`) number, nothing after it:
// strtoull alone would read "12abc" as 12 and "abc" as 0 without a word.
bool to_u64(const std::string &s, uint64_t *out, bool any_base = false) {
    if (s.empty() || s[0] == '-' || s[0] == '+' || s[0] == ' ')
        return false;
    char *end = nullptr;
    errno = 0;
    *out = std::strtoull(s.c_str(), &end, any_base ? 0 : 10);
    return errno == 0 && end && *end == '\0';
}

bool to_pair(const std::string &s, uint32_t *a, uint32_t *b) {
    const size_t colon = s.find(':');
    uint64_t x, y;
    if (colon == std::string::npos || !to_u64(s.substr(0, colon), &x) || !to_u64(s.substr(colon + 1), &y) ||
        x > UINT32_MAX || y > UINT32_MAX)
        return false;
    *a = uint32_t(x);
    *b = uint32_t(y);
    return true;
}

}  // namespace

void add_lab_options(CLI::App *app, LabOptions *o) {
    *o = LabOptions();
    machine_preset("example", &o->model);
    o->work.processors = 132;
    // Each option checks its value and sets its part of `o` in its callback;
    // CLI11 runs the callbacks in the order the options are declared here,
    // so --machine (first) sets the preset that the model's flags change.
    const auto value = [app](const char *flag, const char *type, const char *help,
                             std::function<void(const std::string &)> set) {
        return app->add_option_function<std::string>(flag, std::move(set), help)->type_name(type);
    };
    const auto refuse = [](const std::string &why) { throw CLI::ValidationError(why); };
    const auto number = [refuse](const std::string &v, const std::string &why, uint64_t lo, uint64_t hi,
                                 bool any_base = false) {
        uint64_t n = 0;
        if (!to_u64(v, &n, any_base) || n < lo || n > hi)
            refuse(why);
        return n;
    };
    const char *const model = "The machine model", *const run = "The run", *const other = "Other runs";
    value("--machine", "NAME", "the preset the model starts from: example, or h100 and h200 (calibrated on those GPUs)",
          [o, refuse](const std::string &v) {
              if (!machine_preset(v, &o->model))
                  refuse("unknown machine '" + v + "' (example, h100, h200)");
              o->machine = v;
          })
        ->group(model);
    value("--workload", "NAME", "sequential, random, strided, chase, graph or growing", [o, refuse](const std::string &v) {
        static const std::pair<const char *, Pattern> names[] = {
            {"sequential", Pattern::Sequential}, {"random", Pattern::Random},   {"strided", Pattern::Strided},
            {"chase", Pattern::PointerChase},    {"graph", Pattern::GraphWalk}, {"growing", Pattern::GrowingSet}};
        for (const auto &name : names)
            if (v == name.first) {
                o->work.pattern = name.second;
                return;
            }
        refuse("unknown workload '" + v + "' (sequential, random, strided, chase, graph, growing)");
    })->group(run);
    value("--footprint-mib", "MIB", "MiB the workload touches (default 64)", [o, number](const std::string &v) {
        o->work.footprint = number(v, "--footprint-mib needs a whole number of MiB, 1-" +
                                          std::to_string(kMaxFootprintMib) + kFootprintWhy,
                                   1, kMaxFootprintMib) * M;
    })->group(run);
    value("--accesses", "N", "accesses to simulate (default 1000000)", [o, number](const std::string &v) {
        o->work.accesses = number(v, "--accesses needs a whole number, at least 1", 1, UINT64_MAX);
    })->group(run);
    value("--stride", "BYTES", "bytes between strided accesses, or per chase element (default 4096; 0x... for hex)", [o, number](const std::string &v) {
        o->work.stride = number(v, "--stride needs a number of bytes, at least 1", 1, UINT64_MAX, true);
    })->group(run);
    value("--trace", "FILE", "a trace to replay instead of a workload (docs/page-size-lab.md)",
          [o](const std::string &v) { o->trace = v; })
        ->group(run);
    value("--policy", "LIST", "policies, comma-separated: 4k,64k,2m,adaptive,mosaic (default all)",
          [o, refuse](const std::string &v) {
              o->policies.clear();
              for (size_t at = 0; at <= v.size();) {
                  const size_t comma = std::min(v.find(',', at), v.size());
                  const std::string p = v.substr(at, comma - at);
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
                      refuse("unknown policy '" + p + "' (4k, 64k, 2m, adaptive, mosaic)");
                  at = comma + 1;
              }
          })
        ->group(run);
    value("--gpu-mib", "MIB", "GPU memory in MiB: beyond it the workload runs out of core (0: no limit)",
          [o, number](const std::string &v) {
              o->gpu_memory = number(v, "--gpu-mib needs a whole number of MiB (0: no limit)", 0, UINT64_MAX >> 21) * M;
          })
        ->group(run);
    value("--costs", "GPU", "charge pinning and migration at that GPU's calibrated costs (H100, H200)",
          [o](const std::string &v) { o->costs_device = v; })
        ->group(run);
    value("--calibration", "FILE", "the calibration to read (default: lab/calibration.csv)",
          [o](const std::string &v) { o->calibration = v; })
        ->group(run);
    value("--sweep", "LO:HI", "footprints from LO to HI MiB, doubling: the L2 TLB miss rate of each policy",
          [o, refuse](const std::string &v) {
              uint32_t lo, hi;
              if (!to_pair(v, &lo, &hi) || lo == 0 || hi < lo || hi > kMaxFootprintMib)
                  refuse("--sweep needs LO:HI in MiB, 1 <= LO <= HI <= " + std::to_string(kMaxFootprintMib) +
                         kFootprintWhy);
              o->sweep_lo = lo;
              o->sweep_hi = hi;
          })
        ->group(run);
    value("--svg", "FILE", "with --sweep, an SVG of the miss rates", [o](const std::string &v) { o->svg = v; })
        ->group(run);
    value("--sms", "N", "SMs, 1-100000", [o, number](const std::string &v) {
        o->model.sms = uint32_t(number(v, "--sms needs a number of SMs, 1-100000", 1, 100000));
        o->work.processors = o->model.sms;
    })->group(model);
    for (const char *flag : {"--l1", "--l2"})
        value(flag, "ENTRIES:WAYS", "that TLB's entries and ways", [o, refuse, flag](const std::string &v) {
            TlbShape &t = flag[3] == '1' ? o->model.l1 : o->model.l2;
            if (!to_pair(v, &t.entries, &t.ways))
                refuse(std::string(flag) + " needs ENTRIES:WAYS");
        })->group(model);
    value("--pwc", "N", "page-walk cache entries", [o, number](const std::string &v) {
        o->model.pwc_entries = uint32_t(number(v, "--pwc needs a number of entries", 0, UINT32_MAX));
    })->group(model);
    value("--latency", "L1:L2:WALK", "ns of an L1 hit, an L2 hit and a page-walk read", [o, refuse](const std::string &v) {
        char extra;
        if (std::sscanf(v.c_str(), "%lf:%lf:%lf%c", &o->model.l1_hit_ns, &o->model.l2_hit_ns, &o->model.walk_ref_ns,
                        &extra) != 3 ||
            !(o->model.l1_hit_ns >= 0) || !(o->model.l2_hit_ns >= 0) || !(o->model.walk_ref_ns >= 0))
            refuse("--latency needs L1:L2:WALK in ns, none negative");
    })->group(model);
    value("--validate", "GPU", "the cost model against that GPU's measurements (all: every GPU)",
          [o](const std::string &v) { o->validate = v; })
        ->group(other);
    value("--compare-chase", "CSV", "the TLB model against a measured pointer chase",
          [o](const std::string &v) { o->chase = v; })
        ->group(other);
    CLI::Option *serve = value("--serve", "PORT", "the lab in a browser (0: any free port)",
                               [o, number](const std::string &v) {
                                   number(v, "--serve needs a port, 0-65535 (0: any free port)", 0, 65535);
                                   o->serve_port = v;
                               })
                             ->group(other);
    value("--bind", "ADDRESS", "where --serve listens (default 127.0.0.1, loopback)",
          [o](const std::string &v) { o->bind = v; })
        ->group(other)
        ->needs(serve);
}

bool parse_options(const std::vector<std::string> &args, LabOptions *o, std::string *why) {
    CLI::App app{"", "uvm-lab"};
    add_lab_options(&app, o);
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them last first
    try {
        app.parse(reversed);
    } catch (const CLI::ExtrasError &) {
        *why = "The following argument" + std::string(app.remaining().size() > 1 ? "s were" : " was") +
               " not expected:";
        for (const std::string &a : app.remaining())  // as given (CLI11's message lists them last first)
            *why += " " + a;
        return false;
    } catch (const CLI::ParseError &e) {
        *why = e.what();
        return false;
    }
    return true;
}

int parse_command_line(int argc, char **argv, LabOptions *o) {
    CLI::App app{"The page-size lab: a workload, or a trace, under each page-size policy through a model of the "
                 "GPU's TLBs and page walks (docs/page-size-lab.md).",
                 "uvm-lab"};
    uvm::cli::set_conventions(app);
    add_lab_options(&app, o);
    app.footer("examples:\n"
               "  uvm-lab --workload random --footprint-mib 256 --accesses 1000000\n"
               "  uvm-lab --workload chase --sweep 1:1024 --svg reach.svg\n"
               "  uvm-lab --machine h100 --costs H100 --workload growing --footprint-mib 512 --gpu-mib 256\n"
               "  uvm-lab --validate all\n"
               "  uvm-lab --serve 8080");
    return uvm::cli::parse(app, argc, argv);
}

}  // namespace uvm::lab
