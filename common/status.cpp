// Text for each status code.
#include "uvm/uvm.h"

extern "C" const char *uvm_status_string(uvm_status_t status) {
    switch (status) {
        case UVM_OK: return "success";
        case UVM_ERR_INVALID_ARGUMENT: return "invalid argument";
        case UVM_ERR_INVALID_HANDLE: return "invalid handle (freed, or of another manager)";
        case UVM_ERR_INVALID_GPU: return "invalid GPU index";
        case UVM_ERR_PAGE_SIZE_NOT_SUPPORTED: return "page size not supported by the backing";
        case UVM_ERR_MISALIGNED: return "address not aligned as required";
        case UVM_ERR_OUT_OF_RANGE: return "offset or size beyond the object";
        case UVM_ERR_OUT_OF_MEMORY: return "out of memory";
        case UVM_ERR_NO_HOST_MEMORY: return "out of host memory for bookkeeping";
        case UVM_ERR_NOT_SUPPORTED: return "not supported on this backend or platform";
        case UVM_ERR_NOT_MAPPED: return "not mapped";
        case UVM_ERR_ALREADY_MAPPED: return "already mapped";
        case UVM_ERR_ADDRESS_IN_USE: return "address range already in use";
        case UVM_ERR_NO_PEER_ACCESS: return "no peer access between these GPUs";
        case UVM_ERR_NO_DEVICE: return "no CUDA driver or GPU found";
        case UVM_ERR_BACKEND: return "backend call failed";
        case UVM_ERR_LEAKED_OBJECTS: return "objects were still alive at manager teardown";
        case UVM_ERR_BUSY: return "work queued on a stream cannot finish (held)";
        case UVM_ERR_NOT_FOUND: return "nothing of that kind exists";
        case UVM_ERR_BUFFER_TOO_SMALL: return "output buffer too small";
        case UVM_ERR_FORKED: return "the manager belongs to the parent process (fork)";
        case UVM_ERR_ASLEEP: return "the object's client is asleep (wake it first)";
        case UVM_ERR_HOST_LIMIT: return "host memory for sleeps would pass the manager's limit";
    }
    return "unknown status";
}
