// Simulated GPUs in host memory: the embedded default backend where there is
// no GPU, and the basis of the page-size simulator.
//
// Each GPU's vidmem is a memfd mapped with MAP_NORESERVE: only pages that are
// touched cost host memory, so eight 80 GiB GPUs start on a small machine.
// A physical vidmem address is an offset into that memfd. Sysmem reaches a GPU
// through a simulated IOMMU that hands out DMA addresses (aperture Sys). The
// copy engine walks the GPU's page tree for every page it touches, exactly as
// the GPU's MMU would, and counts the bytes it moved and the walks it made.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace uvm::sim {

// Check `params` and fill in the defaults; INVALID_ARGUMENT when they are bad.
uvm_status_t resolve_params(const uvm_sim_params_t &params, uvm_sim_params_t *out);

uvm_status_t create_sim_backend(const uvm_sim_params_t &params,
                                std::unique_ptr<backend::Backend> *out);

}  // namespace uvm::sim
