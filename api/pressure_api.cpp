// The C functions of uvm_pressure.h, over api/entry.h.
#include <algorithm>

#include "api/entry.h"
#include "compact/compact.h"

using namespace uvm::api;

// The client a sleep or wake names, then `op` on it.
namespace {

template <typename F>
uvm_status_t with_client(uvm_manager_t *m, uvm_client_t *client, F &&op) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (!client)
            return null_argument("client");
        const std::shared_ptr<uvm::Client> c = mgr.clients().lookup(client);
        return c ? op(mgr, *c) : dead_client(client);
    });
}

}  // namespace

extern "C" {

uvm_status_t uvm_mem_evict(uvm_manager_t *m, uvm_mem_t *h) {
    return with_mem(m, h, [](Manager &mgr, Mem &mem) {
        const uvm_status_t status = uvm::mem_evict(mgr, mem);
        if (status == UVM_ERR_OUT_OF_MEMORY)  // over the host limit for evicted bytes
            uvm::note_oom(mgr, uvm::oom_request("evict", mem));
        return status;
    });
}

uvm_status_t uvm_mem_make_resident(uvm_manager_t *m, uvm_mem_t *h) {
    return with_mem(m, h, [](Manager &mgr, Mem &mem) { return make_resident(mgr, mem); });
}

uvm_status_t uvm_client_create(uvm_manager_t *m, const char *name, uvm_client_t **out) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        return mgr.clients().create(name, out);
    });
}

uvm_status_t uvm_client_create_sleepable(uvm_manager_t *m, const char *name, uvm_client_t **out) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (!mgr.backend().offload())
            return uvm::fail(UVM_ERR_NOT_SUPPORTED, "the %s backend cannot give a client's memory back and take it again",
                             mgr.backend().kind() == UVM_BACKEND_CUDA ? "CUDA" : "sim");
        return mgr.clients().create(name, out, std::make_unique<uvm::SleepState>(mgr));
    });
}

uvm_status_t uvm_client_sleep(uvm_manager_t *m, uvm_client_t *client, const uvm_sleep_params_t *params) {
    uvm_sleep_params_t keep_all;
    std::memset(&keep_all, 0, sizeof(keep_all));
    return with_client(m, client, [&](Manager &mgr, uvm::Client &c) {
        if (params && !uvm::sleep_params_valid(*params))
            return uvm::fail(UVM_ERR_INVALID_ARGUMENT,
                             "params: an unknown mode, or tags NULL with a tag_count, or a NULL tag");
        return uvm::client_sleep(mgr, c, params ? *params : keep_all);
    });
}

uvm_status_t uvm_client_wake(uvm_manager_t *m, uvm_client_t *client) {
    return with_client(m, client, [&](Manager &mgr, uvm::Client &c) { return uvm::client_wake(mgr, c); });
}

uvm_status_t uvm_client_set_sleep_policy(uvm_manager_t *m, uvm_client_t *client, const uvm_sleep_policy_t *policy) {
    return with_client(m, client, [&](Manager &mgr, uvm::Client &c) {
        if (!policy || !uvm::sleep_policy_valid(*policy))
            return UVM_ERR_INVALID_ARGUMENT;
        return uvm::client_set_sleep_policy(mgr, c, *policy);
    });
}

uvm_status_t uvm_manager_set_sleep_host_limit(uvm_manager_t *m, uint64_t bytes) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        mgr.sleep_host_limit = bytes;
        return UVM_OK;
    });
}

uvm_status_t uvm_mem_set_sleep_mode(uvm_manager_t *m, uvm_mem_t *h, uvm_sleep_mode_t mode) {
    return with_mem(m, h, [&](Manager &, Mem &mem) -> uvm_status_t {
        const int v = uvm::enum_value(mode);
        if (v < UVM_SLEEP_DEFAULT || v > UVM_SLEEP_DISCARD)
            return uvm::fail(UVM_ERR_INVALID_ARGUMENT,
                             "mode %d: no such sleep mode; UVM_SLEEP_DEFAULT, _KEEP or _DISCARD", v);
        mem.sleep_mode = static_cast<uint8_t>(v);
        return UVM_OK;
    });
}

