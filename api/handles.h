// Between the C handles of uvm.h and the C++ objects behind them. Internal:
// the tests use it to build a manager over a backend of their choosing.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "uvm/manager.h"

namespace uvm {

inline uvm_manager_t *to_handle(Manager *mgr) { return reinterpret_cast<uvm_manager_t *>(mgr); }
inline Manager *from_handle(uvm_manager_t *mgr) { return reinterpret_cast<Manager *>(mgr); }

// A manager over `backend` (which the manager then owns); free it with uvm_manager_destroy.
uvm_status_t create_manager(std::unique_ptr<backend::Backend> backend, uvm_manager_t **out);

}  // namespace uvm
