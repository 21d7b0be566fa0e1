// The sim's offload (backend/offload_capability.h, sim/sim_offload.cpp), on
// the backend itself: roots give their memory back and keep their slots,
// the memory they gave is handed out again at other slots, restore takes it
// back (or says OUT_OF_MEMORY), every refusal changes nothing, and the fault
// injection adaptor fails both calls without a trace.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "backend/fault_injection.h"
#include "backend/offload_capability.h"
#include "backend/sharing_capability.h"
#include "common/bitmap.h"
#include "common/sizes.h"
#include "sim/sim_backend.h"

namespace {

using uvm::kRootChunkSize;
using uvm::backend::Backend;
using uvm::backend::CeAddress;
using uvm::backend::FaultInjectingBackend;
using uvm::backend::GpuMemory;
using uvm::backend::OffloadCapability;

constexpr uint64_t M = 1024 * 1024, R = kRootChunkSize;

// One coherent simulated GPU of `size` (its roots can be mapped on the CPU).
std::unique_ptr<Backend> make_sim(uint64_t size) {
    uvm_sim_params_t p;
    std::memset(&p, 0, sizeof(p));
    p.gpu_count = 1;
    p.vidmem_size = size;
    p.cpu_coherent = 1;
    std::unique_ptr<Backend> b;
    EXPECT_EQ(uvm::sim::create_sim_backend(p, &b), UVM_OK);
    return b;
}

// The `count` roots of a run from `phys`.
std::vector<uint64_t> run(uint64_t phys, size_t count) {
    std::vector<uint64_t> roots;
    for (size_t i = 0; i < count; ++i)
        roots.push_back(phys + i * R);
    return roots;
}

uint64_t alloc(Backend &b, size_t count, bool remappable = false) {
    uint64_t phys = ~0ull;
    EXPECT_EQ(b.root_chunks_alloc(0, count, remappable, &phys), UVM_OK) << count << " roots";
    return phys;
}

void free_all(Backend &b, const std::vector<uint64_t> &roots) {
    for (uint64_t phys : roots)
        b.root_chunk_free(0, phys);
}

uvm_status_t offload(Backend &b, const std::vector<uint64_t> &roots) {
    return b.offload()->root_chunks_offload(0, roots.data(), roots.size());
}
uvm_status_t restore(Backend &b, const std::vector<uint64_t> &roots) {
    return b.offload()->root_chunks_restore(0, roots.data(), roots.size());
}

void expect_memory(Backend &b, uint64_t held, uint64_t free) {
    const GpuMemory m = b.gpu_memory(0);
    EXPECT_EQ(m.held, held);
    EXPECT_EQ(m.free, free);
}

// The CPU's view of a root (the coherent sim maps its memfd).
uint8_t *cpu_map(Backend &b, uint64_t phys) {
    void *p = nullptr;
    EXPECT_EQ(b.vidmem_cpu_map(0, &phys, 1, R, nullptr, &p), UVM_OK);
    return static_cast<uint8_t *>(p);
}

void fill(Backend &b, uint64_t phys, uint8_t value) {
    uint8_t *p = cpu_map(b, phys);
    std::memset(p, value, R);
    b.vidmem_cpu_unmap(p, R);
}

// Whether every byte of the root reads `value` on the CPU.
bool reads(Backend &b, uint64_t phys, uint8_t value) {
    uint8_t *p = cpu_map(b, phys);
    bool all = true;
    for (uint64_t i = 0; i < R && all; ++i)
        all = p[i] == value;
    b.vidmem_cpu_unmap(p, R);
    return all;
}

// Pages of a CPU mapping that are in host memory.
size_t resident_pages(const void *p) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> v(R / page);
    EXPECT_EQ(mincore(const_cast<void *>(p), R, v.data()), 0);
    size_t n = 0;
    for (unsigned char c : v)
        n += c & 1u;
    return n;
}

// The GPU's copy engine over physical addresses (through the roots' slots).
uvm_status_t gpu_copy(Backend &b, uint64_t to, uint64_t from) {
    CeAddress dst, src;
    dst.address = to;
    src.address = from;
    return b.ce_copy(0, dst, src, R);
}

uint64_t largest(Backend &b, const uvm::Bitmap &held_free) { return b.largest_free_run(0, held_free); }
uvm::Bitmap no_held_free(Backend &b) { return uvm::Bitmap(b.gpu_info(0).phys_space / R); }

}  // namespace

