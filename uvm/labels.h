// Interned labels: object tags and client names (uvm/labels.cpp).
#pragma once

#include <cstddef>
#include <mutex>
#include <string>
#include <unordered_set>

namespace uvm {

// Interned strings (object tags, client names) that live as long as the
// manager, so that a record can name them by pointer after the object or
// client is gone. At most kMaxLabels distinct ones; beyond that every new
// one reads "(other)".
class Labels {
public:
    static constexpr size_t kMaxLabels = 4096;
    static constexpr size_t kMaxLength = 63;
    // NULL for NULL or "". Throws std::bad_alloc.
    const char *intern(const char *text);

private:
    std::mutex lock_;
    std::unordered_set<std::string> set_;
};

}  // namespace uvm
