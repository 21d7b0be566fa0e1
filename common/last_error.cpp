// The calling thread's message for its last failed call (last_error.h).
#include "common/last_error.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace uvm {

void note_failure(uvm_status_t status) {
    LastError &e = t_last_error;
    e.message = e.said && e.said_for == status ? e.said : uvm_status_string(status);
    e.said = nullptr;
}

uvm_status_t fail(uvm_status_t status, const char *format, ...) {
    LastError &e = t_last_error;
    // Formatted aside first: an argument may be the last message itself.
    char text[sizeof(e.text)];
    va_list args;
    va_start(args, format);
    std::vsnprintf(text, sizeof(text), format, args);
    va_end(args);
    std::memcpy(e.text, text, sizeof(text));
    e.said = e.text;
    e.said_for = status;
    return status;
}

uvm_status_t fail_within(uvm_status_t status, const char *context) {
    const LastError &e = t_last_error;
    const char *why = e.said && e.said_for == status ? e.said : uvm_status_string(status);
    return fail(status, "%s: %s", context, why);
}

ByteText byte_text(uint64_t bytes) {
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    ByteText t;
    int unit = -1;
    for (int u = 0; u < 6 && bytes >= (1ull << (10 * (u + 1))) && bytes % (1ull << (10 * (u + 1))) == 0; ++u)
        unit = u;
    if (unit < 0)
        std::snprintf(t.text, sizeof(t.text), "%llu bytes", static_cast<unsigned long long>(bytes));
    else
        std::snprintf(t.text, sizeof(t.text), "%llu %s", static_cast<unsigned long long>(bytes >> (10 * (unit + 1))),
                      units[unit]);
    return t;
}

}  // namespace uvm

extern "C" const char *uvm_last_error_message(void) {
    const char *message = uvm::t_last_error.message;
    return message ? message : uvm_status_string(UVM_OK);
}
