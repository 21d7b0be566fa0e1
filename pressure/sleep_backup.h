// A sleepable client's backup: the pinned host memory its sleeps copy the
// kept bytes into (uvm_pressure.h, "Host memory of a sleep").
//
// Pieces of host memory laid end to end in one offset space, in which a
// sleep lays out its GPUs' images one after the other. Each piece is
// allocated and DMA-mapped for every GPU (on CUDA, pinned) once, by the
// backend's sysmem calls, and stays so until it goes back whole. Pinning is
// what made a first sleep slow (the page faults and the pinning cost more
// than the copy): pieces are made by several threads at once, and a sleep
// copies into each as soon as it is ready (wait in at()), so that the copy
// overlaps the pinning of what follows; a reserve made ahead pins nothing
// during the sleep at all.
//
// Thread safety: every call but held() and the workers' own is made under
// the client's sleep gate held exclusive (sleep.h), so by one thread at a
// time; the workers touch only their own pieces and the ready flags, under
// lock_.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "uvm/uvm.h"

namespace uvm {

class Manager;

class SleepBackup {
public:
    // Pieces of at most 64 MiB (Manager::sleep_piece_bytes; the last of a
    // growth holds the rest, to the byte): small enough that a few
    // gigabytes keep several threads busy and the first copy starts early,
    // large enough that the calls per piece cost nothing beside its pinning.
    static constexpr uint32_t kMaxThreads = 64;

    explicit SleepBackup(Manager &mgr);
    ~SleepBackup();  // every piece must have gone back (release())
    SleepBackup(const SleepBackup &) = delete;
    SleepBackup &operator=(const SleepBackup &) = delete;

    // Host memory held, ready or being made ready. Any thread.
    uint64_t held() const { return held_.load(); }

    // Start making `bytes` more ready (a multiple of 4 KiB), in new pieces
    // after the last, by up to `threads` threads (0: the default). The
    // bytes are counted against the manager's limit for backups first, less
    // `credit` bytes the caller gives back right after (HOST_LIMIT, nothing
    // started, where they would pass it); OUT_OF_MEMORY where the host has
    // not that much memory at all. The pieces are ready as at() finds them.
    uvm_status_t start_growth(uint64_t bytes, uint32_t threads, uint64_t credit = 0);
    // Wait for the growth's workers; the first failure among its pieces,
    // and then the growth is undone (the backup holds what it held before).
    uvm_status_t finish_growth();
    // The growth finished: keep it, or give its pieces back (a failed
    // sleep's). Either does nothing where no growth is open.
    void commit_growth() { growing_ = false; }
    void undo_growth();
    // All three: `bytes` more, ready on return, or nothing changed.
    uvm_status_t grow(uint64_t bytes, uint32_t threads, uint64_t credit = 0);

    // The DMA address for `gpu` of the byte at `offset`, and how many bytes
    // from it are in the same piece; waits while its piece is being made
    // ready. The status of the piece's making (a failed one's failure).
    uvm_status_t at(uint32_t gpu, uint64_t offset, uint64_t *dma, uint64_t *contiguous);

    // How many pieces from the first hold together at most `bytes` (as
    // many as can), and in *held what they hold.
    size_t pieces_within(uint64_t bytes, uint64_t *held) const;
    // Give back pieces [first, end) (no image may be in them), by up to
    // `threads` threads (0: the default); the rest close up.
    void release_pieces(size_t first, size_t end, uint32_t threads);
    // Give back whole pieces from the last while the rest still holds at
    // least `bytes`; what stays.
    uint64_t shrink_to(uint64_t bytes, uint32_t threads);
    size_t pieces() const { return pieces_.size(); }
    // Every piece back (no growth may be open).
    void release();

private:
    struct Piece {
        backend::HostAllocation host;
        uint64_t start = 0;
        uint64_t size = 0;
        uint64_t dma[UVM_MAX_GPUS] = {};
        bool ready = false;  // under lock_
        uvm_status_t status = UVM_OK;
    };
    static uint32_t default_threads(uint32_t threads);  // 0: the host's CPUs, at most 8
    uvm_status_t make(Piece &p);  // allocate and map for every GPU, or nothing
    void give_back(Piece &p);
    void work();  // a worker: pieces from next_ until none is left
    bool charge(uint64_t bytes, uint64_t credit);
    void uncharge(uint64_t bytes);

    Manager &mgr_;
    std::vector<std::unique_ptr<Piece>> pieces_;  // by start
    std::atomic<uint64_t> held_{0};
    // The growth open: pieces_[growth_first_ ..), made by workers_.
    bool growing_ = false;
    size_t growth_first_ = 0;
    std::atomic<size_t> next_{0};
    std::atomic<bool> failed_{false};
    std::vector<std::thread> workers_;
    std::mutex lock_;
    std::condition_variable ready_;
};

}  // namespace uvm
