// A table of shared objects named by opaque handles (streams, clients): a
// handle carries the manager's id and an object id, so a handle of another
// manager or of a removed object is refused, never dereferenced. A thread's
// last lookup is cached until an object leaves the table (an epoch that no two
// tables share), sparing the calls that name the same object again and again
// the table's lock.
//
// Thread safety: every method may be called concurrently.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace uvm {

inline std::atomic<uint64_t> &handle_table_epochs() {
    static std::atomic<uint64_t> next{1};
    return next;
}

template <typename T>
class HandleTable {
public:
    explicit HandleTable(uint16_t manager_id)
        : manager_id_(manager_id), epoch_(handle_table_epochs().fetch_add(1)) {}

    // Add `item` under a new id (*id); returns its handle value (never 0).
    uint64_t insert(std::shared_ptr<T> item, uint64_t *id) {
        std::lock_guard<std::mutex> guard(lock_);
        *id = next_id_++;
        table_.emplace(*id, std::move(item));
        return handle_of(*id);
    }
    uint64_t handle_of(uint64_t id) const { return (static_cast<uint64_t>(manager_id_) << (kIdBits + 1)) | (id << 1) | 1; }

    // The object a handle value names, or an empty pointer. The reference is
    // valid until this thread's next lookup in a table of the same type.
    const std::shared_ptr<T> &lookup(uint64_t value) {
        static const std::shared_ptr<T> none;
        if (!(value & 1) || (value >> (kIdBits + 1)) != manager_id_)
            return none;
        thread_local Cache cache;
        const uint64_t epoch = epoch_.load(std::memory_order_acquire);
        if (cache.owner == this && cache.handle == value && cache.epoch == epoch)
            return cache.item;
        std::lock_guard<std::mutex> guard(lock_);
        auto it = table_.find((value >> 1) & ((1ull << kIdBits) - 1));
        if (it == table_.end())
            return none;
        cache = {this, value, epoch, it->second};
        return cache.item;
    }

    void erase(uint64_t id) {
        std::lock_guard<std::mutex> guard(lock_);
        table_.erase(id);
        epoch_.store(handle_table_epochs().fetch_add(1), std::memory_order_release);
    }
    void clear() {
        std::lock_guard<std::mutex> guard(lock_);
        table_.clear();
        epoch_.store(handle_table_epochs().fetch_add(1), std::memory_order_release);
    }
    // Every object, oldest first.
    std::vector<std::shared_ptr<T>> all() {
        std::vector<std::pair<uint64_t, std::shared_ptr<T>>> entries;
        {
            std::lock_guard<std::mutex> guard(lock_);
            entries.assign(table_.begin(), table_.end());
        }
        std::sort(entries.begin(), entries.end(), [](const auto &a, const auto &b) { return a.first < b.first; });
        std::vector<std::shared_ptr<T>> out;
        for (auto &e : entries)
            out.push_back(std::move(e.second));
        return out;
    }
    size_t size() {
        std::lock_guard<std::mutex> guard(lock_);
        return table_.size();
    }

private:
    static constexpr uint64_t kIdBits = 47;  // handle: manager id (16) | id (47) | 1
    struct Cache {
        const void *owner = nullptr;
        uint64_t handle = 0;
        uint64_t epoch = 0;
        std::shared_ptr<T> item;
    };
    uint16_t manager_id_;
    std::atomic<uint64_t> epoch_;
    std::mutex lock_;
    std::unordered_map<uint64_t, std::shared_ptr<T>> table_;
    uint64_t next_id_ = 1;
};

}  // namespace uvm
