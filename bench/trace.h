// Allocation traces: the allocs and frees of a real program, in order, as
// tools/record_torch_trace.py writes them from PyTorch's caching allocator
// (bench/traces/). Read by the replay benchmark and the replay test.
//
//   # comment lines (the header: model, run, counts, PyTorch's own peaks)
//   a <id> <bytes>     an object of <bytes> comes to life
//   f <id>             it is freed
//
// Files may be gzip-compressed (read with zlib where the build has it).
#pragma once

#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>
#if defined(UVM_HAVE_ZLIB)
#include <zlib.h>
#endif

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
    // PyTorch's own peaks in the recorded run ("# pytorch peaks: allocated A
    // reserved R"); 0 where the header does not say.
    uint64_t torch_peak_allocated = 0;
    uint64_t torch_peak_reserved = 0;
};

// Ids beyond this are refused: a corrupt file must not make us allocate
// gigabytes of bookkeeping.
constexpr uint32_t kMaxIds = 1u << 24;

// Lines of a plain or gzip-compressed file (zlib reads both).
class LineReader {
public:
    explicit LineReader(const std::string &path) {
#if defined(UVM_HAVE_ZLIB)
        gz_ = gzopen(path.c_str(), "rb");
#else
        if (path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0)
            return;  // compressed, and no zlib in this build
        f_ = std::fopen(path.c_str(), "rb");
#endif
    }
    ~LineReader() {
#if defined(UVM_HAVE_ZLIB)
        if (gz_)
            gzclose(gz_);
#else
        if (f_)
            std::fclose(f_);
#endif
    }
    LineReader(const LineReader &) = delete;
    LineReader &operator=(const LineReader &) = delete;
    bool ok() const {
#if defined(UVM_HAVE_ZLIB)
        return gz_ != nullptr;
#else
        return f_ != nullptr;
#endif
    }
    // The next line without its newline; false at the end. *complete: it
    // ended with a newline (a last line without one may be cut short).
    bool next(std::string *line, bool *complete) {
        line->clear();
        char buf[4096];
        for (;;) {
#if defined(UVM_HAVE_ZLIB)
            if (!gzgets(gz_, buf, sizeof(buf)))
                break;
#else
            if (!std::fgets(buf, sizeof(buf), f_))
                break;
#endif
            *line += buf;
            if (!line->empty() && line->back() == '\n') {
                line->pop_back();
                *complete = true;
                return true;
            }
        }
        *complete = false;
        return !line->empty();
    }

private:
#if defined(UVM_HAVE_ZLIB)
    gzFile gz_ = nullptr;
#else
    FILE *f_ = nullptr;
#endif
};

