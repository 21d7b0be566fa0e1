// Objects parked whole on the stream they were freed on: the object's half
// of Streams::park and Streams::alloc_parked (stream/stream.h).
#pragma once

#include <cstdint>
#include <memory>

#include "uvm/mem.h"

namespace uvm {

// Objects kept whole by the stream they were freed on (Streams::park,
// stream/stream.h): a vidmem object of its stream's GPU whose only mapping
// is its owner's kernel one (UVM_MEM_GPU_MAPPED, nothing else asked: no
// client, private pool, tag, placement nor other flag), as PyTorch's caching allocator
// keeps its blocks. Parked, it is no object (counted out, its handle gone,
// its kernel address no longer found) but keeps its chunks, its mapping and
// its record, for the stream's next allocation of the same chunk size and
// count.
//  - mem_stream_parkable: whether `mem` (locked) may be, by what it is;
//    mem_stream_parkable_whole the same for one that mem_can_leave_whole
//    already passed (the free's path asks that first). A stitched object
//    (several runs under one kernel view, chunk/pmm.h) may be parked too.
//  - mem_stream_park: end it as an object, the mapping kept.
//  - mem_stream_revive: a parked object (its users set by the caller) as
//    the new object of `size`: counted, given a handle and found at its
//    kernel address (*address, where given); false (nothing changed, the
//    record still the caller's) where the handle table cannot grow.
//  - mem_stream_parked_run: a parked object's run, its mapping removed and
//    the record dead, for the stream's pool (as mem_detach_run); one run only.
//  - mem_stream_unpark_stitched: a parked stitched object whose runs
//    (mem_stitched_runs) went to the stream's pool, left holding its
//    kernel view only (chunks_given), which the stream's queued work may
//    still use; then, out of the stream's lock, mem_stream_unparked_view
//    counts it as an object again, to retire on a fence of the stream as a
//    stitched object freed there does (its release counts it out and
//    removes the view), or to be released at once where the stream's work
//    is done.
bool mem_stream_parkable_whole(const Mem &mem);
inline bool mem_stream_parkable(const Mem &mem) { return mem_can_leave_whole(mem) && mem_stream_parkable_whole(mem); }
void mem_stream_park(Manager &mgr, Mem &mem);
bool mem_stream_revive(Manager &mgr, std::shared_ptr<Mem> &mem, uint64_t size, uvm_mem_t **out, uint64_t *address);
void mem_stream_parked_run(Manager &mgr, Mem &mem, ReusedRun *run);
void mem_stream_unpark_stitched(Mem &mem);
void mem_stream_unparked_view(Manager &mgr, const std::shared_ptr<Mem> &mem);
void mem_stream_unparked_view_undo(Manager &mgr, Mem &mem);  // out of the counts again

}  // namespace uvm
