// The C functions of uvm.h (the core: manager, GPUs, topology, objects,
// mappings, addresses, copies, streams, managed), over api/entry.h.
#include "api/entry.h"
#include "alloc/alloc_path.h"
#include "observe/stats.h"
#include "stream/copy.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

using namespace uvm::api;

// UVM_TRACE's prefix as an absolute path, so that what stderr says of the
// files is where they are whatever the reader's directory.
static std::string trace_path(const char *prefix) {
    if (prefix[0] == '/')
        return prefix;
    char cwd[4096];
    return getcwd(cwd, sizeof(cwd)) ? std::string(cwd) + "/" + prefix : std::string(prefix);
}

extern "C" {

uvm_status_t uvm_manager_create(const uvm_manager_params_t *params, uvm_manager_t **out) {
    return api_call([&]() -> uvm_status_t {
        if (!out)
            return null_argument("out");
        uvm_manager_params_t defaults;
        std::memset(&defaults, 0, sizeof(defaults));
        if (!params)
            params = &defaults;
        const int kind = uvm::enum_value(params->backend);
        if (kind < UVM_BACKEND_AUTO || kind > UVM_BACKEND_CUDA)
            return uvm::fail(UVM_ERR_INVALID_ARGUMENT,
                             "params->backend %d: no such backend; UVM_BACKEND_AUTO (0), _SIM (1) or _CUDA (2)", kind);
        std::unique_ptr<uvm::backend::Backend> backend;
        const uvm_status_t status = uvm::backend::create_backend(*params, &backend);
        if (status != UVM_OK)
            return status;
        const uvm_status_t created = uvm::create_manager(std::move(backend), out);
        // UVM_TRACE=<prefix>: trace the whole run (the files are written at teardown).
        const char *trace = std::getenv("UVM_TRACE");
        if (created == UVM_OK && trace && trace[0]) {
            if (uvm::from_handle(*out)->tracer().start(0) != UVM_OK)
                std::fprintf(stderr, "uvm: UVM_TRACE is set but the trace could not start\n");
            else  // where the files will be, said while the user is looking
                std::fprintf(stderr,
                             "uvm: UVM_TRACE: tracing; %s.json and %s.svg are written when the manager is "
                             "destroyed\n",
                             trace_path(trace).c_str(), trace_path(trace).c_str());
        }
        return created;
    });
}

// UVM_TRACE=<prefix>: a traced manager's trace goes to <prefix>.json and
// <prefix>.svg at teardown, and stderr says where. Failures are said there
// too, never fatal.
static void write_trace_files(Manager &mgr) {
    const char *prefix = std::getenv("UVM_TRACE");
    if (!prefix || !prefix[0])
        return;
    const std::string base = trace_path(prefix);
    for (int svg = 0; svg < 2; ++svg) {
        std::string text;
        if (!(svg ? uvm::trace_svg(mgr, &text) : uvm::trace_chrome_json(mgr, &text)))
            return;  // never traced
        const std::string path = base + (svg ? ".svg" : ".json");
        errno = 0;
        FILE *f = std::fopen(path.c_str(), "w");
        const bool written = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
        const bool closed = f && std::fclose(f) == 0;
        if (!written || !closed) {
            std::fprintf(stderr, "uvm: could not write the trace to %s: %s\n", path.c_str(),
                         std::strerror(errno ? errno : EIO));
            return;
        }
    }
    std::fprintf(stderr, "uvm: UVM_TRACE: the trace is in %s.json (chrome://tracing, Perfetto) and %s.svg\n",
                 base.c_str(), base.c_str());
}

uvm_status_t uvm_manager_destroy(uvm_manager_t *m) {
    return enter(m, [&](Manager &owner) -> uvm_status_t {
        Manager *mgr = &owner;
        mgr->metrics_servers().stop_all();  // their threads read the manager
        mgr->streams().drain();  // objects waiting for stream work are released first
        if (mgr->tracing.on())
            mgr->tracer().stop();
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
            std::lock_guard<uvm::Mutex> guard(mem->lock);
            if (!mem->dead)
                uvm::mem_release(*mgr, *mem);
        }
        delete mgr;
        return live.empty() ? UVM_OK : UVM_ERR_LEAKED_OBJECTS;
    });
}

