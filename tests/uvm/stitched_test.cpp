// Stitched objects (chunk/pmm.h, "Stitched runs"): a runtime's long
// kernel-mapped object that no free run fits takes free driver allocations
// wherever they are, under one kernel mapping, rather than growing beside them.
#include <gtest/gtest.h>

#include "tests/uvm/fixtures.h"
#include "uvm/uvm_sim.h"

using namespace uvm_test;

namespace {

constexpr uint64_t kMiB = 1ull << 20;

// The managers of these tests stitch (UVM_STITCH=1, read at creation).
class StitchedTest : public ManagerTest {
protected:
    void SetUp() override {
        const StitchingOn on;
        ManagerTest::SetUp();
        if (!IsSkipped() && !HasFatalFailure() && on_cuda())
            warm_up_streams();  // the driver keeps 2 MiB once a context has had a stream
    }
    uvm_gpu_stats_t stats() {
        uvm_gpu_stats_t s;
        EXPECT_EQ(uvm_gpu_stats(mgr_, 0, &s), UVM_OK);
        return s;
    }
    // `last` freed on `stream`, its work waited for, `middle` freed and the
    // stream destroyed: nothing is left live, waiting, pooled nor mapped.
    void end_on(uvm_stream_t *stream, uvm_mem_t *last, uvm_mem_t *middle) {
        ASSERT_EQ(uvm_mem_free_async(mgr_, last, stream), UVM_OK);
        ASSERT_EQ(uvm_stream_synchronize(mgr_, stream), UVM_OK);
        ASSERT_EQ(uvm_mem_free(mgr_, middle), UVM_OK);
        ASSERT_EQ(uvm_stream_destroy(mgr_, stream), UVM_OK);
        const uvm_gpu_stats_t end = stats();
        EXPECT_EQ(end.held_live_bytes, 0u);
        EXPECT_EQ(end.held_retiring_bytes + end.held_pooled_bytes, 0u);
        EXPECT_EQ(end.kernel_mappings, 0u) << "every view gone";
        EXPECT_EQ(end.vidmem_objects, 0u);
        uvm_manager_stats_t ms;
        ASSERT_EQ(uvm_manager_stats(mgr_, &ms), UVM_OK);
        EXPECT_EQ(ms.retiring_objects, 0u);
    }
    // A manager made now (under the test's StitchingSwitch), a 32 MiB
    // object of it allocated where only two 16 MiB holes are free: made of
    // those holes without growing where it stitches, else one run grown.
    void long_object_of_a_new_manager(bool stitches) {
        if (on_cuda()) {
            // A second manager's first objects cost the driver state of its own
            // that it keeps (2 MiB short on the H200 with no driver object of
            // either manager alive): made and gone once before the baseline.
            uvm_manager_t *first = nullptr;
            ASSERT_EQ(make_manager(GetParam(), &first), UVM_OK);
            uvm_mem_t *m = nullptr;
            const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, 32 * kMiB, 0, 0, UVM_MEM_GPU_MAPPED);
            ASSERT_EQ(uvm_mem_alloc(first, &a, &m), UVM_OK);
            ASSERT_EQ(uvm_mem_free(first, m), UVM_OK);
            ASSERT_EQ(uvm_manager_destroy(first), UVM_OK);
            ASSERT_NO_FATAL_FAILURE(rebaseline_free_memory());
        }
        uvm_manager_t *other = nullptr;
        ASSERT_EQ(make_manager(GetParam(), &other), UVM_OK);
        const uvm_mem_alloc_params_t b = alloc_params(UVM_BACKING_VIDMEM, 32 * kMiB, 0, 0, UVM_MEM_GPU_MAPPED);
        uvm_mem_t *middle = nullptr, *d = nullptr;
        ASSERT_NO_FATAL_FAILURE(two_holes(other, &middle));
        uvm_gpu_stats_t before, after;
        ASSERT_EQ(uvm_gpu_stats(other, 0, &before), UVM_OK);
        ASSERT_EQ(uvm_mem_alloc(other, &b, &d), UVM_OK);
        ASSERT_EQ(uvm_gpu_stats(other, 0, &after), UVM_OK);
        uvm_gpu_phys_address_t pa;
        ASSERT_EQ(uvm_mem_gpu_phys_address(other, d, 0, 0, 32 * kMiB, &pa), UVM_OK);
        EXPECT_EQ(pa.contiguous, !stitches);
        if (stitches)
            EXPECT_EQ(after.root_chunks_grown, before.root_chunks_grown) << "grew beside 32 MiB of free roots";
        else
            EXPECT_GE(after.root_chunks_grown, before.root_chunks_grown + 16) << "one run grown";
        ASSERT_EQ(uvm_mem_free(other, d), UVM_OK);
        ASSERT_EQ(uvm_mem_free(other, middle), UVM_OK);
        ASSERT_EQ(uvm_manager_destroy(other), UVM_OK);
    }
    uvm_mem_t *alloc(uint64_t size, uint32_t flags = UVM_MEM_GPU_MAPPED, const char *tag = nullptr) {
        uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, size, 0, 0, flags);
        p.tag = tag;
        uvm_mem_t *m = nullptr;
        EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_OK);
        return m;
    }
};