// Read a trace. False where the file is missing or malformed, with
// "<path>:<line>: <what>" in *error: an unknown operation, a missing or
// extra field, a zero size, an id allocated twice or freed while not alive,
// an absurd id, a last line cut short, or fewer operations than the header
// announces (a truncated file).
inline bool read_trace(const std::string &path, Trace *out, std::string *error = nullptr) {
    auto fail = [&](size_t line_no, const std::string &what) {
        if (error)
            *error = path + ":" + std::to_string(line_no) + ": " + what;
        return false;
    };
    LineReader in(path);
    if (!in.ok())
        return fail(0, "cannot open (a missing file, or a .gz file in a build without zlib)");
    Trace t;
    const size_t slash = path.find_last_of('/');
    t.name = path.substr(slash == std::string::npos ? 0 : slash + 1);
    for (const char *ext : {".gz", ".trace"})
        if (t.name.size() > std::string(ext).size() &&
            t.name.compare(t.name.size() - std::string(ext).size(), std::string::npos, ext) == 0)
            t.name.resize(t.name.size() - std::string(ext).size());
    std::vector<uint64_t> sizes;
    std::vector<bool> alive;
    uint64_t live = 0, frees = 0;
    int64_t announced_allocs = -1, announced_frees = -1;
    std::string line;
    bool complete = true;
    size_t line_no = 0;
    while (in.next(&line, &complete)) {
        ++line_no;
        if (!complete)
            return fail(line_no, "the last line has no newline: the file is cut short");
        if (line.empty())
            continue;
        if (line[0] == '#') {
            unsigned long long a = 0, b = 0;
            if (std::sscanf(line.c_str(), "# pytorch peaks: allocated %llu reserved %llu", &a, &b) == 2) {
                t.torch_peak_allocated = a;
                t.torch_peak_reserved = b;
            } else if (std::sscanf(line.c_str(), "# %llu allocs, %llu frees", &a, &b) == 2) {
                announced_allocs = static_cast<int64_t>(a);
                announced_frees = static_cast<int64_t>(b);
            }
            continue;
        }
        std::istringstream fields(line);
        std::string kind;
        int64_t id = -1;
        Op op;
        if (!(fields >> kind >> id) || id < 0)
            return fail(line_no, "expected 'a <id> <bytes>' or 'f <id>', got '" + line + "'");
        if (id >= kMaxIds)
            return fail(line_no, "id " + std::to_string(id) + " is beyond " + std::to_string(kMaxIds));
        op.id = static_cast<uint32_t>(id);
        if (op.id >= sizes.size()) {
            sizes.resize(op.id + 1, 0);
            alive.resize(op.id + 1, false);
        }
        if (kind == "a") {
            int64_t size = -1;
            if (!(fields >> size))
                return fail(line_no, "an alloc without a size");
            if (size <= 0)
                return fail(line_no, "an alloc of " + std::to_string(size) + " bytes");
            if (sizes[op.id] != 0)
                return fail(line_no, "id " + std::to_string(id) + " allocated twice");
            op.alloc = true;
            op.size = static_cast<uint64_t>(size);
            sizes[op.id] = op.size;
            alive[op.id] = true;
            live += op.size;
            t.allocs++;
            t.peak_live_bytes = live > t.peak_live_bytes ? live : t.peak_live_bytes;
        } else if (kind == "f") {
            if (!alive[op.id])
                return fail(line_no, "free of id " + std::to_string(id) + ", which is not alive");
            alive[op.id] = false;
            live -= sizes[op.id];
            frees++;
        } else {
            return fail(line_no, "unknown operation '" + kind + "'");
        }
        std::string extra;
        if (fields >> extra)
            return fail(line_no, "unexpected '" + extra + "' after the operation");
        t.ops.push_back(op);
    }
    if (announced_allocs >= 0 &&
        (static_cast<int64_t>(t.allocs) != announced_allocs || static_cast<int64_t>(frees) != announced_frees))
        return fail(line_no, "the header announces " + std::to_string(announced_allocs) + " allocs and " +
                                 std::to_string(announced_frees) + " frees, the file has " + std::to_string(t.allocs) +
                                 " and " + std::to_string(frees) + ": truncated?");
    if (t.ops.empty())
        return fail(line_no, "no operations");
    t.ids = static_cast<uint32_t>(sizes.size());
    *out = std::move(t);
    return true;
}

// The traces shipped in bench/traces (UVM_TRACE_DIR is set by the build),
// those that are there.
inline std::vector<std::string> shipped_traces() {
    std::vector<std::string> out;
#if defined(UVM_TRACE_DIR)
    // The committed files are compressed; a build without zlib reads
    // uncompressed copies beside them where someone made them (gunzip -k).
#if defined(UVM_HAVE_ZLIB)
    const char *ext = ".trace.gz";
#else
    const char *ext = ".trace";
#endif
    for (const char *name : {"transformer", "cnn", "varlen", "gpt2", "resnet50"}) {
        const std::string path = std::string(UVM_TRACE_DIR) + "/" + name + ext;
        if (FILE *f = std::fopen(path.c_str(), "rb")) {
            std::fclose(f);
            out.push_back(path);
        }
    }
#endif
    return out;
}

// The shipped traces that read, loaded once (for the replay programs); the
// errors of those that do not go to stderr.
inline const std::vector<Trace> &shipped() {
    static const std::vector<Trace> all = [] {
        std::vector<Trace> t;
        for (const std::string &path : shipped_traces()) {
            Trace one;
            std::string error;
            if (read_trace(path, &one, &error))
                t.push_back(std::move(one));
            else
                std::fprintf(stderr, "%s\n", error.c_str());
        }
        return t;
    }();
    return all;
}

}  // namespace uvm_trace
