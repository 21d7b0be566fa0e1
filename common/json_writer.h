// A small JSON writer (objects, arrays, numbers, escaped strings) and byte
// counts for people: the reports, the snapshot and the trace export are
// built with them, so the library needs no JSON package.
#pragma once

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace uvm {

// A small JSON writer: objects and arrays, numbers and escaped strings.
class Json {
public:
    Json &open(const char *key, char bracket) {
        comma();
        if (key)
            name(key);
        out_ += bracket;
        first_.push_back(true);
        return *this;
    }
    Json &close(char bracket) {
        out_ += bracket;
        first_.pop_back();
        return *this;
    }
    Json &num(const char *key, uint64_t v) {
        comma();
        if (key)
            name(key);
        out_ += std::to_string(v);
        return *this;
    }
    Json &str(const char *key, const std::string &v) {
        comma();
        if (key)
            name(key);
        quote(v);
        return *this;
    }
    Json &boolean(const char *key, bool v) {
        comma();
        name(key);
        out_ += v ? "true" : "false";
        return *this;
    }
    // A number with a fraction (a time in microseconds, say).
    Json &real(const char *key, double v) {
        comma();
        if (key)
            name(key);
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%.3f", v);
        out_ += buf;
        return *this;
    }
    std::string take() { return std::move(out_); }
    std::string &text() { return out_; }

private:
    void comma() {
        if (!first_.empty()) {
            if (!first_.back())
                out_ += ',';
            first_.back() = false;
        }
    }
    void name(const char *key) {
        quote(key);
        out_ += ':';
    }
    void quote(const std::string &v) {
        out_ += '"';
        for (unsigned char c : v) {
            if (c == '"' || c == '\\') {
                out_ += '\\';
                out_ += static_cast<char>(c);
            } else if (c < 0x20) {
                char esc[8];
                std::snprintf(esc, sizeof(esc), "\\u%04x", c);
                out_ += esc;
            } else {
                out_ += static_cast<char>(c);
            }
        }
        out_ += '"';
    }
    std::string out_;
    std::vector<bool> first_;
};


inline std::string size_text(uint64_t bytes) {
    char buf[32];
    if (bytes >= (1ull << 30))
        std::snprintf(buf, sizeof(buf), "%.2f GiB", static_cast<double>(bytes) / (1ull << 30));
    else if (bytes >= (1ull << 20))
        std::snprintf(buf, sizeof(buf), "%.2f MiB", static_cast<double>(bytes) / (1ull << 20));
    else if (bytes >= 1024)
        std::snprintf(buf, sizeof(buf), "%.1f KiB", static_cast<double>(bytes) / 1024);
    else
        std::snprintf(buf, sizeof(buf), "%" PRIu64 " B", bytes);
    return buf;
}

}  // namespace uvm
