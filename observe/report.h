// Who holds what: out-of-memory reports, the manager's JSON snapshot and its
// Prometheus metrics (uvm.h, "Reports and metrics"). Built from the public
// statistics calls, so every number matches what uvm_gpu_stats says.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "uvm/manager.h"
#include "uvm/uvm.h"

namespace uvm {

struct Mem;

// "vidmem", "sysmem" or "managed".
const char *backing_text(uvm_backing_t backing);

// What an OUT_OF_MEMORY was asked for.
struct OomRequest {
    const char *call = "alloc";  // "alloc", "restore", "evict"
    uint64_t size = 0;
    uvm_backing_t backing = UVM_BACKING_VIDMEM;
    uint32_t gpu = 0;
    uint64_t chunk_size = 0;  // 0: adaptive
    uint32_t flags = 0;
    const uvm_client_t *client = nullptr;  // whose budget; null: the default client
    // Objects whose locks the failed call holds (restore, evict): the fits
    // never try them (pressure/fits.h).
    const Mem *holding[2] = {nullptr, nullptr};
};

// What an allocation asked for, and what bringing `mem` back (call
// "restore": its GPU's vidmem) or moving it out (call "evict": host memory)
// asks for: every OOM report is built from one of these two. The second
// names `mem` as held (its caller holds its lock).
OomRequest oom_request(const uvm_mem_alloc_params_t &params);
OomRequest oom_request(const char *call, const Mem &mem);

// Record the report of an OUT_OF_MEMORY for the calling thread (both formats),
// and count it. Never fails: a report that cannot be built is left out.
void note_oom(Manager &mgr, const OomRequest &request);
// The calling thread's last report from `mgr`; false where there is none.
bool last_oom_report(const Manager &mgr, bool json, std::string *out);

// The objects, largest first, with totals by client and tag (a leak report,
// or uvm_objects_report). `what` names the report ("live objects", "leaked objects").
std::string objects_report(const std::vector<std::shared_ptr<Mem>> &objects, bool json, const char *what);

std::string snapshot_json(Manager &mgr);
std::string metrics_text(Manager &mgr);

}  // namespace uvm
