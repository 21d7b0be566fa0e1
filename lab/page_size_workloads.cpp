#include "lab/page_size_workloads.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace uvm::lab {

namespace {

constexpr uint64_t kLine = 64, kPage = 4096;

}  // namespace

Workload::Workload(const WorkloadParams &p, uint64_t base) : p_(p), base_(base), rng_(p.seed) {
    if (p_.footprint < kPage)
        p_.footprint = kPage;
    if (p_.processors == 0)
        p_.processors = 1;
    if (p_.pattern == Pattern::PointerChase) {
        // One cycle through every element (one per `stride` bytes, a page by
        // default) in a random order (Sattolo), so that no two steps land on
        // one element and the chase never short-cuts.
        if (p_.stride < kLine)
            p_.stride = kPage;
        const uint64_t pages = std::max<uint64_t>(p_.footprint / p_.stride, 2);
        chain_.resize(pages);
        for (uint64_t i = 0; i < pages; ++i)
            chain_[i] = static_cast<uint32_t>(i);
        for (uint64_t i = pages - 1; i > 0; --i)
            std::swap(chain_[i], chain_[rng_() % i]);
    }
}

bool Workload::next(Access *out) {
    if (issued_ >= p_.accesses)
        return false;
    uint64_t offset = 0;
    switch (p_.pattern) {
        case Pattern::Sequential:
            offset = cursor_;
            cursor_ = (cursor_ + kLine) % p_.footprint;
            break;
        case Pattern::Random:
            offset = (rng_() % p_.footprint) & ~uint64_t(7);
            break;
        case Pattern::Strided:
            offset = cursor_;
            cursor_ = (cursor_ + p_.stride) % p_.footprint;
            break;
        case Pattern::PointerChase:
            // Like the GPU experiment (bench/lab_pointer_chase.cu): element k
            // at k strides plus a line that differs from element to element.
            cursor_ = chain_[cursor_];
            offset = (cursor_ * p_.stride + (cursor_ * 2 * kLine) % p_.stride) % p_.footprint;
            break;
        case Pattern::GraphWalk: {
            // Mostly to a neighbour (within 64 KiB, as vertices of a
            // partitioned graph sit near their edges), sometimes anywhere.
            const uint64_t lines = p_.footprint / kLine;
            if (rng_() % 4 != 0) {
                const int64_t hop = static_cast<int64_t>(rng_() % 2048) - 1024;
                cursor_ = static_cast<uint64_t>((static_cast<int64_t>(cursor_) + hop + static_cast<int64_t>(lines)) %
                                                static_cast<int64_t>(lines));
            } else {
                cursor_ = rng_() % lines;
            }
            offset = cursor_ * kLine;
            break;
        }
        case Pattern::GrowingSet: {
            // The working set grows from a sixteenth of the footprint to all of it.
            const uint64_t low = p_.footprint / 16;
            const uint64_t set = low + (p_.footprint - low) * issued_ / p_.accesses;
            offset = (rng_() % std::max<uint64_t>(set, kLine)) & ~uint64_t(7);
            break;
        }
    }
    out->address = base_ + offset;
    out->size = p_.access_size;
    out->write = false;
    out->processor = static_cast<uint32_t>(issued_ % p_.processors);
    issued_++;
    return true;
}

bool TraceReader::open(const std::string &path) {
    f_ = std::fopen(path.c_str(), "r");
    if (!f_)
        error_ = "cannot open " + path + ": " + std::strerror(errno);
    return f_ != nullptr;
}

TraceReader::~TraceReader() {
    if (f_)
        std::fclose(f_);
}