uvm_status_t uvm_manager_backend(uvm_manager_t *m, uvm_backend_kind_t *out) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (!out)
            return null_argument("out");
        *out = mgr.backend().kind();
        return UVM_OK;
    });
}

uvm_status_t uvm_gpu_count(uvm_manager_t *m, uint32_t *out) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (!out)
            return null_argument("out");
        *out = mgr.gpu_count();
        return UVM_OK;
    });
}


// The GPU opened first (uvm.h): its free memory is the driver's answer.
// The library's own reports (gpu_info below, for every GPU) open nothing.
uvm_status_t uvm_gpu_info(uvm_manager_t *m, uint32_t gpu, uvm_gpu_info_t *out) {
    return enter(m, [&](Manager &mgr) {
        uvm_status_t status = check_gpu(mgr, gpu, out);
        if (status == UVM_OK)
            status = mgr.backend().gpu_open(gpu);
        return status == UVM_OK ? uvm::gpu_info(mgr, gpu, out) : status;
    });
}

uvm_status_t uvm_host_info(uvm_manager_t *m, uvm_host_info_t *out) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (!out)
            return null_argument("out");
        const uvm::topo::Topology &t = mgr.backend().topology();
        uvm_host_info_t r;
        std::memset(&r, 0, sizeof(r));
        r.numa_node_count = static_cast<uint32_t>(t.nodes.size());
        r.from_hwloc = t.from_hwloc;
        r.thp = uvm::topo::thp_mode(false);
        r.shmem_thp = uvm::topo::thp_mode(true);
        *out = r;
        return UVM_OK;
    });
}

uvm_status_t uvm_numa_node_info(uvm_manager_t *m, uint32_t index, uvm_numa_node_info_t *out) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (!out)
            return null_argument("out");
        const uvm::topo::Topology &t = mgr.backend().topology();
        if (index >= t.nodes.size())
            return uvm::fail(UVM_ERR_INVALID_ARGUMENT, "index %u is out of range: the topology has %zu NUMA node%s",
                             index, t.nodes.size(), t.nodes.size() == 1 ? "" : "s");
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
    });
}

uvm_status_t uvm_gpu_path(uvm_manager_t *m, uint32_t a, uint32_t b, uvm_gpu_path_t *out) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        uvm_status_t status = check_gpu(mgr, a, out);
        if (status == UVM_OK)
            status = check_gpu(mgr, b, out);
        if (status != UVM_OK)
            return status;
        *out = a == b ? UVM_GPU_PATH_SELF
                      : uvm::topo::classify_path(mgr.gpu(a).info.place, mgr.gpu(b).info.place);
        return UVM_OK;
    });
}

uvm_status_t uvm_gpu_enable_peer_access(uvm_manager_t *m, uint32_t gpu, uint32_t owner) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (gpu >= mgr.gpu_count() || owner >= mgr.gpu_count())
            return UVM_ERR_INVALID_GPU;
        if (gpu == owner)
            return UVM_ERR_INVALID_ARGUMENT;
        if (!((mgr.gpu(gpu).info.peer_mask >> owner) & 1u))
            return UVM_ERR_NO_PEER_ACCESS;
        return mgr.backend().peer_access(gpu, owner);
    });
}

uvm_status_t uvm_gpu_trim(uvm_manager_t *m, uint32_t gpu, uint64_t *released) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (gpu >= mgr.gpu_count())
            return uvm::bad_gpu(mgr, gpu);
        // Memory streams have finished with comes back first; memory that work
        // may still touch stays allocated, so it cannot go back to the driver.
        try {
            mgr.streams().reap(true);
        } catch (const std::bad_alloc &) {
            // Nothing lost: what could not be looked at stays pooled or retiring.
        }
        mgr.gpu(gpu).caches.flush_all();  // cached chunks would keep their roots held
        const uint64_t bytes =
            mgr.gpu(gpu).pmm.trim() + mgr.gpu(gpu).remap_pmm.trim() + uvm::client_roots_trim(mgr, gpu);
        mgr.gpu(gpu).pressure->host_store.trim();  // empty slabs of host memory for evicted bytes
        mgr.backend().trim(gpu);
        if (released)
            *released = bytes;
        return UVM_OK;
    });
}

