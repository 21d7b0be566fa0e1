// Compaction (uvm_gpu_compact): live vidmem objects move to other physical
// memory of their GPU behind the addresses they have, so that the free
// memory left among them comes together into whole root chunks, and whole
// driver allocations, that can go back to the driver or serve long runs.
//
// What moves is the memory under an object; what it is reached by stays:
// its GPU virtual mappings that the manager placed (kernel and user, on the
// owner) are pointed at the new chunks in place (mmu::PageTree::remap), as
// the page tree is what the GPU translates with. Everything else that names
// the memory itself pins the object (compact_pin says which and why). A move
// is one copy on the owner's copy engine (Backend::ce_copy, as eviction's),
// made after the tracked stream work on the object is done; it either ends
// with the object on its new chunks or leaves it where it was, bytes intact.
//
// Where it goes: an object is taken from the driver allocation (root span)
// with the least live memory first, and moves only into one that holds at
// least as much live memory as its own (never the same one), so each move
// empties the sparse and fills the dense; the PMM's best fit picks the place
// (it never grows for a move). Objects of several spans stay.
//
// What stays (pinned, or with no better place) may keep a whole driver
// allocation for a few live root chunks: with release, such allocations
// shrink to those roots, copied at the same addresses (shrink.cpp), so the
// free rest goes back even where nothing can move (on CUDA, tensors).
//
// Sits above stream/ (it waits for streams) and below pressure/, whose
// free-and-retry ladder compacts before it evicts (compact_for_oom).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "uvm/manager.h"
#include "uvm/mem.h"
#include "uvm/uvm.h"

namespace uvm {

// A GPU's compaction state, held by the manager unseen (GpuState::compaction).
struct GpuCompaction {
    std::mutex lock;                 // one compaction of the GPU at a time
    std::atomic<bool> on_oom{false};  // uvm_gpu_set_compact_policy
    // Statistics (uvm_gpu_stats_t), ever.
    std::atomic<uint64_t> runs{0};
    std::atomic<uint64_t> objects_moved{0};
    std::atomic<uint64_t> bytes_moved{0};
    std::atomic<uint64_t> bytes_released{0};  // the fall in the driver's count across each
    std::atomic<uint64_t> oom_runs{0};    // compactions an allocation ran before evicting or failing
    std::atomic<uint64_t> oom_helped{0};  // of those, the ones after which it was served
    std::atomic<uint64_t> bytes_rebacked{0};
};

// Why `mem` (locked by the caller, vidmem of its owner's PMM) cannot move,
// or null where it can: a text for the OOM report and the tests.
const char *compact_pin(Manager &mgr, const Mem &mem);

struct CompactOptions {
    bool wait = false;     // wait for tracked stream work, rather than skip the object
    bool release = false;  // give every whole free root back afterwards (as uvm_gpu_trim), and shrink
                           // the part-free driver allocations (Backend offload: root_span_shrink)
    bool try_locks = false;  // take objects' locks only if free (the OOM path: the caller may hold one)
    const Mem *skip[2] = {nullptr, nullptr};  // objects whose locks the caller holds: never tried
};

// Compact GPU `gpu`'s PMM: *out (zeroed first) says what moved and what was
// given back. Stops at the first failure of a move or a shrink (that object
// stays where it was, that allocation as it was; those done before stay
// done) and returns its status.
uvm_status_t compact_gpu(Manager &mgr, uint32_t gpu, const CompactOptions &options, uvm_compact_result_t *out);

// The allocation's ladder (pressure/residency.h): where GPU `gpu`'s policy
// compacts before an OOM and its free memory would hold `bytes` were it
// whole, compact (skipping busy objects, locks only tried; the whole free
// roots given back and part-free driver allocations shrunk, as
// UVM_COMPACT_RELEASE does: the request may need the driver's memory) and
// say true;
// false where nothing was tried (the policy, or too little free memory, or
// another compaction of the GPU running). The outcome goes to the calling
// thread's note (compact_take_oom_note) for the OOM report.
// `skip_a`, `skip_b`: objects the caller holds locked (a restore's).
bool compact_for_oom(Manager &mgr, uint32_t gpu, uint64_t bytes, const Mem *skip_a, const Mem *skip_b);
// The ladder's retry after that compaction served the request.
void compact_oom_served(Manager &mgr, uint32_t gpu);
// What the ladder's compaction step last found on the calling thread, in a
// sentence (why it could not help, or what it did): for the OOM report.
// Taken by reading (empty where the step has not run since).
std::string compact_take_oom_note();

}  // namespace uvm
