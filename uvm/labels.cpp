// Interned labels (labels.h).
#include "uvm/labels.h"

#include <cstring>
#include <utility>

namespace uvm {

const char *Labels::intern(const char *text) {
    if (!text || !text[0])
        return nullptr;
    std::string key(text, strnlen(text, kMaxLength));
    std::lock_guard<std::mutex> guard(lock_);
    auto found = set_.find(key);
    if (found != set_.end())
        return found->c_str();
    if (set_.size() >= kMaxLabels)
        key = "(other)";
    // Nodes of an unordered_set never move: the pointer lives as long as the set.
    return set_.insert(std::move(key)).first->c_str();
}

}  // namespace uvm
