// The C functions of uvm_share.h, over api/entry.h.
#include <unistd.h>

#include "api/entry.h"

using namespace uvm::api;

extern "C" {

uvm_status_t uvm_mem_export(uvm_manager_t *m, uvm_mem_t *handle, int socket) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (socket < 0)
            return uvm::fail(UVM_ERR_INVALID_ARGUMENT, "socket %d is not a file descriptor", socket);
        uvm::ipc::ShareMessage msg;
        std::vector<int> fds;
        uvm_status_t status = on_live_mem(mgr, handle, [&](Manager &owner, Mem &mem) { return uvm::mem_export(owner, mem, &msg, &fds); });
        if (status != UVM_OK)
            return status;
        // Sent without the object's lock: a peer slow to read holds up nobody
        // else. The fds hold the memory whatever happens to the object meanwhile.
        status = guarded([&] {
            std::string why;
            const uvm_status_t sent = uvm::ipc::send_share(socket, msg, fds, &why);
            return sent == UVM_OK || why.empty() ? sent : uvm::fail(sent, "%s", why.c_str());
        });
        for (int fd : fds)
            close(fd);  // the peer has its own now
        return status;
    });
}

uvm_status_t uvm_mem_import(uvm_manager_t *m, int socket, uvm_client_t *client_handle, uvm_mem_t **out) {
    return enter(m, [&](Manager &mgr) -> uvm_status_t {
        if (socket < 0)
            return uvm::fail(UVM_ERR_INVALID_ARGUMENT, "socket %d is not a file descriptor", socket);
        if (!out)
            return null_argument("out");
        std::shared_ptr<uvm::Client> client;
        if (client_handle && !(client = mgr.clients().lookup(client_handle)))
            return dead_client(client_handle);
        SlotReservation slot(mgr);
        uvm_status_t status = mgr.reserve_slot(&slot.ticket);
        if (status != UVM_OK)
            return status;
        uvm::ipc::ShareMessage msg;
        std::vector<int> fds;
        std::string why;
        status = uvm::ipc::recv_share(socket, &msg, &fds, &why);
        if (status != UVM_OK)
            return why.empty() ? status : uvm::fail(status, "%s", why.c_str());
        std::shared_ptr<Mem> mem;
        status = uvm::mem_import(mgr, msg, fds, &mem);
        for (int fd : fds)
            close(fd);  // the backend keeps what it needs
        if (status != UVM_OK)
            return status;
        if (client) {
            status = charge_new_object(mgr, *mem, std::move(client));
            if (status != UVM_OK) {  // over the client's budget
                std::lock_guard<uvm::Mutex> guard(mem->lock);
                uvm::mem_release(mgr, *mem);
                return status;
            }
        }
        *out = publish_new_object(mgr, &slot, mem, false);
        return UVM_OK;
    });
}

}  // extern "C"
