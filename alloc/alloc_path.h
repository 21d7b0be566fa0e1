// The allocation path: how a request for memory becomes an object
// (uvm_mem_alloc, uvm_mem_alloc_async, uvm_mem_alloc_gpu; docs/design.md,
// "How memory flows").
//
// A request is checked once, which picks its chunk size once, and described
// by its shape: a few bits saying what it asks for. The sources below are
// tried in order; each has one rule, the shape bits it needs and those it
// refuses, and the first source that serves the request makes the object.
// A new source (compaction) is one more entry in kSources and one more case
// in allocate()'s loop, not one more tier:
//
//   thread-parked  an object freed by this thread, kept whole with its chunk
//                  (uvm/thread_parking.cpp): the held pair's path
//   stream-parked  an object freed on the request's stream, kept whole with
//                  its chunks, mapping and record (stream/parked_objects.h)
//   stream-pool    a run of chunks freed on the request's stream (stream.h)
//   private-pool   for a stream that allocates to a private pool (a graph's:
//                  stream/private_pool.h), a run the pool holds free; the
//                  two sources above never serve such a request, nor do the
//                  stream's pending roots
//   pmm            the GPU's PMM (or a sleepable client's roots), with the
//                  stream's pending roots where they may serve
//   made-room      the PMM again after memory was made free: streams' memory
//                  whose work is done, then the whole free roots of every
//                  pool of the GPU, then streams' memory waited for, then a
//                  compaction where the GPU's policy says so
//                  (compact/compact.h), then
//                  evictions (pressure/residency.h, retry_with_room)
//
// The parked sources come first and need nothing resolved: they are asked
// on the shape the arguments give (one pick of the chunk size), before the
// full check, which then reuses that pick; the held pair takes no more.
// What every source shares is done once, around them: the client is looked
// up and its sleep gate entered before the first source that needs it; the
// new object is charged to its client by a Charge that gives the memory back
// unless committed; out-of-memory is noted for the OOM report in one place.
//
// While the request's stream captures a CUDA graph, no source makes a call
// that the capture forbids (stream/stream.h says how the streams' steps
// avoid them); UVM_MEM_ZERO of memory that is not the stream's is then done
// on the stream too, so that the graph zeroes it at each launch. Whether the
// stream captures is asked only for such a request: the reuse path asks
// nothing.
#pragma once

#include <cstdint>
#include <memory>

#include "uvm/uvm.h"

namespace uvm {

class Manager;
struct Stream;

namespace alloc {

// What a request asks for, as the bits the sources' rules read.
enum Shape : uint32_t {
    kVidmem = 1u << 0,       // vidmem (of the default placement: the check refuses others)
    kOneChunk = 1u << 1,     // of one chunk
    kPlain = 1u << 2,        // no flags and no tag
    kMappedOnly = 1u << 3,   // UVM_MEM_GPU_MAPPED alone: no other flag, no tag, no client
    kOnStream = 1u << 4,     // allocated on a stream (uvm_mem_alloc_async, _gpu)
    kWantsAddress = 1u << 5, // its kernel address is asked for (uvm_mem_alloc_gpu)
    kTraced = 1u << 6,       // the trace is on: every step is recorded as made
    kZero = 1u << 7,         // UVM_MEM_ZERO
    kPendable = 1u << 8,     // 2M chunks, not remappable: its stream's pending roots may serve it
    kClientRoots = 1u << 9,  // a sleepable client's vidmem: from its own roots alone
    kToPool = 1u << 10,      // to its stream's private pool: vidmem of the pool's GPU, not evictable
                             // nor remappable, no sleepable client's
};

enum class Source : uint8_t { ThreadParked, StreamParked, StreamPool, PrivatePool, Pmm, MadeRoom };

// A source's rule: it may serve a request whose shape has every bit of
// `needs` and none of `refuses`. `resolved`: it needs the client looked up
// (kClientRoots is known only then).
struct Rule {
    Source source;
    const char *name;
    uint32_t needs;
    uint32_t refuses;
    bool resolved;
};

// The sources, in the order they are tried.
inline constexpr Rule kSources[] = {
    {Source::ThreadParked, "thread-parked", kVidmem | kOneChunk | kPlain, kOnStream | kWantsAddress | kTraced | kToPool,
     false},
    {Source::StreamParked, "stream-parked", kVidmem | kOnStream, kTraced | kToPool, false},
    {Source::StreamPool, "stream-pool", kVidmem | kOnStream, kPendable | kClientRoots | kToPool, true},
    {Source::PrivatePool, "private-pool", kVidmem | kOnStream | kToPool, kClientRoots, true},
    {Source::Pmm, "pmm", 0, 0, true},
    {Source::MadeRoom, "made-room", 0, 0, true},
};

inline constexpr bool eligible(const Rule &rule, uint32_t shape) {
    return (shape & rule.needs) == rule.needs && !(shape & rule.refuses);
}

// A new object for `params` (checked here), on `stream` where it is not
// null; `gpu_address`, where given, receives its kernel address on its GPU,
// and `alloc_size` the bytes it holds (0 for no object). Both are written
// before the object is published: a caller that pairs by address cannot
// look the object up after, as another thread may free it by then.
uvm_status_t allocate(Manager &mgr, const uvm_mem_alloc_params_t &params, const std::shared_ptr<Stream> &stream,
                      uvm_mem_t **out, uint64_t *gpu_address, uint64_t *alloc_size = nullptr);

}  // namespace alloc
}  // namespace uvm
