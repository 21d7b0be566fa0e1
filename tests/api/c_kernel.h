/* A GPU kernel launched from C through the CUDA driver, loaded at run time
 * (no cuda.h, no toolkit): the C API test reads objects through GPU
 * addresses the manager hands out, as a runtime written in C would. */
#ifndef UVM_TEST_C_KERNEL_H
#define UVM_TEST_C_KERNEL_H

#include <stdint.h>

/* On GPU `gpu`: dst[i] = src[i] + 1 for i < n, both GPU virtual addresses.
 * 0 on success; 1 where the driver is there and something failed; -1 where
 * there is no driver. */
int c_kernel_add_one(int gpu, uint64_t dst, uint64_t src, uint64_t n);

#endif