uvm_status_t uvm_gpu_set_release_threshold(uvm_manager_t *m, uint32_t gpu, uint64_t bytes) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (gpu >= mgr.gpu_count())
            return uvm::bad_gpu(mgr, gpu);
        // Objects kept by streams hold memory the threshold would give back:
        // none is kept under one (stream/stream.h, Streams::set_parking).
        mgr.streams().set_parking(gpu, bytes == UINT64_MAX);
        // Cached chunks would keep roots split that are free: back to the PMM first.
        mgr.gpu(gpu).caches.flush_all();
        mgr.gpu(gpu).pmm.set_release_threshold(bytes);
        mgr.gpu(gpu).remap_pmm.set_release_threshold(bytes);
        return UVM_OK;
    });
}

uvm_status_t uvm_gpu_set_growth_slack(uvm_manager_t *m, uint32_t gpu, uint64_t bytes) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (gpu >= mgr.gpu_count())
            return uvm::bad_gpu(mgr, gpu);
        mgr.gpu(gpu).pmm.set_growth_slack(bytes);
        mgr.gpu(gpu).remap_pmm.set_growth_slack(bytes);
        return UVM_OK;
    });
}

// `gpu_address` (uvm_mem_alloc_gpu): where the new object's kernel address on
// its GPU goes; `alloc_size` (uvm_gpu_malloc_async): the bytes it holds.
// `Caller` only makes each entry point's instance (and its lambda's enter)
// its own: one instance shared by four callers was called out of line, 49
// instructions on the held pair that the compiler inlines away otherwise.
extern "C++" {
template <int Caller>
static uvm_status_t alloc_call(uvm_manager_t *m, const uvm_mem_alloc_params_t *params, uvm_stream_t *stream_handle,
                               bool on_stream, uvm_mem_t **out, uint64_t *gpu_address = nullptr,
                               uint64_t *alloc_size = nullptr) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (!params || !out)
            return null_argument(!params ? "params" : "out");
        uvm_status_t status = UVM_OK;
        static const std::shared_ptr<uvm::Stream> no_stream;
        const std::shared_ptr<uvm::Stream> &stream = on_stream ? stream_of(mgr, stream_handle, &status) : no_stream;
        if (on_stream && !stream)
            return status;
        return uvm::alloc::allocate(mgr, *params, stream, out, gpu_address, alloc_size);
    });
}
}  // extern "C++"

uvm_status_t uvm_mem_alloc(uvm_manager_t *m, const uvm_mem_alloc_params_t *params, uvm_mem_t **out) {
    return alloc_call<0>(m, params, nullptr, false, out);
}

uvm_status_t uvm_mem_alloc_async(uvm_manager_t *m, const uvm_mem_alloc_params_t *params, uvm_stream_t *stream,
                                 uvm_mem_t **out) {
    return alloc_call<1>(m, params, stream, true, out);
}

uvm_status_t uvm_mem_alloc_gpu(uvm_manager_t *m, const uvm_mem_alloc_params_t *params, uvm_stream_t *stream,
                               uvm_mem_t **out, uint64_t *gpu_address) {
    if (!params || !out || !gpu_address)
        return api_call([&] { return null_argument(!params ? "params" : !out ? "out" : "gpu_address"); });
    uvm_mem_alloc_params_t mapped = *params;
    mapped.flags |= UVM_MEM_GPU_MAPPED;
    uvm_mem_t *handle = nullptr;
    uint64_t address = 0;
    const uvm_status_t status = alloc_call<2>(m, &mapped, stream, stream != nullptr, &handle, &address);
    if (status == UVM_OK) {
        *out = handle;
        *gpu_address = address;
    }
    return status;
}

