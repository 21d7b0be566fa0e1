// uvm-tool top (top.cpp): a refreshing view per GPU and client of a running
// process's manager, or of a demo workload. uvm_tool.cpp parses its options.
#pragma once

#include <cstdint>
#include <string>

namespace uvm::tool {

struct TopOptions {
    std::string url;        // a running process's endpoint (its /snapshot), or
    bool demo = false;      // a workload of three clients on simulated GPUs, in this process
    int serve = -1;         // with demo: its metrics served on this port (0: any free one)
    double interval = 1.0;  // seconds between frames
    uint64_t count = 0;     // frames to draw (0: until interrupted)
    bool plain = false;     // one frame after another, no screen clearing (logs, tests)
};

// Draws the frames; the exit status: 0, or 1 where a snapshot could not be
// had (having said why on stderr).
int run_top(const TopOptions &o);

}  // namespace uvm::tool
