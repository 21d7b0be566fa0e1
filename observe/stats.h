// The statistics layer's reads (observe/stats.cpp): what the C calls
// uvm_gpu_info, uvm_gpu_stats and uvm_manager_stats return, for the library's
// own reports too, which never go back out through the C API.
#pragma once

#include "uvm/manager.h"
#include "uvm/uvm.h"

namespace uvm {

uvm_status_t gpu_info(Manager &mgr, uint32_t gpu, uvm_gpu_info_t *out);
uvm_status_t gpu_stats(Manager &mgr, uint32_t gpu, uvm_gpu_stats_t *out);
uvm_status_t manager_stats(Manager &mgr, uvm_manager_stats_t *out);

}  // namespace uvm