uvm_status_t uvm_gpu_malloc_async(uvm_manager_t *m, const uvm_mem_alloc_params_t *params, uvm_stream_t *stream,
                                  uint64_t *gpu_address, uint64_t *alloc_size) {
    if (!params || !gpu_address)
        return api_call([&] { return null_argument(!params ? "params" : "gpu_address"); });
    uvm_mem_alloc_params_t mapped = *params;
    mapped.flags |= UVM_MEM_GPU_MAPPED;
    uvm_mem_t *handle = nullptr;
    uint64_t address = 0, held = 0;
    const uvm_status_t status = alloc_call<3>(m, &mapped, stream, stream != nullptr, &handle, &address, &held);
    if (status == UVM_OK) {
        *gpu_address = address;
        if (alloc_size)
            *alloc_size = held;
    }
    return status;
}

uvm_status_t uvm_gpu_free_async(uvm_manager_t *m, uint32_t gpu, uint64_t gpu_address, uvm_stream_t *stream_handle,
                                uint64_t *size, uint64_t *alloc_size) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (gpu >= mgr.gpu_count())
            return UVM_ERR_INVALID_GPU;
        uvm_status_t status = UVM_OK;
        static const std::shared_ptr<uvm::Stream> no_stream;
        const std::shared_ptr<uvm::Stream> &stream = stream_handle ? stream_of(mgr, stream_handle, &status) : no_stream;
        if (stream_handle && !stream)
            return status;
        uint64_t object_size = 0, held = 0;
        if (gpu_address) {
            uint64_t found = 0, base = 0;
            if (!mgr.gpu(gpu).kernel_addresses.find(gpu_address, &found, &base) || base != gpu_address)
                return UVM_ERR_NOT_FOUND;
            uvm_mem_t *handle = reinterpret_cast<uvm_mem_t *>(static_cast<uintptr_t>(found));
            uvm::FreedBytes freed;
            status = free_object(mgr, handle, stream, &freed);
            if (status != UVM_OK)  // INVALID_HANDLE: freed by another thread meanwhile
                return status == UVM_ERR_INVALID_HANDLE ? UVM_ERR_NOT_FOUND : status;
            object_size = freed.size;
            held = freed.alloc_size;
        }
        if (size)
            *size = object_size;
        if (alloc_size)
            *alloc_size = held;
        return UVM_OK;
    });
}

uvm_status_t uvm_mem_lookup_gpu_kernel(uvm_manager_t *m, uint32_t gpu, uint64_t address, uvm_mem_t **mem,
                                       uint64_t *offset) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        const uvm_status_t status = check_gpu(mgr, gpu, mem);
        if (status != UVM_OK)
            return status;
        uint64_t handle = 0, base = 0;
        if (!mgr.gpu(gpu).kernel_addresses.find(address, &handle, &base))
            return UVM_ERR_NOT_FOUND;
        *mem = reinterpret_cast<uvm_mem_t *>(static_cast<uintptr_t>(handle));
        if (offset)
            *offset = address - base;
        return UVM_OK;
    });
}

uvm_status_t uvm_mem_free(uvm_manager_t *m, uvm_mem_t *handle) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (!handle)
            return UVM_OK;  // a size-0 allocation's handle (uvm.h)
        return free_object(mgr, handle, nullptr);
    });
}

uvm_status_t uvm_mem_free_async(uvm_manager_t *m, uvm_mem_t *handle, uvm_stream_t *stream_handle) {
    return with_stream(m, stream_handle, [&](Manager &mgr, const std::shared_ptr<uvm::Stream> &stream) -> uvm_status_t {
        if (!handle)
            return UVM_OK;  // a size-0 allocation's handle (uvm.h)
        return free_object(mgr, handle, stream);
    });
}

uvm_status_t uvm_stream_create(uvm_manager_t *m, uint32_t gpu, void *native, uvm_stream_t **out) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        const uvm_status_t status = check_gpu(mgr, gpu, out);
        if (status != UVM_OK)
            return status;
        return mgr.streams().create(gpu, native, out);
    });
}

