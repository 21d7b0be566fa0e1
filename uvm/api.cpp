// The C API: checks every argument and handle, takes the object's lock, and
// calls into uvm/mem.cpp.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>

#include "common/enum_value.h"
#include "common/sizes.h"
#include "uvm/api.h"
#include "uvm/mem.h"
#include "pressure/client.h"
#include "observe/metrics_server.h"
#include "observe/report.h"
#include "pressure/residency.h"
#include "share/share.h"
#include "stream/stream.h"

using uvm::GpuState;
using uvm::Manager;
using uvm::Mem;

// A manager of the parent, called from a fork()ed child: refused untouched.
#define UVM_REFUSE_IN_FORKED_CHILD(m)                       \
    do {                                                    \
        if ((m) && uvm::from_handle(m)->forked())           \
            return UVM_ERR_FORKED;                          \
    } while (0)

namespace {

// Host allocation failure anywhere below becomes a status, never an exception across the C API.
template <typename F>
uvm_status_t guarded(F &&f) {
    try {
        return f();
    } catch (const std::bad_alloc &) {
        return UVM_ERR_NO_HOST_MEMORY;
    }
}

// The live object a handle names, locked (*guard); INVALID_HANDLE for a
// freed handle or one of another manager.
uvm_status_t lock_live(Manager &mgr, uvm_mem_t *handle, std::shared_ptr<Mem> *mem,
                       std::unique_lock<std::mutex> *guard) {
    *mem = mgr.lookup(handle);
    if (!*mem)
        return UVM_ERR_INVALID_HANDLE;
    *guard = std::unique_lock<std::mutex>((*mem)->lock);
    return (*mem)->gone() ? UVM_ERR_INVALID_HANDLE : UVM_OK;
}

// Run `op(mgr, mem)` with the object's lock held, after checking the handle.
template <typename F>
uvm_status_t with_mem(uvm_manager_t *m, uvm_mem_t *handle, F &&op) {
    if (!m || !handle)
        return UVM_ERR_INVALID_ARGUMENT;
    Manager &mgr = *uvm::from_handle(m);
    return guarded([&]() -> uvm_status_t {
        std::shared_ptr<Mem> mem;
        std::unique_lock<std::mutex> guard;
        const uvm_status_t status = lock_live(mgr, handle, &mem, &guard);
        return status == UVM_OK ? op(mgr, *mem) : status;
    });
}

// The same, where the call also names a GPU.
template <typename F>
uvm_status_t with_mem_gpu(uvm_manager_t *m, uvm_mem_t *handle, uint32_t gpu, F &&op) {
    if (m && gpu >= uvm::from_handle(m)->gpu_count())
        return UVM_ERR_INVALID_GPU;
    return with_mem(m, handle, std::forward<F>(op));
}

// Bring an evicted object back (residency.h); an OUT_OF_MEMORY leaves its
// report (report.h).
uvm_status_t make_resident(Manager &mgr, Mem &mem, const Mem *holding = nullptr) {
    const uvm_status_t status = uvm::mem_make_resident(mgr, mem, holding);
    if (status == UVM_ERR_OUT_OF_MEMORY) {
        uvm::OomRequest r;
        r.call = "restore";
        r.size = mem.alloc_size;
        r.gpu = mem.owner;
        r.chunk_size = mem.chunk_size;
        r.flags = mem.flags;
        uvm::note_oom(mgr, r);
    }
    return status;
}

// with_mem_gpu for calls that need the object's memory: an evicted object
// is made resident first (residency.h).
template <typename F>
uvm_status_t with_resident_mem(uvm_manager_t *m, uvm_mem_t *handle, uint32_t gpu, F &&op) {
    return with_mem_gpu(m, handle, gpu, [&](Manager &mgr, Mem &mem) {
        const uvm_status_t status = make_resident(mgr, mem);
        return status == UVM_OK ? op(mgr, mem) : status;
    });
}

// A map or unmap call on the object, recorded in the trace when it succeeds.
template <typename F>
uvm_status_t map_call(uvm_manager_t *m, uvm_mem_t *h, uint32_t gpu, bool resident, bool map,
                             uvm::MapKind kind, F &&op) {
    auto traced = [&](Manager &mgr, Mem &mem) {
        const uvm_status_t status = op(mgr, mem);
        if (status == UVM_OK)
            uvm::trace_event(mgr, mem, map ? uvm::TraceKind::Map : uvm::TraceKind::Unmap, kind, gpu);
        return status;
    };
    return resident ? with_resident_mem(m, h, gpu, traced) : with_mem(m, h, traced);
}

// Write a report into the caller's buffer (uvm.h, "Reports and metrics").
uvm_status_t copy_out(const std::string &text, char *buf, size_t size, size_t *needed) {
    if (needed)
        *needed = text.size() + 1;
    if (size < text.size() + 1)
        return UVM_ERR_BUFFER_TOO_SMALL;
    std::memcpy(buf, text.c_str(), text.size() + 1);
    return UVM_OK;
}

// A report's format, read into *json; false for one that is neither text nor JSON.
bool report_format(uvm_report_format_t format, bool *json) {
    const int f = uvm::enum_value(format);
    *json = f == UVM_REPORT_JSON;
    return f == UVM_REPORT_TEXT || f == UVM_REPORT_JSON;
}

uvm_status_t check_gpu(uvm_manager_t *m, uint32_t gpu, const void *out) {
    if (!m || !out)
        return UVM_ERR_INVALID_ARGUMENT;
    return gpu < uvm::from_handle(m)->gpu_count() ? UVM_OK : UVM_ERR_INVALID_GPU;
}

// The stream a call names, or null (then *status says why).
// The reference is valid until the thread's next lookup (Streams::lookup).
const std::shared_ptr<uvm::Stream> &stream_of(Manager &mgr, uvm_stream_t *handle, uvm_status_t *status) {
    static const std::shared_ptr<uvm::Stream> none;
    if (!handle) {
        *status = UVM_ERR_INVALID_ARGUMENT;
        return none;
    }
    const std::shared_ptr<uvm::Stream> &stream = mgr.streams().lookup(handle);
    *status = stream ? UVM_OK : UVM_ERR_INVALID_HANDLE;
    return stream;
}


// Run `op(mgr, stream)` on the stream a call names, after checking it.
template <typename F>
uvm_status_t with_stream(uvm_manager_t *m, uvm_stream_t *handle, F &&op) {
    if (!m)
        return UVM_ERR_INVALID_ARGUMENT;
    Manager &mgr = *uvm::from_handle(m);
    return guarded([&]() -> uvm_status_t {
        uvm_status_t status;
        const std::shared_ptr<uvm::Stream> &stream = stream_of(mgr, handle, &status);
        return stream ? op(mgr, stream) : status;
    });
}

// uvm_mem_alloc, where memory freed on streams may be taken back first when
// the GPU is full; on `stream`, from its pool where it holds a run of this kind.
uvm_status_t alloc_object(Manager &mgr, const uvm_mem_alloc_params_t &params, const std::shared_ptr<uvm::Stream> &stream,
                          std::shared_ptr<Mem> *out) {
    uvm_status_t status = UVM_ERR_OUT_OF_MEMORY;
    if (stream && params.backing == UVM_BACKING_VIDMEM && params.gpu < mgr.gpu_count() && params.size &&
        !(params.flags & ~(UVM_MEM_ZERO | UVM_MEM_EVICTABLE | UVM_MEM_USER_MAPPABLE | UVM_MEM_GPU_MAPPED |
                           UVM_MEM_DISCARDABLE))) {
        uvm::ReusedRun want, run;
        want.gpu = params.gpu;
        if (uvm::pick_chunk_size(params.backing, params.size, params.chunk_size,
                                 mgr.gpu(params.gpu).info.page_sizes, &want.chunk_size) == UVM_OK) {
            want.count = (params.size + want.chunk_size - 1) / want.chunk_size;
            want.evictable = (params.flags & (UVM_MEM_EVICTABLE | UVM_MEM_DISCARDABLE)) != 0;
            want.remappable = (params.flags & UVM_MEM_USER_MAPPABLE) && want.chunk_size == UVM_PAGE_SIZE_2M;
            if (mgr.streams().pool_take(*stream, want, &run)) {
                status = uvm::mem_alloc(mgr, params, out, &run);
                if (status == UVM_OK && (params.flags & UVM_MEM_ZERO)) {
                    uvm::backend::CeAddress dst;
                    dst.address = run.phys;
                    std::lock_guard<std::mutex> guard(stream->lock);
                    status = mgr.backend().ce_memset_async(run.gpu, stream->backend, dst, 0,
                                                           run.chunk_size * run.count);
                    if (status != UVM_OK) {
                        // The new object gives the run back as it took it (to the pool, below).
                        std::lock_guard<std::mutex> mem_guard((*out)->lock);
                        uvm::ReusedRun same;
                        const bool detached = uvm::mem_detach_run(mgr, **out, &same);
                        UVM_ASSERT(detached && same.phys == run.phys && same.count == run.count);
                        (void)detached;
                        out->reset();
                    }
                }
                if (status != UVM_OK)
                    mgr.streams().pool_put(*stream, run);
                return status;
            }
        }
    }
    status = uvm::mem_alloc(mgr, params, out);
    if (status == UVM_ERR_OUT_OF_MEMORY && mgr.streams().reap(true) != 0)
        status = uvm::mem_alloc(mgr, params, out);
    if (status == UVM_ERR_OUT_OF_MEMORY && params.backing == UVM_BACKING_VIDMEM &&
        uvm::eviction_could_make_room(mgr, params.gpu, params.size, nullptr, nullptr))
        while (status == UVM_ERR_OUT_OF_MEMORY && uvm::evict_one(mgr, params.gpu, nullptr, nullptr))
            status = uvm::mem_alloc(mgr, params, out);
    return status;
}

// Free now, or when the work its streams queued is done; `on`: ordered on
// that stream (uvm_mem_free_async).
uvm_status_t free_object(Manager &mgr, uvm_mem_t *handle, const std::shared_ptr<uvm::Stream> &on) {
    std::shared_ptr<Mem> mem;
    std::unique_lock<std::mutex> guard;
    uvm_status_t status = lock_live(mgr, handle, &mem, &guard);
    if (status != UVM_OK)
        return status;
    uvm::Streams &streams = mgr.streams();
    std::vector<uvm::Fence> fences;
    mem->users.for_each([&](const std::shared_ptr<uvm::Stream> &user) {
        if (user == on || status != UVM_OK)
            return;  // the free is ordered on it, or an earlier one failed
        uvm::Fence f{user, 0};
        status = streams.fence(*user, &f.value);
        if (status == UVM_OK && on)
            status = streams.wait(*on, f);
        if (status == UVM_OK)
            fences.push_back(std::move(f));
    });
    if (status != UVM_OK)
        return status;  // the object stays as it was
    const bool pooled = on && uvm::mem_can_detach(*mem);
    if (on && !pooled) {
        uvm::Fence f{on, 0};
        status = streams.fence(*on, &f.value);
        if (status != UVM_OK)
            return status;
        fences.push_back(std::move(f));
    }
    // Recorded while the handle is still taken: its next user's alloc comes after.
    uvm::trace_event(mgr, *mem, uvm::TraceKind::Free);
    const std::shared_ptr<Mem> removed = mgr.remove(handle);
    UVM_ASSERT(removed == mem);
    (void)removed;
    if (pooled) {
        uvm::ReusedRun run;
        const bool detached = uvm::mem_detach_run(mgr, *mem, &run);
        UVM_ASSERT(detached);
        (void)detached;
        streams.pool_put(*on, run);
    } else if (fences.empty()) {
        uvm::mem_release(mgr, *mem);
    } else {
        streams.retire(mem, std::move(fences));
    }
    guard.unlock();
    // Now and then, give back what streams have finished with.
    static thread_local uint32_t frees = 0;
    if (streams.pending() && (++frees & 15) == 0)
        streams.reap(false);
    return UVM_OK;
}

}  // namespace

