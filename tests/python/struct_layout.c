/*
 * The layout of every public struct of include/uvm/uvm.h as the C compiler
 * sees it: "<struct> <sizeof>" and "<struct>.<field> <offsetof>" lines, which
 * tests/python/test_uvm.py compares with the ctypes mirrors of the Python
 * package (python/uvm/_capi.py). A field the mirror names and C lacks does
 * not compile; a field C has and the mirror lacks shows as a size mismatch.
 */
#include <uvm/uvm.h>

#include <stddef.h>
#include <stdio.h>

#define S(type) printf("%s %zu\n", #type, sizeof(type))
#define F(type, field) printf("%s.%s %zu\n", #type, #field, offsetof(type, field))

int main(void) {
    S(uvm_sim_params_t);
    F(uvm_sim_params_t, gpu_count);
    F(uvm_sim_params_t, vidmem_size);
    F(uvm_sim_params_t, page_sizes);
    F(uvm_sim_params_t, peer_rows);
    F(uvm_sim_params_t, no_peers);
    F(uvm_sim_params_t, cpu_coherent);
    F(uvm_sim_params_t, numa_nodes);
    F(uvm_sim_params_t, gpu_numa_node);
    S(uvm_manager_params_t);
    F(uvm_manager_params_t, backend);
    F(uvm_manager_params_t, sim);
    S(uvm_gpu_info_t);
    F(uvm_gpu_info_t, name);
    F(uvm_gpu_info_t, memory_total);
    F(uvm_gpu_info_t, memory_free);
    F(uvm_gpu_info_t, page_sizes);
    F(uvm_gpu_info_t, peer_mask);
    F(uvm_gpu_info_t, cpu_coherent);
    F(uvm_gpu_info_t, granularity);
    F(uvm_gpu_info_t, host_numa_id);
    F(uvm_gpu_info_t, pci_bus_id);
    F(uvm_gpu_info_t, cpus);
    F(uvm_gpu_info_t, uuid);
    S(uvm_host_info_t);
    F(uvm_host_info_t, numa_node_count);
    F(uvm_host_info_t, from_hwloc);
    F(uvm_host_info_t, thp);
    F(uvm_host_info_t, shmem_thp);
    S(uvm_numa_node_info_t);
    F(uvm_numa_node_info_t, id);
    F(uvm_numa_node_info_t, host_node);
    F(uvm_numa_node_info_t, memory_total);
    F(uvm_numa_node_info_t, memory_free);
    F(uvm_numa_node_info_t, cpus);
    S(uvm_placement_t);
    F(uvm_placement_t, kind);
    F(uvm_placement_t, node);
    F(uvm_placement_t, node_mask);
    F(uvm_placement_t, strict);
    S(uvm_mem_alloc_params_t);
    F(uvm_mem_alloc_params_t, size);
    F(uvm_mem_alloc_params_t, backing);
    F(uvm_mem_alloc_params_t, gpu);
    F(uvm_mem_alloc_params_t, chunk_size);
    F(uvm_mem_alloc_params_t, flags);
    F(uvm_mem_alloc_params_t, placement);
    F(uvm_mem_alloc_params_t, client);
    F(uvm_mem_alloc_params_t, tag);
    S(uvm_mem_info_t);
    F(uvm_mem_info_t, size);
    F(uvm_mem_info_t, alloc_size);
    F(uvm_mem_info_t, backing);
    F(uvm_mem_info_t, gpu);
    F(uvm_mem_info_t, chunk_size);
    F(uvm_mem_info_t, chunk_count);
    F(uvm_mem_info_t, cpu_kernel_mapped);
    F(uvm_mem_info_t, cpu_user_mapped);
    F(uvm_mem_info_t, user_address);
    F(uvm_mem_info_t, gpu_phys_mask);
    F(uvm_mem_info_t, gpu_kernel_mask);
    F(uvm_mem_info_t, gpu_user_mask);
    F(uvm_mem_info_t, numa_node);
    F(uvm_mem_info_t, numa_node_mask);
    F(uvm_mem_info_t, flags);
    F(uvm_mem_info_t, gpu_kernel_address);
    S(uvm_gpu_phys_address_t);
    F(uvm_gpu_phys_address_t, address);
    F(uvm_gpu_phys_address_t, aperture);
    F(uvm_gpu_phys_address_t, peer_gpu);
    F(uvm_gpu_phys_address_t, contiguous);
    S(uvm_mem_span_t);
    F(uvm_mem_span_t, mem);
    F(uvm_mem_span_t, offset);
    F(uvm_mem_span_t, view);
    S(uvm_host_pages_t);
    F(uvm_host_pages_t, resident_bytes);
    F(uvm_host_pages_t, huge_bytes);
    F(uvm_host_pages_t, node_bytes);
    S(uvm_residency_t);
    F(uvm_residency_t, resident);
    F(uvm_residency_t, evictions);
    F(uvm_residency_t, restores);
    F(uvm_residency_t, discards);
    S(uvm_eviction_policy_t);
    F(uvm_eviction_policy_t, disabled);
    F(uvm_eviction_policy_t, sysmem_limit);
    S(uvm_client_info_t);
    F(uvm_client_info_t, name);
    F(uvm_client_info_t, objects);
    F(uvm_client_info_t, vidmem_used);
    F(uvm_client_info_t, vidmem_evictable);
    F(uvm_client_info_t, vidmem_budget);
    F(uvm_client_info_t, sysmem_used);
    F(uvm_client_info_t, sysmem_budget);
    S(uvm_pressure_event_t);
    F(uvm_pressure_event_t, gpu);
    F(uvm_pressure_event_t, client);
    F(uvm_pressure_event_t, percent);
    F(uvm_pressure_event_t, rising);
    F(uvm_pressure_event_t, used);
    F(uvm_pressure_event_t, limit);
    S(uvm_page_tree_level_t);
    F(uvm_page_tree_level_t, name);
    F(uvm_page_tree_level_t, va_bit_hi);
    F(uvm_page_tree_level_t, va_bit_lo);
    F(uvm_page_tree_level_t, tables);
    F(uvm_page_tree_level_t, bytes);
    S(uvm_page_tree_info_t);
    F(uvm_page_tree_info_t, level_count);
    F(uvm_page_tree_info_t, levels);
    F(uvm_page_tree_info_t, table_bytes);
    F(uvm_page_tree_info_t, mapped_bytes);
    S(uvm_gpu_stats_t);
    F(uvm_gpu_stats_t, root_chunks);
    F(uvm_gpu_stats_t, bytes_free);
    F(uvm_gpu_stats_t, bytes_pinned);
    F(uvm_gpu_stats_t, bytes_evictable);
    F(uvm_gpu_stats_t, chunks_split);
    F(uvm_gpu_stats_t, largest_free_block);
    F(uvm_gpu_stats_t, vidmem_objects);
    F(uvm_gpu_stats_t, phys_mappings);
    F(uvm_gpu_stats_t, kernel_mappings);
    F(uvm_gpu_stats_t, user_mappings);
    F(uvm_gpu_stats_t, peer_mappings);
    F(uvm_gpu_stats_t, page_table_bytes);
    F(uvm_gpu_stats_t, ce_operations);
    F(uvm_gpu_stats_t, ce_bytes);
    F(uvm_gpu_stats_t, ce_translations);
    F(uvm_gpu_stats_t, evictions);
    F(uvm_gpu_stats_t, restores);
    F(uvm_gpu_stats_t, bytes_evicted);
    F(uvm_gpu_stats_t, bytes_restored);
    F(uvm_gpu_stats_t, evicted_objects);
    F(uvm_gpu_stats_t, evicted_bytes);
    S(uvm_manager_stats_t);
    F(uvm_manager_stats_t, objects);
    F(uvm_manager_stats_t, sysmem_objects);
    F(uvm_manager_stats_t, sysmem_bytes);
    F(uvm_manager_stats_t, cpu_kernel_mappings);
    F(uvm_manager_stats_t, cpu_user_mappings);
    F(uvm_manager_stats_t, managed_objects);
    F(uvm_manager_stats_t, managed_bytes);
    F(uvm_manager_stats_t, prefetches);
    F(uvm_manager_stats_t, prefetched_bytes);
    F(uvm_manager_stats_t, streams);
    F(uvm_manager_stats_t, retiring_objects);
    F(uvm_manager_stats_t, retiring_bytes);
    F(uvm_manager_stats_t, stream_pool_bytes);
    S(uvm_trace_info_t);
    F(uvm_trace_info_t, enabled);
    F(uvm_trace_info_t, ring_bytes);
    F(uvm_trace_info_t, capacity);
    F(uvm_trace_info_t, recorded);
    F(uvm_trace_info_t, overwritten);
    return 0;
}