uvm_status_t uvm_stream_destroy(uvm_manager_t *m, uvm_stream_t *stream) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (!stream)
            return null_argument("stream");
        return mgr.streams().destroy(stream);
    });
}

uvm_status_t uvm_stream_native(uvm_manager_t *m, uvm_stream_t *handle, void **out) {
    return with_stream(m, handle, [&](Manager &mgr, const std::shared_ptr<uvm::Stream> &stream) -> uvm_status_t {
        if (!out)
            return null_argument("out");
        *out = mgr.backend_streams()->stream_native(stream->backend);
        return UVM_OK;
    });
}

uvm_status_t uvm_stream_synchronize(uvm_manager_t *m, uvm_stream_t *handle) {
    return with_stream(m, handle, [](Manager &mgr, const std::shared_ptr<uvm::Stream> &stream) {
        return mgr.streams().synchronize(*stream);
    });
}

uvm_status_t uvm_mem_record_use(uvm_manager_t *m, uvm_mem_t *handle, uvm_stream_t *stream_handle) {
    return with_stream(m, stream_handle, [&](Manager &mgr, const std::shared_ptr<uvm::Stream> &stream) {
        return on_live_mem(mgr, handle, [&](Manager &, Mem &mem) {
            mem.users.add(stream);
            return UVM_OK;
        });
    });
}

uvm_status_t uvm_pool_create(uvm_manager_t *m, uint32_t gpu, uvm_pool_t **out) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        const uvm_status_t status = check_gpu(mgr, gpu, out);
        if (status != UVM_OK)
            return status;
        if (!mgr.backend_streams())
            return UVM_ERR_NOT_SUPPORTED;  // a pool is allocated to through streams
        return mgr.streams().private_pools().create(gpu, out);
    });
}

uvm_status_t uvm_pool_destroy(uvm_manager_t *m, uvm_pool_t *pool) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (!pool)
            return UVM_ERR_INVALID_ARGUMENT;
        return mgr.streams().destroy_pool(pool);
    });
}

uvm_status_t uvm_stream_set_pool(uvm_manager_t *m, uvm_stream_t *handle, uvm_pool_t *pool_handle) {
    return with_stream(m, handle, [&](Manager &mgr, const std::shared_ptr<uvm::Stream> &found) -> uvm_status_t {
        const std::shared_ptr<uvm::Stream> stream = found;  // a copy: the pool's lookup is another table's
        std::shared_ptr<uvm::PrivatePool> pool;
        if (pool_handle && !(pool = mgr.streams().private_pools().lookup(pool_handle)))
            return UVM_ERR_INVALID_HANDLE;
        return mgr.streams().set_pool(*stream, pool);
    });
}

uvm_status_t uvm_pool_info(uvm_manager_t *m, uvm_pool_t *pool_handle, uvm_pool_info_t *out) {
    return with_pool(m, pool_handle, [&](Manager &, uvm::PrivatePool &pool) -> uvm_status_t {
        if (!out)
            return UVM_ERR_INVALID_ARGUMENT;
        uvm_pool_info_t r;
        std::memset(&r, 0, sizeof(r));
        std::lock_guard<std::mutex> guard(pool.lock);
        r.gpu = pool.gpu;
        r.streams = pool.streams;
        r.objects = pool.objects;
        r.live_bytes = pool.live_bytes;
        r.free_bytes = pool.free_bytes;
        r.held_bytes = pool.live_bytes + pool.free_bytes;
        *out = r;
        return UVM_OK;
    });
}