INSTANTIATE_TEST_SUITE_P(Backends, StitchedTest, ::testing::ValuesIn(backend_names()),
                         [](const ::testing::TestParamInfo<std::string> &i) { return i.param; });

TEST_P(StitchedTest, ALongObjectTakesTheFreeRootsAroundALiveOneAndKeepsItsBytes) {
    uvm_mem_t *middle = nullptr;
    ASSERT_NO_FATAL_FAILURE(two_holes(mgr_, &middle));
    const uvm_gpu_stats_t before = stats();
    uvm_mem_t *d = alloc(32 * kMiB);
    ASSERT_NE(d, nullptr);
    const uvm_gpu_stats_t after = stats();
    EXPECT_EQ(after.root_chunks_grown, before.root_chunks_grown) << "grew beside 32 MiB of free roots";
    EXPECT_EQ(after.held_bytes, before.held_bytes);
    // Its kernel mapping joins both pieces: bytes written chunk by chunk read
    // back the same through it, and the live object in between is untouched.
    ASSERT_EQ(write_pattern(mgr_, middle, 16 * kMiB, 3), UVM_OK);
    ASSERT_EQ(write_pattern(mgr_, d, 32 * kMiB, 7), UVM_OK);
    EXPECT_EQ(wrong_bytes(mgr_, d, 32 * kMiB, 7, UVM_VIEW_KERNEL), 0u);
    EXPECT_EQ(wrong_bytes(mgr_, middle, 16 * kMiB, 3, UVM_VIEW_KERNEL), 0u);
    uint64_t kernel = 0;
    ASSERT_EQ(uvm_mem_gpu_kernel_address(mgr_, d, 0, 0, &kernel), UVM_OK);
    EXPECT_NE(kernel, 0u);
    // Found by any address inside it, as every object is.
    uvm_mem_t *found = nullptr;
    uint64_t offset = 0;
    ASSERT_EQ(uvm_mem_lookup_gpu_kernel(mgr_, 0, kernel + 20 * kMiB, &found, &offset), UVM_OK);
    EXPECT_EQ(found, d);
    EXPECT_EQ(offset, 20 * kMiB);
    ASSERT_EQ(uvm_mem_free(mgr_, d), UVM_OK);
    EXPECT_EQ(stats().bytes_free[2], 32 * kMiB);
    ASSERT_EQ(uvm_mem_free(mgr_, middle), UVM_OK);
}

// A manager made with UVM_STITCH=0 makes every object one run; one made
// with the variable unset stitches (the default).
TEST_P(StitchedTest, AManagerMadeWithStitchingOffMakesOneRun) {
    const StitchingOff off;
    ASSERT_NO_FATAL_FAILURE(long_object_of_a_new_manager(false));
}

TEST_P(StitchedTest, AManagerMadeWithTheVariableUnsetStitches) {
    const StitchingUnset unset;
    ASSERT_NO_FATAL_FAILURE(long_object_of_a_new_manager(true));
}

