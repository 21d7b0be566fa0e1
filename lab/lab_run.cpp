// One run of the page-size lab, shared by uvm-lab and its browser lab
// (lab_run.h).
#include "lab/lab_run.h"

#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdlib>

namespace uvm::lab {

namespace {

constexpr uint64_t kBase = 1ull << 40, M = 1ull << 20;

bool fail(std::string *why, const std::string &text) {
    *why = text;
    return false;
}

// One workload (or the trace) under one policy at one footprint.
bool run_one(const LabOptions &o, const CostModel &costs, Policy policy, uint64_t footprint, PolicyResult *out,
             std::string *why) {
    Simulator sim(o.model, policy);
    if (!sim.valid())
        return fail(why, "the machine model is not valid (TLB entries must be a non-zero multiple of ways, SMs > 0)");
    sim.set_costs(costs);
    sim.set_gpu_memory(o.gpu_memory);
    if (!o.trace.empty()) {
        TraceReader reader;
        why->clear();
        if (!reader.open(o.trace) || !replay(reader, sim, why)) {
            if (why->empty())
                *why = reader.error();
            return false;
        }
    } else {
        // The object is rounded to 2 MiB so that every policy can place it.
        const uint64_t size = (footprint + 2 * M - 1) & ~(2 * M - 1);
        if (sim.allocate(kBase, size) != UVM_OK)
            return fail(why, "cannot place the workload's object");
        WorkloadParams w = o.work;
        w.footprint = footprint;
        Workload work(w, kBase);
        Access a;
        while (work.next(&a))
            sim.access(a);
    }
    out->policy = policy;
    out->stats = sim.stats();
    out->time = sim.time();
    return true;
}

void json_number(std::string *s, const char *key, double v, bool comma = true) {
    char text[96];
    std::snprintf(text, sizeof text, "\"%s\":%.17g%s", key, std::isfinite(v) ? v : 0.0, comma ? "," : "");
    *s += text;
}

void json_curve(std::string *s, const char *key, const CostCurve &c, const char *unit, uint64_t unit_bytes) {
    *s += std::string("\"") + key + "\":{";
    json_number(s, "call_us", c.call_us);
    json_number(s, "per_unit_us", c.per_unit_us);
    json_number(s, "bend_us", c.bend_us);
    json_number(s, "knee_bytes", c.knee_units * double(unit_bytes));
    *s += "\"text\":" + json_string(describe_curve(c, unit, unit_bytes)) + "}";
}

}  // namespace

std::string json_string(const std::string &v) {
    std::string s = "\"";
    for (const char c : v) {
        if (c == '"' || c == '\\') {
            s += '\\';
            s += c;
        } else if (static_cast<unsigned char>(c) < 0x20) {
            char esc[8];
            std::snprintf(esc, sizeof esc, "\\u%04x", c);
            s += esc;
        } else {
            s += c;
        }
    }
    return s + "\"";
}

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

bool compute(const LabOptions &o, LabOutcome *out, std::string *why) {
    LabOutcome r;
    if (!o.costs_device.empty()) {
        if (load_costs(o.calibration, o.costs_device, &r.costs, why) != UVM_OK)
            return false;
        r.costed = true;
    }
    if (o.sweep_hi == 0) {
        for (Policy p : o.policies) {
            PolicyResult row;
            if (!run_one(o, r.costs, p, o.work.footprint, &row, why))
                return false;
            r.rows.push_back(row);
        }
    } else {
        for (uint64_t mib = o.sweep_lo; mib <= o.sweep_hi; mib *= 2)
            r.footprints.push_back(mib * M);
        r.miss_rates.assign(o.policies.size(), {});
        for (uint64_t fp : r.footprints)
            for (size_t p = 0; p < o.policies.size(); ++p) {
                PolicyResult row;
                if (!run_one(o, r.costs, o.policies[p], fp, &row, why))
                    return false;
                r.miss_rates[p].push_back(row.stats.l2_miss_rate());
            }
    }
    *out = std::move(r);
    return true;
}

std::string model_line(const LabOptions &o) {
    char text[512];
    std::snprintf(text, sizeof text,
                  "# model: %u SMs, L1 %u entries %u-way, L2 %u entries %u-way, page-walk cache %u, "
                  "%.1f/%.1f/%.1f ns, coalescing %" PRIu64 " MiB (machine '%s'%s)%s%s",
                  o.model.sms, o.model.l1.entries, o.model.l1.ways, o.model.l2.entries, o.model.l2.ways,
                  o.model.pwc_entries, o.model.l1_hit_ns, o.model.l2_hit_ns, o.model.walk_ref_ns,
                  o.model.coalesce_bytes / M, o.machine.c_str(),
                  o.machine == "example" ? ": round numbers for teaching, not a measured GPU" : "",
                  o.costs_device.empty() ? "" : "; costs of ", o.costs_device.c_str());
    return text;
}

// ns/access and walk ns % are translation's; pin ms and move ms the costs of
// pinning the pages and of migrating them (with --costs; 0 without).
void print_table(FILE *f, const std::vector<PolicyResult> &rows) {
    std::fprintf(f, "%-9s %10s %8s %8s %10s %12s %10s %10s %8s %10s %10s %10s %10s %10s %10s\n", "policy",
                 "accesses", "L1 miss", "L2 miss", "walks", "walk reads", "PT KiB", "alloc MiB", "touched", "faults",
                 "moved MiB", "ns/access", "walk ns %", "pin ms", "move ms");
    for (const PolicyResult &r : rows) {
        const Stats &s = r.stats;
        const TimeSplit &t = r.time;
        const double per = s.accesses ? t.translation() / double(s.accesses) : 0;
        std::fprintf(f,
                     "%-9s %10" PRIu64 " %7.2f%% %7.2f%% %10" PRIu64 " %12" PRIu64 " %10.1f %10.1f %7.1f%% %10" PRIu64
                     " %10.1f %10.2f %9.1f%% %10.2f %10.2f\n",
                     policy_name(r.policy), s.accesses, 100 * s.l1_miss_rate(), 100 * s.l2_miss_rate(), s.l2_misses,
                     s.walk_refs, double(s.page_table_bytes) / 1024, double(s.allocated_bytes) / double(M),
                     s.allocated_bytes ? 100.0 * double(s.touched_bytes) / double(s.allocated_bytes) : 0, s.faults,
                     double(s.bytes_migrated_in) / double(M), per,
                     t.translation() > 0 ? 100 * t.walks / t.translation() : 0, t.mapping / 1e6, t.migration / 1e6);
    }
}

void print_sweep(FILE *f, const LabOptions &o, const LabOutcome &r) {
    std::fprintf(f, "%-12s", "footprint");
    for (Policy p : o.policies)
        std::fprintf(f, " %10s", policy_name(p));
    std::fprintf(f, "   (L2 TLB miss rate)\n");
    for (size_t i = 0; i < r.footprints.size(); ++i) {
        std::fprintf(f, "%8" PRIu64 " MiB", r.footprints[i] / M);
        for (size_t p = 0; p < o.policies.size(); ++p)
            std::fprintf(f, " %9.2f%%", 100 * r.miss_rates[p][i]);
        std::fprintf(f, "\n");
    }
}

std::string outcome_json(const LabOptions &o, const LabOutcome &r) {
    std::string s = "{\"model\":" + json_string(model_line(o)) + ",\"machine\":" + json_string(o.machine) + ",";
    s += "\"policies\":[";
    for (size_t p = 0; p < o.policies.size(); ++p)
        s += (p ? ",\"" : "\"") + std::string(policy_name(o.policies[p])) + "\"";
    s += "],\"rows\":[";
    for (size_t i = 0; i < r.rows.size(); ++i) {
        const Stats &st = r.rows[i].stats;
        const TimeSplit &t = r.rows[i].time;
        s += i ? ",{" : "{";
        s += "\"policy\":\"" + std::string(policy_name(r.rows[i].policy)) + "\",";
        json_number(&s, "accesses", double(st.accesses));
        json_number(&s, "l1_miss_rate", st.l1_miss_rate());
        json_number(&s, "l2_miss_rate", st.l2_miss_rate());
        json_number(&s, "walks", double(st.l2_misses));
        json_number(&s, "walk_reads", double(st.walk_refs));
        json_number(&s, "page_table_bytes", double(st.page_table_bytes));
        json_number(&s, "allocated_bytes", double(st.allocated_bytes));
        json_number(&s, "touched_bytes", double(st.touched_bytes));
        json_number(&s, "faults", double(st.faults));
        json_number(&s, "moved_in_bytes", double(st.bytes_migrated_in));
        json_number(&s, "moved_out_bytes", double(st.bytes_migrated_out));
        json_number(&s, "ns_per_access", st.accesses ? t.translation() / double(st.accesses) : 0);
        s += "\"time_ns\":{";
        json_number(&s, "l1", t.l1);
        json_number(&s, "l2", t.l2);
        json_number(&s, "walks", t.walks);
        json_number(&s, "pinning", t.mapping);
        json_number(&s, "migration", t.migration, false);
        s += "}}";
    }
    s += "],\"sweep\":{\"footprint_bytes\":[";
    for (size_t i = 0; i < r.footprints.size(); ++i)
        s += (i ? "," : "") + std::to_string(r.footprints[i]);
    s += "],\"l2_miss_rate\":[";
    for (size_t p = 0; p < r.miss_rates.size(); ++p) {
        s += p ? ",[" : "[";
        for (size_t i = 0; i < r.miss_rates[p].size(); ++i) {
            char v[32];
            std::snprintf(v, sizeof v, "%s%.17g", i ? "," : "", r.miss_rates[p][i]);
            s += v;
        }
        s += "]";
    }
    s += "]},\"costs\":";
    if (!r.costed) {
        s += "null}";
        return s;
    }
    const CostModel &c = r.costs;
    s += "{\"device\":" + json_string(o.costs_device) + ",";
    json_curve(&s, "pin_4k", c.pin_4k, "4K page", 4096);
    s += ",";
    json_curve(&s, "pin_2m", c.pin_2m, "2M page", 2 * M);
    s += ",";
    json_curve(&s, "set_access", c.set_access, "2 MiB handle", 2 * M);
    s += ",";
    json_number(&s, "create_us", c.create_us);
    json_number(&s, "map_us", c.map_us);
    json_number(&s, "interleave_per_handle_us", c.interleave.per_unit_us);
    json_number(&s, "copy_in_latency_us", c.copy_h2d.call_us);
    json_number(&s, "copy_in_gb_s", c.copy_h2d.per_unit_us > 0 ? 1e-3 / c.copy_h2d.per_unit_us : 0);
    json_number(&s, "copy_out_latency_us", c.copy_d2h.call_us);
    json_number(&s, "copy_out_gb_s", c.copy_d2h.per_unit_us > 0 ? 1e-3 / c.copy_d2h.per_unit_us : 0, false);
    s += "}}";
    return s;
}

std::string describe_curve(const CostCurve &c, const char *unit, uint64_t unit_bytes) {
    char text[256];
    const double gib_units = double(1ull << 30) / double(unit_bytes);
    if (c.bend_us > 0)
        std::snprintf(text, sizeof text,
                      "%.1f us + %.4g us per %s to a knee at %.0f MiB, rising to %.4g us per %s at 1 GiB", c.call_us,
                      c.per_unit_us, unit, c.knee_units * double(unit_bytes) / double(M), c.marginal_at(gib_units),
                      unit);
    else
        std::snprintf(text, sizeof text, "%.1f us + %.4g us per %s (no bend)", c.call_us, c.per_unit_us, unit);
    return text;
}

}  // namespace uvm::lab
