#include "observe/trace.h"

#include <chrono>
#include <cstring>
#include <new>
#include <thread>

#include "common/assert.h"

namespace uvm {

namespace {

// A slot's sequence word while its writer fills it (the seqlock's odd state):
// an export skips it, a newer writer of the same slot waits for it.
constexpr uint64_t kBusy = 1ull << 63;

uint64_t now_ns() {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
}

uint64_t pack(const TraceRecord &r) {
    return static_cast<uint64_t>(r.kind) | (static_cast<uint64_t>(r.backing) << 8) |
           (static_cast<uint64_t>(r.gpu & 0xff) << 16) | (static_cast<uint64_t>(r.target & 0xff) << 24) |
           (static_cast<uint64_t>(r.space) << 32) | (static_cast<uint64_t>(r.evictable) << 40) |
           (static_cast<uint64_t>(r.discarded) << 41);
}

void unpack(uint64_t v, TraceRecord *r) {
    r->kind = static_cast<TraceKind>(v & 0xff);
    r->backing = static_cast<uvm_backing_t>((v >> 8) & 0xff);
    r->gpu = static_cast<uint32_t>((v >> 16) & 0xff);
    r->target = static_cast<uint32_t>((v >> 24) & 0xff);
    r->space = static_cast<MapKind>((v >> 32) & 0xff);
    r->evictable = ((v >> 40) & 1) != 0;
    r->discarded = ((v >> 41) & 1) != 0;
}

}  // namespace

Tracer::~Tracer() { UVM_ASSERT(writers_.load() == 0); }

uvm_status_t Tracer::start(uint64_t ring_bytes) {
    if (ring_bytes == 0)
        ring_bytes = kDefaultRingBytes;
    if (ring_bytes < kMinRingBytes || ring_bytes > kMaxRingBytes)
        return UVM_ERR_INVALID_ARGUMENT;
#if defined(UVM_NO_TRACE)
    return UVM_ERR_NOT_SUPPORTED;
#endif
    std::lock_guard<std::mutex> guard(lock_);
    if (on_.load())
        return UVM_ERR_BUSY;
    uint64_t capacity = 1;
    while (capacity * 2 * kRecordBytes <= ring_bytes)
        capacity *= 2;
    // Off, and stop() waited for the last writer: nobody touches the ring.
    UVM_ASSERT(writers_.load() == 0);
    if (capacity != capacity_) {
        Slot *ring = new (std::nothrow) Slot[capacity];
        if (!ring)
            return UVM_ERR_NO_HOST_MEMORY;
        ring_.reset(ring);
        capacity_ = capacity;
    }
    for (uint64_t i = 0; i < capacity_; ++i)
        ring_[i].w[0].store(0, std::memory_order_relaxed);
    head_.store(0, std::memory_order_relaxed);
    start_ns_ = now_ns();
    stop_ns_ = 0;
    on_.store(true);  // publishes the ring and start_ns_ to record()
    return UVM_OK;
}

uvm_status_t Tracer::stop() {
    std::lock_guard<std::mutex> guard(lock_);
    if (!on())
        return UVM_ERR_NOT_FOUND;
    on_.store(false);
    // Writers that saw it on finish their record before the ring may change.
    while (writers_.load() != 0)
        std::this_thread::yield();
    stop_ns_ = now_ns() - start_ns_;
    return UVM_OK;
}

void Tracer::record(TraceRecord r) {
    writers_.fetch_add(1);
    if (!on_.load()) {  // stopped since the caller looked
        writers_.fetch_sub(1);
        return;
    }
    const uint64_t pos = head_.fetch_add(1, std::memory_order_relaxed);
    Slot &s = ring_[pos & (capacity_ - 1)];
    // Claim the slot: a newer record's (a later turn of the ring) stays and
    // this one goes; an older writer still inside it is waited for.
    uint64_t cur = s.w[0].load(std::memory_order_acquire);
    for (;;) {
        if ((cur & ~kBusy) > pos + 1) {
            writers_.fetch_sub(1, std::memory_order_release);
            return;
        }
        if (cur & kBusy) {
            std::this_thread::yield();
            cur = s.w[0].load(std::memory_order_acquire);
            continue;
        }
        if (s.w[0].compare_exchange_weak(cur, (pos + 1) | kBusy, std::memory_order_acq_rel,
                                         std::memory_order_acquire))
            break;
    }
    s.w[1].store(now_ns() - start_ns_, std::memory_order_relaxed);
    s.w[2].store(r.object, std::memory_order_relaxed);
    s.w[3].store(r.bytes, std::memory_order_relaxed);
    s.w[4].store(pack(r), std::memory_order_relaxed);
    s.w[5].store(reinterpret_cast<uintptr_t>(r.client), std::memory_order_relaxed);
    s.w[6].store(reinterpret_cast<uintptr_t>(r.tag), std::memory_order_relaxed);
    s.w[7].store(r.gpu_held, std::memory_order_relaxed);
    s.w[0].store(pos + 1, std::memory_order_release);
    writers_.fetch_sub(1, std::memory_order_release);
}

bool Tracer::collect(std::vector<TraceRecord> *out, uint64_t *dropped, uint64_t *end_ns) {
    std::lock_guard<std::mutex> guard(lock_);
    if (!ring_)
        return false;
    const uint64_t head = head_.load(std::memory_order_acquire);
    const uint64_t first = head > capacity_ ? head - capacity_ : 0;
    *dropped = first;
    out->clear();
    out->reserve(head - first);
    for (uint64_t i = first; i < head; ++i) {
        Slot &s = ring_[i & (capacity_ - 1)];
        const uint64_t seq = s.w[0].load(std::memory_order_acquire);
        uint64_t w[8];
        for (int k = 1; k < 8; ++k)
            w[k] = s.w[k].load(std::memory_order_relaxed);
        std::atomic_thread_fence(std::memory_order_acquire);
        if (seq != i + 1 || s.w[0].load(std::memory_order_relaxed) != seq) {
            ++*dropped;  // being written, or already overwritten
            continue;
        }
        TraceRecord r;
        r.seq = i;
        r.time_ns = w[1];
        r.object = w[2];
        r.bytes = w[3];
        unpack(w[4], &r);
        r.client = reinterpret_cast<const char *>(static_cast<uintptr_t>(w[5]));
        r.tag = reinterpret_cast<const char *>(static_cast<uintptr_t>(w[6]));
        r.gpu_held = w[7];
        out->push_back(r);
    }
    *end_ns = stop_ns_ ? stop_ns_ : now_ns() - start_ns_;
    return true;
}

void Tracer::info(uvm_trace_info_t *out) {
    std::lock_guard<std::mutex> guard(lock_);
    std::memset(out, 0, sizeof(*out));
    out->enabled = on() ? 1 : 0;
    out->ring_bytes = capacity_ * kRecordBytes;
    out->capacity = capacity_;
    const uint64_t head = head_.load();
    out->recorded = head;
    out->overwritten = head > capacity_ ? head - capacity_ : 0;
}

}  // namespace uvm
