// Why the calling thread's last call into the library failed
// (uvm_last_error_message, uvm.h), as sqlite3_errmsg and dlerror say it.
// Each C function starts with begin_call and ends with end_call (api/entry.h
// does both); where a failure is decided, `fail` says why, naming the
// argument, limit or environment variable at fault. A successful call costs
// two stores to a thread-local; formatting happens only on failure.
#pragma once

#include <cstdint>

#include "uvm/uvm.h"

namespace uvm {

struct LastError {
    const char *message;  // null after a success; else static text or `text`
    uvm_status_t status;  // the status `message` was written for
    char text[512];       // where `fail` formats
};
// Trivially constructible and destructible: read without a TLS guard.
extern thread_local LastError t_last_error;

// A call starts: forget the last one's message.
inline void begin_call() { t_last_error.message = nullptr; }

// A failed call's end (out of line): a message said for another status
// than the one returned (a lower layer's, which a higher one turned into
// another status) gives way to the returned status's own text.
void note_failure(uvm_status_t status);

// A call ends with `status`: a success says nothing.
inline uvm_status_t end_call(uvm_status_t status) {
    if (__builtin_expect(status == UVM_OK, 1))
        t_last_error.message = nullptr;
    else
        note_failure(status);
    return status;
}

// Say why the call fails with `status` (printf format), and return `status`.
[[gnu::cold]] uvm_status_t fail(uvm_status_t status, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

// The same, where the failure (said, or else the status's text) happened
// within `context`: "<context>: <why>".
[[gnu::cold]] uvm_status_t fail_within(uvm_status_t status, const char *context);

// A byte count as people read it: "64 MiB", "1 TiB", else "12345 bytes".
struct ByteText {
    char text[48];
};
ByteText byte_text(uint64_t bytes);

}  // namespace uvm
