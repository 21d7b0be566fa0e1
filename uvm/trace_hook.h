// What the object core knows of the event trace (observe/trace.h): the switch
// its paths read, the kinds of record, and the hook that records. The trace
// itself is observe/'s; the core calls it through the hook, defined there.
#pragma once

#include <atomic>
#include <cstdint>

namespace uvm {

class Manager;
struct Mem;

enum class TraceKind : uint8_t { Alloc = 0, Free, Map, Unmap, Evict, Restore, Oom };
// What a Map or Unmap event names (TraceRecord::space).
enum class MapKind : uint8_t { CpuKernel = 0, CpuUser, GpuPhys, GpuKernel, GpuUser };

// Whether the trace records, held by the manager so that a hook costs one
// relaxed load and a branch when it is off; the tracer flips it.
struct TraceSwitch {
#if defined(UVM_NO_TRACE)
    // Built without the trace (UVM_ENABLE_TRACE=OFF): every hook folds away;
    // what tracing off costs is measured against this build.
    static constexpr bool on() { return false; }
#else
    bool on() const { return flag.load(std::memory_order_relaxed); }
#endif
    std::atomic<bool> flag{false};
};

// Record an event of `mem` (its handle set); the caller checked the switch.
// Defined by the trace (observe/trace_export.cpp).
void trace_mem(Manager &mgr, const Mem &mem, TraceKind kind, MapKind space = MapKind::CpuKernel,
               uint32_t target = 0);

}  // namespace uvm
