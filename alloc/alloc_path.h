// The allocation path: how a request for memory becomes an object
// (uvm_mem_alloc, uvm_mem_alloc_async, uvm_mem_alloc_gpu; docs/design.md,
// "How memory flows").
#pragma once

#include <cstdint>
#include <memory>

#include "uvm/uvm.h"

namespace uvm {

class Manager;
struct Stream;

namespace alloc {

// A new object for `params` (checked here), on `stream` where it is not
// null; `gpu_address`, where given, receives its kernel address on its GPU.
uvm_status_t allocate(Manager &mgr, const uvm_mem_alloc_params_t &params, const std::shared_ptr<Stream> &stream,
                      uvm_mem_t **out, uint64_t *gpu_address);

}  // namespace alloc
}  // namespace uvm
