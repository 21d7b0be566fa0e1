// What compact.cpp and shrink.cpp share, inside compact/.
#pragma once

#include "compact/compact.h"

namespace uvm {

// Whether `mem` (locked) has chunks of its GPU now: not freed, evicted or
// asleep.
inline bool holds_memory(const Mem &mem) {
    return !(mem.gone() || mem.evicted || mem.asleep || mem.chunks.size() == 0);
}

// Whether stream work the library tracks on `mem` (locked) is still to be done.
bool busy_on_streams(Manager &mgr, Mem &mem);

// After the moves and the give-back: the driver allocations still part free
// shrink to their live root chunks, which keep every address (objects that
// could not move, above all the window views on CUDA). Those that copy the
// least for what they give back go first: the copies need memory of their
// own for a moment, which the first ones' release makes. OK where each was
// shrunk or left alone; the backend's failure otherwise (*out counts what
// was copied before it).
uvm_status_t shrink_spans(Manager &mgr, uint32_t gpu, const CompactOptions &options, uvm_compact_result_t *out);

}  // namespace uvm
