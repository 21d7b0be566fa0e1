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
#include "common/sizes.h"
#include "api/handles.h"
#include "uvm/mem.h"
#include "pressure/client.h"
#include "observe/metrics_server.h"
#include "observe/report.h"
#include "observe/trace.h"
#include "pressure/gpu_pressure.h"
#include "pressure/residency.h"
#include "uvm/events.h"
#include "share/share.h"
#include "stream/stream.h"

using uvm::GpuState;
using uvm::Manager;
using uvm::Mem;

namespace uvm::api {

// Host allocation failure anywhere below becomes a status, never an exception across the C API.
template <typename F>
uvm_status_t guarded(F &&f) {
    try {
        return f();
    } catch (const std::bad_alloc &) {
        return UVM_ERR_NO_HOST_MEMORY;
    }
}

// The one way into the library for every C function that names a manager
// (as nvidia-uvm routes every ioctl through one macro): a null manager is
// INVALID_ARGUMENT; a parent's manager used in a fork()ed child is FORKED
// and nothing of it is touched (its threads, locks and driver state stayed
// with the parent); host allocation failure is NO_HOST_MEMORY. Then
// `op(mgr)` checks the rest of its arguments.
template <typename F>
uvm_status_t enter(uvm_manager_t *m, F &&op) {
    if (!m)
        return UVM_ERR_INVALID_ARGUMENT;
    Manager &mgr = *uvm::from_handle(m);
    if (mgr.forked())
        return UVM_ERR_FORKED;
    return guarded([&]() -> uvm_status_t { return op(mgr); });
}

// The live object a handle names, locked (*guard); INVALID_HANDLE for a
// freed handle or one of another manager.
inline uvm_status_t lock_live(Manager &mgr, uvm_mem_t *handle, std::shared_ptr<Mem> *mem,
                       std::unique_lock<std::mutex> *guard) {
    *mem = mgr.lookup(handle);
    if (!*mem)
        return UVM_ERR_INVALID_HANDLE;
    *guard = std::unique_lock<std::mutex>((*mem)->lock);
    return (*mem)->gone() ? UVM_ERR_INVALID_HANDLE : UVM_OK;
}

// Inside enter: run `op(mgr, mem)` with the object's lock held, after
// checking the handle.
template <typename F>
uvm_status_t on_live_mem(Manager &mgr, uvm_mem_t *handle, F &&op) {
    if (!handle)
        return UVM_ERR_INVALID_ARGUMENT;
    std::shared_ptr<Mem> mem;
    std::unique_lock<std::mutex> guard;
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
            return UVM_ERR_INVALID_GPU;
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
inline uvm_status_t copy_out(const std::string &text, char *buf, size_t size, size_t *needed) {
    if (needed)
        *needed = text.size() + 1;
    if (size < text.size() + 1)
        return UVM_ERR_BUFFER_TOO_SMALL;
    std::memcpy(buf, text.c_str(), text.size() + 1);
    return UVM_OK;
}

// A report's format, read into *json; false for one that is neither text nor JSON.
inline bool report_format(const uvm_report_format_t &format, bool *json) {
    const int f = uvm::enum_value(format);
    *json = f == UVM_REPORT_JSON;
    return f == UVM_REPORT_TEXT || f == UVM_REPORT_JSON;
}


// The stream a call names, or null (then *status says why).
// The reference is valid until the thread's next lookup (Streams::lookup).
inline const std::shared_ptr<uvm::Stream> &stream_of(Manager &mgr, uvm_stream_t *handle, uvm_status_t *status) {
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
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        uvm_status_t status;
        const std::shared_ptr<uvm::Stream> &stream = stream_of(mgr, handle, &status);
        return stream ? op(mgr, stream) : status;
    });
}

// uvm_mem_alloc, where memory freed on streams may be taken back first when
// the GPU is full; on `stream`, from its pool where it holds a run of this kind.
inline uvm_status_t alloc_object(Manager &mgr, const uvm_mem_alloc_params_t &params, const std::shared_ptr<uvm::Stream> &stream,
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
                    status = mgr.backend_streams()->ce_memset_async(run.gpu, stream->backend, dst, 0,
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
    if (status != UVM_ERR_OUT_OF_MEMORY)
        return status;
    return uvm::retry_with_room(mgr, params.backing == UVM_BACKING_VIDMEM, params.gpu, params.size, nullptr, nullptr,
                                [&] { return uvm::mem_alloc(mgr, params, out); });
}

// Free now, or when the work its streams queued is done; `on`: ordered on
// that stream (uvm_mem_free_async).
inline uvm_status_t free_object(Manager &mgr, uvm_mem_t *handle, const std::shared_ptr<uvm::Stream> &on) {
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

}  // namespace uvm::api

namespace uvm::api {

// The calling thread's last teardown's leak report (uvm_leak_report).
struct LeakNote {
    bool any = false;
    std::string text, json;
};
inline thread_local LeakNote t_leaks;

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
// budget it is nobody's again and the caller gives its memory back. The
// object's lock is held from the moment it names its client until it is
// charged (or nobody's again): an evictable object is on its GPU's evictable
// list already, and an eviction (the client's own, from another thread's
// charge, or the GPU's under pressure) uncharges what it evicts. Evicted
// before it was charged, its memory would be uncharged once too often: the
// client's counters went below zero and let it pass its budget. Evictors
// only try an object's lock, so holding it here makes them pass it by.
inline uvm_status_t charge_new_object(Manager &mgr, Mem &mem, std::shared_ptr<uvm::Client> client) {
    uvm::Client &owner = *client;
    std::lock_guard<std::mutex> guard(mem.lock);
    mem.client = std::move(client);  // moved: no reference count traffic on the pair
    // Lock order: this object, then (in its own evictions) the others' with
    // try_lock and the evictable list: as everywhere (residency.h).
    const uvm_status_t status = uvm::charge_client(mgr, mem, nullptr);
    if (status != UVM_OK) {
        mem.client.reset();
        return status;
    }
    owner.objects.fetch_add(1, std::memory_order_relaxed);
    return UVM_OK;
}

// A new object's handle, in the slot reserved for it: the table takes the
// reference over (no count traffic on the pair); its birth is traced.
inline uvm_mem_t *publish_new_object(Manager &mgr, SlotReservation *slot, std::shared_ptr<Mem> &mem, bool gpu_mapped) {
    uvm_mem_t *handle = nullptr;
    Mem *const raw = mem.get();
    mgr.insert(&slot->ticket, mem, &handle);
    if (gpu_mapped) {
        // Found by its kernel address from now. Nobody has the handle yet;
        // only an evictable object can be reached (and unmapped, by another
        // thread's eviction) without it: that one is locked.
        std::unique_lock<std::mutex> guard(raw->lock, std::defer_lock);
        if (raw->evictable)
            guard.lock();
        uvm::mem_publish_kernel_addresses(mgr, *raw);
    }
    // Nobody has the handle yet: the object stays while the table holds it.
    if (mgr.tracing.on()) {
        std::lock_guard<std::mutex> guard(raw->lock);
        uvm::trace_mem(mgr, *raw, uvm::TraceKind::Alloc);
        if (gpu_mapped)
            uvm::trace_mem(mgr, *raw, uvm::TraceKind::Map, uvm::MapKind::GpuKernel, raw->owner);
    }
    return handle;
}

}  // namespace uvm::api
