// Buddy-style physical memory manager: see pmm.h.
#include "chunk/pmm.h"

#include <algorithm>
#include <map>
#include <memory>
#include <unordered_map>

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
    ListNode link;          // in split_64k_ while split with a free 4K child
    RootChunk *root;
    uint16_t free_4k;       // bit j: 4K child j free (while split)
    uint16_t evictable_4k;  // bit j: 4K child j allocated as evictable (while split)
    uint8_t index;          // in the root
    uint8_t listed_run;     // the list of split_64k_ it is in; 0 = none
    ChunkState state;
};

struct Pmm::RootChunk {
    ListNode link;       // in split_roots_ while split with a free 64K child
    uint64_t phys;
    ChunkState state;
    uint8_t listed_run;  // the list of split_roots_ it is in; 0 = none
    uint32_t free_64k;   // bit i: 64K child i is Free (while split)
    bool large;          // grown for a long run (see pmm.h): never given to a short one
    int8_t holder = -1;  // allocated, pending for this holder's slot (pmm.h)
    uint64_t seq = 0;    // while pending, and after, while taken from there: the holder's sequence number
    bool was_pending = false;  // taken from its holder's pending roots (for undo_alloc)
    // Its release span (RootChunkSource::release_span), by phys / 2 MiB.
    size_t span_first = 0;
    size_t span_count = 1;
    Chunk64K children[k64KPerRoot];
};

// The buddy step below a split chunk of size Parent: what differs between a
// root's 64K children, which have states of their own, and a 64K chunk's 4K
// children, which are bits of its masks (free, evictable).
template <>
struct Pmm::Buddy<kIndex2M> {
    using Chunk = RootChunk;
    using Mask = uint32_t;
    static constexpr SizeIndex kChild = kIndex64K;
    static constexpr uint32_t kChildren = k64KPerRoot;
    static constexpr Mask kAllFree = kAll64KFree;
    static Mask &free_mask(Chunk *c) { return c->free_64k; }
    static RunLists<kChildren> &lists(Pmm *pmm) { return pmm->split_roots_; }
    static uint64_t phys(const Chunk *c) { return c->phys; }
    static Chunk *of(const Pmm *pmm, uint64_t phys) { return pmm->root_of(phys); }
    static ChunkState child_state(const Chunk *c, uint32_t i) { return c->children[i].state; }
    // The children of `bits` become `to` (allocated ones were free).
    static void set_children(Chunk *c, Mask bits, ChunkState to) {
        for (Mask rest = bits; rest; rest &= rest - 1) {
            Chunk64K &child = c->children[__builtin_ctz(rest)];
            UVM_ASSERT(to == ChunkState::Free || child.state == ChunkState::Free);
            child.state = to;
        }
    }
};