TEST(SimOffload, TheSlotsAreTwiceTheMemoryWithTheImportAreaAbove) {
    auto b = make_sim(32 * M);
    EXPECT_NE(b->offload(), nullptr);
    EXPECT_EQ(b->gpu_info(0).memory_total, 32 * M);
    EXPECT_EQ(b->gpu_info(0).phys_space, 96 * M);
    // Nothing offloaded: the addresses and the limits of a GPU of 32 MiB.
    EXPECT_EQ(alloc(*b, 16), 0u);
    uint64_t phys = 0;
    EXPECT_EQ(b->root_chunks_alloc(0, 1, false, &phys), UVM_ERR_OUT_OF_MEMORY);
    expect_memory(*b, 32 * M, 0);
    // A remappable root exported and imported back lands in the import area.
    free_all(*b, run(0, 16));
    const uint64_t own = alloc(*b, 1, true);
    int fd = -1;
    uint64_t offset = 0, imported = 0;
    ASSERT_EQ(b->sharing()->root_chunk_export(0, own, &fd, &offset), UVM_OK);
    ASSERT_EQ(b->sharing()->roots_import(0, &fd, &offset, 1, &imported), UVM_OK);
    EXPECT_EQ(imported, 64 * M);
    fill(*b, own, 0x5a);
    EXPECT_TRUE(reads(*b, imported, 0x5a));  // the same pages
    expect_memory(*b, 2 * M, 30 * M);        // an import holds none of this GPU's memory
    b->sharing()->roots_import_release(0, imported, 1);
    close(fd);
    b->root_chunk_free(0, own);
    expect_memory(*b, 0, 32 * M);
}

TEST(SimOffload, OffloadAndRestoreKeepTheAddressesAndGiveTheMemoryBack) {
    auto b = make_sim(32 * M);  // 16 roots
    const std::vector<uint64_t> gone = run(alloc(*b, 4), 4), kept = run(alloc(*b, 2), 2);
    EXPECT_EQ(gone[0], 0u);
    EXPECT_EQ(kept[0], 8 * M);
    for (uint64_t phys : gone)
        fill(*b, phys, 0xab);
    for (uint64_t phys : kept)
        fill(*b, phys, 0xcd);
    expect_memory(*b, 12 * M, 20 * M);
    uint8_t *view = cpu_map(*b, gone[1]);  // watched, never touched while offloaded
    EXPECT_EQ(resident_pages(view), R / static_cast<uint64_t>(sysconf(_SC_PAGESIZE)));

    ASSERT_EQ(offload(*b, gone), UVM_OK);
    expect_memory(*b, 4 * M, 28 * M);
    EXPECT_EQ(resident_pages(view), 0u);  // the host pages went back
    b->vidmem_cpu_unmap(view, R);
    // The memory they gave is handed out again, at other slots: all of it,
    // and no more.
    const uint64_t other = alloc(*b, 14);
    EXPECT_EQ(other, 12 * M);  // above the kept roots, the offloaded ones' slots held
    expect_memory(*b, 32 * M, 0);
    uint64_t phys = 0;
    EXPECT_EQ(b->root_chunks_alloc(0, 1, false, &phys), UVM_ERR_OUT_OF_MEMORY);
    free_all(*b, run(other, 14));
    expect_memory(*b, 4 * M, 28 * M);

    ASSERT_EQ(restore(*b, gone), UVM_OK);
    expect_memory(*b, 12 * M, 20 * M);
    // Restored at the same addresses, reading zero through the GPU's view
    // (the slot) and the CPU's, and written through the slot again.
    for (uint64_t g : gone) {
        fill(*b, kept[0], 0xcd);
        ASSERT_EQ(gpu_copy(*b, kept[0], g), UVM_OK);
        EXPECT_TRUE(reads(*b, kept[0], 0));
        EXPECT_TRUE(reads(*b, g, 0));
    }
    fill(*b, kept[0], 0xcd);
    ASSERT_EQ(gpu_copy(*b, gone[2], kept[0]), UVM_OK);
    EXPECT_TRUE(reads(*b, gone[2], 0xcd));
    EXPECT_TRUE(reads(*b, kept[1], 0xcd));  // never offloaded: its bytes kept
    free_all(*b, gone);
    free_all(*b, kept);
    expect_memory(*b, 0, 32 * M);
    EXPECT_EQ(largest(*b, no_held_free(*b)), 16u);
}

