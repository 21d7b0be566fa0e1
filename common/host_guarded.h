// Host allocation failure as a status: what the C API returns for it, and
// what a multi-step operation catches to undo its steps rather than unwind
// past them (pressure/sleep.cpp).
#pragma once

#include <new>

#include "uvm/uvm.h"

namespace uvm {

template <typename F>
uvm_status_t host_guarded(F &&f) {
    try {
        return f();
    } catch (const std::bad_alloc &) {
        return UVM_ERR_NO_HOST_MEMORY;
    }
}

}  // namespace uvm
