// NUMA placement of sysmem: turning a caller's uvm_placement_t into a kernel
// memory policy over host nodes, applying it to a range before its pages are
// allocated (mbind), and asking the kernel where the pages of a range are.
//
// Thread safety: all functions may be called concurrently.
#pragma once

#include <cstdint>

#include "topo/topology.h"
#include "uvm/uvm.h"

namespace uvm::topo {

// A kernel memory policy over host node ids.
struct HostPolicy {
    enum class Mode { Any, Preferred, Bind, Interleave };
    Mode mode = Mode::Any;
    uint64_t host_nodes = 0;  // bit n: host node n
};

struct ResolvedPlacement {
    int32_t node = -1;        // the topology node it resolved to (-1: none, or interleave)
    uint64_t node_mask = 0;   // topology nodes bound
    HostPolicy policy;
};

// Resolve `p` against `t`. `gpu_node` is the node of the GPU the object is
// for (-1: unknown). INVALID_ARGUMENT for an unknown kind or node.
uvm_status_t resolve_placement(const uvm_placement_t &p, int32_t gpu_node, const Topology &t,
                               ResolvedPlacement *out);

// Set the policy on [address, address + size) before its pages exist, so that
// they are allocated where it says. NOT_SUPPORTED without libnuma.
uvm_status_t apply_policy(void *address, uint64_t size, const HostPolicy &policy);

// Where the pages of [address, address + size) are: resident and huge-page
// bytes (/proc/self/smaps), and bytes per host node (move_pages).
uvm_status_t query_host_pages(const void *address, uint64_t size, uvm_host_pages_t *out);

// The host's transparent huge page setting for private (shmem false) or
// shared (shmem true) memory.
uvm_thp_mode_t thp_mode(bool shmem);

}  // namespace uvm::topo
