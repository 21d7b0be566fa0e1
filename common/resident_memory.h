// The process's resident memory (/proc/self/statm), in bytes; 0 where it
// cannot be read. For the tests and the benchmarks, as alloc_params.h.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>

namespace uvm {

inline uint64_t resident_bytes() {
    unsigned long size = 0, resident = 0;
    FILE *f = std::fopen("/proc/self/statm", "r");
    if (!f)
        return 0;
    if (std::fscanf(f, "%lu %lu", &size, &resident) != 2)
        resident = 0;
    std::fclose(f);
    return static_cast<uint64_t>(resident) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace uvm
