#include "topo/placement.h"

#include <errno.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/assert.h"
#include "common/enum_value.h"
#include "common/last_error.h"
#include "common/sizes.h"

#ifdef UVM_HAVE_LIBNUMA
#include <numa.h>
#include <numaif.h>
#endif

namespace uvm::topo {

uvm_status_t resolve_placement(const uvm_placement_t &p, int32_t gpu_node, const Topology &t,
                               ResolvedPlacement *out) {
    ResolvedPlacement r;
    const HostPolicy::Mode single = p.strict ? HostPolicy::Mode::Bind : HostPolicy::Mode::Preferred;
    int32_t node = -1;
    // The kind is read as a raw value: a caller's enum may hold anything.
    switch (enum_value(p.kind)) {
        case UVM_PLACEMENT_GPU_LOCAL:
            node = gpu_node;  // unknown: no binding
#ifndef UVM_HAVE_LIBNUMA
            // The default must work in every build: without libnuma it is a
            // preference nobody can state, so nothing is bound. Strict stays
            // a demand, and apply_policy refuses it.
            if (!p.strict)
                node = -1;
#endif
            break;
        case UVM_PLACEMENT_NODE:
            if (p.node >= UVM_MAX_NUMA_NODES || !t.node(static_cast<int32_t>(p.node)))
                return fail(UVM_ERR_INVALID_ARGUMENT, "placement.node %u: no such NUMA node in the topology", p.node);
            node = static_cast<int32_t>(p.node);
            break;
        case UVM_PLACEMENT_INTERLEAVE: {
            uint64_t known = 0;
            for (const NumaNode &n : t.nodes)
                known |= 1ull << n.id;
            const uint64_t mask = p.node_mask ? p.node_mask : known;
            if (mask & ~known)
                return fail(UVM_ERR_INVALID_ARGUMENT,
                            "placement.node_mask 0x%llx names nodes the topology lacks (it has 0x%llx)",
                            static_cast<unsigned long long>(mask), static_cast<unsigned long long>(known));
            r.node_mask = mask;
            r.policy.mode = HostPolicy::Mode::Interleave;
            for (const NumaNode &n : t.nodes)
                if ((mask >> n.id) & 1u)
                    r.policy.host_nodes |= 1ull << n.host_node;
            *out = r;
            return UVM_OK;
        }
        case UVM_PLACEMENT_ANY:
            break;
        default:
            return fail(UVM_ERR_INVALID_ARGUMENT, "placement.kind %d: no such placement kind", enum_value(p.kind));
    }
    if (node >= 0) {
        const NumaNode *n = t.node(node);
        if (!n)  // a GPU on a node the topology lacks: no binding
            node = -1;
        else {
            r.node = node;
            r.node_mask = 1ull << node;
            r.policy.mode = single;
            r.policy.host_nodes = 1ull << n->host_node;
        }
    }
    *out = r;
    return UVM_OK;
}

uvm_status_t apply_policy(void *address, uint64_t size, const HostPolicy &policy) {
    if (policy.mode == HostPolicy::Mode::Any)
        return UVM_OK;
    UVM_ASSERT(policy.host_nodes != 0);
#ifdef UVM_HAVE_LIBNUMA
    int mode = MPOL_PREFERRED;
    if (policy.mode == HostPolicy::Mode::Bind)
        mode = MPOL_BIND;
    else if (policy.mode == HostPolicy::Mode::Interleave)
        mode = MPOL_INTERLEAVE;
    unsigned long mask = policy.host_nodes;
    // maxnode counts bits and the kernel reads one fewer than it is told.
    if (mbind(address, size, mode, &mask, UVM_MAX_NUMA_NODES + 1, 0) != 0)
        return errno == EINVAL || errno == EFAULT ? UVM_ERR_INVALID_ARGUMENT
               : errno == ENOSYS || errno == EPERM ? UVM_ERR_NOT_SUPPORTED
                                                   : UVM_ERR_BACKEND;
    return UVM_OK;
#else
    (void)address;
    (void)size;
    return UVM_ERR_NOT_SUPPORTED;
#endif
}

namespace {

// Sum the huge-page and resident fields of the smaps entries inside the range.
void read_smaps(uint64_t lo, uint64_t hi, uvm_host_pages_t *out) {
    FILE *f = std::fopen("/proc/self/smaps", "r");
    if (!f)
        return;
    char line[512];
    bool inside = false;
    while (std::fgets(line, sizeof line, f)) {
        unsigned long start = 0, end = 0;
        char dash = 0, space = 0;
        // A mapping header is "start-end perms ..."; field lines are "Name:  value kB".
        if (std::sscanf(line, "%lx%c%lx%c", &start, &dash, &end, &space) == 4 && dash == '-' &&
            space == ' ') {
            inside = start >= lo && end <= hi;
            continue;
        }
        if (!inside)
            continue;
        unsigned long kb = 0;
        char name[64];
        if (std::sscanf(line, "%63[^:]: %lu kB", name, &kb) != 2)
            continue;
        if (!std::strcmp(name, "Rss"))
            out->resident_bytes += kb << 10;
        else if (!std::strcmp(name, "AnonHugePages") || !std::strcmp(name, "ShmemPmdMapped") ||
                 !std::strcmp(name, "FilePmdMapped"))
            out->huge_bytes += kb << 10;
    }
    std::fclose(f);
}

}  // namespace

uvm_status_t query_host_pages(const void *address, uint64_t size, uvm_host_pages_t *out) {
    uvm_host_pages_t r;
    std::memset(&r, 0, sizeof r);
    const uint64_t lo = reinterpret_cast<uint64_t>(address);
    read_smaps(lo, lo + size, &r);
#ifdef UVM_HAVE_LIBNUMA
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    constexpr size_t kBatch = 4096;  // pages asked about per call
    std::vector<void *> pages(kBatch);
    std::vector<int> status(kBatch);
    for (uint64_t off = 0; off < size; off += kBatch * page) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(kBatch, (size - off) / page));
        for (size_t i = 0; i < n; i++)
            pages[i] = const_cast<uint8_t *>(static_cast<const uint8_t *>(address)) + off + i * page;
        // With no target nodes, move_pages only reports where each page is.
        if (move_pages(0, n, pages.data(), nullptr, status.data(), 0) != 0)
            return errno == ENOSYS ? UVM_ERR_NOT_SUPPORTED : UVM_ERR_BACKEND;
        for (size_t i = 0; i < n; i++)
            if (status[i] >= 0 && status[i] < UVM_MAX_NUMA_NODES)
                r.node_bytes[status[i]] += page;
    }
#endif
    *out = r;
    return UVM_OK;
}

uvm_thp_mode_t thp_mode(bool shmem) {
    const char *path = shmem ? "/sys/kernel/mm/transparent_hugepage/shmem_enabled"
                             : "/sys/kernel/mm/transparent_hugepage/enabled";
    FILE *f = std::fopen(path, "r");
    if (!f)
        return UVM_THP_UNKNOWN;
    char text[256] = {0};
    const size_t n = std::fread(text, 1, sizeof text - 1, f);
    std::fclose(f);
    text[n] = 0;
    // The file lists every mode with the one in force in brackets.
    const char *open = std::strchr(text, '[');
    const char *close = open ? std::strchr(open, ']') : nullptr;
    if (!open || !close)
        return UVM_THP_UNKNOWN;
    const std::string mode(open + 1, close);
    if (mode == "always" || mode == "within_size" || mode == "force")
        return UVM_THP_ALWAYS;
    if (mode == "madvise" || mode == "advise")
        return UVM_THP_MADVISE;
    if (mode == "never" || mode == "deny")
        return UVM_THP_NEVER;
    return UVM_THP_UNKNOWN;
}

}  // namespace uvm::topo