uvm_status_t uvm_mem_info(uvm_manager_t *m, uvm_mem_t *handle, uvm_mem_info_t *out) {
    return with_mem(m, handle, [&](Manager &, Mem &mem) -> uvm_status_t {
        if (!out)
            return null_argument("out");
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
    return with_mem(m, handle, [&](Manager &, Mem &mem) -> uvm_status_t {
        if (!out)
            return null_argument("out");
        if (mem.backing != UVM_BACKING_SYSMEM)
            return uvm::fail(UVM_ERR_NOT_SUPPORTED, "the object is not sysmem: only host memory has host pages");
        return uvm::topo::query_host_pages(mem.host.linear, mem.alloc_size, out);
    });
}

uvm_status_t uvm_mem_map_cpu_kernel(uvm_manager_t *m, uvm_mem_t *h) {
    return map_call(m, h, 0, true, true, uvm::MapKind::CpuKernel,
                    [](Manager &mgr, Mem &mem) { return uvm::mem_map_cpu_kernel(mgr, mem); });
}
uvm_status_t uvm_mem_unmap_cpu_kernel(uvm_manager_t *m, uvm_mem_t *h) {
    return map_call(m, h, 0, false, false, uvm::MapKind::CpuKernel,
                    [](Manager &mgr, Mem &mem) { return uvm::mem_unmap_cpu_kernel(mgr, mem); });
}
uvm_status_t uvm_mem_map_cpu_user(uvm_manager_t *m, uvm_mem_t *h, void *address) {
    return map_call(m, h, 0, true, true, uvm::MapKind::CpuUser,
                    [&](Manager &mgr, Mem &mem) { return uvm::mem_map_cpu_user(mgr, mem, address); });
}
uvm_status_t uvm_mem_unmap_cpu_user(uvm_manager_t *m, uvm_mem_t *h) {
    return map_call(m, h, 0, false, false, uvm::MapKind::CpuUser,
                    [](Manager &mgr, Mem &mem) { return uvm::mem_unmap_cpu_user(mgr, mem); });
}
uvm_status_t uvm_mem_map_gpu_phys(uvm_manager_t *m, uvm_mem_t *h, uint32_t gpu) {
    return map_call(m, h, gpu, true, true, uvm::MapKind::GpuPhys,
                    [&](Manager &mgr, Mem &mem) { return uvm::mem_map_gpu_phys(mgr, mem, gpu); });
}
uvm_status_t uvm_mem_unmap_gpu_phys(uvm_manager_t *m, uvm_mem_t *h, uint32_t gpu) {
    return map_call(m, h, gpu, true, false, uvm::MapKind::GpuPhys,
                    [&](Manager &mgr, Mem &mem) { return uvm::mem_unmap_gpu_phys(mgr, mem, gpu); });
}
uvm_status_t uvm_mem_map_gpu_kernel(uvm_manager_t *m, uvm_mem_t *h, uint32_t gpu) {
    return map_call(m, h, gpu, true, true, uvm::MapKind::GpuKernel, [&](Manager &mgr, Mem &mem) {
        return uvm::mem_map_gpu_virtual(mgr, mem, gpu, UVM_VA_SPACE_KERNEL, 0);
    });
}
uvm_status_t uvm_mem_unmap_gpu_kernel(uvm_manager_t *m, uvm_mem_t *h, uint32_t gpu) {
    return map_call(m, h, gpu, true, false, uvm::MapKind::GpuKernel, [&](Manager &mgr, Mem &mem) {
        return uvm::mem_unmap_gpu_virtual(mgr, mem, gpu, UVM_VA_SPACE_KERNEL);
    });
}
uvm_status_t uvm_mem_map_gpu_user(uvm_manager_t *m, uvm_mem_t *h, uint32_t gpu, uint64_t address) {
    return map_call(m, h, gpu, true, true, uvm::MapKind::GpuUser, [&](Manager &mgr, Mem &mem) {
        return uvm::mem_map_gpu_virtual(mgr, mem, gpu, UVM_VA_SPACE_USER, address);
    });
}
uvm_status_t uvm_mem_unmap_gpu_user(uvm_manager_t *m, uvm_mem_t *h, uint32_t gpu) {
    return map_call(m, h, gpu, true, false, uvm::MapKind::GpuUser, [&](Manager &mgr, Mem &mem) {
        return uvm::mem_unmap_gpu_virtual(mgr, mem, gpu, UVM_VA_SPACE_USER);
    });
}

uvm_status_t uvm_user_range_reserve(uvm_manager_t *m, uint64_t size, uint64_t *address) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (!address)
            return null_argument("address");
        return mgr.user_space().reserve(size, address);
    });
}

