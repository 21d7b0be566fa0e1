// The allocation path (alloc_path.h).
#include "alloc/alloc_path.h"

#include "observe/report.h"
#include "pressure/client.h"
#include "pressure/residency.h"
#include "pressure/sleep.h"
#include "stream/stream.h"
#include "uvm/manager.h"
#include "uvm/mem.h"

namespace uvm {
namespace alloc {

namespace {

// uvm_mem_alloc, where memory freed on streams may be taken back first when
// the GPU is full; on `stream`, from its pool where it holds a run of this
// kind, and for 2M chunks of its GPU from its pending roots too (not for
// UVM_MEM_ZERO: zeroing is not in the stream's order there); a sleepable
// client's vidmem from its own roots (`client_pmm`, sleep.h), which no
// stream's pool holds.
uvm_status_t alloc_object(Manager &mgr, const uvm_mem_alloc_params_t &params, const std::shared_ptr<uvm::Stream> &stream,
                          std::shared_ptr<Mem> *out, chunk::Pmm *client_pmm = nullptr) {
    uvm_status_t status = UVM_ERR_OUT_OF_MEMORY;
    chunk::Pmm::Holder holder;  // none
    if (stream && !client_pmm && params.backing == UVM_BACKING_VIDMEM && params.gpu < mgr.gpu_count() && params.size &&
        !(params.flags & ~(UVM_MEM_ZERO | UVM_MEM_EVICTABLE | UVM_MEM_USER_MAPPABLE | UVM_MEM_GPU_MAPPED |
                           UVM_MEM_DISCARDABLE))) {
        uvm::ReusedRun want, run;
        want.gpu = params.gpu;
        if (uvm::pick_chunk_size(params.backing, params.size, params.chunk_size,
                                 mgr.gpu(params.gpu).info.page_sizes, &want.chunk_size) == UVM_OK) {
            want.count = (params.size + want.chunk_size - 1) / want.chunk_size;
            want.evictable = (params.flags & (UVM_MEM_EVICTABLE | UVM_MEM_DISCARDABLE)) != 0;
            want.remappable = (params.flags & UVM_MEM_USER_MAPPABLE) && want.chunk_size == UVM_PAGE_SIZE_2M;
            if (uvm::Streams::pendable(*stream, want)) {
                // Runs of this kind freed on the stream are its pending roots,
                // never in its pool: nothing to look for there.
                if (!(params.flags & UVM_MEM_ZERO))
                    holder = mgr.streams().pend_holder(*stream, want.count);
            } else if (mgr.streams().pool_take(*stream, want, &run)) {
                status = uvm::mem_alloc(mgr, params, out, &run);
                if (status == UVM_OK && (params.flags & UVM_MEM_ZERO)) {
                    uvm::backend::CeAddress dst;
                    dst.address = run.phys;
                    std::lock_guard<std::mutex> guard(stream->lock);
                    status = mgr.backend_streams()->ce_memset_async(run.gpu, stream->backend, dst, 0,
                                                                    run.chunk_size * run.count);
                    if (status != UVM_OK) {
                        // The new object gives the run back as it took it (to the pool, below).
                        {
                            std::lock_guard<uvm::Mutex> mem_guard((*out)->lock);
                            uvm::ReusedRun same;
                            const bool detached = uvm::mem_detach_run(mgr, **out, &same);
                            UVM_ASSERT(detached && same.phys == run.phys && same.count == run.count);
                            (void)detached;
                        }
                        out->reset();  // after the unlock: the object goes with its last reference
                    }
                }
                if (status != UVM_OK)
                    mgr.streams().pool_put(*stream, run);
                return status;
            }
        }
    }
    const chunk::Pmm::Holder *mine = holder.slot >= 0 ? &holder : nullptr;
    status = uvm::mem_alloc(mgr, params, out, nullptr, client_pmm, mine);
    if (status != UVM_ERR_OUT_OF_MEMORY)
        return status;
    return uvm::retry_with_room(mgr, params.backing == UVM_BACKING_VIDMEM, params.gpu, params.size, nullptr, nullptr,
                                [&] { return uvm::mem_alloc(mgr, params, out, nullptr, client_pmm, mine); });
}

}  // namespace

uvm_status_t allocate(Manager &mgr, const uvm_mem_alloc_params_t &params_ref, const std::shared_ptr<Stream> &stream,
                      uvm_mem_t **out, uint64_t *gpu_address) {
    const uvm_mem_alloc_params_t *params = &params_ref;
    const bool on_stream = stream != nullptr;
    if (!on_stream && !gpu_address && uvm::mem_alloc_parked(mgr, *params, out))
        return UVM_OK;  // the held pair's alloc: a parked object taken whole
    uvm_status_t status = UVM_OK;
    if (on_stream && mgr.streams().alloc_parked(stream, *params, out, gpu_address))
        return UVM_OK;  // an object freed on the stream, taken whole
    std::shared_ptr<uvm::Client> client;
    if (params->client && !(client = mgr.clients().lookup(params->client)))
        return UVM_ERR_INVALID_HANDLE;
    if (params->size == 0) {
        // As cudaMalloc(0): no object, once the rest would have been accepted.
        uvm_mem_alloc_params_t one = *params;
        one.size = 1;
        status = uvm::mem_check_alloc(mgr, one);
        if (status == UVM_OK && params->backing == UVM_BACKING_MANAGED && mgr.backend().kind() == UVM_BACKEND_SIM)
            status = UVM_ERR_NOT_SUPPORTED;  // as for any size: managed memory is the CUDA backend's
        if (status == UVM_OK) {
            *out = nullptr;
            if (gpu_address)
                *gpu_address = 0;
        }
        return status;
    }
    // A sleepable client's vidmem: from its own roots, and never while
    // it sleeps or goes to sleep (the gate is held until the handle is out).
    uvm::SleepGate gate;
    uvm::chunk::Pmm *client_pmm = nullptr;
    if (client && params->backing == UVM_BACKING_VIDMEM && params->gpu < mgr.gpu_count()) {
        status = gate.enter(client.get());
        if (status == UVM_OK)
            client_pmm = uvm::client_pmm(mgr, client.get(), params->gpu, &status);
        if (status != UVM_OK)
            return status;
    }
    std::shared_ptr<Mem> mem;
    // Undo the allocation. Memory that came from the stream's pool may
    // still be written by earlier work on it: it goes back there, not to
    // the PMM.
    auto give_back = [&] {
        std::lock_guard<uvm::Mutex> guard(mem->lock);
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
    status = alloc_object(mgr, *params, stream, &mem, client_pmm);
    if (status == UVM_OK && client) {
        status = charge_new_object(mgr, *mem, std::move(client));
        if (status != UVM_OK)  // over the client's budget
            give_back();
    }
    if (status == UVM_ERR_OUT_OF_MEMORY)
        uvm::note_oom(mgr, uvm::oom_request(*params));
    if (status != UVM_OK)
        return status;
    if (stream) {
        UVM_ASSERT(mem->users.empty());
        mem->users.add(stream);  // a new object's first stream: held inline, no allocation
    }
    if (gpu_address) {
        // Before publication nobody has the object but another thread's
        // eviction (of an evictable one), which takes its lock.
        std::unique_lock<uvm::Mutex> guard(mem->lock, std::defer_lock);
        if (mem->evictable)
            guard.lock();
        const uvm::GpuMapping *mapping = mem->owner < mem->gpus.size() ? &mem->gpus[mem->owner] : nullptr;
        *gpu_address = mapping && mapping->kernel ? mapping->kernel_va : 0;
    }
    *out = publish_new_object(mgr, &slot, mem, (params->flags & UVM_MEM_GPU_MAPPED) != 0);
    return UVM_OK;
}

}  // namespace alloc
}  // namespace uvm
