// Where things sit in the host: NUMA nodes (their CPUs and memory) and, for
// each GPU, the node it hangs off and its path through the PCI tree. The
// host's own topology is read once per process with hwloc; the sim backend
// builds a configured one whose nodes are backed by the host's.
//
// Thread safety: host_topology() may be called concurrently (it is built
// once); a Topology is immutable once built.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "uvm/uvm.h"

namespace uvm::topo {

struct NumaNode {
    int32_t id = 0;         // the node number callers use (placement, GPU info)
    int32_t host_node = 0;  // the host node whose pages back it (== id on real topologies)
    uint64_t memory_total = 0;
    std::string cpus;       // CPU list, "0-15,32-47"
};

// Where one GPU sits.
struct GpuPlace {
    int32_t numa_node = -1;  // -1: unknown
    std::string cpus;        // CPUs local to it; empty when unknown
    // PCI bridges from the GPU up to its host bridge (host bridge last), as
    // ids unique within the topology; empty when the PCI tree is unknown.
    std::vector<uint64_t> bridges;
};

struct Topology {
    std::vector<NumaNode> nodes;  // ascending id
    bool from_hwloc = false;      // false: a fallback or configured topology

    const NumaNode *node(int32_t id) const;
};

// The host's topology, read with hwloc when the build has it, else from
// sysconf (one node holding every CPU). Built on first use, then cached.
const Topology &host_topology();

// Where the PCI device `bus_id` ("0000:3b:00.0") sits in the host; numa_node
// -1 when hwloc does not know it.
GpuPlace locate_pci_device(const std::string &bus_id);

// A configured topology of `node_count` nodes for simulated GPUs: node n is
// backed by the host's node (n mod host node count), with its CPUs.
Topology configured_topology(const Topology &host, uint32_t node_count);

// How two GPUs are connected, in the terms of `nvidia-smi topo -m`.
uvm_gpu_path_t classify_path(const GpuPlace &a, const GpuPlace &b);

// Free bytes of a host node (libnuma); 0 when unknown.
uint64_t host_node_free_bytes(int32_t host_node);

// Bytes of the host's physical memory, all of it or what is free now
// (sysconf); 0 when unknown.
uint64_t host_memory_bytes(bool free_only);

}  // namespace uvm::topo
