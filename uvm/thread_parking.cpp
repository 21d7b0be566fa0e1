// Objects parked whole in their thread's chunk cache (mem_park, uvm/mem.h),
// and the allocation that takes one back (mem_take_thread_parked).
#include "uvm/mem.h"
#include "uvm/events.h"

#include "common/enum_value.h"
#include "common/sizes.h"

namespace uvm {

Mem::~Mem() {
    if (parked_by)
        events::heard::owned_released(*parked_by, *this);  // out of its client's budget and count now
}

void mem_park_owned(Manager &mgr, std::shared_ptr<Mem> &&mem) {
    UVM_ASSERT(mem->client);
    const uintptr_t owner = events::heard::owned_parked(*mem);
    if (!owner) {
        mem_release(mgr, *mem);  // nobody else has it: no lock to take
        return;
    }
    mem->parked_by = &mgr;
    ChunkCaches &caches = mgr.gpu(mem->owner).caches;
    const uint64_t chunk_size = mem->chunk_size, phys = mem->chunks[0];
    caches.park(chunk_size, phys, -1, std::move(mem), owner);  // counted out as mem_release would
}

bool mem_take_thread_parked(Manager &mgr, const uvm_mem_alloc_params_t &params, uint64_t chunk_size, uvm_mem_t **out) {
    GpuState &gpu = mgr.gpu(params.gpu);
    uint64_t phys = 0;
    std::shared_ptr<Mem> mem;
    // Parked under its client's handle as the caller knows it: a destroyed
    // client's never match (uvm_client_destroy drops its parked objects, and
    // a dead handle names no other client). Taken, it is counted as
    // events::created would count it.
    if (!gpu.caches.take_parked(chunk_size, &phys, &mem, +1, reinterpret_cast<uintptr_t>(params.client)))
        return false;
    UVM_ASSERT(mem->chunks[0] == phys && mem->chunk_size == chunk_size && mem->owner == params.gpu &&
               mem->alloc_size == chunk_size && !mem->touched);
    UVM_ASSERT(!params.client == !mem->client && (!mem->client || mem->parked_by == &mgr));
    if (mem->client) {
        mem->parked_by = nullptr;  // an object again: its release ends the charge
        if (!events::heard::owned_reused(*mem)) {
            mem_park(mgr, std::move(mem));  // back; the general path drops it and charges anew
            return false;
        }
    }
    mem->size = params.size;
    mem->born_ns = coarse_now_ns();
    if (mgr.insert_new(mem, out) != UVM_OK) {
        mem_park(mgr, std::move(mem));  // parked again; the general path says why
        return false;
    }
    return true;
}

}  // namespace uvm