template <>
struct Pmm::Buddy<kIndex64K> {
    using Chunk = Chunk64K;
    using Mask = uint16_t;
    static constexpr SizeIndex kChild = kIndex4K;
    static constexpr uint32_t kChildren = k4KPer64K;
    static constexpr Mask kAllFree = kAll4KFree;
    static Mask &free_mask(Chunk *c) { return c->free_4k; }
    static RunLists<kChildren> &lists(Pmm *pmm) { return pmm->split_64k_; }
    static uint64_t phys(const Chunk *c) { return c->root->phys + c->index * kPageSize64K; }
    static Chunk *of(const Pmm *pmm, uint64_t phys) {
        RootChunk *root = pmm->root_of(phys);
        return &root->children[(phys - root->phys) / kPageSize64K];
    }
    // Of an allocated child: its only record is the evictable mask.
    static ChunkState child_state(const Chunk *c, uint32_t i) {
        return (c->evictable_4k >> i) & 1u ? ChunkState::Evictable : ChunkState::Pinned;
    }
    static void set_children(Chunk *c, Mask bits, ChunkState to) {
        const uint32_t evictable = to == ChunkState::Evictable ? c->evictable_4k | bits : c->evictable_4k & ~bits;
        c->evictable_4k = static_cast<Mask>(evictable);
    }
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

// Put a split chunk in the list of its longest free run, or in none when it
// has no free child or is all free (about to merge).
template <unsigned Children, typename Chunk>
void Pmm::relist(RunLists<Children> &lists, Chunk *chunk, uint64_t free_mask) {
    if (chunk->listed_run) {
        list_remove(&chunk->link);
        if (list_empty(&lists.lists[chunk->listed_run]))
            lists.nonempty &= ~(uint64_t(1) << chunk->listed_run);
        chunk->listed_run = 0;
    }
    const unsigned run = Bitmap::longest_run(free_mask);
    if (run == 0 || run >= Children)
        return;
    list_push(&lists.lists[run], &chunk->link);
    lists.nonempty |= uint64_t(1) << run;
    chunk->listed_run = static_cast<uint8_t>(run);
}

// The split chunk whose longest free run is the shortest that holds `count`
// (under alloc_avoiding, the first such in a root not avoided).
template <unsigned Children, typename Chunk, typename Phys>
Chunk *Pmm::best_fit(RunLists<Children> &lists, uint32_t count, Phys &&phys) {
    uint64_t fits = lists.nonempty & (~uint64_t(0) << count);
    if (!fits)
        return nullptr;
    if (__builtin_expect(!avoid_, 1))
        return reinterpret_cast<Chunk *>(lists.lists[__builtin_ctzll(fits)].next);
    for (; fits; fits &= fits - 1) {
        const ListNode *head = &lists.lists[__builtin_ctzll(fits)];
        for (ListNode *n = head->next; n != head; n = n->next)
            if (!avoid_->test(phys(reinterpret_cast<Chunk *>(n)) / kRootChunkSize))
                return reinterpret_cast<Chunk *>(n);
    }
    return nullptr;
}

Pmm::Pmm(RootChunkSource *source, uint64_t phys_limit)
    : source_(source),
      roots_(phys_limit / kRootChunkSize, nullptr),
      free_roots_(phys_limit / kRootChunkSize),
      free_short_(phys_limit / kRootChunkSize),
      holders_(kMaxHolders) {
    UVM_ASSERT(source);
    for (ListNode &head : split_roots_.lists)
        list_init(&head);
    for (ListNode &head : split_64k_.lists)
        list_init(&head);
}

void add_stats(PmmStats *sum, const PmmStats &more) {
    sum->root_chunks += more.root_chunks;
    for (int i = 0; i < kSizeIndexCount; ++i) {
        sum->bytes_free[i] += more.bytes_free[i];
        sum->bytes_pinned[i] += more.bytes_pinned[i];
        sum->bytes_evictable[i] += more.bytes_evictable[i];
        sum->chunks_split[i] += more.chunks_split[i];
    }
    sum->largest_free_block = std::max(sum->largest_free_block, more.largest_free_block);
    sum->roots_grown += more.roots_grown;
    sum->roots_moved += more.roots_moved;
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

// Held roots come free, or are taken: both bitmaps follow, a range at a
// time (each range joins or cuts the runs around it once).
template <typename F>
void Pmm::for_each_short_range(size_t at, size_t count, F f) const {
    for (size_t i = at; i < at + count;) {
        if (roots_[i]->large) {
            ++i;
            continue;
        }
        size_t j = i + 1;
        while (j < at + count && !roots_[j]->large)
            ++j;
        f(i, j - i);
        i = j;
    }
}

void Pmm::mark_roots_free(size_t at, size_t count) {
    free_roots_.set_range(at, count);
    for_each_short_range(at, count, [this](size_t i, size_t n) { free_short_.set_range(i, n); });
}

void Pmm::mark_roots_taken(size_t at, size_t count) {
    free_roots_.clear_range(at, count);
    for_each_short_range(at, count, [this](size_t i, size_t n) { free_short_.clear_range(i, n); });
}

Pmm::RootChunk *Pmm::root_of(uint64_t phys) const {
    const uint64_t index = phys / kRootChunkSize;
    return index < roots_.size() ? roots_[index] : nullptr;
}

void Pmm::account(SizeIndex size_index, ChunkState from, ChunkState to) {
    const uint64_t size = chunk_size_of_index(size_index);
    if (from != ChunkState::IsSplit) {
        UVM_ASSERT(bytes_[static_cast<int>(from)][size_index] >= size);
        bytes_[static_cast<int>(from)][size_index] -= size;
    }
    if (to != ChunkState::IsSplit)
        bytes_[static_cast<int>(to)][size_index] += size;
}

// Under alloc_avoiding: the first root of the shortest stretch of at least
// `count` roots set in `free` and clear in avoid_ (the lowest of equals), or
// npos. One walk of the free roots: compaction's path, not the hot one.
size_t Pmm::find_best_run_avoiding(const RunBitmap &free, size_t count) const {
    size_t best = Bitmap::npos, best_length = 0;
    free.bits().for_each_run([&](size_t run, size_t end) {
        for (size_t i = run; i < end;) {
            if (avoid_->test(i)) {
                ++i;
                continue;
            }
            size_t j = i + 1;
            while (j < end && !avoid_->test(j))
                ++j;
            if (j - i >= count && (best == Bitmap::npos || j - i < best_length)) {
                best = i;
                best_length = j - i;
            }
            i = j;
        }
        return best_length != count;  // an exact fit ends the walk
    });
    return best;
}

// `count` adjacent whole free root chunks, taken off the free bitmap (still
// in state Free: the caller gives them their state): held ones, lowest
// address first, else new ones from the source.
uvm_status_t Pmm::take_roots(size_t count, RootChunk **first, HolderState *holder) {
    const bool large = count > kShortRun;
    const RunBitmap &free = large ? free_roots_ : free_short_;
    // A holder's own pending roots first (best fit among them), then the
    // best fit among them and free ones joined: memory that only this
    // holder can use is worth most to it, and free memory stays for everyone
    // else where it can.
    const Bitmap *pending = holder && holder->bytes ? (large ? &holder->roots : &holder->short_roots) : nullptr;
    size_t at = Bitmap::npos;
    if (pending && holder->hint != UINT64_MAX) {
        // The run the holder asks for, where all of it is still pending.
        const size_t hinted = holder->hint / kRootChunkSize;
        bool whole = hinted + count <= roots_.size();
        for (size_t i = hinted; whole && i < hinted + count; ++i)
            whole = pending->test(i);
        if (whole)
            at = hinted;
    }
    if (!pending) {
        at = __builtin_expect(!avoid_, 1) ? free.find_best_run(count) : find_best_run_avoiding(free, count);
    } else if (at == Bitmap::npos) {
        at = pending->find_best_run(count);
        if (at == Bitmap::npos)
            at = find_best_joined_run(free, *pending, count);
    }
    if (at != Bitmap::npos) {
        if (!pending) {
            mark_roots_taken(at, count);
            for (size_t i = at; holder && i < at + count; ++i)
                roots_[i]->was_pending = false;
        } else {
            // Stretches of the holder's pending roots and of free ones, each at once.
            for (size_t i = at; i < at + count;) {
                const bool was_pending = roots_[i]->holder >= 0;
                size_t end = i + 1;
                while (end < at + count && (roots_[end]->holder >= 0) == was_pending)
                    ++end;
                for (size_t k = i; k < end; ++k)
                    roots_[k]->was_pending = was_pending;
                if (was_pending)
                    reclaim_pending(i, end - i);  // never on the free bitmaps
                else
                    mark_roots_taken(i, end - i);
                i = end;
            }
        }
        *first = roots_[at];
        return UVM_OK;
    }
    if (!may_grow_)
        return UVM_ERR_OUT_OF_MEMORY;
    size_t base = 0;
    const uvm_status_t status = grow_roots(count, large, &base);
    if (status == UVM_OK)
        *first = roots_[base];
    return status;
}

// `count` new root chunks side by side from the source, from *base (by phys /
// 2 MiB), in state Free and on no free bitmap (the caller takes them), noted
// in grown_in_call_.
uvm_status_t Pmm::grow_roots(size_t count, bool large, size_t *base) {
    // Everything the new roots need from the host first: once the source has
    // given its memory, nothing may fail.
    std::vector<std::unique_ptr<RootChunk>> made;
    made.reserve(count);
    for (size_t i = 0; i < count; ++i)
        made.push_back(std::make_unique<RootChunk>());
    grown_in_call_.reserve(grown_in_call_.size() + count);
    uint64_t phys = 0;
    const uvm_status_t status = source_->alloc_root_chunks(count, &phys);
    if (status != UVM_OK)
        return status;
    UVM_ASSERT(is_aligned(phys, kRootChunkSize));
    for (size_t i = 0; i < count; ++i) {
        const uint64_t index = phys / kRootChunkSize + i;
        UVM_ASSERT(index < roots_.size() && !roots_[index]);
        RootChunk *root = made[i].release();
        root->phys = index * kRootChunkSize;
        root->state = ChunkState::Free;
        root->large = large;
        list_init(&root->link);
        for (uint32_t c = 0; c < k64KPerRoot; ++c) {
            root->children[c].root = root;
            root->children[c].index = static_cast<uint8_t>(c);
            list_init(&root->children[c].link);
        }
        roots_[index] = root;
        root_count_++;
        bytes_[static_cast<int>(ChunkState::Free)][kIndex2M] += kRootChunkSize;
        grown_in_call_.push_back(root->phys);
    }
    *base = phys / kRootChunkSize;
    note_spans(*base, count);
    return UVM_OK;
}

// Lock held; no held run of `count` roots fits (alloc). The run in pieces:
// runs of whole release spans (driver allocations) of held roots that are
// each free or the current holder's pending, the longest first while they
// fit, and the rest grown as one new run, checked to be whole spans too: a
// piece is mapped elsewhere by its driver allocations whole (pmm.h).
// OUT_OF_MEMORY, nothing taken, where no span serves or the rest cannot be
// grown so.
uvm_status_t Pmm::stitch(size_t count, ChunkState to, uint64_t *out) {
    const int slot = taking_for_ ? static_cast<int>(taking_for_ - holders_.data()) : -1;
    auto usable = [&](size_t i) {
        const RootChunk *r = i < roots_.size() ? roots_[i] : nullptr;
        return r && (r->state == ChunkState::Free || (slot >= 0 && r->holder == slot));
    };
    struct Piece {
        size_t first, count;
    };
    std::vector<Piece> spans;
    // The usable roots a word at a time (the free ones and the holder's
    // pending ones), not every root of the GPU: a failed stitch is then as
    // cheap as the free memory is scattered.
    stitch_usable_ = free_roots_.bits();
    if (taking_for_)
        stitch_usable_.merge(taking_for_->roots);
    size_t next = 0;  // the first root not yet looked at (a span is looked at from its first root)
    stitch_usable_.for_each_run([&](size_t run, size_t end) {
        for (size_t i = std::max(run, next); i < end;) {
            UVM_ASSERT(usable(i));
            const size_t first = roots_[i]->span_first, n = roots_[i]->span_count;
            bool whole = first == i && n <= count;
            for (size_t k = first; whole && k < first + n; ++k)
                whole = usable(k) && roots_[k]->span_first == first;
            if (whole && !spans.empty() && spans.back().first + spans.back().count == first)
                spans.back().count += n;  // adjacent whole spans: one piece
            else if (whole)
                spans.push_back({first, n});
            i = std::max(i + 1, first + n);
            next = i;
        }
        return true;
    });
    // The longest first: the fewest pieces, and the short holes stay for
    // the short requests (taken in address order, single roots on sim
    // scattered a GPT-2 step's long objects over every hole: held 1.21x
    // live on its trace against 1.04x unstitched).
    std::stable_sort(spans.begin(), spans.end(), [](const Piece &a, const Piece &b) { return a.count > b.count; });
    std::vector<Piece> taken;
    size_t covered = 0;
    for (const Piece &p : spans)
        if (covered + p.count <= count && taken.size() < kMaxStitchPieces) {
            taken.push_back(p);
            covered += p.count;
        }
    // The rest is grown as a long run (the source gives a short one parts
    // of shared driver allocations): the last piece gives way to it, a whole
    // span at a time from its end.
    while (!taken.empty() && count - covered > 0 && count - covered <= kShortRun) {
        Piece &last = taken.back();
        const size_t cut = last.first + last.count - roots_[last.first + last.count - 1]->span_first;
        last.count -= cut;
        covered -= cut;
        if (last.count == 0)
            taken.pop_back();
    }
    if (taken.empty())
        return UVM_ERR_OUT_OF_MEMORY;
    const size_t rest = count - covered;
    size_t base = 0;
    if (rest > 0) {
        if (grow_roots(rest, true, &base) != UVM_OK)
            return UVM_ERR_OUT_OF_MEMORY;
        bool whole = true;
        for (size_t k = base; whole && k < base + rest; ++k)
            whole = roots_[k]->span_first >= base && roots_[k]->span_first + roots_[k]->span_count <= base + rest;
        if (!whole) {
            mark_roots_free(base, rest);  // as release_whole_root finds a free root
            for (size_t k = base; k < base + rest; ++k)
                release_whole_root(k * kRootChunkSize);
            grown_in_call_.clear();
            return UVM_ERR_OUT_OF_MEMORY;
        }
        taken.push_back({base, rest});
    }
    size_t at = 0;
    for (const Piece &p : taken) {
        for (size_t k = p.first; k < p.first + p.count; ++k) {
            RootChunk *root = roots_[k];
            const bool grown_now = rest > 0 && k >= base && k < base + rest;
            root->was_pending = !grown_now && root->holder >= 0;
            if (root->was_pending)
                reclaim_pending(k, 1);
            else if (!grown_now)
                mark_roots_taken(k, 1);
            account(kIndex2M, ChunkState::Free, to);
            root->state = to;
            out[at++] = root->phys;
        }
    }
    UVM_ASSERT(at == count);
    return UVM_OK;
}

// Where each held root of [base, base + count) has its memory go back with
// others' (one driver allocation), asked once per span: what make_room moves.
void Pmm::note_spans(size_t base, size_t count) {
    for (size_t i = base; i < base + count;) {
        if (!roots_[i]) {
            ++i;
            continue;
        }
        uint64_t span = 0;
        size_t n = 0;
        source_->release_span(i * kRootChunkSize, &span, &n);
        UVM_ASSERT(n >= 1 && span <= i * kRootChunkSize && i * kRootChunkSize < span + n * kRootChunkSize);
        const size_t end = std::min(base + count, span / kRootChunkSize + n);
        for (; i < end; ++i)
            if (roots_[i]) {
                roots_[i]->span_first = span / kRootChunkSize;
                roots_[i]->span_count = n;
            }
    }
}

// A chunk of size Parent, allocated, split into free children.
template <SizeIndex Parent>
void Pmm::split(typename Buddy<Parent>::Chunk *chunk) {
    using B = Buddy<Parent>;
    UVM_ASSERT(is_allocated_state(chunk->state) && chunk->listed_run == 0);
    account(Parent, chunk->state, ChunkState::IsSplit);
    chunk->state = ChunkState::IsSplit;
    B::free_mask(chunk) = B::kAllFree;
    B::set_children(chunk, B::kAllFree, ChunkState::Free);
    bytes_[static_cast<int>(ChunkState::Free)][B::kChild] += chunk_size_of_index(Parent);
    split_[Parent]++;
}

// The free children [index, index + count) of a split chunk of size Parent become `to`.
template <SizeIndex Parent>
void Pmm::take_children(typename Buddy<Parent>::Chunk *chunk, uint32_t index, uint32_t count, ChunkState to) {
    using B = Buddy<Parent>;
    using Mask = typename B::Mask;
    const Mask bits = static_cast<Mask>(((uint64_t(1) << count) - 1) << index);
    UVM_ASSERT((B::free_mask(chunk) & bits) == bits);
    B::set_children(chunk, bits, to);
    B::free_mask(chunk) = static_cast<Mask>(B::free_mask(chunk) & ~bits);
    for (uint32_t i = 0; i < count; ++i)
        account(B::kChild, ChunkState::Free, to);
    relist(B::lists(this), chunk, B::free_mask(chunk));
}

// A run of `count` chunks one size below Parent (see pmm.h): in the split
// chunk of size Parent whose longest free run fits it most tightly, else on
// whole chunks of size Parent allocated and split for it.
template <SizeIndex Parent>
uvm_status_t Pmm::alloc_children(size_t count, ChunkState to, uint64_t *first) {
    using B = Buddy<Parent>;
    // Split roots never come from pending ones (alloc).
    UVM_ASSERT(!taking_for_);
    if (count < B::kChildren) {
        if (auto *chunk = best_fit<B::kChildren, typename B::Chunk>(
                B::lists(this), static_cast<uint32_t>(count), [](typename B::Chunk *c) { return B::phys(c); })) {
            const int at = Bitmap::find_run_in_word(B::free_mask(chunk), static_cast<unsigned>(count));
            UVM_ASSERT(at >= 0);
            take_children<Parent>(chunk, static_cast<uint32_t>(at), static_cast<uint32_t>(count), to);
            *first = B::phys(chunk) + static_cast<uint64_t>(at) * chunk_size_of_index(B::kChild);
            return UVM_OK;
        }
    }
    const size_t parents = (count + B::kChildren - 1) / B::kChildren;
    uint64_t base = 0;
    const uvm_status_t status = alloc_run(Parent, parents, ChunkState::Pinned, &base);
    if (status != UVM_OK)
        return status;
    size_t left = count;
    for (size_t i = 0; i < parents; ++i) {
        typename B::Chunk *chunk = B::of(this, base + i * chunk_size_of_index(Parent));
        split<Parent>(chunk);
        const uint32_t take = static_cast<uint32_t>(std::min<size_t>(left, B::kChildren));
        take_children<Parent>(chunk, 0, take, to);
        left -= take;
    }
    *first = base;
    return UVM_OK;
}

uvm_status_t Pmm::alloc_run(SizeIndex size_index, size_t count, ChunkState to, uint64_t *first) {
    if (size_index == kIndex2M) {
        RootChunk *root = nullptr;
        const uvm_status_t status = take_roots(count, &root, taking_for_);
        if (status != UVM_OK)
            return status;
        const uint64_t base = root->phys / kRootChunkSize;
        for (size_t i = 0; i < count; ++i) {
            account(kIndex2M, ChunkState::Free, to);
            roots_[base + i]->state = to;
        }
        *first = root->phys;
        return UVM_OK;
    }
    if (size_index == kIndex64K)
        return alloc_children<kIndex2M>(count, to, first);
    return alloc_children<kIndex64K>(count, to, first);
}

std::vector<uint64_t> Pmm::free_root_list() const {
    std::vector<uint64_t> whole;
    whole.reserve(free_roots_.count());
    for (size_t i = free_roots_.bits().find_first(); i != Bitmap::npos; i = free_roots_.bits().find_next(i + 1))
        whole.push_back(i * kRootChunkSize);
    return whole;
}

void Pmm::release_whole_root(uint64_t phys) {
    RootChunk *root = root_of(phys);
    UVM_ASSERT(root && root->state == ChunkState::Free);
    mark_roots_taken(phys / kRootChunkSize, 1);
    bytes_[static_cast<int>(ChunkState::Free)][kIndex2M] -= kRootChunkSize;
    roots_[phys / kRootChunkSize] = nullptr;
    root_count_--;
    delete root;
    source_->free_root_chunk(phys);
}

// Lock held. About to grow `roots` root chunks: move whole free ones there
// instead where the PMM would otherwise hold more than it ever needed (see
// the top of pmm.h). Only memory that goes back: spans (driver allocations)
// whose every root the PMM holds is free. Those in the shortest free runs go
// first, and of those the smallest: the free roots serve no run of this
// length, and the longest runs are the likeliest to serve the next one.
void Pmm::make_room(size_t roots) {
    const size_t free = free_roots_.count();
    UVM_ASSERT(free <= root_count_);
    const uint64_t need = root_count_ - free + roots;
    if (need > need_peak_) {
        need_peak_ = need;
        moved_since_peak_ = 0;
    }
    const uint64_t cap = growth_slack_ > UINT64_MAX - need_peak_ ? UINT64_MAX : need_peak_ + growth_slack_;
    if (free == 0 || root_count_ + roots <= cap || moved_since_peak_ >= need_peak_ / kMoveBudgetDiv)
        return;
    const size_t want = static_cast<size_t>(std::min<uint64_t>(root_count_ + roots - cap, free));
    spans_.clear();
    free_roots_.bits().for_each_run([&](size_t run, size_t end) {
        for (size_t r = run; r < end;) {
            const RootChunk *root = roots_[r];
            const size_t first = root->span_first, last = first + root->span_count;
            bool whole = true;  // every root of the span held here is free
            for (size_t k = first; k < last && whole; ++k)
                whole = !roots_[k] || free_roots_.test(k);
            if (whole && (first >= run || r == run))
                spans_.push_back({end - run, root->span_count, first});
            r = std::max(r + 1, last);
        }
        return true;
    });
    std::sort(spans_.begin(), spans_.end());
    size_t moved = 0;
    for (const FreeSpan &span : spans_) {
        if (moved >= want)
            break;
        for (size_t k = span.first; k < span.first + span.count; ++k)
            if (roots_[k] && free_roots_.test(k)) {  // a span seen from two runs goes once
                release_whole_root(k * kRootChunkSize);
                moved++;
            }
    }
    roots_moved_ += moved;
    moved_since_peak_ += moved;
}

void Pmm::release_whole_roots(const std::vector<uint64_t> &roots) {
    for (uint64_t phys : roots)
        release_whole_root(phys);
}

uvm_status_t Pmm::alloc(uint64_t size, size_t count, bool evictable, uint64_t *out,
                        std::vector<uint64_t> *grown, bool may_grow, Holder holder, bool may_stitch) {
    const SizeIndex size_index = chunk_size_index(size);
    if (size_index == kNoSizeIndex || count == 0 || !out)
        return UVM_ERR_INVALID_ARGUMENT;
    if (count > roots_.size() * (kRootChunkSize / size))
        return UVM_ERR_OUT_OF_MEMORY;  // more than all of the physical space
    const ChunkState to = evictable ? ChunkState::Evictable : ChunkState::Pinned;
    std::lock_guard<std::mutex> guard(lock_);
    grown_in_call_.clear();
    uint64_t first = 0;
    may_grow_ = false;
    // Split roots never come from pending ones: their free children would
    // be everyone's while the holder's work may still use them.
    taking_for_ = size_index == kIndex2M ? holder_state(holder) : nullptr;
    if (taking_for_)
        taking_for_->hint = holder.hint % kRootChunkSize == 0 ? holder.hint : UINT64_MAX;
    uvm_status_t status = alloc_run(size_index, count, to, &first);
    bool stitched = false;  // out[] written by stitch(), several runs
    if (status == UVM_ERR_OUT_OF_MEMORY && may_grow && may_stitch && size_index == kIndex2M && count > kShortRun) {
        // Pieces of held memory, the rest grown (see the top of pmm.h).
        may_grow_ = true;
        stitched = stitch(count, to, out) == UVM_OK;
        UVM_ASSERT(stitched || grown_in_call_.empty());  // a failed stitch took nothing
        may_grow_ = false;
        status = stitched ? UVM_OK : UVM_ERR_OUT_OF_MEMORY;
    }
    if (status == UVM_ERR_OUT_OF_MEMORY && may_grow) {
        // Nothing held fits. Under a release threshold, give the whole free
        // roots back before growing (see the top of pmm.h): the source may
        // join them with its own into the run, or release what they empty
        // and grow with that. Without one, only those held above the peak
        // need and the slack (make_room); the rest stay for later requests,
        // and all of them go back only where the source has no more.
        if (release_threshold_ != UINT64_MAX && free_roots_.count() > 0)
            release_whole_roots(free_root_list());
        else
            make_room((count * size + kRootChunkSize - 1) / kRootChunkSize);
        may_grow_ = true;
        status = alloc_run(size_index, count, to, &first);
        if (status == UVM_ERR_OUT_OF_MEMORY && free_roots_.count() > 0) {
            release_whole_roots(free_root_list());
            status = alloc_run(size_index, count, to, &first);
        }
        may_grow_ = false;
    }
    taking_for_ = nullptr;
    // A run is placed in one step after every fallible one: failure took nothing.
    UVM_ASSERT(status == UVM_OK || grown_in_call_.empty());
    if (status != UVM_OK)
        return status;
    for (size_t i = 0; !stitched && i < count; ++i)
        out[i] = first + i * size;
    // Counted for allocations that stay (undo_alloc takes them back out).
    roots_grown_ += grown_in_call_.size();
    if (grown)
        grown->swap(grown_in_call_);  // no allocation once the run is taken
    return UVM_OK;
}

void Pmm::undo_alloc(uint64_t size, const uint64_t *phys, size_t count,
                     const std::vector<uint64_t> &grown, Holder holder) {
    const SizeIndex size_index = chunk_size_index(size);
    UVM_ASSERT(size_index != kNoSizeIndex);
    std::lock_guard<std::mutex> guard(lock_);
    HolderState *h = size_index == kIndex2M ? holder_state(holder) : nullptr;
    for (size_t i = 0; i < count; ++i) {
        UVM_ASSERT(is_allocated(size, phys[i]));
        RootChunk *root = root_of(phys[i]);
        if (h && root->was_pending) {  // its holder's work may still use it: pending again, as it was
            pend_roots(*h, holder.slot, root->phys / kRootChunkSize, 1, root->seq);
            continue;
        }
        free_one(size_index, phys[i], true);
    }
    // Another thread may have taken chunks of a grown root meanwhile: keep
    // those. (No host memory is asked for: an undo cannot fail.)
    for (uint64_t root : grown)
        if (root_of(root) && root_of(root)->state == ChunkState::Free)
            release_whole_root(root);
    UVM_ASSERT(roots_grown_ >= grown.size());
    roots_grown_ -= grown.size();
}

bool Pmm::is_allocated(uint64_t size, uint64_t phys) const {
    if (!is_aligned(phys, size))
        return false;
    const RootChunk *root = root_of(phys);
    if (!root)
        return false;
    if (size == kRootChunkSize)
        return is_allocated_state(root->state) && root->holder < 0;  // pending: the holder's, not an object's
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

void Pmm::make_root_free(RootChunk *root) {
    root->state = ChunkState::Free;
    mark_roots_free(root->phys / kRootChunkSize, 1);
}

// Allocated children (`bits`: child i at bit i) of a split chunk of size
// Parent become free; a child that is split itself is one whose own children
// all came back. The chunk is relisted now, or where it merges: once every
// child is free it is one free chunk of size Parent again, freed in its own
// parent (or a whole free root).
template <SizeIndex Parent>
void Pmm::free_children(typename Buddy<Parent>::Chunk *chunk, uint64_t bits, bool relist_now) {
    using B = Buddy<Parent>;
    using Mask = typename B::Mask;
    for (uint64_t rest = bits; rest; rest &= rest - 1)
        account(B::kChild, B::child_state(chunk, static_cast<uint32_t>(__builtin_ctzll(rest))), ChunkState::Free);
    B::set_children(chunk, static_cast<Mask>(bits), ChunkState::Free);
    B::free_mask(chunk) = static_cast<Mask>(B::free_mask(chunk) | bits);
    if (relist_now || B::free_mask(chunk) == B::kAllFree)
        relist(B::lists(this), chunk, B::free_mask(chunk));  // a merging chunk leaves the lists
    if (B::free_mask(chunk) != B::kAllFree)
        return;
    bytes_[static_cast<int>(ChunkState::Free)][B::kChild] -= chunk_size_of_index(Parent);
    split_[Parent]--;
    free_one(Parent, B::phys(chunk), relist_now);  // counts the merged chunk free
}

// A run of allocated chunks one size below Parent back at once: each split
// chunk's mask takes the run's bits in one operation, merges once and is
// relisted once (where relist_now).
template <SizeIndex Parent>
void Pmm::free_child_run(uint64_t first, size_t count, bool relist_now) {
    using B = Buddy<Parent>;
    const uint64_t size = chunk_size_of_index(B::kChild);
    for (size_t i = 0; i < count;) {
        const uint64_t phys = first + i * size;
        typename B::Chunk *chunk = B::of(this, phys);
        const uint32_t index = static_cast<uint32_t>((phys - B::phys(chunk)) / size);
        const uint32_t k = static_cast<uint32_t>(std::min<size_t>(count - i, B::kChildren - index));
        free_children<Parent>(chunk, ((uint64_t(1) << k) - 1) << index, relist_now);
        i += k;
    }
}

void Pmm::free_one(SizeIndex size_index, uint64_t phys, bool relist_now) {
    UVM_ASSERT(root_of(phys));
    if (size_index == kIndex2M) {
        RootChunk *root = root_of(phys);
        account(kIndex2M, root->state, ChunkState::Free);
        make_root_free(root);
        return;
    }
    if (size_index == kIndex64K)
        free_child_run<kIndex2M>(phys, 1, relist_now);
    else
        free_child_run<kIndex64K>(phys, 1, relist_now);
}

// A run of allocated chunks (as alloc gives them) back at once.
void Pmm::free_run(SizeIndex size_index, uint64_t first, size_t count) {
    if (size_index == kIndex2M) {
        for (size_t i = 0; i < count; ++i) {
            RootChunk *root = root_of(first + i * kRootChunkSize);
            account(kIndex2M, root->state, ChunkState::Free);
            root->state = ChunkState::Free;
        }
        mark_roots_free(first / kRootChunkSize, count);
        return;
    }
    if (size_index == kIndex64K)
        free_child_run<kIndex2M>(first, count, true);
    else
        free_child_run<kIndex64K>(first, count, true);
}

uvm_status_t Pmm::alloc_avoiding(uint64_t size, size_t count, bool evictable, const Bitmap &avoid, uint64_t *out) {
    const SizeIndex size_index = chunk_size_index(size);
    if (size_index == kNoSizeIndex || count == 0 || !out || avoid.size() < roots_.size())
        return UVM_ERR_INVALID_ARGUMENT;
    if (count > roots_.size() * (kRootChunkSize / size))
        return UVM_ERR_OUT_OF_MEMORY;
    const ChunkState to = evictable ? ChunkState::Evictable : ChunkState::Pinned;
    std::lock_guard<std::mutex> guard(lock_);
    may_grow_ = false;
    taking_for_ = nullptr;
    avoid_ = &avoid;
    uint64_t first = 0;
    uvm_status_t status = alloc_run(size_index, count, to, &first);
    avoid_ = nullptr;
    if (status != UVM_OK)
        return status;
    // Every way of taking memory above keeps out of `avoid`; checked again.
    const uint64_t bytes = count * size;
    for (uint64_t root = first / kRootChunkSize; root <= (first + bytes - 1) / kRootChunkSize; ++root) {
        if (avoid.test(root)) {
            std::vector<uint64_t> phys(count);
            for (size_t i = 0; i < count; ++i)
                phys[i] = first + i * size;
            const uvm_status_t freed = free_locked(size, phys.data(), count);
            UVM_ASSERT(freed == UVM_OK);
            (void)freed;
            return UVM_ERR_OUT_OF_MEMORY;
        }
    }
    for (size_t i = 0; i < count; ++i)
        out[i] = first + i * size;
    return UVM_OK;
}

uvm_status_t Pmm::free(uint64_t size, const uint64_t *phys, size_t count) {
    std::lock_guard<std::mutex> guard(lock_);
    const uvm_status_t status = free_locked(size, phys, count);
    if (bytes_[static_cast<int>(ChunkState::Free)][kIndex2M] > release_threshold_)
        release_above_threshold();
    return status;
}

// Lock held.
uint64_t Pmm::release_above_threshold() {
    uint64_t released = 0;
    while (bytes_[static_cast<int>(ChunkState::Free)][kIndex2M] > release_threshold_) {
        const size_t at = free_roots_.bits().find_first();
        UVM_ASSERT(at != Bitmap::npos);
        release_whole_root(at * kRootChunkSize);
        released += kRootChunkSize;
    }
    return released;
}

void Pmm::set_growth_slack(uint64_t bytes) {
    std::lock_guard<std::mutex> guard(lock_);
    growth_slack_ = bytes / kRootChunkSize;
}

uint64_t Pmm::set_release_threshold(uint64_t bytes) {
    std::lock_guard<std::mutex> guard(lock_);
    release_threshold_ = bytes;
    return release_above_threshold();
}

uvm_status_t Pmm::free_and_release(const uint64_t *phys, size_t count) {
    std::lock_guard<std::mutex> guard(lock_);
    const uvm_status_t status = free_locked(kRootChunkSize, phys, count);
    if (status != UVM_OK)
        return status;
    // Whole roots now, and free: back to the source before anyone can take them.
    for (size_t i = 0; i < count; ++i)
        release_whole_root(phys[i]);
    return UVM_OK;
}

uvm_status_t Pmm::free_locked(uint64_t size, const uint64_t *phys, size_t count) {
    const SizeIndex size_index = chunk_size_index(size);
    if (size_index == kNoSizeIndex || (count && !phys))
        return UVM_ERR_INVALID_ARGUMENT;
    for (size_t i = 0; i < count; ++i)
        if (!is_allocated(size, phys[i]))
            return UVM_ERR_INVALID_ARGUMENT;
#if UVM_ASSERTS_ENABLED
    // No chunk twice (checked without allocating: a free cannot fail).
    for (size_t i = 0; count <= 512 && i < count; ++i)
        for (size_t j = i + 1; j < count; ++j)
            UVM_ASSERT(phys[i] != phys[j]);
#endif
    bool run = count > 1;
    for (size_t i = 1; i < count && run; ++i)
        run = phys[i] == phys[0] + i * size;
    if (run) {
        free_run(size_index, phys[0], count);
        return UVM_OK;
    }
    // Chunks that share parents: put each parent in its list once, after all
    // its chunks are back, not once per chunk.
    for (size_t i = 0; i < count; ++i)
        free_one(size_index, phys[i], count == 1);
    if (count > 1 && size_index != kIndex2M) {
        const void *last_root = nullptr, *last_64k = nullptr;
        for (size_t i = 0; i < count; ++i) {
            RootChunk *root = root_of(phys[i]);
            if (root->state != ChunkState::IsSplit)
                continue;  // merged whole
            if (root != last_root)
                relist(split_roots_, root, root->free_64k);
            last_root = root;
            Chunk64K *chunk = &root->children[(phys[i] - root->phys) / kPageSize64K];
            if (size_index == kIndex4K && chunk->state == ChunkState::IsSplit && chunk != last_64k)
                relist(split_64k_, chunk, chunk->free_4k);
            last_64k = chunk;
        }
    }
    return UVM_OK;
}

Pmm::HolderState *Pmm::holder_state(Holder holder) {
    if (holder.slot < 0 || holder.slot >= kMaxHolders)
        return nullptr;
    HolderState &h = holders_[static_cast<size_t>(holder.slot)];
    return h.used && h.gen == holder.gen ? &h : nullptr;
}

Pmm::Holder Pmm::add_holder() {
    std::lock_guard<std::mutex> guard(lock_);
    for (int slot = 0; slot < kMaxHolders; ++slot) {
        HolderState &h = holders_[static_cast<size_t>(slot)];
        if (h.used)
            continue;
        if (h.roots.size() != roots_.size()) {  // made on a slot's first use
            h.roots.resize(roots_.size());
            h.short_roots.resize(roots_.size());
        }
        UVM_ASSERT(h.bytes == 0 && h.roots.count() == 0 && h.pended.empty());
        h.used = true;
        return Holder{slot, ++h.gen};
    }
    return Holder();
}

void Pmm::remove_holder(Holder holder) {
    unpend(holder, UINT64_MAX);
    std::lock_guard<std::mutex> guard(lock_);
    if (HolderState *h = holder_state(holder))
        h->used = false;
}

// Whether root `i` is held and pending for holder slot `slot` under `seq`
// (an entry's roots may have been taken back, pended again under a later
// seq, or given back to the source since).
bool Pmm::pended_under(size_t i, int slot, uint64_t seq) const {
    const RootChunk *root = roots_[i];
    return root && root->holder == slot && root->seq == seq;
}

// Roots [at, at + count) become `h`'s (slot `slot`) pending ones; their
// bitmaps a range at a time.
void Pmm::pend_roots(HolderState &h, int slot, size_t at, size_t count, uint64_t seq) {
    // Entries whose roots the holder has all taken back wait for an unpend
    // to pop them; a stream whose fences are never done (one that captures,
    // held work) would pile them up, so the oldest are dropped here as they
    // empty, two looked at per pend.
    for (int k = 0; k < 2 && !h.pended.empty(); ++k) {
        const HolderState::Pended &p = h.pended.front();
        bool any = false;
        for (size_t i = p.at; !any && i < p.at + p.count; ++i)
            any = pended_under(i, slot, p.seq);
        if (any)
            break;
        h.pended.pop_front();
    }
    // Pends come in seq order; undo_alloc's pends again under an older seq
    // go to the back all the same, and wait there for the later entries'
    // fences (their own is done no later): given back later, never early.
    // Where the entry cannot be had (no host memory: a pend, like an undo,
    // may not fail), unpend walks every pending root until none is left.
    try {
        h.pended.push_back({at, count, seq});
    } catch (const std::bad_alloc &) {
        h.unlisted = true;
    }
    for (size_t i = at; i < at + count; ++i) {
        roots_[i]->holder = static_cast<int8_t>(slot);
        roots_[i]->seq = seq;
    }
    h.roots.set_range(at, count);
    for_each_short_range(at, count, [&h](size_t i, size_t n) { h.short_roots.set_range(i, n); });
    h.bytes += count * kRootChunkSize;
}

// Pending roots [at, at + count), all of one holder, leave it, free (off
// the free bitmaps: the caller takes them or marks them free).
void Pmm::reclaim_pending(size_t at, size_t count) {
    const int holder = roots_[at]->holder;
    UVM_ASSERT(count > 0 && holder >= 0);
    HolderState &h = holders_[static_cast<size_t>(holder)];
    for (size_t i = at; i < at + count; ++i) {
        RootChunk *root = roots_[i];
        UVM_ASSERT(root->holder == holder && is_allocated_state(root->state));
        root->holder = -1;
        account(kIndex2M, root->state, ChunkState::Free);
        root->state = ChunkState::Free;
    }
    h.roots.clear_range(at, count);
    for_each_short_range(at, count, [&h](size_t i, size_t n) { h.short_roots.clear_range(i, n); });
    UVM_ASSERT(h.bytes >= count * kRootChunkSize);
    h.bytes -= count * kRootChunkSize;
}

uvm_status_t Pmm::pend(Holder holder, uint64_t first, size_t count, uint64_t seq) {
    std::lock_guard<std::mutex> guard(lock_);
    HolderState *h = holder_state(holder);
    if (!h || count == 0)
        return UVM_ERR_INVALID_ARGUMENT;
    for (size_t i = 0; i < count; ++i)
        if (!is_allocated(kRootChunkSize, first + i * kRootChunkSize))
            return UVM_ERR_INVALID_ARGUMENT;
    pend_roots(*h, holder.slot, first / kRootChunkSize, count, seq);
    return UVM_OK;
}

uint64_t Pmm::unpend(Holder holder, uint64_t upto) {
    std::lock_guard<std::mutex> guard(lock_);
    HolderState *h = holder_state(holder);
    if (!h)
        return 0;
    if (h->bytes == 0) {
        h->pended.clear();  // each names roots the holder took back: nothing to give
        h->unlisted = false;
        return 0;
    }
    uint64_t bytes = 0;
    const int slot = holder.slot;
    if (h->unlisted) {
        // Some pending root has no entry (pend_roots): every one is looked at.
        for (size_t i = h->roots.find_first(); i != Bitmap::npos;) {
            if (roots_[i]->seq > upto) {
                i = h->roots.find_next(i + 1);
                continue;
            }
            size_t end = i + 1;
            while (end < roots_.size() && h->roots.test(end) && roots_[end]->seq <= upto)
                ++end;
            reclaim_pending(i, end - i);
            mark_roots_free(i, end - i);
            bytes += (end - i) * kRootChunkSize;
            i = h->roots.find_next(end);
        }
    }
    while (!h->pended.empty() && h->pended.front().seq <= upto) {
        const HolderState::Pended p = h->pended.front();
        h->pended.pop_front();
        // The entry's roots still pending under its seq, a stretch at a time.
        auto ours = [&](size_t i) { return pended_under(i, slot, p.seq); };
        for (size_t i = p.at; i < p.at + p.count;) {
            if (!ours(i)) {
                ++i;
                continue;
            }
            size_t end = i + 1;
            while (end < p.at + p.count && ours(end))
                ++end;
            reclaim_pending(i, end - i);
            mark_roots_free(i, end - i);
            bytes += (end - i) * kRootChunkSize;
            i = end;
        }
    }
    if (h->bytes == 0) {
        h->pended.clear();  // what is left names roots the holder took back: nothing to give
        h->unlisted = false;
    }
    if (bytes_[static_cast<int>(ChunkState::Free)][kIndex2M] > release_threshold_)
        release_above_threshold();
    return bytes;
}

uint64_t Pmm::pending_bytes(Holder holder) const {
    std::lock_guard<std::mutex> guard(lock_);
    const HolderState *h = const_cast<Pmm *>(this)->holder_state(holder);
    return h ? h->bytes : 0;
}

uint64_t Pmm::trim() {
    std::lock_guard<std::mutex> guard(lock_);
    const std::vector<uint64_t> whole = free_root_list();
    release_whole_roots(whole);
    need_peak_ = root_count_;  // what is needed from now on
    moved_since_peak_ = 0;
    return whole.size() * kRootChunkSize;
}

ChunkState Pmm::state(uint64_t phys, uint64_t size) const {
    std::lock_guard<std::mutex> guard(lock_);
    const RootChunk *root = root_of(phys);
    if (!root || chunk_size_index(size) == kNoSizeIndex)
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

bool Pmm::root_has_pinned(uint64_t phys) const {
    std::lock_guard<std::mutex> guard(lock_);
    const RootChunk *root = root_of(phys);
    if (!root || root->state != ChunkState::IsSplit)
        return root && root->state == ChunkState::Pinned;
    for (const Chunk64K &c : root->children) {
        if (c.state == ChunkState::Pinned)
            return true;
        const uint16_t allocated = static_cast<uint16_t>(~c.free_4k);
        if (c.state == ChunkState::IsSplit && (allocated & static_cast<uint16_t>(~c.evictable_4k)))
            return true;
    }
    return false;
}

PmmStats Pmm::stats() const {
    std::lock_guard<std::mutex> guard(lock_);
    PmmStats s;
    s.root_chunks = root_count_;
    s.roots_grown = roots_grown_;
    s.roots_moved = roots_moved_;
    for (int i = 0; i < kSizeIndexCount; ++i) {
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

Pmm::RootUsage Pmm::usage_of(const RootChunk &root) {
    RootUsage u;
    auto add = [&u](ChunkState state, uint32_t bytes) {
        if (state == ChunkState::Free)
            u.free += bytes;
        else if (state == ChunkState::Pinned)
            u.pinned += bytes;
        else
            u.evictable += bytes;
    };
    if (root.state != ChunkState::IsSplit) {
        add(root.state, static_cast<uint32_t>(kRootChunkSize));
        return u;
    }
    for (const Chunk64K &chunk : root.children) {
        if (chunk.state != ChunkState::IsSplit) {
            add(chunk.state, static_cast<uint32_t>(kPageSize64K));
            continue;
        }
        const uint32_t free = static_cast<uint32_t>(__builtin_popcount(chunk.free_4k));
        const uint32_t evictable = static_cast<uint32_t>(__builtin_popcount(chunk.evictable_4k));
        u.free += free * static_cast<uint32_t>(kPageSize4K);
        u.evictable += evictable * static_cast<uint32_t>(kPageSize4K);
        u.pinned += (k4KPer64K - free - evictable) * static_cast<uint32_t>(kPageSize4K);
    }
    return u;
}

std::vector<Pmm::RootUsage> Pmm::root_usage() const {
    std::vector<RootUsage> usage;
    std::lock_guard<std::mutex> guard(lock_);
    usage.resize(roots_.size());
    for (size_t i = 0; i < roots_.size(); ++i)
        if (roots_[i])
            usage[i] = usage_of(*roots_[i]);
    return usage;
}

uvm_status_t Pmm::with_roots_still(uint64_t first, size_t count,
                                   const std::function<uvm_status_t(uint64_t used)> &fn) {
    UVM_ASSERT(first % kRootChunkSize == 0);
    std::lock_guard<std::mutex> guard(lock_);
    const size_t base = first / kRootChunkSize;
    const size_t n = base < roots_.size() ? std::min(count, roots_.size() - base) : 0;
    uint64_t used = 0;
    for (size_t i = base; i < base + n; ++i)
        if (roots_[i]) {
            const RootUsage u = usage_of(*roots_[i]);
            used += uint64_t(u.pinned) + u.evictable;
        }
    const uvm_status_t status = fn(used);
    if (status == UVM_OK)  // the source may have cut its allocations there anew
        note_spans(base, n);
    return status;
}

bool Pmm::check_invariants() const {
    std::lock_guard<std::mutex> guard(lock_);
    // Which list each listed chunk is in, and that each list's mask bit is right.
    std::map<const void *, unsigned> listed;
    auto collect = [&listed](const ListNode *lists, unsigned children, uint64_t nonempty) {
        for (unsigned r = 1; r < children; ++r) {
            size_t n = 0;
            for (const ListNode *node = lists[r].next; node != &lists[r]; node = node->next, ++n)
                if (!listed.emplace(node, r).second || n > (1u << 30))
                    return false;  // twice listed, or a cycle
            if (((nonempty >> r) & 1u) != (n > 0))
                return false;
        }
        return (nonempty & 1u) == 0 && (nonempty >> children) == 0;
    };
    if (!collect(split_roots_.lists, k64KPerRoot, split_roots_.nonempty) ||
        !collect(split_64k_.lists, k4KPer64K, split_64k_.nonempty))
        return false;
    // A split chunk is listed exactly where its longest free run says.
    auto listed_right = [&listed](const void *chunk, unsigned listed_run, uint64_t free_mask, unsigned children) {
        const unsigned run = Bitmap::longest_run(free_mask);
        const unsigned want = run < children ? run : 0;
        auto it = listed.find(chunk);
        const unsigned got = it == listed.end() ? 0 : it->second;
        if (it != listed.end())
            listed.erase(it);
        return got == want && listed_run == want;
    };
    uint64_t bytes[kChunkStates][kSizeIndexCount] = {};
    uint64_t split[kSizeIndexCount] = {};
    uint64_t roots = 0, free_roots = 0;
    std::vector<uint64_t> pending(kMaxHolders, 0);
    for (size_t idx = 0; idx < roots_.size(); ++idx) {
        const RootChunk *root = roots_[idx];
        if (!root) {
            if (free_roots_.test(idx) || free_short_.test(idx))
                return false;
            continue;
        }
        roots++;
        if (root->phys != idx * kRootChunkSize)
            return false;
        if (free_roots_.test(idx) != (root->state == ChunkState::Free) ||
            free_short_.test(idx) != (root->state == ChunkState::Free && !root->large))
            return false;
        free_roots += root->state == ChunkState::Free;
        if (root->holder >= 0) {  // pending: allocated, in its holder's bitmaps and no other's
            const HolderState &h = holders_[static_cast<size_t>(root->holder)];
            if (!h.used || !is_allocated_state(root->state) || !h.roots.test(idx) ||
                h.short_roots.test(idx) != !root->large)
                return false;
            pending[root->holder] += kRootChunkSize;
        }
        if (root->state != ChunkState::IsSplit) {
            bytes[static_cast<int>(root->state)][kIndex2M] += kRootChunkSize;
            if (root->listed_run || listed.count(root))
                return false;
            continue;
        }
        split[kIndex2M]++;
        uint32_t free_mask = 0;
        for (uint32_t i = 0; i < k64KPerRoot; ++i) {
            const Chunk64K &chunk = root->children[i];
            if (chunk.root != root || chunk.index != i)
                return false;
            if (chunk.state == ChunkState::Free)
                free_mask |= 1u << i;
            if (chunk.state != ChunkState::IsSplit) {
                bytes[static_cast<int>(chunk.state)][kIndex64K] += kPageSize64K;
                if (chunk.listed_run || listed.count(&chunk))
                    return false;
                continue;
            }
            split[kIndex64K]++;
            if (chunk.free_4k == kAll4KFree)  // should have merged
                return false;
            if (chunk.evictable_4k & chunk.free_4k)
                return false;
            for (uint32_t j = 0; j < k4KPer64K; ++j) {
                const uint16_t bit = static_cast<uint16_t>(1u << j);
                const ChunkState s = (chunk.free_4k & bit)        ? ChunkState::Free
                                     : (chunk.evictable_4k & bit) ? ChunkState::Evictable
                                                                  : ChunkState::Pinned;
                bytes[static_cast<int>(s)][kIndex4K] += kPageSize4K;
            }
            if (!listed_right(&chunk, chunk.listed_run, chunk.free_4k, k4KPer64K))
                return false;
        }
        if (free_mask != root->free_64k || free_mask == kAll64KFree)
            return false;
        if (!listed_right(root, root->listed_run, free_mask, k64KPerRoot))
            return false;
    }
    if (!listed.empty() || roots != root_count_ || free_roots != free_roots_.count() || !free_roots_.check() ||
        !free_short_.check())
        return false;
    for (size_t slot = 0; slot < holders_.size(); ++slot)
        if (pending[slot] != holders_[slot].bytes || holders_[slot].roots.count() * kRootChunkSize != pending[slot])
            return false;
    // Every pending root is in an entry of its holder's of its seq (unless
    // the holder is unlisted: pend_roots).
    for (size_t slot = 0; slot < holders_.size(); ++slot) {
        const HolderState &h = holders_[slot];
        if (h.unlisted)
            continue;
        std::unordered_multimap<uint64_t, const HolderState::Pended *> by_seq;
        for (const HolderState::Pended &e : h.pended)
            by_seq.emplace(e.seq, &e);
        for (size_t i = h.roots.find_first(); i != Bitmap::npos; i = h.roots.find_next(i + 1)) {
            const auto range = by_seq.equal_range(roots_[i]->seq);
            bool found = false;
            for (auto it = range.first; !found && it != range.second; ++it)
                found = i >= it->second->at && i < it->second->at + it->second->count;
            if (!found)
                return false;
        }
    }
    for (int s = 0; s < kChunkStates; ++s)
        for (int i = 0; i < kSizeIndexCount; ++i)
            if (s != static_cast<int>(ChunkState::IsSplit) && bytes[s][i] != bytes_[s][i])
                return false;
    return split[kIndex64K] == split_[kIndex64K] && split[kIndex2M] == split_[kIndex2M];
}

}  // namespace uvm::chunk
