#include "topo/topology.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "common/assert.h"

#ifdef UVM_HAVE_HWLOC
#include <hwloc.h>
#endif
#ifdef UVM_HAVE_LIBNUMA
#include <numa.h>
#endif

namespace uvm::topo {

const NumaNode *Topology::node(int32_t id) const {
    for (const NumaNode &n : nodes)
        if (n.id == id)
            return &n;
    return nullptr;
}

namespace {

std::string all_cpus_list() {
    const long n = sysconf(_SC_NPROCESSORS_CONF);
    return n > 1 ? "0-" + std::to_string(n - 1) : "0";
}

// One node holding every CPU and all memory: what a machine without NUMA
// looks like, and what we say when hwloc is not in the build or fails.
Topology fallback_topology() {
    Topology t;
    NumaNode n;
    n.memory_total = host_memory_bytes(false);
    n.cpus = all_cpus_list();
    t.nodes.push_back(n);
    return t;
}

#ifdef UVM_HAVE_HWLOC
std::string cpu_list(hwloc_const_bitmap_t set) {
    if (!set || hwloc_bitmap_iszero(set))
        return std::string();
    char *text = nullptr;
    if (hwloc_bitmap_list_asprintf(&text, set) < 0 || !text)
        return std::string();
    std::string out(text);
    free(text);
    return out;
}

// The process-wide hwloc topology, with the PCI objects that lead to
// "important" devices (GPUs among them). Never destroyed: it lives as long as
// the process, like the host it describes.
hwloc_topology_t loaded_hwloc() {
    static hwloc_topology_t topology = [] {
        hwloc_topology_t t = nullptr;
        if (hwloc_topology_init(&t) != 0)
            return static_cast<hwloc_topology_t>(nullptr);
        hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
        if (hwloc_topology_load(t) != 0) {
            hwloc_topology_destroy(t);
            return static_cast<hwloc_topology_t>(nullptr);
        }
        return t;
    }();
    return topology;
}
#endif

Topology discover() {
#ifdef UVM_HAVE_HWLOC
    hwloc_topology_t h = loaded_hwloc();
    if (!h)
        return fallback_topology();
    Topology t;
    t.from_hwloc = true;
    const int count = hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_NUMANODE);
    for (int i = 0; i < count; i++) {
        hwloc_obj_t obj = hwloc_get_obj_by_type(h, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
        if (!obj || obj->os_index >= UVM_MAX_NUMA_NODES)
            continue;
        NumaNode n;
        n.id = n.host_node = static_cast<int32_t>(obj->os_index);
        n.memory_total = obj->attr ? obj->attr->numanode.local_memory : 0;
        n.cpus = cpu_list(obj->cpuset);
        t.nodes.push_back(n);
    }
    if (t.nodes.empty())
        return fallback_topology();
    std::sort(t.nodes.begin(), t.nodes.end(),
              [](const NumaNode &a, const NumaNode &b) { return a.id < b.id; });
    return t;
#else
    return fallback_topology();
#endif
}

}  // namespace

const Topology &host_topology() {
    static const Topology topology = discover();
    return topology;
}

GpuPlace locate_pci_device(const std::string &bus_id) {
    GpuPlace place;
#ifdef UVM_HAVE_HWLOC
    unsigned domain = 0, bus = 0, dev = 0, func = 0;
    hwloc_topology_t h = loaded_hwloc();
    if (!h || std::sscanf(bus_id.c_str(), "%x:%x:%x.%x", &domain, &bus, &dev, &func) != 4)
        return place;
    hwloc_obj_t pci = hwloc_get_pcidev_by_busid(h, domain, bus, dev, func);
    if (!pci)
        return place;
    for (hwloc_obj_t up = pci->parent; up && up->type == HWLOC_OBJ_BRIDGE; up = up->parent)
        place.bridges.push_back(up->gp_index);
    hwloc_obj_t cpu_side = hwloc_get_non_io_ancestor_obj(h, pci);
    if (cpu_side) {
        place.cpus = cpu_list(cpu_side->cpuset);
        const int first = cpu_side->nodeset ? hwloc_bitmap_first(cpu_side->nodeset) : -1;
        // A GPU whose nearest CPU-side object spans every node (a machine
        // with one node, or an unknown attachment) is on the first of them.
        if (first >= 0 && first < UVM_MAX_NUMA_NODES)
            place.numa_node = first;
    }
#else
    (void)bus_id;
#endif
    return place;
}

Topology configured_topology(const Topology &host, uint32_t node_count) {
    UVM_ASSERT(!host.nodes.empty() && node_count > 0 && node_count <= UVM_MAX_NUMA_NODES);
    Topology t;
    for (uint32_t i = 0; i < node_count; i++) {
        const NumaNode &backing = host.nodes[i % host.nodes.size()];
        NumaNode n = backing;
        n.id = static_cast<int32_t>(i);
        n.host_node = backing.host_node;
        t.nodes.push_back(n);
    }
    return t;
}

uvm_gpu_path_t classify_path(const GpuPlace &a, const GpuPlace &b) {
    if (!a.bridges.empty() && !b.bridges.empty()) {
        // The lowest bridge both paths go through, and how far up each path it is.
        for (size_t i = 0; i < a.bridges.size(); i++) {
            const auto j = std::find(b.bridges.begin(), b.bridges.end(), a.bridges[i]);
            if (j == b.bridges.end())
                continue;
            const size_t k = static_cast<size_t>(j - b.bridges.begin());
            if (i + 1 == a.bridges.size() && k + 1 == b.bridges.size())
                return UVM_GPU_PATH_PHB;  // only the host bridge is shared
            // A switch is an upstream port above one downstream port per device.
            return i <= 1 && k <= 1 ? UVM_GPU_PATH_PIX : UVM_GPU_PATH_PXB;
        }
    }
    if (a.numa_node < 0 || b.numa_node < 0)
        return UVM_GPU_PATH_UNKNOWN;
    return a.numa_node == b.numa_node ? UVM_GPU_PATH_NODE : UVM_GPU_PATH_SYS;
}

uint64_t host_memory_bytes(bool free_only) {
    const long pages = sysconf(free_only ? _SC_AVPHYS_PAGES : _SC_PHYS_PAGES);
    const long page_size = sysconf(_SC_PAGESIZE);
    return pages > 0 && page_size > 0 ? static_cast<uint64_t>(pages) * page_size : 0;
}

uint64_t host_node_free_bytes(int32_t host_node) {
#ifdef UVM_HAVE_LIBNUMA
    if (numa_available() < 0)
        return host_memory_bytes(true);  // a kernel without NUMA: one node, the whole host
    long long free_bytes = 0;
    if (numa_node_size64(host_node, &free_bytes) < 0 || free_bytes < 0)
        return 0;
    return static_cast<uint64_t>(free_bytes);
#else
    return host_node == 0 ? host_memory_bytes(true) : 0;
#endif
}

}  // namespace uvm::topo