uvm_status_t uvm_user_range_release(uvm_manager_t *m, uint64_t address) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        return mgr.user_space().unreserve(address);
    });
}

uvm_status_t uvm_mem_advise(uvm_manager_t *m, uvm_mem_t *h, uvm_managed_advice_t advice, int32_t processor) {
    const int raw = uvm::enum_value(advice);
    return with_mem(m, h, [&](Manager &mgr, Mem &mem) { return uvm::mem_advise(mgr, mem, raw, processor); });
}
uvm_status_t uvm_mem_prefetch(uvm_manager_t *m, uvm_mem_t *h, uint64_t offset, uint64_t size, int32_t processor) {
    return with_mem(m, h, [&](Manager &mgr, Mem &mem) { return uvm::mem_prefetch(mgr, mem, offset, size, processor); });
}

// OUT_OF_RANGE for an offset past the object's end.
[[gnu::cold]] static uvm_status_t offset_out_of_range(uint64_t offset, const Mem &mem) {
    return uvm::fail(UVM_ERR_OUT_OF_RANGE, "offset %llu is past the object's end (%s)",
                     static_cast<unsigned long long>(offset), uvm::byte_text(mem.alloc_size).text);
}

static uvm_status_t cpu_address(uvm_manager_t *m, uvm_mem_t *h, uint64_t offset, void **out, bool user) {
    return with_mem(m, h, [&](Manager &, Mem &mem) -> uvm_status_t {
        if (!out)
            return null_argument("out");
        void *base = user ? mem.cpu_user : mem.cpu_kernel;
        if (offset >= mem.alloc_size)
            return offset_out_of_range(offset, mem);
        if (!base)
            return uvm::fail(UVM_ERR_NOT_MAPPED, "the object has no CPU %s mapping", user ? "user" : "kernel");
        *out = static_cast<uint8_t *>(base) + offset;
        return UVM_OK;
    });
}
uvm_status_t uvm_mem_cpu_kernel_address(uvm_manager_t *m, uvm_mem_t *h, uint64_t offset, void **out) {
    return cpu_address(m, h, offset, out, false);
}
uvm_status_t uvm_mem_cpu_user_address(uvm_manager_t *m, uvm_mem_t *h, uint64_t offset, void **out) {
    return cpu_address(m, h, offset, out, true);
}

uvm_status_t uvm_mem_gpu_phys_address(uvm_manager_t *m, uvm_mem_t *h, uint32_t gpu, uint64_t offset,
                                      uint64_t size, uvm_gpu_phys_address_t *out) {
    return with_resident_mem(m, h, gpu, [&](Manager &mgr, Mem &mem) -> uvm_status_t {
        if (!out)
            return null_argument("out");
        return uvm::mem_gpu_phys_address(mgr, mem, gpu, offset, size, out);
    });
}

static uvm_status_t gpu_virtual_address(uvm_manager_t *m, uvm_mem_t *h, uint32_t gpu, uint64_t offset,
                                        uint64_t *out, bool user) {
    return with_resident_mem(m, h, gpu, [&](Manager &, Mem &mem) -> uvm_status_t {
        if (!out)
            return null_argument("out");
        if (offset >= mem.alloc_size)
            return offset_out_of_range(offset, mem);
        if (mem.gpus.empty() || !(user ? mem.gpus[gpu].user : mem.gpus[gpu].kernel))
            return uvm::fail(UVM_ERR_NOT_MAPPED, "the object has no GPU %s mapping on GPU %u", user ? "user" : "kernel",
                             gpu);
        *out = (user ? mem.user_address : mem.gpus[gpu].kernel_va) + offset;
        return UVM_OK;
    });
}
uvm_status_t uvm_mem_gpu_kernel_address(uvm_manager_t *m, uvm_mem_t *h, uint32_t gpu, uint64_t offset,
                                        uint64_t *out) {
    return gpu_virtual_address(m, h, gpu, offset, out, false);
}
uvm_status_t uvm_mem_gpu_user_address(uvm_manager_t *m, uvm_mem_t *h, uint32_t gpu, uint64_t offset,
                                      uint64_t *out) {
    return gpu_virtual_address(m, h, gpu, offset, out, true);
}

