// Workloads for the page-size lab (lab/page_size_sim.h): generators of
// access streams, and the lab's text trace format for users' own traces.
//
// Trace format (one event per line; '#' starts a comment; blank lines skip):
//   alloc <base> <size>                    an object (numbers decimal or 0x hex)
//   free <base>
//   <r|w> <address> [size [processor]]     an access (size 8, processor 0 by default)
// A bad line stops the replay with its line number and what is wrong.
//
// Thread safety: none; one reader or generator per thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "lab/page_size_sim.h"

namespace uvm::lab {

enum class Pattern { Sequential, Random, Strided, PointerChase, GraphWalk, GrowingSet };

struct WorkloadParams {
    Pattern pattern = Pattern::Random;
    uint64_t footprint = 64ull << 20;  // bytes the accesses range over (GrowingSet: the last size)
    uint64_t accesses = 1000000;
    uint64_t stride = 4096;            // Strided; PointerChase: one element per stride
    uint32_t processors = 1;           // accesses spread over this many SMs, in turn
    uint32_t access_size = 8;
    uint64_t seed = 1;
};

// Makes the accesses of a workload over one object at `base` (the caller
// allocates it with `footprint` bytes). Each call of next() gives one.
class Workload {
public:
    Workload(const WorkloadParams &p, uint64_t base);
    bool next(Access *out);

private:
    WorkloadParams p_;
    uint64_t base_;
    uint64_t issued_ = 0;
    uint64_t cursor_ = 0;
    std::mt19937_64 rng_;
    std::vector<uint32_t> chain_;  // PointerChase: the next line of each line
};

// The lab's text trace, read line by line (bounded memory).
class TraceReader {
public:
    // False (with error()) where the file cannot be opened.
    bool open(const std::string &path);
    ~TraceReader();

    enum class Kind { Alloc, Free, Access, End, Error };
    struct Event {
        Kind kind = Kind::End;
        uint64_t base = 0, size = 0;  // Alloc, Free
        Access access;                // Access
    };
    Event next();
    const std::string &error() const { return error_; }  // "line N: what"
    uint64_t line() const { return line_; }

    // One line, for tests and for callers with their own input.
    static Event parse(const char *text, std::string *why);

private:
    FILE *f_ = nullptr;
    uint64_t line_ = 0;
    std::string error_;
};

// Replay a trace through a simulator: false with the reader's or the
// simulator's error (an alloc the simulator refuses, a free of nothing).
bool replay(TraceReader &reader, Simulator &sim, std::string *error);

}  // namespace uvm::lab