TEST(SimOffload, RestoreOnAFullGpuSaysOutOfMemoryAndChangesNothing) {
    auto b = make_sim(32 * M);
    const std::vector<uint64_t> half = run(alloc(*b, 8), 8), rest = run(alloc(*b, 8), 8);
    expect_memory(*b, 32 * M, 0);
    ASSERT_EQ(offload(*b, half), UVM_OK);
    const std::vector<uint64_t> elsewhere = run(alloc(*b, 8), 8);
    EXPECT_EQ(elsewhere[0], 32 * M);  // past the memory's slots
    expect_memory(*b, 32 * M, 0);

    EXPECT_EQ(restore(*b, half), UVM_ERR_OUT_OF_MEMORY);
    EXPECT_EQ(restore(*b, {half[0]}), UVM_ERR_OUT_OF_MEMORY);  // not even one
    expect_memory(*b, 32 * M, 0);
    EXPECT_EQ(offload(*b, {half[3]}), UVM_ERR_INVALID_ARGUMENT);  // still offloaded

    free_all(*b, rest);
    EXPECT_EQ(restore(*b, half), UVM_OK);
    expect_memory(*b, 32 * M, 0);
    EXPECT_TRUE(reads(*b, half[7], 0));
    free_all(*b, half);
    free_all(*b, elsewhere);
    expect_memory(*b, 0, 32 * M);
}

