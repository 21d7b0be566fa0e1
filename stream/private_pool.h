// Private pools (uvm_pool_create): GPU memory kept for the CUDA graphs whose
// captures allocate to it, as PyTorch keeps a graph's private memory pool
// (docs/design.md, "Private pools").
//
//  - A stream set to a pool (uvm_stream_set_pool) allocates to it: the
//    allocation path's private-pool source (alloc/alloc_path.h) takes the
//    pool's free memory first, then new memory from the PMM, never memory
//    freed outside the pool (a stream's pool, its parked objects or pending
//    roots, which work queued before the capture may still use when the
//    graph is launched elsewhere). The object belongs to the pool (Mem::pool).
//  - An object of a pool, freed, leaves its memory to the pool: freed on a
//    stream, for the pool's later allocations on that stream (the stream
//    orders them, within a capture as outside one; once the stream is
//    synchronized or destroyed, for any of them); freed once its work is
//    done, for any of them. Nothing else takes it: not trim, not the OOM
//    path, not a release threshold.
//  - Destroyed (uvm_pool_destroy, once no stream allocates to it), its free
//    memory goes back to the GPU when the work queued so far on every stream
//    of the GPU is done (the graphs' launches among it: Streams::retire_run);
//    objects still live go back as anyone's when freed.
//
// Thread safety: every method may be called concurrently. A pool's lock is a
// leaf, taken after an object's and a stream's.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/handle_table.h"
#include "uvm/mem.h"
#include "uvm/uvm.h"

namespace uvm {

struct Stream;

struct PrivatePool {
    uint64_t id = 0;
    uint32_t gpu = 0;
    std::mutex lock;
    bool destroyed = false;  // its handle is gone: its objects' memory is anyone's when freed
    struct FreeRun {
        ReusedRun run;
        // Freed on it, for its next allocations to the pool; null: its work
        // is done, for any stream.
        std::shared_ptr<Stream> stream;
    };
    std::vector<FreeRun> free;  // newest last
    uint64_t free_bytes = 0;
    uint64_t live_bytes = 0;  // its objects' chunks
    uint64_t objects = 0;
    uint32_t streams = 0;  // streams set to it (uvm_stream_set_pool)
};

class PrivatePools {
public:
    explicit PrivatePools(uint16_t manager_id) : table_(manager_id) {}

    uvm_status_t create(uint32_t gpu, uvm_pool_t **out);
    // The pool a handle names, or an empty pointer (valid until this
    // thread's next lookup, as HandleTable::lookup).
    const std::shared_ptr<PrivatePool> &lookup(const uvm_pool_t *handle);
    // Take the pool's handle: BUSY (nothing done) while a stream allocates to
    // it. Its free runs go to *runs, for the caller to give back.
    uvm_status_t destroy(const uvm_pool_t *handle, std::vector<ReusedRun> *runs);

    // A free run of `want`'s kind and count for an allocation on `stream`:
    // freed on it or for any stream; the fewest chunks that are enough, the
    // rest staying free (as Streams::pool_take).
    static bool take(PrivatePool &pool, const Stream *stream, const ReusedRun &want, ReusedRun *out);
    // A run taken and not used back into the free memory, for `stream`'s
    // allocations (null: anyone's). False where the pool was destroyed
    // meanwhile: the run is then the caller's to give back.
    static bool put(PrivatePool &pool, const ReusedRun &run, std::shared_ptr<Stream> stream);
    // An object of the pool made, of `bytes` of chunks.
    static void joined(PrivatePool &pool, uint64_t bytes);
    // An object of the pool ended, its chunks detached as `run`: into the
    // free memory as put() does, with the same answer.
    static bool returned(PrivatePool &pool, const ReusedRun &run, std::shared_ptr<Stream> stream);

    // The work queued on `stream` so far is done (synchronized, destroyed):
    // the runs freed on it serve any stream.
    void settled(const Stream *stream);
    // The free bytes the pools of `gpu` hold (uvm_gpu_stats' held_private_bytes).
    uint64_t free_bytes(uint32_t gpu);
    uint64_t count() { return table_.size(); }
    // Teardown: every pool's free runs to *runs, the table emptied.
    void drain(std::vector<ReusedRun> *runs);

private:
    HandleTable<PrivatePool> table_;
};

}  // namespace uvm