namespace uvm {

uvm_status_t create_manager(std::unique_ptr<backend::Backend> backend, uvm_manager_t **out) {
    if (!out || !backend)
        return UVM_ERR_INVALID_ARGUMENT;
    return guarded([&]() -> uvm_status_t {
        Manager *mgr = nullptr;
        const uvm_status_t status = Manager::create(std::move(backend), &mgr);
        if (status == UVM_OK)
            *out = to_handle(mgr);
        return status;
    });
}

}  // namespace uvm

extern "C" {

uvm_status_t uvm_manager_create(const uvm_manager_params_t *params, uvm_manager_t **out) {
    if (!out)
        return UVM_ERR_INVALID_ARGUMENT;
    uvm_manager_params_t defaults;
    std::memset(&defaults, 0, sizeof(defaults));
    if (!params)
        params = &defaults;
    const int kind = uvm::enum_value(params->backend);
    if (kind < UVM_BACKEND_AUTO || kind > UVM_BACKEND_CUDA)
        return UVM_ERR_INVALID_ARGUMENT;
    return guarded([&]() -> uvm_status_t {
        std::unique_ptr<uvm::backend::Backend> backend;
        const uvm_status_t status = uvm::backend::create_backend(*params, &backend);
        if (status != UVM_OK)
            return status;
        const uvm_status_t created = uvm::create_manager(std::move(backend), out);
        // UVM_TRACE=<prefix>: trace the whole run (the files are written at teardown).
        const char *trace = std::getenv("UVM_TRACE");
        if (created == UVM_OK && trace && trace[0] &&
            uvm::from_handle(*out)->tracer.start(0) != UVM_OK)
            std::fprintf(stderr, "uvm: UVM_TRACE is set but the trace could not start\n");
        return created;
    });
}

// The calling thread's last teardown's leak report (uvm_leak_report).
static thread_local struct {
    bool any = false;
    std::string text, json;
} t_leaks;

// UVM_TRACE=<prefix>: a traced manager's trace goes to <prefix>.json and
// <prefix>.svg at teardown. Failures are said on stderr, never fatal.
static void write_trace_files(Manager &mgr) {
    const char *prefix = std::getenv("UVM_TRACE");
    if (!prefix || !prefix[0])
        return;
    for (int svg = 0; svg < 2; ++svg) {
        std::string text;
        if (!(svg ? uvm::trace_svg(mgr, &text) : uvm::trace_chrome_json(mgr, &text)))
            return;  // never traced
        const std::string path = std::string(prefix) + (svg ? ".svg" : ".json");
        FILE *f = std::fopen(path.c_str(), "w");
        const bool written = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
        const bool closed = f && std::fclose(f) == 0;
        if (!written || !closed)
            std::fprintf(stderr, "uvm: could not write the trace to %s\n", path.c_str());
    }
}

uvm_status_t uvm_manager_destroy(uvm_manager_t *m) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!m)
        return UVM_ERR_INVALID_ARGUMENT;
    Manager *mgr = uvm::from_handle(m);
    mgr->metrics_servers().stop_all();  // their threads read the manager
    mgr->streams().drain();  // objects waiting for stream work are released first
    if (mgr->tracer.on())
        mgr->tracer.stop();
    try {
        write_trace_files(*mgr);
    } catch (const std::bad_alloc &) {
        std::fprintf(stderr, "uvm: no memory to write the trace\n");
    }
    const auto live = mgr->remove_all();
    t_leaks.any = !live.empty();
    if (!live.empty()) {
        try {
            t_leaks.text = uvm::objects_report(live, false, "leaked objects");
            t_leaks.json = uvm::objects_report(live, true, "leaked objects");
            std::fprintf(stderr, "uvm: %s", t_leaks.text.c_str());
        } catch (const std::bad_alloc &) {
            t_leaks.any = false;
            std::fprintf(stderr, "uvm: %zu leaked objects (no memory for their report)\n", live.size());
        }
    }
    for (const auto &mem : live) {
        std::lock_guard<std::mutex> guard(mem->lock);
        if (!mem->dead)
            uvm::mem_release(*mgr, *mem);
    }
    delete mgr;
    return live.empty() ? UVM_OK : UVM_ERR_LEAKED_OBJECTS;
}

