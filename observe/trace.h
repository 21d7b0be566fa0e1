// The event trace (uvm.h, "Event trace"): a bounded ring of what the manager
// did to memory - allocs, frees, maps, unmaps, evictions, restores, OOMs -
// with timestamps, exported as Chrome Trace Event JSON and as an SVG of
// memory over time (trace_export.cpp).
//
// Off, it costs one relaxed load and a branch per call. On, a record is one
// fetch_add on the ring's head, a compare-exchange that claims the slot it
// names, and eight stores into it: no lock, no allocation. Slots are a
// seqlock each (the sequence number is stored last), so an export taken
// while threads record reads only whole records and skips the ones being
// written. A writer that was held up for a whole turn of the ring finds its
// slot taken by a newer record and drops its own (older than the ring's
// window); it never overwrites the newer one, which the window holds. (It
// did: a Free lost so, the export's replay kept its object alive for ever,
// 1 run in 150 of TraceStress.ThreadsRecordWhileAnotherExports on 2 cores.)
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "uvm/trace_hook.h"
#include "uvm/uvm.h"

namespace uvm {

struct TraceRecord {
    uint64_t seq = 0;      // order of recording, from 0
    uint64_t time_ns = 0;  // since the trace started
    uint64_t object = 0;   // the handle's value (0 for an OOM)
    uint64_t bytes = 0;    // the object's alloc_size; an OOM: the request
    TraceKind kind = TraceKind::Alloc;
    uvm_backing_t backing = UVM_BACKING_SYSMEM;
    uint32_t gpu = 0;      // the object's GPU (owner, or sysmem's params.gpu)
    uint32_t target = 0;   // Map/Unmap of a GPU mapping: the GPU mapped on
    MapKind space = MapKind::CpuKernel;
    bool evictable = false;
    bool discarded = false;        // an Evict that dropped the bytes (UVM_MEM_DISCARDABLE)
    const char *client = nullptr;  // interned name; NULL: the default client
    const char *tag = nullptr;     // interned; NULL: none
    uint64_t gpu_held = 0;         // the GPU's held bytes right after the event
};

// The exports of the manager's trace (uvm_trace_export); false: never traced.
bool trace_chrome_json(Manager &mgr, std::string *out);
bool trace_svg(Manager &mgr, std::string *out);

// The trace's ring; its switch is the manager's (uvm/trace_hook.h), read by
// every hook.
class Tracer {
public:
    explicit Tracer(TraceSwitch &on) : on_(on.flag) {}
    static constexpr uint64_t kDefaultRingBytes = 16ull << 20;
    static constexpr uint64_t kMinRingBytes = 64ull << 10;
    static constexpr uint64_t kMaxRingBytes = 4ull << 30;
    static constexpr uint64_t kRecordBytes = 64;

    ~Tracer();
#if defined(UVM_NO_TRACE)
    static constexpr bool on() { return false; }
#else
    bool on() const { return on_.load(std::memory_order_relaxed); }
#endif
    // A new trace in a ring of `ring_bytes` (0: the default). INVALID_ARGUMENT
    // for a size out of range, BUSY while on, NO_HOST_MEMORY, NOT_SUPPORTED
    // in a build without the trace.
    uvm_status_t start(uint64_t ring_bytes);
    // Stop recording; the records stay for export. NOT_FOUND when off.
    uvm_status_t stop();
    // Record (the caller checked on(); a record made as tracing stops may be
    // left out). Sets seq and time.
    void record(TraceRecord r);
    // The whole records in the ring, oldest first; false when there has never
    // been a trace. *dropped: records overwritten or caught mid-write.
    bool collect(std::vector<TraceRecord> *out, uint64_t *dropped, uint64_t *end_ns);
    void info(uvm_trace_info_t *out);

private:
    struct Slot {
        std::atomic<uint64_t> w[8];
    };
    std::atomic<bool> &on_;  // the manager's TraceSwitch
    std::atomic<uint64_t> writers_{0};  // threads inside record(): the ring stays while any are
    std::atomic<uint64_t> head_{0};
    std::mutex lock_;  // start, stop, collect
    std::unique_ptr<Slot[]> ring_;
    uint64_t capacity_ = 0;  // records, a power of two
    uint64_t start_ns_ = 0;
    uint64_t stop_ns_ = 0;  // 0 while on
};

}  // namespace uvm
