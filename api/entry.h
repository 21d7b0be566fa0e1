// The entry layer every C function of the API goes through (api/*_api.cpp):
// argument and handle checks, the fork refusal, the object lock, host
// allocation failure as a status. Internal.
#pragma once


#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>

#include "backend/stream_capability.h"  // a stream's calls: a stream exists only where the backend has streams
#include "common/enum_value.h"
#include "common/host_guarded.h"
#include "common/last_error.h"
#include "common/sizes.h"
#include "api/handles.h"
#include "uvm/mem.h"
#include "pressure/client.h"
#include "observe/metrics_server.h"
#include "observe/report.h"
#include "observe/trace.h"
#include "pressure/gpu_pressure.h"
#include "pressure/residency.h"
#include "pressure/sleep.h"
#include "uvm/events.h"
#include "share/share.h"
#include "stream/stream.h"

using uvm::GpuState;
using uvm::Manager;
using uvm::Mem;
using uvm::SlotReservation;

namespace uvm::api {

using uvm::dead_client;  // beside null_argument for every call here (uvm/manager.h: the allocation path says it too)

// Host allocation failure anywhere below becomes a status, never an exception across the C API.
template <typename F>
uvm_status_t guarded(F &&f) {
    return host_guarded(std::forward<F>(f));
}

// The way into the library for a C function that names no manager: host
// allocation failure is NO_HOST_MEMORY, and the thread's message
// (uvm_last_error_message) is what `f` said of its failure, or its status's
// text, or none after a success.
template <typename F>
uvm_status_t api_call(F &&f) {
    return uvm::end_call(guarded(std::forward<F>(f)));
}

// The one way into the library for every C function that names a manager
// (as nvidia-uvm routes every ioctl through one macro): a null manager is
// INVALID_ARGUMENT; a parent's manager used in a fork()ed child is FORKED
// and nothing of it is touched (its threads, locks and driver state stayed
// with the parent); host allocation failure is NO_HOST_MEMORY; the thread's
// message is kept as api_call keeps it. Then `op(mgr)` checks the rest of
// its arguments.
template <typename F>
uvm_status_t enter(uvm_manager_t *m, F &&op) {
    if (!m)
        return uvm::end_call(uvm::fail(UVM_ERR_INVALID_ARGUMENT, "the manager handle is NULL"));
    Manager &mgr = *uvm::from_handle(m);
    if (mgr.forked())
        return uvm::end_call(uvm::fail(UVM_ERR_FORKED,
                                       "the manager belongs to the parent of this fork()ed process: "
                                       "create a manager of its own"));
    return uvm::end_call(guarded([&]() -> uvm_status_t { return op(mgr); }));
}

// An argument that must not be NULL: INVALID_ARGUMENT, naming it.
[[gnu::cold]] inline uvm_status_t null_argument(const char *name) {
    return uvm::fail(UVM_ERR_INVALID_ARGUMENT, "%s is NULL", name);
}

// Inside enter: run `op(mgr, mem)` with the object's lock held, after
// checking the handle.
template <typename F>
uvm_status_t on_live_mem(Manager &mgr, uvm_mem_t *handle, F &&op) {
    if (!handle)
        return uvm::fail(UVM_ERR_INVALID_ARGUMENT, "the object handle is NULL");
    std::shared_ptr<Mem> mem;
    std::unique_lock<uvm::Mutex> guard;
    const uvm_status_t status = lock_live(mgr, handle, &mem, &guard);
    return status == UVM_OK ? op(mgr, *mem) : status;
}

// enter, then on_live_mem.
template <typename F>
uvm_status_t with_mem(uvm_manager_t *m, uvm_mem_t *handle, F &&op) {
    return enter(m, [&](Manager &mgr) { return on_live_mem(mgr, handle, op); });
}

// The same, where the call also names a GPU.
template <typename F>
uvm_status_t with_mem_gpu(uvm_manager_t *m, uvm_mem_t *handle, uint32_t gpu, F &&op) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (gpu >= mgr.gpu_count())
            return uvm::bad_gpu(mgr, gpu);
        return on_live_mem(mgr, handle, op);
    });
}