uvm_status_t uvm_leak_report(uvm_report_format_t format, char *buf, size_t size, size_t *needed) {
    bool json;
    if (!report_format(format, &json) || (!buf && size))
        return UVM_ERR_INVALID_ARGUMENT;
    if (!t_leaks.any)
        return UVM_ERR_NOT_FOUND;
    return guarded([&] { return copy_out(json ? t_leaks.json : t_leaks.text, buf, size, needed); });
}

uvm_status_t uvm_objects_report(uvm_manager_t *m, uvm_report_format_t format, char *buf, size_t size,
                                size_t *needed) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    bool json;
    if (!m || !report_format(format, &json) || (!buf && size))
        return UVM_ERR_INVALID_ARGUMENT;
    Manager &mgr = *uvm::from_handle(m);
    return guarded([&] { return copy_out(uvm::objects_report(mgr.live_objects(), json, "live objects"), buf, size, needed); });
}

uvm_status_t uvm_trace_start(uvm_manager_t *m, uint64_t ring_bytes) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!m)
        return UVM_ERR_INVALID_ARGUMENT;
    return uvm::from_handle(m)->tracer.start(ring_bytes);
}

uvm_status_t uvm_trace_stop(uvm_manager_t *m) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!m)
        return UVM_ERR_INVALID_ARGUMENT;
    return uvm::from_handle(m)->tracer.stop();
}

uvm_status_t uvm_trace_info(uvm_manager_t *m, uvm_trace_info_t *out) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!m || !out)
        return UVM_ERR_INVALID_ARGUMENT;
    uvm::from_handle(m)->tracer.info(out);
    return UVM_OK;
}

uvm_status_t uvm_trace_export(uvm_manager_t *m, uvm_trace_format_t format, char *buf, size_t size, size_t *needed) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    const int f = uvm::enum_value(format);
    if (!m || (f != UVM_TRACE_CHROME_JSON && f != UVM_TRACE_SVG) || (!buf && size))
        return UVM_ERR_INVALID_ARGUMENT;
    Manager &mgr = *uvm::from_handle(m);
    return guarded([&]() -> uvm_status_t {
        std::string text;
        const bool any = f == UVM_TRACE_SVG ? uvm::trace_svg(mgr, &text) : uvm::trace_chrome_json(mgr, &text);
        if (!any)
            return UVM_ERR_NOT_FOUND;
        return copy_out(text, buf, size, needed);
    });
}

uvm_status_t uvm_manager_backend(uvm_manager_t *m, uvm_backend_kind_t *out) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!m || !out)
        return UVM_ERR_INVALID_ARGUMENT;
    *out = uvm::from_handle(m)->backend().kind();
    return UVM_OK;
}

uvm_status_t uvm_gpu_count(uvm_manager_t *m, uint32_t *out) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!m || !out)
        return UVM_ERR_INVALID_ARGUMENT;
    *out = uvm::from_handle(m)->gpu_count();
    return UVM_OK;
}

uvm_status_t uvm_gpu_info(uvm_manager_t *m, uint32_t gpu, uvm_gpu_info_t *out) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    uvm_status_t status = check_gpu(m, gpu, out);
    if (status != UVM_OK)
        return status;
    Manager &mgr = *uvm::from_handle(m);
    const uvm::backend::GpuInfo &info = mgr.gpu(gpu).info;
    uvm_gpu_info_t r;
    std::memset(&r, 0, sizeof(r));
    std::snprintf(r.name, sizeof(r.name), "%s", info.name.c_str());
    r.memory_total = info.memory_total;
    r.memory_free = mgr.backend().gpu_memory_free(gpu);
    r.page_sizes = info.page_sizes;
    r.peer_mask = info.peer_mask;
    r.cpu_coherent = info.cpu_coherent;
    r.granularity = info.granularity;
    r.host_numa_id = info.place.numa_node;
    std::snprintf(r.pci_bus_id, sizeof(r.pci_bus_id), "%s", info.pci_bus_id.c_str());
    std::memcpy(r.uuid, info.uuid, sizeof(r.uuid));
    std::snprintf(r.cpus, sizeof(r.cpus), "%s", info.place.cpus.c_str());
    *out = r;
    return UVM_OK;
}

uvm_status_t uvm_host_info(uvm_manager_t *m, uvm_host_info_t *out) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!m || !out)
        return UVM_ERR_INVALID_ARGUMENT;
    const uvm::topo::Topology &t = uvm::from_handle(m)->backend().topology();
    uvm_host_info_t r;
    std::memset(&r, 0, sizeof(r));
    r.numa_node_count = static_cast<uint32_t>(t.nodes.size());
    r.from_hwloc = t.from_hwloc;
    r.thp = uvm::topo::thp_mode(false);
    r.shmem_thp = uvm::topo::thp_mode(true);
    *out = r;
    return UVM_OK;
}

uvm_status_t uvm_numa_node_info(uvm_manager_t *m, uint32_t index, uvm_numa_node_info_t *out) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!m || !out)
        return UVM_ERR_INVALID_ARGUMENT;
    const uvm::topo::Topology &t = uvm::from_handle(m)->backend().topology();
    if (index >= t.nodes.size())
        return UVM_ERR_INVALID_ARGUMENT;
    const uvm::topo::NumaNode &n = t.nodes[index];
    uvm_numa_node_info_t r;
    std::memset(&r, 0, sizeof(r));
    r.id = n.id;
    r.host_node = n.host_node;
    r.memory_total = n.memory_total;
    r.memory_free = uvm::topo::host_node_free_bytes(n.host_node);
    std::snprintf(r.cpus, sizeof(r.cpus), "%s", n.cpus.c_str());
    *out = r;
    return UVM_OK;
}

uvm_status_t uvm_gpu_path(uvm_manager_t *m, uint32_t a, uint32_t b, uvm_gpu_path_t *out) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    uvm_status_t status = check_gpu(m, a, out);
    if (status == UVM_OK)
        status = check_gpu(m, b, out);
    if (status != UVM_OK)
        return status;
    Manager &mgr = *uvm::from_handle(m);
    *out = a == b ? UVM_GPU_PATH_SELF
                  : uvm::topo::classify_path(mgr.gpu(a).info.place, mgr.gpu(b).info.place);
    return UVM_OK;
}

uvm_status_t uvm_gpu_trim(uvm_manager_t *m, uint32_t gpu, uint64_t *released) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!m)
        return UVM_ERR_INVALID_ARGUMENT;
    if (gpu >= uvm::from_handle(m)->gpu_count())
        return UVM_ERR_INVALID_GPU;
    Manager &mgr = *uvm::from_handle(m);
    // Memory streams have finished with comes back first; memory that work
    // may still touch stays allocated, so it cannot go back to the driver.
    try {
        mgr.streams().reap(true);
    } catch (const std::bad_alloc &) {
        // Nothing lost: what could not be looked at stays pooled or retiring.
    }
    mgr.gpu(gpu).caches.flush_all();  // cached chunks would keep their roots held
    const uint64_t bytes = mgr.gpu(gpu).pmm.trim() + mgr.gpu(gpu).remap_pmm.trim();
    mgr.gpu(gpu).host_store.trim();  // empty slabs of host memory for evicted bytes
    mgr.backend().trim(gpu);
    if (released)
        *released = bytes;
    return UVM_OK;
}

// A reserved slot of the handle table, given back unless an insert used it.
struct SlotReservation {
    Manager &mgr;
    Manager::SlotTicket ticket;
    explicit SlotReservation(Manager &m) : mgr(m) {}
    ~SlotReservation() { mgr.cancel_slot(&ticket); }
    SlotReservation(const SlotReservation &) = delete;
    SlotReservation &operator=(const SlotReservation &) = delete;
};