namespace {

// The next whitespace-separated token of *p as a number (decimal or 0x hex).
bool number(const char **p, uint64_t *out) {
    while (**p == ' ' || **p == '\t')
        ++*p;
    if (!std::isdigit(static_cast<unsigned char>(**p)))
        return false;
    char *end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(*p, &end, 0);
    if (errno != 0 || end == *p || (*end && !std::isspace(static_cast<unsigned char>(*end))))
        return false;
    *out = v;
    *p = end;
    return true;
}

TraceReader::Event event(TraceReader::Kind kind) {
    TraceReader::Event e;
    e.kind = kind;
    return e;
}

bool at_end(const char *p) {
    while (*p && std::isspace(static_cast<unsigned char>(*p)))
        ++p;
    return *p == 0 || *p == '#';
}

}  // namespace

TraceReader::Event TraceReader::parse(const char *text, std::string *why) {
    Event e;
    const char *p = text;
    while (*p == ' ' || *p == '\t')
        ++p;
    if (at_end(p)) {
        e.kind = Kind::End;  // nothing on the line
        return e;
    }
    e.kind = Kind::Error;
    auto word = [&](const char *w) {
        const size_t n = std::strlen(w);
        if (std::strncmp(p, w, n) == 0 && (p[n] == ' ' || p[n] == '\t')) {
            p += n;
            return true;
        }
        return false;
    };
    if (word("alloc")) {
        if (!number(&p, &e.base) || !number(&p, &e.size) || !at_end(p)) {
            *why = "alloc wants a base and a size";
            return e;
        }
        if (e.size == 0) {
            *why = "alloc of 0 bytes";
            return e;
        }
        e.kind = Kind::Alloc;
    } else if (word("free")) {
        if (!number(&p, &e.base) || !at_end(p)) {
            *why = "free wants a base";
            return e;
        }
        e.kind = Kind::Free;
    } else if (const bool read = word("r"); read || word("w")) {
        e.access.write = !read;
        uint64_t v = 0;
        if (!number(&p, &e.access.address)) {
            *why = "an access wants an address";
            return e;
        }
        if (!at_end(p)) {
            if (!number(&p, &v) || v == 0 || v > (1u << 30)) {
                *why = "an access size must be 1 to 2^30 bytes";
                return e;
            }
            e.access.size = static_cast<uint32_t>(v);
        } else {
            e.access.size = 8;
        }
        if (!at_end(p)) {
            if (!number(&p, &v) || v > UINT32_MAX) {
                *why = "a processor must be a number";
                return e;
            }
            e.access.processor = static_cast<uint32_t>(v);
        }
        if (!at_end(p)) {
            *why = "more on the line than an access has";
            return e;
        }
        e.kind = Kind::Access;
    } else {
        *why = "not alloc, free, r or w";
    }
    return e;
}

TraceReader::Event TraceReader::next() {
    char buf[512];
    while (f_ && std::fgets(buf, sizeof(buf), f_)) {
        line_++;
        if (!std::strchr(buf, '\n') && !std::feof(f_)) {
            error_ = "line " + std::to_string(line_) + ": longer than 511 characters";
            return event(Kind::Error);
        }
        std::string why;
        Event e = parse(buf, &why);
        if (e.kind == Kind::Error) {
            error_ = "line " + std::to_string(line_) + ": " + why;
            return e;
        }
        if (e.kind != Kind::End)
            return e;
    }
    if (f_ && std::ferror(f_)) {
        error_ = "read error after line " + std::to_string(line_);
        return event(Kind::Error);
    }
    return event(Kind::End);
}

bool replay(TraceReader &reader, Simulator &sim, std::string *error) {
    for (;;) {
        const TraceReader::Event e = reader.next();
        uvm_status_t s = UVM_OK;
        switch (e.kind) {
            case TraceReader::Kind::End: return true;
            case TraceReader::Kind::Error: *error = reader.error(); return false;
            case TraceReader::Kind::Alloc: s = sim.allocate(e.base, e.size); break;
            case TraceReader::Kind::Free: s = sim.free(e.base); break;
            case TraceReader::Kind::Access: sim.access(e.access); break;
        }
        if (s != UVM_OK) {
            *error = "line " + std::to_string(reader.line()) + ": the simulator refused it: " +
                     uvm_status_string(s);
            return false;
        }
    }
}

}  // namespace uvm::lab
