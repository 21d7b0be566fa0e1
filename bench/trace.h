// Allocation traces: the allocs and frees of a real program, in order, as
// tools/record_torch_trace.py writes them from PyTorch's caching allocator
// (bench/traces/). Read by the replay benchmark and the replay test.
//
//   # comment lines
//   a <id> <bytes>     an object of <bytes> comes to life
//   f <id>             it is freed
#pragma once

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace uvm_trace {

struct Op {
    bool alloc = false;
    uint32_t id = 0;    // dense: ids are 0 .. ids-1
    uint64_t size = 0;  // alloc only
};

struct Trace {
    std::string name;
    std::vector<Op> ops;
    uint32_t ids = 0;
    uint64_t allocs = 0;
    uint64_t peak_live_bytes = 0;
};

// False where the file is missing or malformed (a free of an id not alive,
// an id used twice).
inline bool read_trace(const std::string &path, Trace *out) {
    std::ifstream in(path);
    if (!in)
        return false;
    Trace t;
    const size_t slash = path.find_last_of('/');
    t.name = path.substr(slash == std::string::npos ? 0 : slash + 1);
    std::vector<uint64_t> sizes;
    std::vector<bool> alive;
    uint64_t live = 0;
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#')
            continue;
        std::istringstream fields(line);
        char kind = 0;
        Op op;
        if (!(fields >> kind >> op.id))
            return false;
        if (op.id >= sizes.size()) {
            sizes.resize(op.id + 1, 0);
            alive.resize(op.id + 1, false);
        }
        if (kind == 'a') {
            if (!(fields >> op.size) || op.size == 0 || sizes[op.id] != 0)
                return false;
            op.alloc = true;
            sizes[op.id] = op.size;
            alive[op.id] = true;
            live += op.size;
            t.allocs++;
            t.peak_live_bytes = live > t.peak_live_bytes ? live : t.peak_live_bytes;
        } else if (kind == 'f') {
            if (!alive[op.id])
                return false;
            alive[op.id] = false;
            live -= sizes[op.id];
        } else {
            return false;
        }
        t.ops.push_back(op);
    }
    t.ids = static_cast<uint32_t>(sizes.size());
    *out = std::move(t);
    return !out->ops.empty();
}

// The traces shipped in bench/traces (UVM_TRACE_DIR is set by the build).
inline std::vector<std::string> shipped_traces() {
#if defined(UVM_TRACE_DIR)
    return {std::string(UVM_TRACE_DIR) + "/transformer.trace", std::string(UVM_TRACE_DIR) + "/cnn.trace"};
#else
    return {};
#endif
}

}  // namespace uvm_trace