TEST(SimOffload, BadListsAreRefusedWholeAndChangeNothing) {
    auto b = make_sim(32 * M);
    const std::vector<uint64_t> two = run(alloc(*b, 2), 2);
    const uint64_t free_slot = 10 * M;
    fill(*b, two[0], 0x11);
    // Not roots at all, or not given.
    EXPECT_EQ(offload(*b, {1}), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(offload(*b, {b->gpu_info(0).phys_space}), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(offload(*b, {free_slot}), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(offload(*b, {40 * M}), UVM_ERR_INVALID_ARGUMENT);  // a slot past the memory, free
    EXPECT_EQ(offload(*b, {64 * M}), UVM_ERR_INVALID_ARGUMENT);  // the import area, empty
    EXPECT_EQ(restore(*b, {free_slot}), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(restore(*b, {1}), UVM_ERR_INVALID_ARGUMENT);
    // A backed root restored; a good root with a bad one, or named twice.
    EXPECT_EQ(restore(*b, {two[0]}), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(offload(*b, {two[0], free_slot}), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(offload(*b, {two[0], two[1], two[0]}), UVM_ERR_INVALID_ARGUMENT);
    expect_memory(*b, 4 * M, 28 * M);
    EXPECT_TRUE(reads(*b, two[0], 0x11));  // its pages untouched
    EXPECT_EQ(restore(*b, {two[0]}), UVM_ERR_INVALID_ARGUMENT);  // none of them offloaded

    // Offloaded: again is refused; a restore list with a bad entry too.
    ASSERT_EQ(offload(*b, two), UVM_OK);
    EXPECT_EQ(offload(*b, {two[1]}), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(restore(*b, {two[0], free_slot}), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(restore(*b, {two[1], two[1]}), UVM_ERR_INVALID_ARGUMENT);
    expect_memory(*b, 0, 32 * M);
    EXPECT_EQ(restore(*b, two), UVM_OK);  // both were still offloaded
    expect_memory(*b, 4 * M, 28 * M);
    EXPECT_EQ(offload(*b, {}), UVM_OK);  // nothing to do
    EXPECT_EQ(restore(*b, {}), UVM_OK);

    // Shared roots: an exported one and an imported one cannot go.
    const uint64_t shared = alloc(*b, 1, true);
    int fd = -1;
    uint64_t offset = 0, imported = 0;
    ASSERT_EQ(b->sharing()->root_chunk_export(0, shared, &fd, &offset), UVM_OK);
    ASSERT_EQ(b->sharing()->roots_import(0, &fd, &offset, 1, &imported), UVM_OK);
    EXPECT_EQ(offload(*b, {shared}), UVM_ERR_NOT_SUPPORTED);
    EXPECT_EQ(offload(*b, {imported}), UVM_ERR_NOT_SUPPORTED);
    EXPECT_EQ(offload(*b, {two[0], shared}), UVM_ERR_NOT_SUPPORTED);
    expect_memory(*b, 6 * M, 26 * M);
    b->sharing()->roots_import_release(0, imported, 1);
    close(fd);
    b->root_chunk_free(0, shared);
    // Freed and given again, the slot is a fresh root: it can go, and an
    // offloaded root has nothing to export.
    const uint64_t again = alloc(*b, 1, true);
    EXPECT_EQ(again, shared);
    EXPECT_EQ(offload(*b, {again}), UVM_OK);
    int none = -1;
    EXPECT_EQ(b->sharing()->root_chunk_export(0, again, &none, &offset), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(none, -1);
    free_all(*b, {again});
    free_all(*b, two);
    expect_memory(*b, 0, 32 * M);
}

TEST(SimOffload, FreeingAnOffloadedRootGivesItsSlotAndCountsNothing) {
    auto b = make_sim(32 * M);
    const std::vector<uint64_t> two = run(alloc(*b, 2), 2);
    ASSERT_EQ(offload(*b, {two[0]}), UVM_OK);
    expect_memory(*b, 2 * M, 30 * M);
    b->root_chunk_free(0, two[0]);
    expect_memory(*b, 2 * M, 30 * M);  // it held no memory
    // The slot is free again, lowest first, and a plain root there works.
    const uint64_t next = alloc(*b, 1);
    EXPECT_EQ(next, two[0]);
    fill(*b, next, 0x77);
    EXPECT_TRUE(reads(*b, next, 0x77));
    EXPECT_EQ(offload(*b, {next}), UVM_OK);
    EXPECT_EQ(restore(*b, {next}), UVM_OK);
    EXPECT_TRUE(reads(*b, next, 0));
    free_all(*b, {next, two[1]});
    expect_memory(*b, 0, 32 * M);
    EXPECT_EQ(largest(*b, no_held_free(*b)), 16u);
}

// largest_free_run's figure is what one root_chunks_alloc can give: bounded
// by the free slots where they are short, by the memory where it is.
TEST(SimOffload, LargestFreeRunWithOffloadedRootsIsWhatAllocGives) {
    auto b = make_sim(32 * M);  // 16 roots
    std::vector<uint64_t> singles;
    for (int i = 0; i < 16; ++i)
        singles.push_back(alloc(*b, 1));
    ASSERT_EQ(offload(*b, run(0, 4)), UVM_OK);  // slots 16-19 open to 4 roots of memory
    for (int i : {5, 7, 9})
        b->root_chunk_free(0, singles[i]);
    // 7 roots of memory left, but the longest run of slots is 16-19.
    EXPECT_EQ(largest(*b, no_held_free(*b)), 4u);
    uint64_t phys = 0;
    EXPECT_EQ(b->root_chunks_alloc(0, 5, false, &phys), UVM_ERR_OUT_OF_MEMORY);
    // Were roots 6 and 8 given back, 5-9 would be a run of 5 (memory 9).
    uvm::Bitmap held_free = no_held_free(*b);
    held_free.set(6);
    held_free.set(8);
    EXPECT_EQ(largest(*b, held_free), 5u);
    // Were offloaded roots 2 and 3 given back, slots 18 and 19 would close
    // (the window narrows): slots 2-3 and 16-17 are runs of 2, 4 is taken.
    held_free = no_held_free(*b);
    held_free.set_range(2, 2);
    EXPECT_EQ(largest(*b, held_free), 2u);
    const uint64_t top = alloc(*b, 4);
    EXPECT_EQ(top, 32 * M);
    EXPECT_EQ(largest(*b, no_held_free(*b)), 1u);  // 5, 7 or 9
    b->root_chunk_free(0, singles[6]);
    b->root_chunk_free(0, singles[8]);
    EXPECT_EQ(largest(*b, no_held_free(*b)), 5u);
    phys = alloc(*b, 5);
    EXPECT_EQ(phys, 10 * M);
    EXPECT_EQ(largest(*b, no_held_free(*b)), 0u);  // memory: none left
    EXPECT_EQ(b->root_chunks_alloc(0, 1, false, &phys), UVM_ERR_OUT_OF_MEMORY);
    free_all(*b, run(10 * M, 5));
    free_all(*b, run(top, 4));

    // Bounded by the memory, where the slots are not short.
    free_all(*b, run(0, 4));
    for (int i : {4, 10, 11, 12, 13, 14, 15})
        b->root_chunk_free(0, singles[i]);
    const std::vector<uint64_t> four = run(alloc(*b, 4), 4);
    EXPECT_EQ(four[0], 0u);
    ASSERT_EQ(offload(*b, {four[0], four[1]}), UVM_OK);
    const uint64_t big = alloc(*b, 8);  // slots 4-11
    EXPECT_EQ(big, 8 * M);
    // Backed: 2-3 and 4-11 = 10; memory left 6; free slots 12-17 (window 18) = 6.
    EXPECT_EQ(largest(*b, no_held_free(*b)), 6u);
    const uint64_t six = alloc(*b, 6);
    EXPECT_EQ(six, 24 * M);
    EXPECT_EQ(largest(*b, no_held_free(*b)), 0u);
    free_all(*b, run(six, 6));
    free_all(*b, run(big, 8));
    // Slots free: 4-17 (14) in the window; memory left 14; restore takes 2.
    EXPECT_EQ(largest(*b, no_held_free(*b)), 14u);
    ASSERT_EQ(restore(*b, {four[0], four[1]}), UVM_OK);
    EXPECT_EQ(largest(*b, no_held_free(*b)), 12u);  // window 16 again: 4-15
    free_all(*b, four);
    expect_memory(*b, 0, 32 * M);
    EXPECT_EQ(largest(*b, no_held_free(*b)), 16u);
}

TEST(SimOffload, RemappableRootsInTheirOwnMemfdOffloadAndRestore) {
    auto b = make_sim(32 * M);
    const std::vector<uint64_t> three = run(alloc(*b, 3, true), 3);
    for (uint64_t phys : three)
        fill(*b, phys, 0x3c);
    uint8_t *view = cpu_map(*b, three[0]);  // its run's memfd
    EXPECT_GT(resident_pages(view), 0u);
    ASSERT_EQ(offload(*b, {three[0], three[2]}), UVM_OK);
    expect_memory(*b, 2 * M, 30 * M);
    EXPECT_EQ(resident_pages(view), 0u);  // punched from the run's memfd
    b->vidmem_cpu_unmap(view, R);
    EXPECT_TRUE(reads(*b, three[1], 0x3c));  // its neighbour in the run kept

    // Others take the memory meanwhile, then restore fails until it is back.
    const uint64_t filler = alloc(*b, 15);
    EXPECT_EQ(restore(*b, {three[0], three[2]}), UVM_ERR_OUT_OF_MEMORY);
    b->root_chunk_free(0, filler);
    EXPECT_EQ(restore(*b, {three[0], three[2]}), UVM_ERR_OUT_OF_MEMORY);  // one short
    free_all(*b, run(filler + R, 14));
    ASSERT_EQ(restore(*b, {three[0], three[2]}), UVM_OK);
    expect_memory(*b, 6 * M, 26 * M);
    EXPECT_TRUE(reads(*b, three[0], 0));
    EXPECT_TRUE(reads(*b, three[2], 0));
    EXPECT_TRUE(reads(*b, three[1], 0x3c));
    // Through the slot: the restored root's slot maps its run's memfd again.
    ASSERT_EQ(gpu_copy(*b, three[0], three[1]), UVM_OK);
    EXPECT_TRUE(reads(*b, three[0], 0x3c));
    // Exportable again, and freed while offloaded.
    int fd = -1;
    uint64_t offset = 0;
    ASSERT_EQ(b->sharing()->root_chunk_export(0, three[0], &fd, &offset), UVM_OK);
    EXPECT_EQ(offset, 0u);
    close(fd);
    ASSERT_EQ(offload(*b, {three[2]}), UVM_OK);
    free_all(*b, three);
    expect_memory(*b, 0, 32 * M);
    // The slots have the GPU's memfd back: a plain root there works.
    const uint64_t plain = alloc(*b, 3);
    EXPECT_EQ(plain, three[0]);
    fill(*b, plain + 2 * R, 0x42);
    ASSERT_EQ(gpu_copy(*b, plain, plain + 2 * R), UVM_OK);
    EXPECT_TRUE(reads(*b, plain, 0x42));
    free_all(*b, run(plain, 3));
}

// Four threads, each with roots of its own, offload, restore, allocate and
// free at once; the counts come out right.
TEST(SimOffload, FourThreadsOffloadAndRestoreTheirOwnRootsAtOnce) {
    auto b = make_sim(64 * M);  // 32 roots: at most 4 x 3 backed at a time
    Backend &backend = *b;
    std::vector<std::thread> threads;
    std::vector<int> failures(4, 0);
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&backend, &failures, t] {
            for (int i = 0; i < 200; ++i) {
                uint64_t two = 0, one = 0;
                if (backend.root_chunks_alloc(0, 2, (i + t) % 2 == 0, &two) != UVM_OK) {
                    ++failures[t];
                    continue;
                }
                const std::vector<uint64_t> mine = run(two, 2);
                bool ok = backend.offload()->root_chunks_offload(0, mine.data(), 2) == UVM_OK;
                ok &= backend.root_chunks_alloc(0, 1, false, &one) == UVM_OK;
                if (i % 3 == 0) {
                    backend.root_chunk_free(0, mine[1]);  // freed while offloaded
                    ok &= backend.offload()->root_chunks_restore(0, mine.data(), 1) == UVM_OK;
                    backend.root_chunk_free(0, mine[0]);
                } else {
                    ok &= backend.offload()->root_chunks_restore(0, mine.data(), 2) == UVM_OK;
                    ok &= backend.offload()->root_chunks_offload(0, &mine[1], 1) == UVM_OK;
                    free_all(backend, mine);
                }
                if (ok)
                    backend.root_chunk_free(0, one);
                failures[t] += !ok;
            }
        });
    }
    for (auto &t : threads)
        t.join();
    for (int t = 0; t < 4; ++t)
        EXPECT_EQ(failures[t], 0) << "thread " << t;
    expect_memory(backend, 0, 64 * M);
    EXPECT_EQ(largest(backend, no_held_free(backend)), 32u);
    EXPECT_EQ(alloc(backend, 32), 0u);  // every slot of the memory free again
    free_all(backend, run(0, 32));
}

// An injected failure of offload or restore reaches nothing: the roots stay
// as they were, and the retry succeeds.
TEST(SimOffload, InjectedFailuresOfOffloadAndRestoreLeaveEverythingAsItWas) {
    FaultInjectingBackend faults(make_sim(32 * M));
    ASSERT_NE(faults.offload(), nullptr);
    const std::vector<uint64_t> two = run(alloc(faults, 2, true), 2);
    fill(faults, two[0], 0x99);
    faults.fail_call(1);
    EXPECT_EQ(offload(faults, two), UVM_ERR_BACKEND);
    EXPECT_TRUE(faults.fired());
    faults.fail_call(0);
    expect_memory(faults, 4 * M, 28 * M);
    EXPECT_TRUE(reads(faults, two[0], 0x99));
    EXPECT_EQ(restore(faults, two), UVM_ERR_INVALID_ARGUMENT);  // not offloaded
    ASSERT_EQ(offload(faults, two), UVM_OK);
    expect_memory(faults, 0, 32 * M);

    faults.fail_call(1);
    EXPECT_EQ(restore(faults, two), UVM_ERR_BACKEND);
    EXPECT_TRUE(faults.fired());
    faults.fail_call(0);
    expect_memory(faults, 0, 32 * M);
    EXPECT_EQ(offload(faults, two), UVM_ERR_INVALID_ARGUMENT);  // still offloaded
    ASSERT_EQ(restore(faults, two), UVM_OK);
    expect_memory(faults, 4 * M, 28 * M);
    EXPECT_TRUE(reads(faults, two[0], 0));
    // Counted as every failable call is: the second of two fails.
    faults.fail_call(2);
    EXPECT_EQ(offload(faults, {two[0]}), UVM_OK);
    EXPECT_EQ(restore(faults, {two[0]}), UVM_ERR_BACKEND);
    EXPECT_EQ(faults.calls(), 2u);
    faults.fail_call(0);
    EXPECT_EQ(restore(faults, {two[0]}), UVM_OK);
    free_all(faults, two);
    expect_memory(faults, 0, 32 * M);
}