// A new object made `client`'s (moved in), charged to its budget; over the
// budget it is nobody's again and the caller gives its memory back. Whose an
// object is is written under its lock: an evictable object is on its GPU's
// evictable list already, where other threads' budget evictions read it
// (client.cpp).
static uvm_status_t charge_new_object(Manager &mgr, Mem &mem, std::shared_ptr<uvm::Client> client) {
    uvm::Client &owner = *client;
    {
        std::lock_guard<std::mutex> guard(mem.lock);
        mem.client = std::move(client);  // moved: no reference count traffic on the pair
    }
    const uvm_status_t status = uvm::charge_client(mgr, mem, nullptr);
    if (status != UVM_OK) {
        std::lock_guard<std::mutex> guard(mem.lock);
        mem.client.reset();
        return status;
    }
    owner.objects.fetch_add(1, std::memory_order_relaxed);
    return UVM_OK;
}

// A new object's handle, in the slot reserved for it: the table takes the
// reference over (no count traffic on the pair); its birth is traced.
static uvm_mem_t *publish_new_object(Manager &mgr, SlotReservation *slot, std::shared_ptr<Mem> &mem, bool gpu_mapped) {
    uvm_mem_t *handle = nullptr;
    Mem *const raw = mem.get();
    mgr.insert(&slot->ticket, mem, &handle);
    // Nobody has the handle yet: the object stays while the table holds it.
    if (mgr.tracer.on()) {
        std::lock_guard<std::mutex> guard(raw->lock);
        uvm::trace_mem(mgr, *raw, uvm::TraceKind::Alloc);
        if (gpu_mapped)
            uvm::trace_mem(mgr, *raw, uvm::TraceKind::Map, uvm::MapKind::GpuKernel, raw->owner);
    }
    return handle;
}

static uvm_status_t alloc_call(uvm_manager_t *m, const uvm_mem_alloc_params_t *params, uvm_stream_t *stream_handle,
                               bool on_stream, uvm_mem_t **out) {
    if (!m || !params || !out)
        return UVM_ERR_INVALID_ARGUMENT;
    Manager &mgr = *uvm::from_handle(m);
    return guarded([&]() -> uvm_status_t {
        uvm_status_t status = UVM_OK;
        static const std::shared_ptr<uvm::Stream> no_stream;
        const std::shared_ptr<uvm::Stream> &stream = on_stream ? stream_of(mgr, stream_handle, &status) : no_stream;
        if (on_stream && !stream)
            return status;
        std::shared_ptr<uvm::Client> client;
        if (params->client && !(client = mgr.clients().lookup(params->client)))
            return UVM_ERR_INVALID_HANDLE;
        std::shared_ptr<Mem> mem;
        // Undo the allocation. Memory that came from the stream's pool may
        // still be written by earlier work on it: it goes back there, not to
        // the PMM.
        auto give_back = [&] {
            std::lock_guard<std::mutex> guard(mem->lock);
            uvm::ReusedRun run;
            if (stream && uvm::mem_detach_run(mgr, *mem, &run))
                mgr.streams().pool_put(*stream, run);
            else
                uvm::mem_release(mgr, *mem);
        };
        // The handle's slot first: once the object holds memory, nothing may fail.
        SlotReservation slot(mgr);
        status = mgr.reserve_slot(&slot.ticket);
        if (status != UVM_OK)
            return status;
        status = alloc_object(mgr, *params, stream, &mem);
        if (status == UVM_OK && client) {
            status = charge_new_object(mgr, *mem, std::move(client));
            if (status != UVM_OK)  // over the client's budget
                give_back();
        }
        if (status == UVM_ERR_OUT_OF_MEMORY) {
            uvm::OomRequest r;
            r.size = params->size;
            r.backing = params->backing;
            r.gpu = params->gpu;
            r.chunk_size = params->chunk_size;
            r.flags = params->flags;
            uvm::note_oom(mgr, r);
        }
        if (status != UVM_OK)
            return status;
        if (stream) {
            UVM_ASSERT(mem->users.empty());
            mem->users.add(stream);  // a new object's first stream: held inline, no allocation
        }
        *out = publish_new_object(mgr, &slot, mem, (params->flags & UVM_MEM_GPU_MAPPED) != 0);
        return UVM_OK;
    });
}

uvm_status_t uvm_mem_alloc(uvm_manager_t *m, const uvm_mem_alloc_params_t *params, uvm_mem_t **out) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    return alloc_call(m, params, nullptr, false, out);
}

uvm_status_t uvm_mem_alloc_async(uvm_manager_t *m, const uvm_mem_alloc_params_t *params, uvm_stream_t *stream,
                                 uvm_mem_t **out) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    return alloc_call(m, params, stream, true, out);
}

uvm_status_t uvm_mem_export(uvm_manager_t *m, uvm_mem_t *handle, int socket) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (socket < 0)
        return UVM_ERR_INVALID_ARGUMENT;
    uvm::ipc::ShareMessage msg;
    std::vector<int> fds;
    uvm_status_t status = with_mem(m, handle, [&](Manager &mgr, Mem &mem) { return uvm::mem_export(mgr, mem, &msg, &fds); });
    if (status != UVM_OK)
        return status;
    // Sent without the object's lock: a peer slow to read holds up nobody
    // else. The fds hold the memory whatever happens to the object meanwhile.
    status = guarded([&] {
        std::string why;
        return uvm::ipc::send_share(socket, msg, fds, &why);
    });
    for (int fd : fds)
        close(fd);  // the peer has its own now
    return status;
}

uvm_status_t uvm_mem_import(uvm_manager_t *m, int socket, uvm_client_t *client_handle, uvm_mem_t **out) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!m || socket < 0 || !out)
        return UVM_ERR_INVALID_ARGUMENT;
    Manager &mgr = *uvm::from_handle(m);
    return guarded([&]() -> uvm_status_t {
        std::shared_ptr<uvm::Client> client;
        if (client_handle && !(client = mgr.clients().lookup(client_handle)))
            return UVM_ERR_INVALID_HANDLE;
        SlotReservation slot(mgr);
        uvm_status_t status = mgr.reserve_slot(&slot.ticket);
        if (status != UVM_OK)
            return status;
        uvm::ipc::ShareMessage msg;
        std::vector<int> fds;
        std::string why;
        status = uvm::ipc::recv_share(socket, &msg, &fds, &why);
        if (status != UVM_OK)
            return status;
        std::shared_ptr<Mem> mem;
        status = uvm::mem_import(mgr, msg, fds, &mem);
        for (int fd : fds)
            close(fd);  // the backend keeps what it needs
        if (status != UVM_OK)
            return status;
        if (client) {
            status = charge_new_object(mgr, *mem, std::move(client));
            if (status != UVM_OK) {  // over the client's budget
                std::lock_guard<std::mutex> guard(mem->lock);
                uvm::mem_release(mgr, *mem);
                return status;
            }
        }
        *out = publish_new_object(mgr, &slot, mem, false);
        return UVM_OK;
    });
}

uvm_status_t uvm_mem_free(uvm_manager_t *m, uvm_mem_t *handle) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!m || !handle)
        return UVM_ERR_INVALID_ARGUMENT;
    Manager &mgr = *uvm::from_handle(m);
    return guarded([&] { return free_object(mgr, handle, nullptr); });
}

uvm_status_t uvm_mem_free_async(uvm_manager_t *m, uvm_mem_t *handle, uvm_stream_t *stream_handle) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!handle)
        return UVM_ERR_INVALID_ARGUMENT;
    return with_stream(m, stream_handle, [&](Manager &mgr, const std::shared_ptr<uvm::Stream> &stream) {
        return free_object(mgr, handle, stream);
    });
}

