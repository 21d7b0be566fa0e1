// uvm_mem_alloc_params_t in one expression, for the tests and the benchmarks.
#pragma once

#include <cstring>

#include "uvm/uvm.h"

namespace uvm {

inline uvm_mem_alloc_params_t alloc_params(uvm_backing_t backing, uint64_t size, uint32_t gpu = 0,
                                           uint64_t chunk = 0, uint32_t flags = 0) {
    uvm_mem_alloc_params_t p;
    std::memset(&p, 0, sizeof(p));
    p.backing = backing;
    p.size = size;
    p.gpu = gpu;
    p.chunk_size = chunk;
    p.flags = flags;
    return p;
}

}  // namespace uvm
