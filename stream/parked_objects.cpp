// Objects parked whole on the stream they were freed on: the object's half
// (stream/parked_objects.h); the stream's half is Streams::park and alloc_parked.
#include "stream/parked_objects.h"

#include "common/enum_value.h"
#include "uvm/events.h"
#include "uvm/manager.h"

namespace uvm {

bool mem_stream_parkable_whole(const Mem &mem) {
    // Nothing of it may differ from what mem_alloc makes for the same
    // request but its chunks and kernel address: the record is reused as is.
    UVM_ASSERT(mem_can_leave_whole(mem));
    return mem.flags == UVM_MEM_GPU_MAPPED && !mem.client && !mem.pool && !mem.tag &&
           !mem.evictable &&
           !mem.remappable && !mem.own_pmm && !mem.sleep_mode && !mem.parked_by && mem.owner < mem.gpus.size() &&
           mem.gpus[mem.owner].kernel && !mem.dead && !mem.retiring;
}

void mem_stream_park(Manager &mgr, Mem &mem) {
    UVM_ASSERT(mem_stream_parkable(mem) && mem.handle);
    // Its address is nobody's now: a lookup finds nothing, as after any free.
    mgr.gpu(mem.owner).kernel_addresses.name(mem.gpus[mem.owner].kernel_name, 0);
    mem.handle = 0;
    mem.users.clear();  // its stream orders every use of it from here
    // No object's now: out of the counts of objects and of kernel mappings
    // (the mapping itself stays, for its next object).
    events::unmapped(mgr, MapKind::GpuKernel, mem.owner);
    events::released(mgr, mem);
}

bool mem_stream_revive(Manager &mgr, std::shared_ptr<Mem> &mem, uint64_t size, uvm_mem_t **out, uint64_t *address) {
    Mem &m = *mem;
    UVM_ASSERT(!m.handle && size <= m.alloc_size && size > m.alloc_size - m.chunk_size);
    m.size = size;
    m.born_ns = coarse_now_ns();
    const uvm_status_t counted = events::created(mgr, mem);  // not evictable: cannot fail
    UVM_ASSERT(counted == UVM_OK);
    (void)counted;
    if (mgr.insert_new(mem, out) != UVM_OK) {
        events::released(mgr, m);
        return false;  // the table could not grow: the caller keeps it parked
    }
    events::mapped(mgr, MapKind::GpuKernel, m.owner);
    if (address)
        *address = m.gpus[m.owner].kernel_va;
    mem_publish_kernel_addresses(mgr, m);
    return true;
}

void mem_stream_parked_run(Manager &mgr, Mem &mem, ReusedRun *run) {
    UVM_ASSERT(!mem.handle && mem.users.empty() && mem_stream_parkable(mem) && !mem.stitched);
    events::mapped(mgr, MapKind::GpuKernel, mem.owner);  // counted out when parked; the unmapping counts it out
    mem_take_run(mgr, mem, run);
}

void mem_stream_unpark_stitched(Mem &mem) {
    UVM_ASSERT(!mem.handle && mem.users.empty() && mem_stream_parkable(mem) && mem.stitched);
    mem.chunks_given = true;
}

void mem_stream_unparked_view(Manager &mgr, const std::shared_ptr<Mem> &mem) {
    UVM_ASSERT(!mem->handle && mem->stitched && !mem->gone());
    // Out of the counts since it was parked (mem_stream_park): in again, as
    // the retiring object whose release counts it out and unmaps the view.
    const uvm_status_t counted = events::created(mgr, mem);  // not evictable: cannot fail
    UVM_ASSERT(counted == UVM_OK);
    (void)counted;
    events::mapped(mgr, MapKind::GpuKernel, mem->owner);
}

void mem_stream_unparked_view_undo(Manager &mgr, Mem &mem) {
    events::unmapped(mgr, MapKind::GpuKernel, mem.owner);
    events::released(mgr, mem);
}

}  // namespace uvm
