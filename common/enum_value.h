// Enum fields of the C API come from C callers, who may store any integer in
// them; reading such a value as the C++ enum type is undefined. Read the raw
// integer instead, and check it before converting.
#pragma once

#include <cstring>

namespace uvm {

template <typename E>
int enum_value(const E &field) {
    static_assert(sizeof(E) == sizeof(int), "C enums are int-sized here");
    int raw;
    std::memcpy(&raw, &field, sizeof(raw));
    return raw;
}

}  // namespace uvm
