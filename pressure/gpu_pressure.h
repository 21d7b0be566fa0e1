// A GPU's state under pressure: its evictable objects (residency.h), the host
// store for their bytes (host_store.h) and the watermarks on its held memory
// (pressure.h). The manager holds it unseen (uvm/manager.h, GpuState::pressure).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "backend/backend.h"
#include "pressure/host_store.h"
#include "pressure/pressure.h"

namespace uvm {

struct Mem;

struct GpuPressure {
    GpuPressure(backend::Backend &backend, uint32_t gpu) : host_store(backend, gpu) {}

    // Evictable vidmem objects of this GPU, resident or evicted (residency.h).
    std::mutex evictable_lock;
    std::unordered_map<Mem *, std::weak_ptr<Mem>> evictable;
    HostStore host_store;  // where evicted bytes live
    Watermarks held_marks;  // pressure notices on GpuState::held_bytes
    // Held shared while a sleepable client's roots on this GPU go back to the
    // driver or come back (sleep.h, ClientRoots::offload and restore), and
    // exclusive while the statistics are read: a read sees a client's roots
    // all held or all given back, never the driver's count of one moment
    // beside the PMM's of another.
    std::shared_mutex roots_moving;
};

}  // namespace uvm