uvm_status_t uvm_stream_create(uvm_manager_t *m, uint32_t gpu, void *native, uvm_stream_t **out) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    const uvm_status_t status = check_gpu(m, gpu, out);
    if (status != UVM_OK)
        return status;
    return guarded([&] { return uvm::from_handle(m)->streams().create(gpu, native, out); });
}

uvm_status_t uvm_stream_destroy(uvm_manager_t *m, uvm_stream_t *stream) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!m || !stream)
        return UVM_ERR_INVALID_ARGUMENT;
    return guarded([&] { return uvm::from_handle(m)->streams().destroy(stream); });
}

uvm_status_t uvm_stream_native(uvm_manager_t *m, uvm_stream_t *handle, void **out) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!out)
        return UVM_ERR_INVALID_ARGUMENT;
    return with_stream(m, handle, [&](Manager &mgr, const std::shared_ptr<uvm::Stream> &stream) {
        *out = mgr.backend().stream_native(stream->backend);
        return UVM_OK;
    });
}

uvm_status_t uvm_stream_synchronize(uvm_manager_t *m, uvm_stream_t *handle) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    return with_stream(m, handle, [](Manager &mgr, const std::shared_ptr<uvm::Stream> &stream) {
        return mgr.streams().synchronize(*stream);
    });
}

uvm_status_t uvm_mem_record_use(uvm_manager_t *m, uvm_mem_t *handle, uvm_stream_t *stream_handle) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!handle)
        return UVM_ERR_INVALID_ARGUMENT;
    return with_stream(m, stream_handle, [&](Manager &, const std::shared_ptr<uvm::Stream> &stream) {
        return with_mem(m, handle, [&](Manager &, Mem &mem) {
            mem.users.add(stream);
            return UVM_OK;
        });
    });
}

// Hold or release simulated work on a stream.
static uvm_status_t sim_hold(uvm_manager_t *m, uvm_stream_t *handle, bool hold) {
    return with_stream(m, handle, [&](Manager &mgr, const std::shared_ptr<uvm::Stream> &stream) {
        uvm_status_t status;
        {
            std::lock_guard<std::mutex> guard(stream->lock);
            if (stream->destroyed)
                return UVM_ERR_INVALID_HANDLE;
            status = hold ? mgr.backend().stream_hold(stream->backend) : mgr.backend().stream_release(stream->backend);
        }
        if (status == UVM_OK && !hold)
            mgr.streams().reap(false);
        return status;
    });
}

uvm_status_t uvm_sim_stream_hold(uvm_manager_t *m, uvm_stream_t *stream) { return sim_hold(m, stream, true); }
uvm_status_t uvm_sim_stream_release(uvm_manager_t *m, uvm_stream_t *stream) { return sim_hold(m, stream, false); }

uvm_status_t uvm_mem_info(uvm_manager_t *m, uvm_mem_t *handle, uvm_mem_info_t *out) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!out)
        return UVM_ERR_INVALID_ARGUMENT;
    return with_mem(m, handle, [&](Manager &, Mem &mem) {
        uvm_mem_info_t r;
        std::memset(&r, 0, sizeof(r));
        r.size = mem.size;
        r.alloc_size = mem.alloc_size;
        r.backing = mem.backing;
        r.gpu = mem.owner;
        r.chunk_size = mem.chunk_size;
        r.chunk_count = mem.chunk_count();
        r.cpu_kernel_mapped = mem.cpu_kernel != nullptr;
        r.cpu_user_mapped = mem.cpu_user != nullptr;
        r.user_address = mem.user_address;
        r.numa_node = mem.numa_node;
        r.numa_node_mask = mem.numa_node_mask;
        r.flags = mem.flags;
        if (mem.is_vidmem())
            r.gpu_phys_mask |= 1u << mem.owner;
        for (uint32_t g = 0; g < mem.gpus.size(); ++g) {
            r.gpu_phys_mask |= mem.gpus[g].phys ? 1u << g : 0;
            r.gpu_kernel_mask |= mem.gpus[g].kernel ? 1u << g : 0;
            r.gpu_user_mask |= mem.gpus[g].user ? 1u << g : 0;
        }
        if (mem.owner < mem.gpus.size() && mem.gpus[mem.owner].kernel)
            r.gpu_kernel_address = mem.gpus[mem.owner].kernel_va;
        *out = r;
        return UVM_OK;
    });
}

uvm_status_t uvm_mem_host_pages(uvm_manager_t *m, uvm_mem_t *handle, uvm_host_pages_t *out) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!out)
        return UVM_ERR_INVALID_ARGUMENT;
    return with_mem(m, handle, [&](Manager &, Mem &mem) {
        if (mem.backing != UVM_BACKING_SYSMEM)
            return UVM_ERR_NOT_SUPPORTED;
        return uvm::topo::query_host_pages(mem.host.linear, mem.alloc_size, out);
    });
}

uvm_status_t uvm_mem_map_cpu_kernel(uvm_manager_t *m, uvm_mem_t *h) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    return map_call(m, h, 0, true, true, uvm::MapKind::CpuKernel,
                    [](Manager &mgr, Mem &mem) { return uvm::mem_map_cpu_kernel(mgr, mem); });
}
uvm_status_t uvm_mem_unmap_cpu_kernel(uvm_manager_t *m, uvm_mem_t *h) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    return map_call(m, h, 0, false, false, uvm::MapKind::CpuKernel,
                    [](Manager &mgr, Mem &mem) { return uvm::mem_unmap_cpu_kernel(mgr, mem); });
}
uvm_status_t uvm_mem_map_cpu_user(uvm_manager_t *m, uvm_mem_t *h, void *address) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    return map_call(m, h, 0, true, true, uvm::MapKind::CpuUser,
                    [&](Manager &mgr, Mem &mem) { return uvm::mem_map_cpu_user(mgr, mem, address); });
}
uvm_status_t uvm_mem_unmap_cpu_user(uvm_manager_t *m, uvm_mem_t *h) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    return map_call(m, h, 0, false, false, uvm::MapKind::CpuUser,
                    [](Manager &mgr, Mem &mem) { return uvm::mem_unmap_cpu_user(mgr, mem); });
}
uvm_status_t uvm_mem_map_gpu_phys(uvm_manager_t *m, uvm_mem_t *h, uint32_t gpu) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    return map_call(m, h, gpu, true, true, uvm::MapKind::GpuPhys,
                    [&](Manager &mgr, Mem &mem) { return uvm::mem_map_gpu_phys(mgr, mem, gpu); });
}
uvm_status_t uvm_mem_unmap_gpu_phys(uvm_manager_t *m, uvm_mem_t *h, uint32_t gpu) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    return map_call(m, h, gpu, true, false, uvm::MapKind::GpuPhys,
                    [&](Manager &mgr, Mem &mem) { return uvm::mem_unmap_gpu_phys(mgr, mem, gpu); });
}
uvm_status_t uvm_mem_map_gpu_kernel(uvm_manager_t *m, uvm_mem_t *h, uint32_t gpu) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    return map_call(m, h, gpu, true, true, uvm::MapKind::GpuKernel, [&](Manager &mgr, Mem &mem) {
        return uvm::mem_map_gpu_virtual(mgr, mem, gpu, UVM_VA_SPACE_KERNEL, 0);
    });
}
uvm_status_t uvm_mem_unmap_gpu_kernel(uvm_manager_t *m, uvm_mem_t *h, uint32_t gpu) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    return map_call(m, h, gpu, true, false, uvm::MapKind::GpuKernel, [&](Manager &mgr, Mem &mem) {
        return uvm::mem_unmap_gpu_virtual(mgr, mem, gpu, UVM_VA_SPACE_KERNEL);
    });
}
uvm_status_t uvm_mem_map_gpu_user(uvm_manager_t *m, uvm_mem_t *h, uint32_t gpu, uint64_t address) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    return map_call(m, h, gpu, true, true, uvm::MapKind::GpuUser, [&](Manager &mgr, Mem &mem) {
        return uvm::mem_map_gpu_virtual(mgr, mem, gpu, UVM_VA_SPACE_USER, address);
    });
}
uvm_status_t uvm_mem_unmap_gpu_user(uvm_manager_t *m, uvm_mem_t *h, uint32_t gpu) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    return map_call(m, h, gpu, true, false, uvm::MapKind::GpuUser, [&](Manager &mgr, Mem &mem) {
        return uvm::mem_unmap_gpu_virtual(mgr, mem, gpu, UVM_VA_SPACE_USER);
    });
}

