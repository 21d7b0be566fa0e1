// Objects shared with other processes (share.h).
#include "share/share.h"

#include <strings.h>
#include <unistd.h>

#include <cstring>

#include "backend/sharing_capability.h"
#include "common/sizes.h"

namespace uvm {

namespace {

void copy_pci(const std::string &bus, char (&out)[16]) {
    std::memset(out, 0, sizeof(out));
    std::strncpy(out, bus.c_str(), sizeof(out) - 1);
}

// The GPU of this manager that the message names: by UUID where it carries
// one and a GPU here has it, else by PCI bus id (case-insensitive); -1: none.
int owner_gpu(Manager &mgr, const ipc::ShareMessage &msg) {
    static const uint8_t zero[16] = {};
    if (std::memcmp(msg.owner_uuid, zero, sizeof(zero)) != 0)
        for (uint32_t g = 0; g < mgr.gpu_count(); ++g)
            if (std::memcmp(mgr.gpu(g).info.uuid, msg.owner_uuid, sizeof(zero)) == 0)
                return static_cast<int>(g);
    if (!msg.owner_pci[0])
        return -1;
    for (uint32_t g = 0; g < mgr.gpu_count(); ++g)
        if (strcasecmp(mgr.gpu(g).info.pci_bus_id.c_str(), msg.owner_pci) == 0)
            return static_cast<int>(g);
    return -1;
}

void name_owner(const backend::GpuInfo &info, ipc::ShareMessage *m) {
    copy_pci(info.pci_bus_id, m->owner_pci);
    std::memcpy(m->owner_uuid, info.uuid, sizeof(m->owner_uuid));
}

}  // namespace

uvm_status_t mem_export(Manager &mgr, Mem &mem, ipc::ShareMessage *msg, std::vector<int> *fds) {
    if (mem.asleep)
        return UVM_ERR_ASLEEP;  // its roots' memory is the driver's until the wake (pressure/sleep.h)
    ipc::ShareMessage m;
    m.size = mem.alloc_size;
    m.object_size = mem.size;
    m.chunk_size = mem.chunk_size;
    std::vector<int> out;
    if (mem.is_vidmem()) {
        if (!mem.remappable || mem.evictable || mem.evicted || mem.chunk_size != kPageSize2M)
            return UVM_ERR_NOT_SUPPORTED;
        m.backing = ipc::ShareBacking::Vidmem;
        backend::SharingCapability *sharing = mgr.backend_sharing();
        if (!sharing)
            return UVM_ERR_NOT_SUPPORTED;  // roots this backend cannot hand out
        m.kind = static_cast<ipc::ShareHandleKind>(sharing->export_handle_kind());
        name_owner(mgr.gpu(mem.owner).info, &m);
        out.reserve(mem.chunks.size());
        m.segments.reserve(mem.chunks.size());
        for (size_t i = 0; i < mem.chunks.size(); ++i) {
            int fd = -1;
            uint64_t offset = 0;
            const uvm_status_t status = sharing->root_chunk_export(mem.owner, mem.chunks[i], &fd, &offset);
            if (status != UVM_OK) {
                for (int f : out)
                    close(f);
                return status;
            }
            out.push_back(fd);
            m.segments.push_back({static_cast<uint32_t>(i), offset, kPageSize2M, i * kPageSize2M});
        }
    } else if (mem.is_managed() || mem.host.fd < 0) {
        return UVM_ERR_NOT_SUPPORTED;  // managed memory, or private anonymous sysmem
    } else {
        m.backing = ipc::ShareBacking::Sysmem;
        m.kind = ipc::ShareHandleKind::Memfd;
        if (mem.owner < mgr.gpu_count())
            name_owner(mgr.gpu(mem.owner).info, &m);
        const int fd = dup(mem.host.fd);
        if (fd < 0)
            return UVM_ERR_BACKEND;
        out.push_back(fd);
        m.segments.push_back({0, 0, mem.alloc_size, 0});
    }
    m.fd_count = static_cast<uint32_t>(out.size());
    if (mem.is_vidmem())
        mem.exported = true;  // from the first export on: another process may hold its roots
    *msg = std::move(m);
    *fds = std::move(out);
    return UVM_OK;
}

uvm_status_t mem_import(Manager &mgr, const ipc::ShareMessage &msg, const std::vector<int> &fds,
                        std::shared_ptr<Mem> *out) {
    const int owner = owner_gpu(mgr, msg);
    std::shared_ptr<Mem> mem = make_mem();
    mem->born_ns = coarse_now_ns();
    mem->size = msg.object_size;
    mem->alloc_size = msg.size;
    mem->chunk_size = msg.chunk_size;
    mem->flags = UVM_MEM_USER_MAPPABLE;  // as the exporter's: shareable pages, remappable roots
    // Without sharing: no handle kind (0), and every import NOT_SUPPORTED,
    // checked where the backend would have been asked, as before there was
    // a capability (so the statuses for a bad message stay the same).
    backend::SharingCapability *sharing = mgr.backend_sharing();
    if (msg.backing == ipc::ShareBacking::Vidmem) {
        if (static_cast<int>(msg.kind) != (sharing ? sharing->export_handle_kind() : 0))
            return UVM_ERR_NOT_SUPPORTED;  // a CUDA handle into sim, or the reverse
        if (owner < 0)
            return UVM_ERR_INVALID_GPU;
        if (msg.chunk_size != kPageSize2M)
            return UVM_ERR_INVALID_ARGUMENT;
        // One fd per root chunk, in order: the segments say so.
        std::vector<uint64_t> offsets(msg.segments.size());
        for (size_t i = 0; i < msg.segments.size(); ++i) {
            const ipc::ShareSegment &s = msg.segments[i];
            if (s.fd_index != i || s.size != kPageSize2M)
                return UVM_ERR_INVALID_ARGUMENT;
            offsets[i] = s.fd_offset;
        }
        mem->backing = UVM_BACKING_VIDMEM;
        mem->owner = static_cast<uint32_t>(owner);
        mem->remappable = true;
        mem->imported = true;
        mem->chunks.resize(fds.size());
        uint64_t phys = 0;
        const uvm_status_t status = sharing ? sharing->roots_import(mem->owner, fds.data(), offsets.data(), fds.size(), &phys)
                                            : UVM_ERR_NOT_SUPPORTED;
        if (status != UVM_OK)
            return status;
        for (size_t i = 0; i < fds.size(); ++i)
            mem->chunks[i] = phys + i * kPageSize2M;
        mgr.gpu(mem->owner).caches.count_object(+1);
    } else {
        if (msg.kind != ipc::ShareHandleKind::Memfd || msg.segments.size() != 1 || msg.segments[0].fd_offset != 0)
            return UVM_ERR_INVALID_ARGUMENT;
        mem->backing = UVM_BACKING_SYSMEM;
        mem->owner = owner < 0 ? 0 : static_cast<uint32_t>(owner);  // the GPU it was for, where this host has it
        const uvm_status_t status = sharing ? sharing->sysmem_import(fds[0], msg.size, msg.chunk_size, &mem->host)
                                            : UVM_ERR_NOT_SUPPORTED;
        if (status != UVM_OK)
            return status;
        mgr.sysmem_objects++;
        mgr.sysmem_bytes += msg.size;
    }
    *out = std::move(mem);
    return UVM_OK;
}

}  // namespace uvm
