// Why the calling thread's last call into the library failed
// (uvm_last_error_message, uvm.h), as sqlite3_errmsg and dlerror say it.
// Where a failure is decided, `fail` says why, naming the argument, limit or
// environment variable at fault; each C function ends with end_call (api/
// entry.h's enter and api_call), which makes that the thread's message, or
// the status's own text where nothing was said. A successful call costs one
// thread-local access and two stores; formatting happens only on failure.
#pragma once

#include <cstdint>

#include "uvm/uvm.h"

namespace uvm {

struct LastError {
    const char *message;     // as the last call ended: null after a success
    const char *said;        // what `fail` said in the call in flight, or null
    uvm_status_t said_for;   // the status `said` explains
    char text[512];          // where `fail` formats
};
// Defined here, trivially: no TLS guard on the access.
inline thread_local LastError t_last_error;

// A failed call's end (out of line): what was said, where it explains the
// status returned (a lower layer's words, for a status a higher one kept),
// else the status's own text.
void note_failure(uvm_status_t status);

// A call ends with `status`: a success says nothing, and what a step that
// was recovered from said is forgotten.
inline uvm_status_t end_call(uvm_status_t status) {
    if (__builtin_expect(status == UVM_OK, 1)) {
        LastError &e = t_last_error;
        e.message = nullptr;
        e.said = nullptr;
    } else {
        note_failure(status);
    }
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