uvm_status_t uvm_user_range_reserve(uvm_manager_t *m, uint64_t size, uint64_t *address) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!m || !address)
        return UVM_ERR_INVALID_ARGUMENT;
    Manager &mgr = *uvm::from_handle(m);
    return guarded([&] { return mgr.user_space().reserve(size, address); });
}

uvm_status_t uvm_user_range_release(uvm_manager_t *m, uint64_t address) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!m)
        return UVM_ERR_INVALID_ARGUMENT;
    Manager &mgr = *uvm::from_handle(m);
    return guarded([&] { return mgr.user_space().unreserve(address); });
}

uvm_status_t uvm_mem_advise(uvm_manager_t *m, uvm_mem_t *h, uvm_managed_advice_t advice, int32_t processor) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    const int raw = uvm::enum_value(advice);
    return with_mem(m, h, [&](Manager &mgr, Mem &mem) { return uvm::mem_advise(mgr, mem, raw, processor); });
}
uvm_status_t uvm_mem_prefetch(uvm_manager_t *m, uvm_mem_t *h, uint64_t offset, uint64_t size, int32_t processor) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    return with_mem(m, h, [&](Manager &mgr, Mem &mem) { return uvm::mem_prefetch(mgr, mem, offset, size, processor); });
}

static uvm_status_t cpu_address(uvm_manager_t *m, uvm_mem_t *h, uint64_t offset, void **out, bool user) {
    if (!out)
        return UVM_ERR_INVALID_ARGUMENT;
    return with_mem(m, h, [&](Manager &, Mem &mem) {
        void *base = user ? mem.cpu_user : mem.cpu_kernel;
        if (offset >= mem.alloc_size)
            return UVM_ERR_OUT_OF_RANGE;
        if (!base)
            return UVM_ERR_NOT_MAPPED;
        *out = static_cast<uint8_t *>(base) + offset;
        return UVM_OK;
    });
}
uvm_status_t uvm_mem_cpu_kernel_address(uvm_manager_t *m, uvm_mem_t *h, uint64_t offset, void **out) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    return cpu_address(m, h, offset, out, false);
}
uvm_status_t uvm_mem_cpu_user_address(uvm_manager_t *m, uvm_mem_t *h, uint64_t offset, void **out) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    return cpu_address(m, h, offset, out, true);
}

uvm_status_t uvm_mem_gpu_phys_address(uvm_manager_t *m, uvm_mem_t *h, uint32_t gpu, uint64_t offset,
                                      uint64_t size, uvm_gpu_phys_address_t *out) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!out)
        return UVM_ERR_INVALID_ARGUMENT;
    return with_resident_mem(m, h, gpu, [&](Manager &mgr, Mem &mem) {
        return uvm::mem_gpu_phys_address(mgr, mem, gpu, offset, size, out);
    });
}

static uvm_status_t gpu_virtual_address(uvm_manager_t *m, uvm_mem_t *h, uint32_t gpu, uint64_t offset,
                                        uint64_t *out, bool user) {
    if (!out)
        return UVM_ERR_INVALID_ARGUMENT;
    return with_resident_mem(m, h, gpu, [&](Manager &, Mem &mem) {
        if (offset >= mem.alloc_size)
            return UVM_ERR_OUT_OF_RANGE;
        if (mem.gpus.empty() || !(user ? mem.gpus[gpu].user : mem.gpus[gpu].kernel))
            return UVM_ERR_NOT_MAPPED;
        *out = (user ? mem.user_address : mem.gpus[gpu].kernel_va) + offset;
        return UVM_OK;
    });
}
uvm_status_t uvm_mem_gpu_kernel_address(uvm_manager_t *m, uvm_mem_t *h, uint32_t gpu, uint64_t offset,
                                        uint64_t *out) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    return gpu_virtual_address(m, h, gpu, offset, out, false);
}
uvm_status_t uvm_mem_gpu_user_address(uvm_manager_t *m, uvm_mem_t *h, uint32_t gpu, uint64_t offset,
                                      uint64_t *out) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    return gpu_virtual_address(m, h, gpu, offset, out, true);
}

// Copy or memset (src null) on GPU `gpu`'s copy engine, in pieces that are
// contiguous on both sides.
// `stream_handle` (with `on_stream`): queued there, else synchronous.
static uvm_status_t copy_engine_op(uvm_manager_t *m, uint32_t gpu, const uvm_mem_span_t *dst,
                                   const uvm_mem_span_t *src, uint8_t value, uint64_t size,
                                   bool on_stream = false, uvm_stream_t *stream_handle = nullptr) {
    if (!m || !dst || !dst->mem || (src && !src->mem) || size == 0)
        return UVM_ERR_INVALID_ARGUMENT;
    Manager &mgr = *uvm::from_handle(m);
    if (gpu >= mgr.gpu_count())
        return UVM_ERR_INVALID_GPU;
    return guarded([&]() -> uvm_status_t {
        uvm_status_t status = UVM_OK;
        std::shared_ptr<uvm::Stream> stream;
        if (on_stream && !(stream = stream_of(mgr, stream_handle, &status)))
            return status;
        if (stream && stream->gpu != gpu)
            return UVM_ERR_INVALID_ARGUMENT;  // a stream of another GPU
        std::shared_ptr<Mem> d = mgr.lookup(dst->mem);
        std::shared_ptr<Mem> s = src ? mgr.lookup(src->mem) : nullptr;
        if (!d || (src && !s))
            return UVM_ERR_INVALID_HANDLE;
        // Lock both objects (once when they are the same) without deadlock.
        std::unique_lock<std::mutex> ld(d->lock, std::defer_lock);
        std::unique_lock<std::mutex> ls;
        if (s && s != d) {
            ls = std::unique_lock<std::mutex>(s->lock, std::defer_lock);
            std::lock(ld, ls);
        } else {
            ld.lock();
        }
        if (d->gone() || (s && s->gone()))
            return UVM_ERR_INVALID_HANDLE;
        status = make_resident(mgr, *d, s.get());
        if (status == UVM_OK && s)
            status = make_resident(mgr, *s, d.get());
        if (status != UVM_OK)
            return status;
        if (dst->offset > d->alloc_size || size > d->alloc_size - dst->offset)
            return UVM_ERR_OUT_OF_RANGE;
        if (s && (src->offset > s->alloc_size || size > s->alloc_size - src->offset))
            return UVM_ERR_OUT_OF_RANGE;
        if (s == d && dst->offset < src->offset + size && src->offset < dst->offset + size)
            return UVM_ERR_INVALID_ARGUMENT;
        const int dst_view = uvm::enum_value(dst->view);
        const int src_view = s ? uvm::enum_value(src->view) : UVM_VIEW_KERNEL;
        for (int view : {dst_view, src_view})
            if (view < UVM_VIEW_KERNEL || view > UVM_VIEW_PHYSICAL)
                return UVM_ERR_INVALID_ARGUMENT;
        // Every piece is resolved before any is run or queued: a bad view
        // or a missing mapping changes nothing.
        struct Piece {
            uvm::backend::CeAddress to, from;
            uint64_t size;
        };
        std::vector<Piece> pieces;
        for (uint64_t done = 0; done < size;) {
            Piece p;
            uint64_t to_piece = 0, from_piece = UINT64_MAX;
            status = uvm::mem_ce_address(mgr, *d, gpu, static_cast<uvm_gpu_view_t>(dst_view), dst->offset + done,
                                         &p.to, &to_piece);
            if (status == UVM_OK && s)
                status = uvm::mem_ce_address(mgr, *s, gpu, static_cast<uvm_gpu_view_t>(src_view),
                                              src->offset + done, &p.from, &from_piece);
            if (status != UVM_OK)
                return status;
            p.size = std::min(size - done, std::min(to_piece, from_piece));
            pieces.push_back(p);
            done += p.size;
        }
        uvm::backend::Backend &backend = mgr.backend();
        if (!stream) {
            for (const Piece &p : pieces) {
                status = s ? backend.ce_copy(gpu, p.to, p.from, p.size) : backend.ce_memset(gpu, p.to, value, p.size);
                if (status != UVM_OK)
                    return status;
            }
            return UVM_OK;
        }
        {
            std::lock_guard<std::mutex> guard(stream->lock);
            if (stream->destroyed)
                return UVM_ERR_INVALID_HANDLE;
            for (const Piece &p : pieces) {
                status = s ? backend.ce_copy_async(gpu, stream->backend, p.to, p.from, p.size)
                           : backend.ce_memset_async(gpu, stream->backend, p.to, value, p.size);
                if (status != UVM_OK)
                    break;
            }
        }
        // Track even after a failure: earlier pieces may be queued.
        d->users.add(stream);
        if (s)
            s->users.add(stream);
        return status;
    });
}