uvm_status_t uvm_client_destroy(uvm_manager_t *m, uvm_client_t *client) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (!client)
            return null_argument("client");
        const uvm_status_t status = mgr.clients().destroy(client);
        if (status != UVM_ERR_BUSY)
            return status;
        // Its parked objects (uvm/mem.h, mem_park) count as its own until
        // dropped: drop every thread's, then ask again.
        for (uint32_t g = 0; g < mgr.gpu_count(); ++g)
            mgr.gpu(g).caches.flush_all();
        return mgr.clients().destroy(client);
    });
}

uvm_status_t uvm_client_set_budget(uvm_manager_t *m, uvm_client_t *client, uint32_t gpu, uint64_t bytes) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (!client)
            return null_argument("client");
        if (gpu != UVM_CLIENT_SYSMEM && gpu >= mgr.gpu_count())
            return uvm::bad_gpu(mgr, gpu);
        const std::shared_ptr<uvm::Client> c = mgr.clients().lookup(client);
        if (!c)
            return dead_client(client);
        uvm::set_client_budget(mgr, *c, gpu == UVM_CLIENT_SYSMEM, gpu == UVM_CLIENT_SYSMEM ? 0 : gpu, bytes);
        return UVM_OK;
    });
}

uvm_status_t uvm_client_info(uvm_manager_t *m, uvm_client_t *client, uvm_client_info_t *out) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (!client || !out)
            return null_argument(!client ? "client" : "out");
        const std::shared_ptr<uvm::Client> c = mgr.clients().lookup(client);
        if (!c)
            return dead_client(client);
        uvm_client_info_t r;
        std::memset(&r, 0, sizeof(r));
        std::snprintf(r.name, sizeof(r.name), "%s", c->name.c_str());
        const uvm::ClientParked parked = uvm::client_parked(mgr, *c);
        r.objects = parked.live_objects;
        for (uint32_t g = 0; g < mgr.gpu_count(); ++g) {
            r.vidmem_used[g] = c->vidmem[g].used.load();
            // A record parked and charged since the look above, or one whose
            // charge a flush ended since, may stand between the two reads.
            r.vidmem_cached[g] = std::min(parked.cached[g], r.vidmem_used[g]);
            r.vidmem_evictable[g] = c->vidmem[g].evictable.load();
            r.vidmem_budget[g] = c->vidmem[g].budget.load();
        }
        r.sysmem_used = c->sysmem.used.load();
        r.sysmem_budget = c->sysmem.budget.load();
        if (c->sleep) {
            r.sleepable = 1;
            r.asleep = c->sleep->asleep.load();
            for (uint32_t g = 0; g < mgr.gpu_count(); ++g)
                r.vidmem_asleep[g] = c->sleep->asleep_bytes[g].load();
            r.sleep_host_bytes = c->sleep->host_bytes.load();
            r.sleep_host_held = c->sleep->backup.held();
            r.sleep_host_reserve = c->sleep->host_reserve.load();
            r.sleep_host_policy = c->sleep->host_policy.load();
        }
        *out = r;
        return UVM_OK;
    });
}

