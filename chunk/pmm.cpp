// Buddy-style physical memory manager: see pmm.h.
#include "chunk/pmm.h"

#include <algorithm>
#include <set>

#include "common/assert.h"
#include "common/sizes.h"

namespace uvm::chunk {

namespace {
constexpr uint32_t k64KPerRoot = 32;
constexpr uint32_t k4KPer64K = 16;
constexpr uint32_t kAll64KFree = 0xFFFFFFFFu;
constexpr uint16_t kAll4KFree = 0xFFFFu;

bool is_allocated_state(ChunkState s) {
    return s == ChunkState::Pinned || s == ChunkState::Evictable;
}
}  // namespace

// The list link comes first in both structs, so a ListNode* is the struct's address.
struct Pmm::Chunk64K {
    ListNode link;
    RootChunk *root;
    uint16_t free_4k;       // bit j: 4K child j free (while split)
    uint16_t evictable_4k;  // bit j: 4K child j allocated as evictable (while split)
    uint8_t index;          // in the root
    ChunkState state;
};

struct Pmm::RootChunk {
    ListNode link;
    uint64_t phys;
    ChunkState state;
    uint32_t free_64k;  // bit i: 64K child i is Free (while split)
    Chunk64K children[k64KPerRoot];
};

void Pmm::list_init(ListNode *head) { head->prev = head->next = head; }
bool Pmm::list_empty(const ListNode *head) { return head->next == head; }
void Pmm::list_push(ListNode *head, ListNode *node) {
    node->next = head->next;
    node->prev = head;
    head->next->prev = node;
    head->next = node;
}
void Pmm::list_remove(ListNode *node) {
    node->prev->next = node->next;
    node->next->prev = node->prev;
    node->prev = node->next = node;
}

Pmm::Pmm(RootChunkSource *source, uint64_t phys_limit)
    : source_(source), roots_(phys_limit / kRootChunkSize, nullptr) {
    UVM_ASSERT(source);
    list_init(&free_roots_);
    list_init(&roots_with_free_64k_);
    list_init(&chunks_with_free_4k_);
}

Pmm::~Pmm() {
    for (RootChunk *&root : roots_) {
        if (!root)
            continue;
        source_->free_root_chunk(root->phys);
        delete root;
        root = nullptr;
    }
}

Pmm::RootChunk *Pmm::root_of(uint64_t phys) const {
    const uint64_t index = phys / kRootChunkSize;
    return index < roots_.size() ? roots_[index] : nullptr;
}

void Pmm::account(int size_index, ChunkState from, ChunkState to) {
    const uint64_t size = chunk_size_of_index(size_index);
    if (from != ChunkState::IsSplit) {
        UVM_ASSERT(bytes_[static_cast<int>(from)][size_index] >= size);
        bytes_[static_cast<int>(from)][size_index] -= size;
    }
    if (to != ChunkState::IsSplit)
        bytes_[static_cast<int>(to)][size_index] += size;
}

uvm_status_t Pmm::take_root(RootChunk **out) {
    if (!list_empty(&free_roots_)) {
        RootChunk *root = reinterpret_cast<RootChunk *>(free_roots_.next);
        list_remove(&root->link);
        UVM_ASSERT(root->state == ChunkState::Free);
        *out = root;
        return UVM_OK;
    }
    uint64_t phys = 0;
    const uvm_status_t status = source_->alloc_root_chunk(&phys);
    if (status != UVM_OK)
        return status;
    UVM_ASSERT(is_aligned(phys, kRootChunkSize));
    UVM_ASSERT(phys / kRootChunkSize < roots_.size() && !roots_[phys / kRootChunkSize]);
    RootChunk *root = new RootChunk();
    root->phys = phys;
    root->state = ChunkState::Free;
    list_init(&root->link);
    for (uint32_t i = 0; i < k64KPerRoot; ++i) {
        root->children[i].root = root;
        root->children[i].index = static_cast<uint8_t>(i);
        list_init(&root->children[i].link);
    }
    roots_[phys / kRootChunkSize] = root;
    root_count_++;
    bytes_[static_cast<int>(ChunkState::Free)][2] += kRootChunkSize;
    grown_in_call_.push_back(phys);
    *out = root;
    return UVM_OK;
}

// A split 64K chunk with at least one free 4K child, splitting a free 64K chunk
// (and a root before it) where none exists.
uvm_status_t Pmm::take_64k(Chunk64K **out) {
    if (!list_empty(&chunks_with_free_4k_)) {
        *out = reinterpret_cast<Chunk64K *>(chunks_with_free_4k_.next);
        return UVM_OK;
    }
    uint64_t phys = 0;
    const uvm_status_t status = alloc_one(1, false, &phys);
    if (status != UVM_OK)
        return status;
    RootChunk *root = root_of(phys);
    Chunk64K *chunk = &root->children[(phys - root->phys) / kPageSize64K];
    account(1, chunk->state, ChunkState::IsSplit);
    chunk->state = ChunkState::IsSplit;
    chunk->free_4k = kAll4KFree;
    chunk->evictable_4k = 0;
    bytes_[static_cast<int>(ChunkState::Free)][0] += kPageSize64K;
    split_[1]++;
    list_push(&chunks_with_free_4k_, &chunk->link);
    *out = chunk;
    return UVM_OK;
}

uvm_status_t Pmm::alloc_one(int size_index, bool evictable, uint64_t *out) {
    const ChunkState to = evictable ? ChunkState::Evictable : ChunkState::Pinned;
    if (size_index == 2) {
        RootChunk *root = nullptr;
        const uvm_status_t status = take_root(&root);
        if (status != UVM_OK)
            return status;
        account(2, ChunkState::Free, to);
        root->state = to;
        *out = root->phys;
        return UVM_OK;
    }
    if (size_index == 1) {
        RootChunk *root;
        if (!list_empty(&roots_with_free_64k_)) {
            root = reinterpret_cast<RootChunk *>(roots_with_free_64k_.next);
        } else {
            const uvm_status_t status = take_root(&root);
            if (status != UVM_OK)
                return status;
            account(2, ChunkState::Free, ChunkState::IsSplit);
            root->state = ChunkState::IsSplit;
            root->free_64k = kAll64KFree;
            for (Chunk64K &child : root->children)
                child.state = ChunkState::Free;
            bytes_[static_cast<int>(ChunkState::Free)][1] += kRootChunkSize;
            split_[2]++;
            list_push(&roots_with_free_64k_, &root->link);
        }
        const uint32_t index = static_cast<uint32_t>(__builtin_ctz(root->free_64k));
        root->free_64k &= ~(1u << index);
        if (root->free_64k == 0)
            list_remove(&root->link);
        Chunk64K *chunk = &root->children[index];
        UVM_ASSERT(chunk->state == ChunkState::Free);
        account(1, ChunkState::Free, to);
        chunk->state = to;
        *out = root->phys + index * kPageSize64K;
        return UVM_OK;
    }
    Chunk64K *chunk = nullptr;
    const uvm_status_t status = take_64k(&chunk);
    if (status != UVM_OK)
        return status;
    const uint32_t index = static_cast<uint32_t>(__builtin_ctz(chunk->free_4k));
    chunk->free_4k = static_cast<uint16_t>(chunk->free_4k & ~(1u << index));
    if (evictable)
        chunk->evictable_4k = static_cast<uint16_t>(chunk->evictable_4k | (1u << index));
    if (chunk->free_4k == 0)
        list_remove(&chunk->link);
    account(0, ChunkState::Free, to);
    *out = chunk->root->phys + chunk->index * kPageSize64K + index * kPageSize4K;
    return UVM_OK;
}

void Pmm::release_whole_roots(const std::vector<uint64_t> &roots) {
    for (uint64_t phys : roots) {
        RootChunk *root = root_of(phys);
        UVM_ASSERT(root && root->state == ChunkState::Free);
        list_remove(&root->link);
        bytes_[static_cast<int>(ChunkState::Free)][2] -= kRootChunkSize;
        roots_[phys / kRootChunkSize] = nullptr;
        root_count_--;
        delete root;
        source_->free_root_chunk(phys);
    }
}

uvm_status_t Pmm::alloc(uint64_t size, size_t count, bool evictable, uint64_t *out,
                        std::vector<uint64_t> *grown) {
    const int size_index = chunk_size_index(size);
    if (size_index < 0 || count == 0 || !out)
        return UVM_ERR_INVALID_ARGUMENT;
    std::lock_guard<std::mutex> guard(lock_);
    grown_in_call_.clear();
    for (size_t i = 0; i < count; ++i) {
        const uvm_status_t status = alloc_one(size_index, evictable, &out[i]);
        if (status == UVM_OK)
            continue;
        // Roll back: free what this call took, then give back the roots it grew,
        // which the frees have merged whole again.
        for (size_t j = 0; j < i; ++j)
            free_one(size_index, out[j]);
        release_whole_roots(grown_in_call_);
        grown_in_call_.clear();
        return status;
    }
    if (grown)
        *grown = grown_in_call_;
    return UVM_OK;
}

void Pmm::undo_alloc(uint64_t size, const uint64_t *phys, size_t count,
                     const std::vector<uint64_t> &grown) {
    const int size_index = chunk_size_index(size);
    UVM_ASSERT(size_index >= 0);
    std::lock_guard<std::mutex> guard(lock_);
    for (size_t i = 0; i < count; ++i) {
        UVM_ASSERT(is_allocated(size, phys[i]));
        free_one(size_index, phys[i]);
    }
    // Another thread may have taken chunks of a grown root meanwhile: keep those.
    std::vector<uint64_t> whole;
    for (uint64_t root : grown)
        if (root_of(root) && root_of(root)->state == ChunkState::Free)
            whole.push_back(root);
    release_whole_roots(whole);
}

bool Pmm::is_allocated(uint64_t size, uint64_t phys) const {
    if (!is_aligned(phys, size))
        return false;
    const RootChunk *root = root_of(phys);
    if (!root)
        return false;
    if (size == kRootChunkSize)
        return is_allocated_state(root->state);
    if (root->state != ChunkState::IsSplit)
        return false;
    const uint64_t offset = phys - root->phys;
    const Chunk64K &chunk = root->children[offset / kPageSize64K];
    if (size == kPageSize64K)
        return is_allocated_state(chunk.state);
    if (chunk.state != ChunkState::IsSplit)
        return false;
    const uint32_t index = static_cast<uint32_t>((offset % kPageSize64K) / kPageSize4K);
    return (chunk.free_4k & (1u << index)) == 0;
}

void Pmm::free_64k_child(RootChunk *root, uint32_t index) {
    Chunk64K *chunk = &root->children[index];
    chunk->state = ChunkState::Free;
    if (root->free_64k == 0)
        list_push(&roots_with_free_64k_, &root->link);
    root->free_64k |= 1u << index;
    if (root->free_64k != kAll64KFree)
        return;
    // The last 64K child came back: merge into a whole free root chunk.
    list_remove(&root->link);
    bytes_[static_cast<int>(ChunkState::Free)][1] -= kRootChunkSize;
    split_[2]--;
    root->state = ChunkState::Free;
    bytes_[static_cast<int>(ChunkState::Free)][2] += kRootChunkSize;
    list_push(&free_roots_, &root->link);
}

void Pmm::free_one(int size_index, uint64_t phys) {
    RootChunk *root = root_of(phys);
    UVM_ASSERT(root);
    if (size_index == 2) {
        account(2, root->state, ChunkState::Free);
        root->state = ChunkState::Free;
        list_push(&free_roots_, &root->link);
        return;
    }
    const uint64_t offset = phys - root->phys;
    const uint32_t index64 = static_cast<uint32_t>(offset / kPageSize64K);
    Chunk64K *chunk = &root->children[index64];
    if (size_index == 1) {
        account(1, chunk->state, ChunkState::Free);
        free_64k_child(root, index64);
        return;
    }
    const uint32_t index4 = static_cast<uint32_t>((offset % kPageSize64K) / kPageSize4K);
    const uint16_t bit = static_cast<uint16_t>(1u << index4);
    account(0, (chunk->evictable_4k & bit) ? ChunkState::Evictable : ChunkState::Pinned,
            ChunkState::Free);
    chunk->evictable_4k = static_cast<uint16_t>(chunk->evictable_4k & ~bit);
    if (chunk->free_4k == 0)
        list_push(&chunks_with_free_4k_, &chunk->link);
    chunk->free_4k = static_cast<uint16_t>(chunk->free_4k | bit);
    if (chunk->free_4k != kAll4KFree)
        return;
    // The last 4K child came back: merge into a free 64K chunk.
    list_remove(&chunk->link);
    bytes_[static_cast<int>(ChunkState::Free)][0] -= kPageSize64K;
    split_[1]--;
    bytes_[static_cast<int>(ChunkState::Free)][1] += kPageSize64K;
    free_64k_child(root, index64);
}

uvm_status_t Pmm::free(uint64_t size, const uint64_t *phys, size_t count) {
    const int size_index = chunk_size_index(size);
    if (size_index < 0 || (count && !phys))
        return UVM_ERR_INVALID_ARGUMENT;
    std::lock_guard<std::mutex> guard(lock_);
    for (size_t i = 0; i < count; ++i)
        if (!is_allocated(size, phys[i]))
            return UVM_ERR_INVALID_ARGUMENT;
#if UVM_ASSERTS_ENABLED
    if (count > 1) {
        std::vector<uint64_t> sorted(phys, phys + count);
        std::sort(sorted.begin(), sorted.end());
        UVM_ASSERT(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
    }
#endif
    for (size_t i = 0; i < count; ++i)
        free_one(size_index, phys[i]);
    return UVM_OK;
}

uint64_t Pmm::trim() {
    std::lock_guard<std::mutex> guard(lock_);
    uint64_t released = 0;
    while (!list_empty(&free_roots_)) {
        RootChunk *root = reinterpret_cast<RootChunk *>(free_roots_.next);
        list_remove(&root->link);
        bytes_[static_cast<int>(ChunkState::Free)][2] -= kRootChunkSize;
        roots_[root->phys / kRootChunkSize] = nullptr;
        root_count_--;
        source_->free_root_chunk(root->phys);
        delete root;
        released += kRootChunkSize;
    }
    return released;
}

ChunkState Pmm::state(uint64_t phys, uint64_t size) const {
    std::lock_guard<std::mutex> guard(lock_);
    const RootChunk *root = root_of(phys);
    if (!root || chunk_size_index(size) < 0)
        return ChunkState::Free;
    if (size == kRootChunkSize)
        return root->state;
    if (root->state != ChunkState::IsSplit)
        return ChunkState::Free;
    const uint64_t offset = phys - root->phys;
    const Chunk64K &chunk = root->children[offset / kPageSize64K];
    if (size == kPageSize64K || chunk.state != ChunkState::IsSplit)
        return size == kPageSize64K ? chunk.state : ChunkState::Free;
    const uint16_t bit = static_cast<uint16_t>(1u << ((offset % kPageSize64K) / kPageSize4K));
    if (chunk.free_4k & bit)
        return ChunkState::Free;
    return (chunk.evictable_4k & bit) ? ChunkState::Evictable : ChunkState::Pinned;
}

PmmStats Pmm::stats() const {
    std::lock_guard<std::mutex> guard(lock_);
    PmmStats s;
    s.root_chunks = root_count_;
    for (int i = 0; i < 3; ++i) {
        s.bytes_free[i] = bytes_[static_cast<int>(ChunkState::Free)][i];
        s.bytes_pinned[i] = bytes_[static_cast<int>(ChunkState::Pinned)][i];
        s.bytes_evictable[i] = bytes_[static_cast<int>(ChunkState::Evictable)][i];
        s.chunks_split[i] = split_[i];
    }
    // Longest run of free memory in physical order, across adjacent held roots.
    uint64_t run = 0;
    auto extend = [&](bool free, uint64_t bytes) {
        run = free ? run + bytes : 0;
        s.largest_free_block = std::max(s.largest_free_block, run);
    };
    for (const RootChunk *root : roots_) {
        if (!root) {
            run = 0;
            continue;
        }
        if (root->state != ChunkState::IsSplit) {
            extend(root->state == ChunkState::Free, kRootChunkSize);
            continue;
        }
        for (const Chunk64K &chunk : root->children) {
            if (chunk.state != ChunkState::IsSplit) {
                extend(chunk.state == ChunkState::Free, kPageSize64K);
                continue;
            }
            for (uint32_t j = 0; j < k4KPer64K; ++j)
                extend((chunk.free_4k >> j) & 1u, kPageSize4K);
        }
    }
    return s;
}

bool Pmm::check_invariants() const {
    std::lock_guard<std::mutex> guard(lock_);
    auto collect = [](const ListNode *head) {
        std::set<const void *> members;
        for (const ListNode *n = head->next; n != head; n = n->next)
            if (!members.insert(n).second)
                return std::set<const void *>{nullptr};  // a cycle: poison the set
        return members;
    };
    const auto free_roots = collect(&free_roots_);
    const auto partial_roots = collect(&roots_with_free_64k_);
    const auto partial_64k = collect(&chunks_with_free_4k_);
    uint64_t bytes[4][3] = {};
    uint64_t split[3] = {};
    uint64_t roots = 0;
    size_t in_free_roots = 0, in_partial_roots = 0, in_partial_64k = 0;
    for (size_t idx = 0; idx < roots_.size(); ++idx) {
        const RootChunk *root = roots_[idx];
        if (!root)
            continue;
        roots++;
        if (root->phys != idx * kRootChunkSize)
            return false;
        if (root->state != ChunkState::IsSplit) {
            bytes[static_cast<int>(root->state)][2] += kRootChunkSize;
            const bool listed = free_roots.count(root);
            if (listed != (root->state == ChunkState::Free))
                return false;
            in_free_roots += listed;
            continue;
        }
        split[2]++;
        uint32_t free_mask = 0;
        for (uint32_t i = 0; i < k64KPerRoot; ++i) {
            const Chunk64K &chunk = root->children[i];
            if (chunk.root != root || chunk.index != i)
                return false;
            if (chunk.state == ChunkState::Free)
                free_mask |= 1u << i;
            if (chunk.state != ChunkState::IsSplit) {
                bytes[static_cast<int>(chunk.state)][1] += kPageSize64K;
                continue;
            }
            split[1]++;
            if (chunk.free_4k == kAll4KFree)  // should have merged
                return false;
            if (chunk.evictable_4k & chunk.free_4k)
                return false;
            for (uint32_t j = 0; j < k4KPer64K; ++j) {
                const uint16_t bit = static_cast<uint16_t>(1u << j);
                const ChunkState s = (chunk.free_4k & bit)        ? ChunkState::Free
                                     : (chunk.evictable_4k & bit) ? ChunkState::Evictable
                                                                  : ChunkState::Pinned;
                bytes[static_cast<int>(s)][0] += kPageSize4K;
            }
            const bool listed = partial_64k.count(&chunk);
            if (listed != (chunk.free_4k != 0))
                return false;
            in_partial_64k += listed;
        }
        if (free_mask != root->free_64k || free_mask == kAll64KFree)
            return false;
        const bool listed = partial_roots.count(root);
        if (listed != (free_mask != 0))
            return false;
        in_partial_roots += listed;
    }
    if (in_free_roots != free_roots.size() || in_partial_roots != partial_roots.size() ||
        in_partial_64k != partial_64k.size() || roots != root_count_)
        return false;
    for (int s = 0; s < 4; ++s)
        for (int i = 0; i < 3; ++i)
            if (s != static_cast<int>(ChunkState::IsSplit) && bytes[s][i] != bytes_[s][i])
                return false;
    return split[1] == split_[1] && split[2] == split_[2];
}

}  // namespace uvm::chunk