uvm_status_t uvm_mem_copy(uvm_manager_t *m, uint32_t gpu, const uvm_mem_span_t *dst,
                          const uvm_mem_span_t *src, uint64_t size) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!src)
        return UVM_ERR_INVALID_ARGUMENT;
    return copy_engine_op(m, gpu, dst, src, 0, size);
}

uvm_status_t uvm_mem_memset(uvm_manager_t *m, uint32_t gpu, const uvm_mem_span_t *dst, uint8_t value,
                            uint64_t size) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    return copy_engine_op(m, gpu, dst, nullptr, value, size);
}

uvm_status_t uvm_mem_copy_async(uvm_manager_t *m, uint32_t gpu, const uvm_mem_span_t *dst,
                                const uvm_mem_span_t *src, uint64_t size, uvm_stream_t *stream) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!src)
        return UVM_ERR_INVALID_ARGUMENT;
    return copy_engine_op(m, gpu, dst, src, 0, size, true, stream);
}

uvm_status_t uvm_mem_memset_async(uvm_manager_t *m, uint32_t gpu, const uvm_mem_span_t *dst, uint8_t value,
                                  uint64_t size, uvm_stream_t *stream) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    return copy_engine_op(m, gpu, dst, nullptr, value, size, true, stream);
}

uvm_status_t uvm_mem_evict(uvm_manager_t *m, uvm_mem_t *h) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    return with_mem(m, h, [](Manager &mgr, Mem &mem) {
        const uvm_status_t status = uvm::mem_evict(mgr, mem);
        if (status == UVM_ERR_OUT_OF_MEMORY) {  // over the host limit for evicted bytes
            uvm::OomRequest r;
            r.call = "evict";
            r.size = mem.alloc_size;
            r.backing = UVM_BACKING_SYSMEM;
            r.gpu = mem.owner;
            uvm::note_oom(mgr, r);
        }
        return status;
    });
}

uvm_status_t uvm_mem_make_resident(uvm_manager_t *m, uvm_mem_t *h) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    return with_mem(m, h, [](Manager &mgr, Mem &mem) { return make_resident(mgr, mem); });
}

uvm_status_t uvm_client_create(uvm_manager_t *m, const char *name, uvm_client_t **out) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!m)
        return UVM_ERR_INVALID_ARGUMENT;
    return guarded([&] { return uvm::from_handle(m)->clients().create(name, out); });
}

uvm_status_t uvm_client_destroy(uvm_manager_t *m, uvm_client_t *client) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!m || !client)
        return UVM_ERR_INVALID_ARGUMENT;
    return guarded([&] { return uvm::from_handle(m)->clients().destroy(client); });
}

uvm_status_t uvm_client_set_budget(uvm_manager_t *m, uvm_client_t *client, uint32_t gpu, uint64_t bytes) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!m || !client)
        return UVM_ERR_INVALID_ARGUMENT;
    Manager &mgr = *uvm::from_handle(m);
    if (gpu != UVM_CLIENT_SYSMEM && gpu >= mgr.gpu_count())
        return UVM_ERR_INVALID_GPU;
    return guarded([&]() -> uvm_status_t {
        const std::shared_ptr<uvm::Client> c = mgr.clients().lookup(client);
        if (!c)
            return UVM_ERR_INVALID_HANDLE;
        c->account(gpu == UVM_CLIENT_SYSMEM, gpu == UVM_CLIENT_SYSMEM ? 0 : gpu).budget.store(bytes);
        return UVM_OK;
    });
}

uvm_status_t uvm_client_info(uvm_manager_t *m, uvm_client_t *client, uvm_client_info_t *out) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!m || !client || !out)
        return UVM_ERR_INVALID_ARGUMENT;
    Manager &mgr = *uvm::from_handle(m);
    return guarded([&]() -> uvm_status_t {
        const std::shared_ptr<uvm::Client> c = mgr.clients().lookup(client);
        if (!c)
            return UVM_ERR_INVALID_HANDLE;
        uvm_client_info_t r;
        std::memset(&r, 0, sizeof(r));
        std::snprintf(r.name, sizeof(r.name), "%s", c->name.c_str());
        r.objects = c->objects.load();
        for (uint32_t g = 0; g < mgr.gpu_count(); ++g) {
            r.vidmem_used[g] = c->vidmem[g].used.load();
            r.vidmem_evictable[g] = c->vidmem[g].evictable.load();
            r.vidmem_budget[g] = c->vidmem[g].budget.load();
        }
        r.sysmem_used = c->sysmem.used.load();
        r.sysmem_budget = c->sysmem.budget.load();
        *out = r;
        return UVM_OK;
    });
}

uvm_status_t uvm_pressure_watermarks(uvm_manager_t *m, uvm_client_t *client, uint32_t gpu, const uint32_t *percents,
                                     uint32_t count) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!m || (count && !percents) || count > 16)
        return UVM_ERR_INVALID_ARGUMENT;
    for (uint32_t i = 0; i < count; ++i)
        if (percents[i] == 0 || percents[i] > 100)
            return UVM_ERR_INVALID_ARGUMENT;
    Manager &mgr = *uvm::from_handle(m);
    const bool sys = gpu == UVM_CLIENT_SYSMEM;
    if ((!client && sys) || (!sys && gpu >= mgr.gpu_count()))
        return UVM_ERR_INVALID_GPU;
    return guarded([&]() -> uvm_status_t {
        if (!client) {
            mgr.gpu(gpu).held_marks.set(percents, count);
            return UVM_OK;
        }
        const std::shared_ptr<uvm::Client> c = mgr.clients().lookup(client);
        if (!c)
            return UVM_ERR_INVALID_HANDLE;
        c->account(sys, sys ? 0 : gpu).marks.set(percents, count);
        return UVM_OK;
    });
}

uvm_status_t uvm_pressure_fd(uvm_manager_t *m, int *fd) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!m || !fd)
        return UVM_ERR_INVALID_ARGUMENT;
    const int f = uvm::from_handle(m)->pressure.fd();
    if (f < 0)
        return UVM_ERR_NOT_SUPPORTED;  // no eventfd on this system
    *fd = f;
    return UVM_OK;
}

uvm_status_t uvm_pressure_events(uvm_manager_t *m, uvm_pressure_event_t *out, uint32_t max, uint32_t *count) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!m || !count || (max && !out))
        return UVM_ERR_INVALID_ARGUMENT;
    *count = uvm::from_handle(m)->pressure.take(out, max);
    return UVM_OK;
}