// Copy or memset (src null) on GPU `gpu`'s copy engine, in pieces that are
// contiguous on both sides.
// `copy`: a copy, whose source must be given; else a memset.
// `stream_handle` (with `on_stream`): queued there, else synchronous.
static uvm_status_t copy_engine_op(uvm_manager_t *m, uint32_t gpu, const uvm_mem_span_t *dst, bool copy,
                                   const uvm_mem_span_t *src, uint8_t value, uint64_t size,
                                   bool on_stream = false, uvm_stream_t *stream_handle = nullptr) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (!dst || !dst->mem)
            return null_argument(!dst ? "dst" : "dst->mem");
        if (copy && (!src || !src->mem))
            return null_argument(!src ? "src" : "src->mem");
        if (size == 0)
            return uvm::fail(UVM_ERR_INVALID_ARGUMENT, "size is 0");
        if (gpu >= mgr.gpu_count())
            return uvm::bad_gpu(mgr, gpu);
        uvm_status_t status = UVM_OK;
        std::shared_ptr<uvm::Stream> stream;
        if (on_stream && !(stream = stream_of(mgr, stream_handle, &status)))
            return status;
        if (stream && stream->gpu != gpu)
            return uvm::fail(UVM_ERR_INVALID_ARGUMENT, "the stream is GPU %u's, the copy engine GPU %u's", stream->gpu,
                             gpu);
        std::shared_ptr<Mem> d = mgr.lookup(dst->mem);
        std::shared_ptr<Mem> s = src ? mgr.lookup(src->mem) : nullptr;
        if (!d || (src && !s))
            return uvm::dead_handle(!d ? dst->mem : src->mem);
        // Lock both objects (once when they are the same) without deadlock.
        std::unique_lock<uvm::Mutex> ld(d->lock, std::defer_lock);
        std::unique_lock<uvm::Mutex> ls;
        if (s && s != d) {
            ls = std::unique_lock<uvm::Mutex>(s->lock, std::defer_lock);
            std::lock(ld, ls);
        } else {
            ld.lock();
        }
        if (d->gone() || (s && s->gone()))
            return uvm::dead_handle(d->gone() ? dst->mem : src->mem);
        status = make_resident(mgr, *d, s.get());
        if (status == UVM_OK && s)
            status = make_resident(mgr, *s, d.get());
        if (status != UVM_OK)
            return status;
        return uvm::mem_copy_engine(mgr, gpu, d.get(), dst, s.get(), src, value, size, stream);
    });
}

uvm_status_t uvm_mem_copy(uvm_manager_t *m, uint32_t gpu, const uvm_mem_span_t *dst,
                          const uvm_mem_span_t *src, uint64_t size) {
    return copy_engine_op(m, gpu, dst, true, src, 0, size);
}

uvm_status_t uvm_mem_memset(uvm_manager_t *m, uint32_t gpu, const uvm_mem_span_t *dst, uint8_t value,
                            uint64_t size) {
    return copy_engine_op(m, gpu, dst, false, nullptr, value, size);
}

uvm_status_t uvm_mem_copy_async(uvm_manager_t *m, uint32_t gpu, const uvm_mem_span_t *dst,
                                const uvm_mem_span_t *src, uint64_t size, uvm_stream_t *stream) {
    return copy_engine_op(m, gpu, dst, true, src, 0, size, true, stream);
}

uvm_status_t uvm_mem_memset_async(uvm_manager_t *m, uint32_t gpu, const uvm_mem_span_t *dst, uint8_t value,
                                  uint64_t size, uvm_stream_t *stream) {
    return copy_engine_op(m, gpu, dst, false, nullptr, value, size, true, stream);
}

}  // extern "C"