// Bring an evicted object back (residency.h); an OUT_OF_MEMORY leaves its
// report (report.h).
inline uvm_status_t make_resident(Manager &mgr, Mem &mem, const Mem *holding = nullptr) {
    const uvm_status_t status = uvm::mem_make_resident(mgr, mem, holding);
    if (status == UVM_ERR_OUT_OF_MEMORY) {
        uvm::OomRequest r = uvm::oom_request("restore", mem);
        r.holding[1] = holding;  // locked by the caller too
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
// An asleep object's GPU mappings are unmapped as they are: an unmap needs
// none of its memory, and the wake restores only its roots (sleep.h); one
// evicted too forgets the mapping its restore would have made again.
template <typename F>
uvm_status_t map_call(uvm_manager_t *m, uvm_mem_t *h, uint32_t gpu, bool resident, bool map,
                             uvm::MapKind kind, F &&op) {
    auto traced = [&](Manager &mgr, Mem &mem) {
        const uvm_status_t status = op(mgr, mem);
        if (status == UVM_OK)
            uvm::trace_event(mgr, mem, map ? uvm::TraceKind::Map : uvm::TraceKind::Unmap, kind, gpu);
        return status;
    };
    if (!resident)
        return with_mem(m, h, traced);
    if (map)
        return with_resident_mem(m, h, gpu, traced);
    return with_mem_gpu(m, h, gpu, [&](Manager &mgr, Mem &mem) -> uvm_status_t {
        if (__builtin_expect(mem.asleep, 0)) {
            if (!mem.evicted)
                return traced(mgr, mem);
            const uvm_status_t status = uvm::mem_forget_remap(mgr, mem, gpu, kind);
            if (status == UVM_OK)
                uvm::trace_event(mgr, mem, uvm::TraceKind::Unmap, kind, gpu);
            return status;
        }
        const uvm_status_t status = make_resident(mgr, mem);
        return status == UVM_OK ? traced(mgr, mem) : status;
    });
}

// Write a report into the caller's buffer (uvm.h, "Reports and metrics").
inline uvm_status_t copy_out(const std::string &text, char *buf, size_t size, size_t *needed) {
    if (needed)
        *needed = text.size() + 1;
    if (size < text.size() + 1)
        return uvm::fail(UVM_ERR_BUFFER_TOO_SMALL, "size %zu: the text needs %zu bytes", size, text.size() + 1);
    std::memcpy(buf, text.c_str(), text.size() + 1);
    return UVM_OK;
}

// A report call's buffer: INVALID_ARGUMENT for a NULL one of non-zero size.
inline uvm_status_t check_buffer(const char *buf, size_t size) {
    if (!buf && size)
        return uvm::fail(UVM_ERR_INVALID_ARGUMENT, "buf is NULL and size %zu", size);
    return UVM_OK;
}

// A report's format (read into *json) and buffer: INVALID_ARGUMENT for a
// format that is neither text nor JSON, or a bad buffer.
inline uvm_status_t check_report(const uvm_report_format_t &format, const char *buf, size_t size, bool *json) {
    const int f = uvm::enum_value(format);
    *json = f == UVM_REPORT_JSON;
    if (f != UVM_REPORT_TEXT && f != UVM_REPORT_JSON)
        return uvm::fail(UVM_ERR_INVALID_ARGUMENT, "format %d: no such report format; UVM_REPORT_TEXT or _JSON", f);
    return check_buffer(buf, size);
}


// The stream a call names, or null (then *status says why).
// The reference is valid until the thread's next lookup (Streams::lookup).
inline const std::shared_ptr<uvm::Stream> &stream_of(Manager &mgr, uvm_stream_t *handle, uvm_status_t *status) {
    static const std::shared_ptr<uvm::Stream> none;
    if (!handle) {
        *status = uvm::fail(UVM_ERR_INVALID_ARGUMENT, "the stream handle is NULL");
        return none;
    }
    const std::shared_ptr<uvm::Stream> &stream = mgr.streams().lookup(handle);
    *status = stream ? UVM_OK
                     : uvm::fail(UVM_ERR_INVALID_HANDLE, "stream %p: destroyed, or of another manager",
                                 static_cast<void *>(handle));
    return stream;
}


// Run `op(mgr, stream)` on the stream a call names, after checking it.
template <typename F>
uvm_status_t with_stream(uvm_manager_t *m, uvm_stream_t *handle, F &&op) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        uvm_status_t status;
        const std::shared_ptr<uvm::Stream> &stream = stream_of(mgr, handle, &status);
        return stream ? op(mgr, stream) : status;
    });
}

// Run `op(mgr, pool)` on the live private pool a call names, after
// checking it (a pool destroyed by another thread since it was looked up is
// INVALID_HANDLE too).
template <typename F>
uvm_status_t with_pool(uvm_manager_t *m, uvm_pool_t *handle, F &&op) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (!handle)
            return UVM_ERR_INVALID_ARGUMENT;
        const std::shared_ptr<uvm::PrivatePool> pool = mgr.streams().private_pools().lookup(handle);
        if (!pool)
            return UVM_ERR_INVALID_HANDLE;
        return op(mgr, *pool);
    });
}

}  // namespace uvm::api

namespace uvm::api {

// The calling thread's last teardown's leak report (uvm_leak_report).
struct LeakNote {
    bool any = false;
    std::string text, json;
};
inline thread_local LeakNote t_leaks;

}  // namespace uvm::api