// Only a runtime's plain kernel-mapped object is stitched: one asked with
// more (a tag, zeroing, evictable) is one run, as before.
TEST_P(StitchedTest, AnObjectAskedWithMoreIsOneRun) {
    uvm_mem_t *middle = nullptr;
    ASSERT_NO_FATAL_FAILURE(two_holes(mgr_, &middle));
    for (const auto &ask : {std::make_pair(UVM_MEM_GPU_MAPPED | UVM_MEM_ZERO, (const char *)nullptr),
                            std::make_pair(UVM_MEM_GPU_MAPPED | UVM_MEM_EVICTABLE, (const char *)nullptr),
                            std::make_pair(UVM_MEM_GPU_MAPPED, "tagged"), std::make_pair(0u, (const char *)nullptr)}) {
        SCOPED_TRACE(ask.first);
        const uint64_t grown = stats().root_chunks_grown;
        uvm_mem_t *d = alloc(32 * kMiB, ask.first, ask.second);
        ASSERT_NE(d, nullptr);
        EXPECT_GE(stats().root_chunks_grown, grown + 16) << "one run of 16 roots fits in no free run";
        ASSERT_EQ(uvm_mem_free(mgr_, d), UVM_OK);
        ASSERT_EQ(uvm_gpu_trim(mgr_, 0, nullptr), UVM_OK);
    }
    ASSERT_EQ(uvm_mem_free(mgr_, middle), UVM_OK);
}

// A compaction never moves it (its mapping names each piece) and keeps its bytes.
TEST_P(StitchedTest, CompactionLeavesItWhereItIs) {
    uvm_mem_t *middle = nullptr;
    ASSERT_NO_FATAL_FAILURE(two_holes(mgr_, &middle));
    uvm_mem_t *d = alloc(32 * kMiB);
    ASSERT_NE(d, nullptr);
    ASSERT_EQ(write_pattern(mgr_, d, 32 * kMiB, 5), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, middle), UVM_OK);
    uvm_compact_result_t r;
    ASSERT_EQ(uvm_gpu_compact(mgr_, 0, UVM_COMPACT_RELEASE, &r), UVM_OK);
    EXPECT_GE(r.objects_pinned, 1u);
    EXPECT_EQ(wrong_bytes(mgr_, d, 32 * kMiB, 5, UVM_VIEW_KERNEL), 0u);
    ASSERT_EQ(uvm_mem_free(mgr_, d), UVM_OK);
}

// Freed on a stream that parks nothing (a release threshold is set), its
// runs are the stream's at once: the next long request there takes them
// again, nothing grown; its kernel view waits for the stream's work.
TEST_P(StitchedTest, FreedOnAStreamItsRootsComeBackOnceTheWorkIsDone) {
    uvm_stream_t *stream = nullptr;
    ASSERT_EQ(uvm_stream_create(mgr_, 0, nullptr, &stream), UVM_OK);  // every backend has streams
    ASSERT_EQ(uvm_gpu_set_release_threshold(mgr_, 0, 1ull << 30), UVM_OK);
    uvm_mem_t *middle = nullptr;
    ASSERT_NO_FATAL_FAILURE(two_holes(mgr_, &middle));
    const uint64_t grown = stats().root_chunks_grown;
    const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 32 * kMiB, 0, 0, UVM_MEM_GPU_MAPPED);
    uvm_mem_t *d = nullptr;
    uint64_t address = 0;
    ASSERT_EQ(uvm_mem_alloc_gpu(mgr_, &p, stream, &d, &address), UVM_OK);
    EXPECT_NE(address, 0u);
    EXPECT_EQ(stats().root_chunks_grown, grown);
    ASSERT_EQ(uvm_mem_free_async(mgr_, d, stream), UVM_OK);
    uvm_mem_t *again = nullptr;
    const uvm_mem_alloc_params_t q = alloc_params(UVM_BACKING_VIDMEM, 32 * kMiB, 0, 0, UVM_MEM_GPU_MAPPED);
    ASSERT_EQ(uvm_mem_alloc_gpu(mgr_, &q, stream, &again, &address), UVM_OK);
    EXPECT_EQ(stats().root_chunks_grown, grown) << "the freed object's runs serve the stream's next request";
    ASSERT_EQ(write_pattern(mgr_, again, 32 * kMiB, 4), UVM_OK);
    EXPECT_EQ(wrong_bytes(mgr_, again, 32 * kMiB, 4, UVM_VIEW_KERNEL), 0u);
    ASSERT_NO_FATAL_FAILURE(end_on(stream, again, middle));
}

