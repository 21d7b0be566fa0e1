// The page-size lab's C API (include/uvm/uvm_lab.h) over lab/page_size_sim.h.
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_set>

#include "common/enum_value.h"
#include "lab/page_size_costs.h"
#include "lab/page_size_sim.h"
#include "lab/page_size_workloads.h"
#include "uvm/uvm_lab.h"

struct uvm_lab {
    explicit uvm_lab(const uvm::lab::MachineModel &m, uvm::lab::Policy p) : sim(m, p) {}
    uvm::lab::Simulator sim;
};

namespace {

// Live labs: a destroyed or made-up handle is refused, never dereferenced.
std::mutex g_lock;
std::unordered_set<const uvm_lab_t *> &live() {
    static std::unordered_set<const uvm_lab_t *> labs;
    return labs;
}

bool is_live(const uvm_lab_t *lab) {
    std::lock_guard<std::mutex> guard(g_lock);
    return live().count(lab) != 0;
}

template <typename F>
uvm_status_t with_lab(uvm_lab_t *lab, F &&f) {
    if (!lab)
        return UVM_ERR_INVALID_ARGUMENT;
    if (!is_live(lab))
        return UVM_ERR_INVALID_HANDLE;
    try {
        return f(*lab);
    } catch (const std::bad_alloc &) {
        return UVM_ERR_NO_HOST_MEMORY;
    }
}

}  // namespace

uvm_status_t uvm_lab_create(const uvm_lab_model_t *model, uvm_lab_policy_t policy, uvm_lab_t **out) {
    const int p = uvm::enum_value(policy);
    if (!model || !out || p < UVM_LAB_PAGES_4K || p > UVM_LAB_MOSAIC)
        return UVM_ERR_INVALID_ARGUMENT;
    uvm::lab::MachineModel m;
    m.sms = model->sms;
    m.l1 = {model->l1_entries, model->l1_ways};
    m.l2 = {model->l2_entries, model->l2_ways};
    m.pwc_entries = model->pwc_entries;
    m.l1_hit_ns = model->l1_hit_ns;
    m.l2_hit_ns = model->l2_hit_ns;
    m.walk_ref_ns = model->walk_ref_ns;
    m.coalesce_bytes = model->coalesce_bytes;
    m.random_replacement = model->random_replacement != 0;
    if (!(m.l1_hit_ns >= 0 && m.l2_hit_ns >= 0 && m.walk_ref_ns >= 0) || model->reserved != 0)
        return UVM_ERR_INVALID_ARGUMENT;  // negative or NaN
    try {
        auto lab = std::make_unique<uvm_lab>(m, static_cast<uvm::lab::Policy>(p));
        if (!lab->sim.valid())
            return UVM_ERR_INVALID_ARGUMENT;
        lab->sim.set_gpu_memory(model->gpu_memory);
        std::lock_guard<std::mutex> guard(g_lock);
        live().insert(lab.get());
        *out = lab.release();
    } catch (const std::bad_alloc &) {
        return UVM_ERR_NO_HOST_MEMORY;
    }
    return UVM_OK;
}

uvm_status_t uvm_lab_destroy(uvm_lab_t *lab) {
    if (!lab)
        return UVM_ERR_INVALID_ARGUMENT;
    {
        std::lock_guard<std::mutex> guard(g_lock);
        if (live().erase(lab) == 0)
            return UVM_ERR_INVALID_HANDLE;
    }
    delete lab;
    return UVM_OK;
}

uvm_status_t uvm_lab_allocate(uvm_lab_t *lab, uint64_t base, uint64_t size) {
    return with_lab(lab, [&](uvm_lab &l) { return l.sim.allocate(base, size); });
}

uvm_status_t uvm_lab_free(uvm_lab_t *lab, uint64_t base) {
    return with_lab(lab, [&](uvm_lab &l) { return l.sim.free(base); });
}

uvm_status_t uvm_lab_access(uvm_lab_t *lab, const uvm_lab_access_t *accesses, size_t count) {
    if (count && !accesses)
        return UVM_ERR_INVALID_ARGUMENT;
    return with_lab(lab, [&](uvm_lab &l) {
        for (size_t i = 0; i < count; ++i)
            if (accesses[i].size == 0 || accesses[i].reserved != 0)
                return UVM_ERR_INVALID_ARGUMENT;  // before any is replayed
        for (size_t i = 0; i < count; ++i) {
            uvm::lab::Access a;
            a.address = accesses[i].address;
            a.size = accesses[i].size;
            a.write = accesses[i].write != 0;
            a.processor = accesses[i].processor;
            l.sim.access(a);
        }
        return UVM_OK;
    });
}