uvm_status_t uvm_pressure_watermarks(uvm_manager_t *m, uvm_client_t *client, uint32_t gpu, const uint32_t *percents,
                                     uint32_t count) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (count && !percents)
            return null_argument("percents");
        if (count > 16)
            return uvm::fail(UVM_ERR_INVALID_ARGUMENT, "count %u is over the limit of 16 watermarks", count);
        for (uint32_t i = 0; i < count; ++i)
            if (percents[i] == 0 || percents[i] > 100)
                return uvm::fail(UVM_ERR_INVALID_ARGUMENT, "percents[%u] is %u: a watermark is 1 to 100", i,
                                 percents[i]);
        const bool sys = gpu == UVM_CLIENT_SYSMEM;
        if (!client && sys)
            return uvm::fail(UVM_ERR_INVALID_GPU, "UVM_CLIENT_SYSMEM needs a client: the GPUs' held memory has no "
                                                  "sysmem watermarks");
        if (!sys && gpu >= mgr.gpu_count())
            return uvm::bad_gpu(mgr, gpu);
        if (!client) {
            GpuState &g = mgr.gpu(gpu);
            g.pressure->held_marks.set(percents, count,
                             [&] { return uvm::Watermarks::Level{g.held_bytes.load(), g.info.memory_total}; });
            return UVM_OK;
        }
        const std::shared_ptr<uvm::Client> c = mgr.clients().lookup(client);
        if (!c)
            return dead_client(client);
        // A watched usage is the objects' own: parked objects (uvm/mem.h,
        // mem_park), charged to their client, go back first, and none is
        // parked while the marks are set.
        if (!sys && count)
            mgr.gpu(gpu).caches.flush_all();
        uvm::set_client_watermarks(*c, sys, sys ? 0 : gpu, percents, count);
        return UVM_OK;
    });
}

uvm_status_t uvm_pressure_fd(uvm_manager_t *m, int *fd) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (!fd)
            return null_argument("fd");
        const int f = mgr.pressure().fd();
        if (f < 0)
            return uvm::fail(UVM_ERR_NOT_SUPPORTED, "no eventfd on this system");
        *fd = f;
        return UVM_OK;
    });
}

uvm_status_t uvm_pressure_events(uvm_manager_t *m, uvm_pressure_event_t *out, uint32_t max, uint32_t *count) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (!count || (max && !out))
            return null_argument(!count ? "count" : "out");
        *count = mgr.pressure().take(out, max);
        return UVM_OK;
    });
}

uvm_status_t uvm_mem_touch(uvm_manager_t *m, uvm_mem_t *h) {
    return with_mem(m, h, [](Manager &, Mem &mem) {
        uvm::mem_touch(mem);
        return UVM_OK;
    });
}

uvm_status_t uvm_mem_residency(uvm_manager_t *m, uvm_mem_t *h, uvm_residency_t *out) {
    return with_mem(m, h, [&](Manager &, Mem &mem) -> uvm_status_t {
        if (!out)
            return null_argument("out");
        uvm_residency_t r;
        std::memset(&r, 0, sizeof(r));
        r.resident = !mem.evicted;
        r.evictions = mem.evictions;
        r.restores = mem.restores;
        r.discards = mem.discards;
        *out = r;
        return UVM_OK;
    });
}

uvm_status_t uvm_gpu_compact(uvm_manager_t *m, uint32_t gpu, uint32_t flags, uvm_compact_result_t *out) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (gpu >= mgr.gpu_count())
            return UVM_ERR_INVALID_GPU;
        if (flags & ~(UVM_COMPACT_WAIT | UVM_COMPACT_RELEASE))
            return UVM_ERR_INVALID_ARGUMENT;
        uvm::CompactOptions options;
        options.wait = (flags & UVM_COMPACT_WAIT) != 0;
        options.release = (flags & UVM_COMPACT_RELEASE) != 0;
        uvm_compact_result_t result;
        const uvm_status_t status = uvm::compact_gpu(mgr, gpu, options, &result);
        if (out)
            *out = result;
        return status;
    });
}

uvm_status_t uvm_gpu_set_compact_on_oom(uvm_manager_t *m, uint32_t gpu, int on) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (gpu >= mgr.gpu_count())
            return UVM_ERR_INVALID_GPU;
        mgr.gpu(gpu).compaction->on_oom.store(on != 0, std::memory_order_relaxed);
        return UVM_OK;
    });
}

uvm_status_t uvm_manager_set_eviction_policy(uvm_manager_t *m, const uvm_eviction_policy_t *policy) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (!policy)
            return null_argument("policy");
        mgr.eviction_disabled = policy->disabled != 0;
        mgr.evicted_limit = policy->sysmem_limit;
        return UVM_OK;
    });
}

}  // extern "C"