// Freed on its stream, it is parked whole, as any runtime's object of one
// run is: the stream's next request of its size takes it back, view and
// all, with nothing grown or mapped anew; a long request of another size
// then takes its runs (pieces of the new object), its view retiring on the
// stream's work. On sim that work is held, so that a view not parked would
// still be mapped (retiring) when the next object is placed.
TEST_P(StitchedTest, FreedOnAStreamItIsParkedWholeForItsSize) {
    uvm_stream_t *stream = nullptr;
    ASSERT_EQ(uvm_stream_create(mgr_, 0, nullptr, &stream), UVM_OK);  // every backend has streams
    uvm_mem_t *middle = nullptr;
    ASSERT_NO_FATAL_FAILURE(two_holes(mgr_, &middle));
    const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 32 * kMiB, 0, 0, UVM_MEM_GPU_MAPPED);
    uvm_mem_t *d = nullptr;
    uint64_t first = 0, again_address = 0;
    ASSERT_EQ(uvm_mem_alloc_gpu(mgr_, &p, stream, &d, &first), UVM_OK);
    uvm_gpu_phys_address_t pa;
    ASSERT_EQ(uvm_mem_gpu_phys_address(mgr_, d, 0, 0, 32 * kMiB, &pa), UVM_OK);
    ASSERT_FALSE(pa.contiguous) << "stitched";
    ASSERT_EQ(write_pattern(mgr_, d, 32 * kMiB, 9), UVM_OK);
    const bool held = !on_cuda();
    if (held)
        ASSERT_EQ(uvm_sim_stream_hold(mgr_, stream), UVM_OK);
    const uvm_gpu_stats_t before = stats();
    ASSERT_EQ(uvm_mem_free_async(mgr_, d, stream), UVM_OK);
    EXPECT_EQ(stats().kernel_mappings, before.kernel_mappings - 1) << "parked: no object's mapping";
    const uvm_mem_alloc_params_t q = alloc_params(UVM_BACKING_VIDMEM, 31 * kMiB, 0, 0, UVM_MEM_GPU_MAPPED);
    uvm_mem_t *again = nullptr;
    ASSERT_EQ(uvm_mem_alloc_gpu(mgr_, &q, stream, &again, &again_address), UVM_OK);
    EXPECT_EQ(again_address, first) << "the parked object, its view kept";
    EXPECT_EQ(stats().root_chunks_grown, before.root_chunks_grown);
    EXPECT_EQ(stats().kernel_mappings, before.kernel_mappings);
    EXPECT_EQ(wrong_bytes(mgr_, again, 31 * kMiB, 9, UVM_VIEW_KERNEL), 0u) << "the same memory";
    uvm_mem_t *found = nullptr;
    uint64_t offset = 0;
    ASSERT_EQ(uvm_mem_lookup_gpu_kernel(mgr_, 0, first + 20 * kMiB, &found, &offset), UVM_OK);
    EXPECT_EQ(found, again);
    // Parked again, then a long request of another size: the parked runs
    // are the stream's (pending), and serve it; the old view retires.
    ASSERT_EQ(uvm_mem_free_async(mgr_, again, stream), UVM_OK);
    const uvm_mem_alloc_params_t r = alloc_params(UVM_BACKING_VIDMEM, 48 * kMiB, 0, 0, UVM_MEM_GPU_MAPPED);
    uvm_mem_t *longer = nullptr;
    uint64_t longer_address = 0;
    const uint64_t grown = stats().root_chunks_grown;
    ASSERT_EQ(uvm_mem_alloc_gpu(mgr_, &r, stream, &longer, &longer_address), UVM_OK);
    EXPECT_LE(stats().root_chunks_grown - grown, 8u) << "only what the 32 MiB it was freed with lacks";
    ASSERT_EQ(write_pattern(mgr_, longer, 48 * kMiB, 10), UVM_OK);
    EXPECT_EQ(wrong_bytes(mgr_, longer, 48 * kMiB, 10, UVM_VIEW_KERNEL), 0u);
    if (held) {
        uvm_manager_stats_t ms;
        ASSERT_EQ(uvm_manager_stats(mgr_, &ms), UVM_OK);
        EXPECT_EQ(ms.retiring_objects, 1u) << "the unparked view waits for the stream's held work";
        ASSERT_EQ(uvm_sim_stream_release(mgr_, stream), UVM_OK);
    }
    ASSERT_NO_FATAL_FAILURE(end_on(stream, longer, middle));
}

}  // namespace

