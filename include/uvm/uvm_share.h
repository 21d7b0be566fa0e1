/*
 * uvm_share.h - sharing objects with other processes (docs/sharing.md).
 *
 * An exported object is a set of file descriptors sent over a Unix socket;
 * the importer maps the same physical memory. Included by uvm.h.
 */
#ifndef UVM_UVM_SHARE_H
#define UVM_UVM_SHARE_H

#ifndef UVM_UVM_H
#include <uvm/uvm.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Sharing with other processes (docs/sharing.md).                           */
/* ------------------------------------------------------------------------ */

/* Send the object over `socket`, a connected Unix domain socket of type
 * SOCK_SEQPACKET: a versioned message naming its size, chunk size, backing
 * and owner GPU (by UUID and PCI bus id), with its memory as file descriptors
 * (SCM_RIGHTS). Another manager, usually in another process, makes an object
 * of the same memory with uvm_mem_import. The memory lives until the
 * exporter and every importer have freed it (or exited): a vidmem object
 * once exported goes back to the driver when freed here, never to this
 * manager's pools. What can be exported: sysmem allocated with
 * UVM_MEM_USER_MAPPABLE (its memfd), and vidmem of 2M chunks allocated with
 * UVM_MEM_USER_MAPPABLE and not evictable (a root chunk of its own per 2 MiB,
 * sent as an fd each: a memfd on sim, a driver handle's POSIX fd on CUDA);
 * else NOT_SUPPORTED. ASLEEP for vidmem of a client asleep (uvm_pressure.h;
 * nothing is sent). BACKEND where the socket fails. A process may hold
 * about 1,000 fds at once by default (ulimit -n): the importer holds one per
 * 2 MiB while it imports. It blocks until the message is sent, without
 * holding the object: other calls on it go on meanwhile. Thread-safe. */
UVM_API uvm_status_t uvm_mem_export(uvm_manager_t *mgr, uvm_mem_t *mem, int socket);

/* Receive one exported object from `socket` and make it an object of this
 * manager, charged to `client` (NULL: the default client). It maps as its
 * backing allows here: sysmem on the CPU (kernel and user) and every GPU;
 * vidmem on the GPU with the exporter's UUID, else its PCI bus id (physical, kernel and user
 * mappings, a user address of the caller's included) and on that GPU's peers.
 * It is never evicted. uvm_mem_info gives the exporter's size, chunk size and
 * backing, and the flag UVM_MEM_USER_MAPPABLE. INVALID_ARGUMENT for a
 * malformed, truncated or inconsistent message, or fds of the wrong kind or
 * size; NOT_SUPPORTED for another message version or a handle this backend
 * cannot import (a CUDA handle into sim, or the reverse); INVALID_GPU where
 * no GPU here has the owner's UUID or PCI bus id; NOT_FOUND where the peer closed
 * the socket first. On any error nothing is mapped and no fd stays open.
 * Thread-safe. */
UVM_API uvm_status_t uvm_mem_import(uvm_manager_t *mgr, int socket, uvm_client_t *client, uvm_mem_t **out);

/* Where a sysmem object's pages really are, as the kernel reports it. */
typedef struct uvm_host_pages_s {
    uint64_t resident_bytes;  /* pages present */
    uint64_t huge_bytes;      /* of those, in 2 MiB transparent huge pages (/proc/self/smaps) */
    uint64_t node_bytes[UVM_MAX_NUMA_NODES]; /* by host NUMA node (move_pages); all zero
                                                in a build without libnuma */
} uvm_host_pages_t;

/* A diagnostic, not for hot paths: reads /proc/self/smaps and asks the kernel
 * for every page's node. NOT_SUPPORTED for vidmem and managed objects. */
UVM_API uvm_status_t uvm_mem_host_pages(uvm_manager_t *mgr, uvm_mem_t *mem, uvm_host_pages_t *out);

#ifdef __cplusplus
}
#endif

#endif /* UVM_UVM_SHARE_H */