uvm_status_t uvm_oom_report(uvm_manager_t *m, uvm_report_format_t format, char *buf, size_t size, size_t *needed) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    bool json;
    if (!m || !report_format(format, &json) || (!buf && size))
        return UVM_ERR_INVALID_ARGUMENT;
    return guarded([&]() -> uvm_status_t {
        std::string text;
        if (!uvm::last_oom_report(*uvm::from_handle(m), json, &text))
            return UVM_ERR_NOT_FOUND;
        return copy_out(text, buf, size, needed);
    });
}

uvm_status_t uvm_manager_snapshot(uvm_manager_t *m, char *buf, size_t size, size_t *needed) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!m || (!buf && size))
        return UVM_ERR_INVALID_ARGUMENT;
    return guarded([&] { return copy_out(uvm::snapshot_json(*uvm::from_handle(m)), buf, size, needed); });
}

uvm_status_t uvm_metrics_serve(uvm_manager_t *m, const char *address, uint16_t port, uvm_metrics_server_t **out,
                               uint16_t *bound_port) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!m)
        return UVM_ERR_INVALID_ARGUMENT;
    return guarded([&] { return uvm::from_handle(m)->metrics_servers().serve(address, port, out, bound_port); });
}

uvm_status_t uvm_metrics_stop(uvm_manager_t *m, uvm_metrics_server_t *server) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!m || !server)
        return UVM_ERR_INVALID_ARGUMENT;
    return guarded([&] { return uvm::from_handle(m)->metrics_servers().stop(server); });
}

uvm_status_t uvm_manager_metrics(uvm_manager_t *m, char *buf, size_t size, size_t *needed) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!m || (!buf && size))
        return UVM_ERR_INVALID_ARGUMENT;
    return guarded([&] { return copy_out(uvm::metrics_text(*uvm::from_handle(m)), buf, size, needed); });
}

uvm_status_t uvm_mem_touch(uvm_manager_t *m, uvm_mem_t *h) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    return with_mem(m, h, [](Manager &, Mem &mem) {
        uvm::mem_touch(mem);
        return UVM_OK;
    });
}

uvm_status_t uvm_mem_residency(uvm_manager_t *m, uvm_mem_t *h, uvm_residency_t *out) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!out)
        return UVM_ERR_INVALID_ARGUMENT;
    return with_mem(m, h, [&](Manager &, Mem &mem) {
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

uvm_status_t uvm_manager_set_eviction_policy(uvm_manager_t *m, const uvm_eviction_policy_t *policy) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!m || !policy)
        return UVM_ERR_INVALID_ARGUMENT;
    Manager &mgr = *uvm::from_handle(m);
    mgr.eviction_disabled = policy->disabled != 0;
    mgr.evicted_limit = policy->sysmem_limit;
    return UVM_OK;
}

uvm_status_t uvm_gpu_page_tree_info(uvm_manager_t *m, uint32_t gpu, uvm_va_space_kind_t space,
                                    uvm_page_tree_info_t *out) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    uvm_status_t status = check_gpu(m, gpu, out);
    if (status != UVM_OK)
        return status;
    const int raw_space = uvm::enum_value(space);
    if (raw_space != UVM_VA_SPACE_KERNEL && raw_space != UVM_VA_SPACE_USER)
        return UVM_ERR_INVALID_ARGUMENT;
    const uvm::mmu::PageTreeInfo info = uvm::from_handle(m)->gpu(gpu).tree(space).info();
    uvm_page_tree_info_t r;
    std::memset(&r, 0, sizeof(r));
    r.level_count = uvm::mmu::PageTreeInfo::kLevels;
    for (int i = 0; i < uvm::mmu::PageTreeInfo::kLevels; ++i) {
        std::snprintf(r.levels[i].name, sizeof(r.levels[i].name), "%s", info.levels[i].name);
        r.levels[i].va_bit_hi = info.levels[i].va_bit_hi;
        r.levels[i].va_bit_lo = info.levels[i].va_bit_lo;
        r.levels[i].tables = info.levels[i].tables;
        r.levels[i].bytes = info.levels[i].bytes;
    }
    r.table_bytes = info.table_bytes;
    for (int i = 0; i < UVM_CHUNK_SIZE_COUNT; ++i)
        r.mapped_bytes[i] = info.mapped_bytes[i];
    *out = r;
    return UVM_OK;
}

uvm_status_t uvm_gpu_stats(uvm_manager_t *m, uint32_t gpu, uvm_gpu_stats_t *out) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    uvm_status_t status = check_gpu(m, gpu, out);
    if (status != UVM_OK)
        return status;
    Manager &mgr = *uvm::from_handle(m);
    GpuState &g = mgr.gpu(gpu);
    g.caches.flush_all();  // the PMM whole: cached chunks are free chunks
    uvm::chunk::PmmStats p = g.pmm.stats();
    const uvm::chunk::PmmStats q = g.remap_pmm.stats();
    p.root_chunks += q.root_chunks;
    for (int i = 0; i < UVM_CHUNK_SIZE_COUNT; ++i) {
        p.bytes_free[i] += q.bytes_free[i];
        p.bytes_pinned[i] += q.bytes_pinned[i];
        p.bytes_evictable[i] += q.bytes_evictable[i];
        p.chunks_split[i] += q.chunks_split[i];
    }
    p.largest_free_block = std::max(p.largest_free_block, q.largest_free_block);
    const uvm::backend::CeCounters ce = mgr.backend().ce_counters(gpu);
    uvm_gpu_stats_t r;
    std::memset(&r, 0, sizeof(r));
    r.root_chunks = p.root_chunks;
    for (int i = 0; i < UVM_CHUNK_SIZE_COUNT; ++i) {
        r.bytes_free[i] = p.bytes_free[i];
        r.bytes_pinned[i] = p.bytes_pinned[i];
        r.bytes_evictable[i] = p.bytes_evictable[i];
        r.chunks_split[i] = p.chunks_split[i];
    }
    r.largest_free_block = p.largest_free_block;
    r.vidmem_objects = g.caches.objects();
    r.phys_mappings = r.vidmem_objects + g.other_phys_mappings;
    r.kernel_mappings = g.kernel_mappings;
    r.user_mappings = g.user_mappings;
    r.peer_mappings = g.peer_mappings;
    r.page_table_bytes = g.kernel_tree.info().table_bytes + g.user_tree.info().table_bytes;
    r.ce_operations = ce.operations;
    r.ce_bytes = ce.bytes;
    r.ce_translations = ce.translations;
    r.evictions = g.evictions;
    r.restores = g.restores;
    r.bytes_evicted = g.bytes_evicted;
    r.bytes_restored = g.bytes_restored;
    r.evicted_objects = g.evicted_objects;
    r.evicted_bytes = g.evicted_bytes;
    *out = r;
    return UVM_OK;
}

uvm_status_t uvm_manager_stats(uvm_manager_t *m, uvm_manager_stats_t *out) {
    UVM_REFUSE_IN_FORKED_CHILD(m);
    if (!m || !out)
        return UVM_ERR_INVALID_ARGUMENT;
    Manager &mgr = *uvm::from_handle(m);
    uvm_manager_stats_t r;
    std::memset(&r, 0, sizeof(r));
    r.objects = mgr.sysmem_objects + mgr.managed_objects;
    for (uint32_t g = 0; g < mgr.gpu_count(); ++g)
        r.objects += mgr.gpu(g).caches.objects();
    r.sysmem_objects = mgr.sysmem_objects;
    r.sysmem_bytes = mgr.sysmem_bytes;
    r.cpu_kernel_mappings = mgr.cpu_kernel_mappings;
    r.cpu_user_mappings = mgr.cpu_user_mappings;
    r.managed_objects = mgr.managed_objects;
    r.managed_bytes = mgr.managed_bytes;
    r.prefetches = mgr.prefetches;
    r.prefetched_bytes = mgr.prefetched_bytes;
    r.streams = mgr.streams().stream_count();
    r.retiring_objects = mgr.streams().retiring_objects();
    r.retiring_bytes = mgr.streams().retiring_bytes();
    r.stream_pool_bytes = mgr.streams().pooled_bytes();
    *out = r;
    return UVM_OK;
}

}  // extern "C"
