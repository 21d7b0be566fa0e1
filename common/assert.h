// Invariant checks, after nvidia-uvm's UVM_ASSERT: on in debug and sanitizer
// builds, compiled out in release builds where they would sit on hot paths.
#pragma once

#include <cstdio>
#include <cstdlib>

#if !defined(NDEBUG) || defined(UVM_DEBUG)
#define UVM_ASSERTS_ENABLED 1
#define UVM_ASSERT(expr)                                                                  \
    do {                                                                                  \
        if (!(expr)) {                                                                    \
            std::fprintf(stderr, "uvm: assertion failed: %s (%s:%d)\n", #expr, __FILE__, \
                         __LINE__);                                                       \
            std::abort();                                                                 \
        }                                                                                 \
    } while (0)
#else
#define UVM_ASSERTS_ENABLED 0
#define UVM_ASSERT(expr) ((void)sizeof(!(expr)))
#endif