namespace {

// A stitched object's free on a stream that fails at each backend call in
// turn (sim behind fault injection): the object stays alive with its memory,
// which a later allocation on the stream never gets; the free then succeeds.
TEST(StitchedFaults, AFailedFreeOnAStreamKeepsTheObjectsMemoryItsOwn) {
    for (uint64_t n = 1;; ++n) {
        SCOPED_TRACE(n);
        uvm_sim_params_t sp;
        std::memset(&sp, 0, sizeof(sp));
        sp.gpu_count = 1;
        sp.vidmem_size = 256 * kMiB;
        uvm::backend::FaultInjectingBackend *faults = nullptr;
        uvm_manager_t *mgr = nullptr;
        {
            const StitchingOn on;
            mgr = faulty_sim(sp, &faults);
        }
        ASSERT_NE(mgr, nullptr);
        uvm_stream_t *stream = nullptr;
        ASSERT_EQ(uvm_stream_create(mgr, 0, nullptr, &stream), UVM_OK);
        const uvm_mem_alloc_params_t b = alloc_params(UVM_BACKING_VIDMEM, 32 * kMiB, 0, 0, UVM_MEM_GPU_MAPPED);
        uvm_mem_t *middle = nullptr, *d = nullptr;
        ASSERT_NO_FATAL_FAILURE(two_holes(mgr, &middle));
        ASSERT_EQ(uvm_mem_alloc(mgr, &b, &d), UVM_OK);
        uvm_gpu_phys_address_t pa;
        ASSERT_EQ(uvm_mem_gpu_phys_address(mgr, d, 0, 0, 32 * kMiB, &pa), UVM_OK);
        ASSERT_FALSE(pa.contiguous) << "stitched";
        ASSERT_EQ(write_pattern(mgr, d, 32 * kMiB, 6), UVM_OK);
        faults->fail_call(n);
        const uvm_status_t freed = uvm_mem_free_async(mgr, d, stream);
        const bool fired = faults->fired();
        faults->fail_call(0);
        if (fired && freed != UVM_OK) {
            // Still its own: a new object on the stream takes none of it.
            uvm_mem_t *e = nullptr;
            ASSERT_EQ(uvm_mem_alloc_async(mgr, &b, stream, &e), UVM_OK);
            ASSERT_EQ(write_pattern(mgr, e, 32 * kMiB, 8), UVM_OK);
            EXPECT_EQ(wrong_bytes(mgr, d, 32 * kMiB, 6, UVM_VIEW_KERNEL), 0u);
            ASSERT_EQ(uvm_mem_free_async(mgr, e, stream), UVM_OK);
            ASSERT_EQ(uvm_mem_free_async(mgr, d, stream), UVM_OK);
        } else {
            EXPECT_EQ(freed, UVM_OK);
        }
        ASSERT_EQ(uvm_stream_synchronize(mgr, stream), UVM_OK);
        ASSERT_EQ(uvm_mem_free(mgr, middle), UVM_OK);
        ASSERT_EQ(uvm_stream_destroy(mgr, stream), UVM_OK);
        EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
        if (!fired || ::testing::Test::HasFailure())
            break;
        ASSERT_LT(n, 40u);
    }
}

}  // namespace
