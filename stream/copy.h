// The copy engine's operations on objects (stream/copy.cpp).
#pragma once

#include <cstdint>
#include <memory>

#include "uvm/mem.h"
#include "uvm/uvm.h"

namespace uvm {

struct Stream;

// Copy `size` bytes from `src` (in object `s`) to `dst` (in object `d`), or
// set them to `value` where `s` is null, on GPU `gpu`'s copy engine; queued
// on `stream` where given (the objects then track it), else run now. Both
// objects are locked and resident. Every piece is resolved before any runs:
// OUT_OF_RANGE, INVALID_ARGUMENT (overlap, a bad view) or NOT_MAPPED change
// nothing; a BACKEND failure on a stream may leave earlier pieces queued.
uvm_status_t mem_copy_engine(Manager &mgr, uint32_t gpu, Mem *d, const uvm_mem_span_t *dst, Mem *s,
                             const uvm_mem_span_t *src, uint8_t value, uint64_t size,
                             const std::shared_ptr<Stream> &stream);

}  // namespace uvm
