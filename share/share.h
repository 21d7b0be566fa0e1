// Objects shared with other processes (uvm_mem_export / uvm_mem_import,
// docs/sharing.md): an object's memory as the message of share/share_message.h,
// and an object made of a message another manager sent.
//
// What travels: sysmem allocated UVM_MEM_USER_MAPPABLE, as its memfd; vidmem
// of 2M chunks allocated UVM_MEM_USER_MAPPABLE and not evictable (remappable
// roots, each its own memfd on sim and its own driver handle on CUDA), as an
// fd per root chunk. The owner GPU is named by UUID and PCI bus id. Both functions
// hold the object's lock (export) or make a new object (import) and leave
// everything as it was on failure.
#pragma once

#include <memory>
#include <vector>

#include "share/share_message.h"
#include "uvm/mem.h"

namespace uvm {

// The message and fds for `mem` (the caller closes the fds once sent).
// NOT_SUPPORTED for an object that cannot be shared (above), ASLEEP for
// vidmem of a client asleep (uvm_pressure.h); marks exported
// vidmem so that its roots are never reused here.
uvm_status_t mem_export(Manager &mgr, Mem &mem, ipc::ShareMessage *msg, std::vector<int> *fds);

// An object of this manager over the memory of a received message (`fds`
// stay the caller's). NOT_SUPPORTED for a handle kind this backend cannot
// import; INVALID_GPU where no GPU has the owner's UUID or PCI bus id;
// INVALID_ARGUMENT where the backend refuses the fds.
uvm_status_t mem_import(Manager &mgr, const ipc::ShareMessage &msg, const std::vector<int> &fds,
                        std::shared_ptr<Mem> *out);

}  // namespace uvm