uvm_status_t uvm_lab_run(uvm_lab_t *lab, const uvm_lab_workload_t *w, uint64_t base) {
    if (!w)
        return UVM_ERR_INVALID_ARGUMENT;
    const int pattern = uvm::enum_value(w->pattern);
    const uint64_t stride = w->stride ? w->stride : 4096;
    // A pointer chase keeps its cycle in memory: 2^28 elements at most.
    if (pattern < UVM_LAB_SEQUENTIAL || pattern > UVM_LAB_GROWING_SET || w->footprint < 4096 ||
        w->footprint > (1ull << 46) || (pattern == UVM_LAB_POINTER_CHASE && w->footprint / stride > (1ull << 28)))
        return UVM_ERR_INVALID_ARGUMENT;
    return with_lab(lab, [&](uvm_lab &l) {
        uvm::lab::WorkloadParams p;
        p.pattern = static_cast<uvm::lab::Pattern>(pattern);
        p.footprint = w->footprint;
        p.accesses = w->accesses;
        p.stride = stride;
        p.processors = w->processors ? w->processors : 1;
        p.access_size = w->access_size ? w->access_size : 8;
        p.seed = w->seed;
        uvm::lab::Workload work(p, base);
        uvm::lab::Access a;
        while (work.next(&a))
            l.sim.access(a);
        return UVM_OK;
    });
}

uvm_status_t uvm_lab_replay(uvm_lab_t *lab, const char *path, char *error, size_t error_size) {
    if (!path)
        return UVM_ERR_INVALID_ARGUMENT;
    return with_lab(lab, [&](uvm_lab &l) {
        uvm::lab::TraceReader reader;
        std::string why;
        const bool ok = reader.open(path) && uvm::lab::replay(reader, l.sim, &why);
        if (ok)
            return UVM_OK;
        if (why.empty())
            why = reader.error();
        if (error && error_size) {
            std::strncpy(error, why.c_str(), error_size - 1);
            error[error_size - 1] = 0;
        }
        return UVM_ERR_INVALID_ARGUMENT;
    });
}

uvm_status_t uvm_lab_stats(uvm_lab_t *lab, uvm_lab_stats_t *out) {
    if (!out)
        return UVM_ERR_INVALID_ARGUMENT;
    return with_lab(lab, [&](uvm_lab &l) {
        const uvm::lab::Stats s = l.sim.stats();
        const uvm::lab::TimeSplit t = l.sim.time();
        uvm_lab_stats_t r;
        std::memset(&r, 0, sizeof(r));
        r.accesses = s.accesses;
        r.l1_misses = s.l1_misses;
        r.l2_misses = s.l2_misses;
        r.pwc_hits = s.pwc_hits;
        r.walk_refs = s.walk_refs;
        r.unmapped = s.unmapped;
        r.allocated_bytes = s.allocated_bytes;
        r.touched_bytes = s.touched_bytes;
        r.page_table_bytes = s.page_table_bytes;
        r.coalesced_frames = s.coalesced_frames;
        r.faults = s.faults;
        r.bytes_migrated_in = s.bytes_migrated_in;
        r.bytes_migrated_out = s.bytes_migrated_out;
        r.time_l1_ns = t.l1;
        r.time_l2_ns = t.l2;
        r.time_walks_ns = t.walks;
        r.time_mapping_ns = t.mapping;
        r.time_migration_ns = t.migration;
        *out = r;
        return UVM_OK;
    });
}

uvm_status_t uvm_lab_preset(const char *name, uvm_lab_model_t *out) {
    if (!name || !out)
        return UVM_ERR_INVALID_ARGUMENT;
    uvm::lab::MachineModel m;
    try {
        if (!uvm::lab::machine_preset(name, &m))
            return UVM_ERR_NOT_FOUND;
    } catch (const std::bad_alloc &) {
        return UVM_ERR_NO_HOST_MEMORY;
    }
    uvm_lab_model_t r;
    std::memset(&r, 0, sizeof(r));
    r.sms = m.sms;
    r.l1_entries = m.l1.entries;
    r.l1_ways = m.l1.ways;
    r.l2_entries = m.l2.entries;
    r.l2_ways = m.l2.ways;
    r.pwc_entries = m.pwc_entries;
    r.l1_hit_ns = m.l1_hit_ns;
    r.l2_hit_ns = m.l2_hit_ns;
    r.walk_ref_ns = m.walk_ref_ns;
    r.coalesce_bytes = m.coalesce_bytes;
    r.random_replacement = m.random_replacement ? 1 : 0;
    *out = r;
    return UVM_OK;
}

uvm_status_t uvm_lab_set_costs(uvm_lab_t *lab, const char *path, const char *device, char *error,
                               size_t error_size) {
    if (!device)
        return UVM_ERR_INVALID_ARGUMENT;
    return with_lab(lab, [&](uvm_lab &l) {
        std::string why;
        uvm::lab::CostModel costs;
        const uvm_status_t s = uvm::lab::load_costs(path ? path : "", device, &costs, &why);
        if (s == UVM_OK) {
            l.sim.set_costs(costs);
            return UVM_OK;
        }
        if (error && error_size) {
            std::strncpy(error, why.c_str(), error_size - 1);
            error[error_size - 1] = 0;
        }
        return s;
    });
}
