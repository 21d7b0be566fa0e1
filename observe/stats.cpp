// The statistics of a GPU and of the manager (uvm_observe.h, uvm.h's
// uvm_gpu_info), read from the counters the subsystems keep. Everything that
// reports (the C calls, OOM reports, the snapshot, the metrics) reads them
// here, so every number agrees with every other.
#include "observe/stats.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <shared_mutex>

#include "common/sizes.h"
#include "compact/compact.h"
#include "pressure/gpu_pressure.h"
#include "pressure/sleep.h"
#include "stream/stream.h"

namespace uvm {

uvm_status_t gpu_info(Manager &mgr, uint32_t gpu, uvm_gpu_info_t *out) {
    uvm_status_t status = check_gpu(mgr, gpu, out);
    if (status != UVM_OK)
        return status;
    const uvm::backend::GpuInfo &info = mgr.gpu(gpu).info;
    uvm_gpu_info_t r;
    std::memset(&r, 0, sizeof(r));
    std::snprintf(r.name, sizeof(r.name), "%s", info.name.c_str());
    r.memory_total = info.memory_total;
    r.memory_free = mgr.backend().gpu_memory_free(gpu);
    r.page_sizes = info.page_sizes;
    r.peer_mask = info.peer_mask;
    r.cpu_coherent = info.cpu_coherent;
    r.granularity = info.granularity;
    r.host_numa_id = info.place.numa_node;
    std::snprintf(r.pci_bus_id, sizeof(r.pci_bus_id), "%s", info.pci_bus_id.c_str());
    std::memcpy(r.uuid, info.uuid, sizeof(r.uuid));
    std::snprintf(r.cpus, sizeof(r.cpus), "%s", info.place.cpus.c_str());
    *out = r;
    return UVM_OK;
}

uvm_status_t gpu_stats(Manager &mgr, uint32_t gpu, uvm_gpu_stats_t *out) {
    uvm_status_t status = check_gpu(mgr, gpu, out);
    if (status != UVM_OK)
        return status;
    GpuState &g = mgr.gpu(gpu);
    // No sleepable client's roots go back to the driver or come back while
    // this reads (gpu_pressure.h): a sleep or wake moves many at once.
    const std::unique_lock<std::shared_mutex> still(g.pressure->roots_moving);
    // Read, never flushed: chunks in threads' caches are free memory that
    // the PMM counts as pinned, moved across here.
    uint64_t cached[UVM_CHUNK_SIZE_COUNT];
    g.caches.cached_bytes(cached);
    chunk::PmmStats p = g.pmm.stats();
    chunk::add_stats(&p, g.remap_pmm.stats());
    client_roots_stats(mgr, gpu, &p);  // the sleepable clients' own roots
    for (int i = 0; i < UVM_CHUNK_SIZE_COUNT; ++i) {
        // A chunk may move between a cache and the PMM between the two reads:
        // never report less than nothing pinned.
        const uint64_t moved = std::min(cached[i], p.bytes_pinned[i]);
        p.bytes_pinned[i] -= moved;
        p.bytes_free[i] += moved;
        if (moved)
            p.largest_free_block = std::max(p.largest_free_block, chunk_size_of_index(i));
    }
    const backend::CeCounters ce = mgr.backend().ce_counters(gpu);
    uvm_gpu_stats_t r;
    std::memset(&r, 0, sizeof(r));
    r.root_chunks = p.root_chunks;
    for (int i = 0; i < UVM_CHUNK_SIZE_COUNT; ++i) {
        r.bytes_free[i] = p.bytes_free[i];
        r.bytes_pinned[i] = p.bytes_pinned[i];
        r.bytes_evictable[i] = p.bytes_evictable[i];
        r.chunks_split[i] = p.chunks_split[i];
    }
    r.largest_free_block = p.largest_free_block;
    r.root_chunks_grown = p.roots_grown;
    r.root_chunks_moved = p.roots_moved;
    const GpuCompaction &compaction = *g.compaction;
    r.compactions = compaction.runs.load(std::memory_order_relaxed);
    r.compact_objects_moved = compaction.objects_moved.load(std::memory_order_relaxed);
    r.compact_bytes_moved = compaction.bytes_moved.load(std::memory_order_relaxed);
    r.compact_bytes_released = compaction.bytes_released.load(std::memory_order_relaxed);
    r.compactions_on_oom = compaction.oom_runs.load(std::memory_order_relaxed);
    r.compactions_on_oom_served = compaction.oom_helped.load(std::memory_order_relaxed);
    r.compact_bytes_rebacked = compaction.bytes_rebacked.load(std::memory_order_relaxed);
    r.vidmem_objects = g.caches.objects();
    r.phys_mappings = r.vidmem_objects + g.other_phys_mappings;
    r.kernel_mappings = g.kernel_mappings;
    r.user_mappings = g.user_mappings;
    r.peer_mappings = g.peer_mappings;
    r.page_table_bytes = g.kernel_tree.info().table_bytes + g.user_tree.info().table_bytes;
    r.ce_operations = ce.operations;
    r.ce_bytes = ce.bytes;
    r.ce_translations = ce.translations;
    r.evictions = g.evictions;
    r.restores = g.restores;
    r.bytes_evicted = g.bytes_evicted;
    r.bytes_restored = g.bytes_restored;
    r.evicted_objects = g.evicted_objects;
    r.evicted_bytes = g.evicted_bytes;
    // Where the held memory is. Every part is read without stopping anyone,
    // so a chunk moving between two reads shows in `other` (or, had it made
    // the parts exceed the whole, shortens `live`).
    const backend::GpuMemory m = mgr.backend().gpu_memory(gpu);
    uint64_t allocated = 0;
    for (int i = 0; i < UVM_CHUNK_SIZE_COUNT; ++i) {
        allocated += p.bytes_pinned[i] + p.bytes_evictable[i];
        r.held_cached_bytes += p.bytes_free[i];
    }
    r.held_bytes = m.held;
    r.held_unused_bytes = m.ready;
    r.held_pooled_bytes = std::min(mgr.streams().pooled_bytes(gpu), allocated);
    r.held_retiring_bytes = std::min(mgr.streams().retiring_vidmem_bytes(gpu), allocated - r.held_pooled_bytes);
    r.held_private_bytes = std::min(mgr.streams().private_pools().free_bytes(gpu),
                                    allocated - r.held_pooled_bytes - r.held_retiring_bytes);
    r.held_live_bytes = allocated - r.held_pooled_bytes - r.held_retiring_bytes - r.held_private_bytes;
    const uint64_t parts = r.held_live_bytes + r.held_cached_bytes + r.held_pooled_bytes + r.held_retiring_bytes +
                           r.held_private_bytes + r.held_unused_bytes;
    if (parts > r.held_bytes) {
        // A chunk caught twice as it moved: taken off live first, then the
        // rest, so that the parts still add up to the whole.
        uint64_t excess = parts - r.held_bytes;
        for (uint64_t *part : {&r.held_live_bytes, &r.held_cached_bytes, &r.held_pooled_bytes,
                               &r.held_retiring_bytes, &r.held_private_bytes, &r.held_unused_bytes}) {
            const uint64_t cut = std::min(*part, excess);
            *part -= cut;
            excess -= cut;
        }
    } else {
        r.held_other_bytes = r.held_bytes - parts;
    }
    r.driver_free_bytes = m.free;
    *out = r;
    return UVM_OK;
}

uvm_status_t manager_stats(Manager &mgr, uvm_manager_stats_t *out) {
    if (!out)
        return UVM_ERR_INVALID_ARGUMENT;
    uvm_manager_stats_t r;
    std::memset(&r, 0, sizeof(r));
    r.objects = mgr.sysmem_objects + mgr.managed_objects;
    for (uint32_t g = 0; g < mgr.gpu_count(); ++g)
        r.objects += mgr.gpu(g).caches.objects();
    r.sysmem_objects = mgr.sysmem_objects;
    r.sysmem_bytes = mgr.sysmem_bytes;
    r.cpu_kernel_mappings = mgr.cpu_kernel_mappings;
    r.cpu_user_mappings = mgr.cpu_user_mappings;
    r.managed_objects = mgr.managed_objects;
    r.managed_bytes = mgr.managed_bytes;
    r.prefetches = mgr.prefetches;
    r.prefetched_bytes = mgr.prefetched_bytes;
    r.streams = mgr.streams().stream_count();
    r.sleep_host_bytes = mgr.sleep_host_bytes.load();
    r.sleep_host_limit = mgr.sleep_host_limit.load();
    r.retiring_objects = mgr.streams().retiring_objects();
    r.retiring_bytes = mgr.streams().retiring_bytes();
    r.stream_pool_bytes = mgr.streams().pooled_bytes();
    *out = r;
    return UVM_OK;
}

}  // namespace uvm
