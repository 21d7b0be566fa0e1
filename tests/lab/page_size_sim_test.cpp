// The page-size simulator against cases computed by hand.
#include <gtest/gtest.h>

#include "lab/page_size_sim.h"

using uvm::lab::Access;
using uvm::lab::MachineModel;
using uvm::lab::Policy;
using uvm::lab::Simulator;

namespace {

constexpr uint64_t K = 1024, M = 1024 * 1024;
constexpr uint64_t kBase = 1ull << 40;  // 512 MiB aligned: one page-walk-cache region

MachineModel model(uint32_t l1_entries, uint32_t l1_ways, uint32_t l2_entries, uint32_t l2_ways, uint32_t pwc) {
    MachineModel m;
    m.sms = 1;
    m.l1 = {l1_entries, l1_ways};
    m.l2 = {l2_entries, l2_ways};
    m.pwc_entries = pwc;
    m.l1_hit_ns = 1;
    m.l2_hit_ns = 10;
    m.walk_ref_ns = 100;
    return m;
}

void touch(Simulator &s, uint64_t address) {
    Access a;
    a.address = address;
    a.size = 4;
    s.access(a);
}

}  // namespace

TEST(PageSizeSim, SequentialFourKPagesMissOncePerPage) {
    Simulator s(model(16, 4, 64, 4, 8), Policy::Fixed4K);
    ASSERT_TRUE(s.valid());
    ASSERT_EQ(s.allocate(kBase, 1 * M), UVM_OK);
    for (uint64_t p = 0; p < 256; ++p)
        touch(s, kBase + p * 4 * K);
    const auto st = s.stats();
    EXPECT_EQ(st.accesses, 256u);
    EXPECT_EQ(st.l1_misses, 256u);
    EXPECT_EQ(st.l2_misses, 256u);
    // The first walk reads all six levels; the page-walk cache then knows the
    // region's PDE0 table: PDE0 and the page table, two reads each.
    EXPECT_EQ(st.pwc_hits, 255u);
    EXPECT_EQ(st.walk_refs, 6u + 255u * 2u);
    const auto t = s.time();
    EXPECT_DOUBLE_EQ(t.l1, 256.0);
    EXPECT_DOUBLE_EQ(t.l2, 2560.0);
    EXPECT_DOUBLE_EQ(t.walks, 100.0 * (6 + 255 * 2));
}

TEST(PageSizeSim, OneTwoMegPageCoversTheSameWalkWithOneMiss) {
    Simulator s(model(16, 4, 64, 4, 8), Policy::Fixed2M);
    ASSERT_EQ(s.allocate(kBase, 2 * M), UVM_OK);
    for (uint64_t p = 0; p < 512; ++p)
        touch(s, kBase + p * 4 * K);
    const auto st = s.stats();
    EXPECT_EQ(st.l1_misses, 1u);
    EXPECT_EQ(st.l2_misses, 1u);
    EXPECT_EQ(st.walk_refs, 5u);  // PDE4..PDE1, then the 2M leaf in PDE0
    EXPECT_EQ(st.allocated_bytes, 2 * M);
    EXPECT_EQ(st.touched_bytes, 2 * M);
}

TEST(PageSizeSim, PagesWithinReachHitOnTheSecondPass) {
    Simulator s(model(16, 4, 64, 4, 0), Policy::Fixed4K);
    ASSERT_EQ(s.allocate(kBase, 64 * K), UVM_OK);
    for (int pass = 0; pass < 2; ++pass)
        for (uint64_t p = 0; p < 8; ++p)
            touch(s, kBase + p * 4 * K);
    EXPECT_EQ(s.stats().l1_misses, 8u);
    EXPECT_EQ(s.stats().walk_refs, 8u * 6u);  // no page-walk cache: every walk reads six levels
}

TEST(PageSizeSim, LeastRecentlyUsedWayIsReplaced) {
    // One set of two ways in L1 and in L2: A B C A misses four times (C
    // evicts A); A B A C B hits A and then misses B (C evicted B).
    Simulator s(model(2, 2, 2, 2, 0), Policy::Fixed4K);
    ASSERT_EQ(s.allocate(kBase, 64 * K), UVM_OK);
    const uint64_t A = kBase, B = kBase + 4 * K, C = kBase + 8 * K;
    for (uint64_t a : {A, B, C, A})
        touch(s, a);
    EXPECT_EQ(s.stats().l1_misses, 4u);
    Simulator t(model(2, 2, 2, 2, 0), Policy::Fixed4K);
    ASSERT_EQ(t.allocate(kBase, 64 * K), UVM_OK);
    for (uint64_t a : {A, B, A, C, B})
        touch(t, a);
    EXPECT_EQ(t.stats().l1_misses, 4u);  // A, B, C, B
}

TEST(PageSizeSim, AdaptiveFollowsTheManagersRule) {
    Simulator s(model(16, 4, 64, 4, 8), Policy::Adaptive);
    ASSERT_EQ(s.allocate(kBase, 60 * K), UVM_OK);
    ASSERT_EQ(s.allocate(kBase + 2 * M, 1 * M), UVM_OK);
    ASSERT_EQ(s.allocate(kBase + 4 * M, 2 * M), UVM_OK);
    EXPECT_EQ(s.page_size_at(kBase), 4 * K);
    EXPECT_EQ(s.page_size_at(kBase + 2 * M), 64 * K);
    EXPECT_EQ(s.page_size_at(kBase + 4 * M), 2 * M);
    EXPECT_EQ(s.page_size_at(kBase + 3 * M), 0u);  // between objects
}

TEST(PageSizeSim, MosaicCoalescesAFullFrameAndSplintersItOnFree) {
    Simulator s(model(16, 4, 64, 4, 8), Policy::Mosaic);
    ASSERT_EQ(s.allocate(kBase, 1 * M), UVM_OK);
    EXPECT_EQ(s.page_size_at(kBase), 4 * K);
    const uint64_t tables_4k = s.stats().page_table_bytes;
    ASSERT_EQ(s.allocate(kBase + 1 * M, 1 * M), UVM_OK);  // the frame is full
    EXPECT_EQ(s.page_size_at(kBase), 2 * M);
    EXPECT_EQ(s.stats().coalesced_frames, 1u);
    EXPECT_LT(s.stats().page_table_bytes, tables_4k);  // the 4K page table went
    for (uint64_t p = 0; p < 512; ++p)
        touch(s, kBase + p * 4 * K);
    EXPECT_EQ(s.stats().l1_misses, 1u);
    ASSERT_EQ(s.free(kBase + 1 * M), UVM_OK);  // splinter
    EXPECT_EQ(s.page_size_at(kBase), 4 * K);
    EXPECT_EQ(s.stats().coalesced_frames, 0u);
    touch(s, kBase);
    EXPECT_EQ(s.stats().l1_misses, 2u);  // the 2M translation was shot down
}

TEST(PageSizeSim, BigPagesCostInternalFragmentationAndSaveTables) {
    Simulator big(model(16, 4, 64, 4, 8), Policy::Fixed2M);
    Simulator small(model(16, 4, 64, 4, 8), Policy::Fixed4K);
    ASSERT_EQ(big.allocate(kBase, 4 * K), UVM_OK);
    ASSERT_EQ(small.allocate(kBase, 4 * K), UVM_OK);
    touch(big, kBase);
    touch(small, kBase);
    EXPECT_EQ(big.stats().allocated_bytes, 2 * M);
    EXPECT_EQ(small.stats().allocated_bytes, 4 * K);
    EXPECT_EQ(big.stats().touched_bytes, 4 * K);
    Simulator big64(model(16, 4, 64, 4, 8), Policy::Fixed2M), small64(model(16, 4, 64, 4, 8), Policy::Fixed4K);
    ASSERT_EQ(big64.allocate(kBase, 64 * M), UVM_OK);
    ASSERT_EQ(small64.allocate(kBase, 64 * M), UVM_OK);
    // 4K pages: 32 page tables of 4 KiB more than 2M pages, whose leaves are in PDE0.
    EXPECT_EQ(small64.stats().page_table_bytes - big64.stats().page_table_bytes, 32u * 4096u);
}

TEST(PageSizeSim, BadInputIsRefused) {
    EXPECT_FALSE(Simulator(model(15, 4, 64, 4, 0), Policy::Fixed4K).valid());
    EXPECT_FALSE(Simulator(model(16, 0, 64, 4, 0), Policy::Fixed4K).valid());
    Simulator s(model(16, 4, 64, 4, 8), Policy::Fixed2M);
    EXPECT_EQ(s.allocate(kBase + 4 * K, 2 * M), UVM_ERR_MISALIGNED);
    EXPECT_EQ(s.allocate(kBase + 1, 4 * K), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(s.allocate(kBase, 0), UVM_ERR_INVALID_ARGUMENT);
    ASSERT_EQ(s.allocate(kBase, 2 * M), UVM_OK);
    EXPECT_EQ(s.allocate(kBase, 2 * M), UVM_ERR_ADDRESS_IN_USE);
    EXPECT_EQ(s.free(kBase + 2 * M), UVM_ERR_NOT_MAPPED);
    touch(s, kBase + 8 * M);
    EXPECT_EQ(s.stats().unmapped, 1u);
    EXPECT_EQ(s.stats().accesses, 0u);
    ASSERT_EQ(s.free(kBase), UVM_OK);
    EXPECT_EQ(s.free(kBase), UVM_ERR_NOT_MAPPED);
    EXPECT_EQ(s.stats().allocated_bytes, 0u);
    EXPECT_EQ(s.stats().page_table_bytes, 4096u);  // the root stays
}

// ---- workloads and the trace format ----

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <set>
#include <string>

#include "lab/page_size_workloads.h"

using uvm::lab::Pattern;
using uvm::lab::TraceReader;
using uvm::lab::Workload;
using uvm::lab::WorkloadParams;

namespace {

// A random workload of `accesses` over one object of `footprint` bytes, on a
// GPU of `gpu_memory` bytes (0: all resident); the statistics after it.
uvm::lab::Stats random_run(Policy policy, uint64_t footprint, uint64_t accesses, uint64_t gpu_memory) {
    Simulator s(model(16, 16, 512, 16, 16), policy);
    s.set_gpu_memory(gpu_memory);
    EXPECT_EQ(s.allocate(kBase, footprint), UVM_OK);
    WorkloadParams p;
    p.footprint = footprint;
    p.accesses = accesses;
    Workload w(p, kBase);
    uvm::lab::Access a;
    while (w.next(&a))
        s.access(a);
    return s.stats();
}

}  // namespace

TEST(PageSizeWorkloads, PointerChaseVisitsEveryPageOnceAroundTheCycle) {
    WorkloadParams p;
    p.pattern = Pattern::PointerChase;
    p.footprint = 256 * 4 * K;
    p.accesses = 256;
    Workload w(p, kBase);
    std::set<uint64_t> pages;
    uvm::lab::Access a;
    while (w.next(&a)) {
        EXPECT_GE(a.address, kBase);
        EXPECT_LT(a.address, kBase + p.footprint);
        pages.insert((a.address - kBase) / (4 * K));
    }
    EXPECT_EQ(pages.size(), 256u);  // a single cycle: no page twice in one round
}

TEST(PageSizeWorkloads, EveryPatternStaysInsideItsFootprint) {
    for (Pattern pat : {Pattern::Sequential, Pattern::Random, Pattern::Strided, Pattern::PointerChase,
                        Pattern::GraphWalk, Pattern::GrowingSet}) {
        WorkloadParams p;
        p.pattern = pat;
        p.footprint = 8 * M;
        p.accesses = 20000;
        p.processors = 4;
        Workload w(p, kBase);
        uvm::lab::Access a;
        uint64_t n = 0;
        while (w.next(&a)) {
            ASSERT_GE(a.address, kBase);
            ASSERT_LT(a.address + a.size, kBase + p.footprint + 1);
            ASSERT_LT(a.processor, 4u);
            n++;
        }
        EXPECT_EQ(n, 20000u);
    }
}

TEST(PageSizeWorkloads, LargePagesCutMissesOnALargeRandomWorkingSet) {
    // Mosaic's first finding, on a 256 MiB random working set: the 2M TLB
    // reach covers it, the 4K reach does not.
    auto misses = [](Policy policy) { return random_run(policy, 256 * M, 200000, 0).l2_misses; };
    const uint64_t small = misses(Policy::Fixed4K), big = misses(Policy::Fixed2M);
    EXPECT_GT(small, 190000u);  // nearly every access walks
    EXPECT_LT(big, 1000u);      // 128 pages, all within the L2 TLB after the first touches
}

TEST(PageSizeTrace, LinesParseAndBadOnesSayWhy) {
    std::string why;
    auto e = TraceReader::parse("alloc 0x10000000000 4096", &why);
    EXPECT_EQ(e.kind, TraceReader::Kind::Alloc);
    EXPECT_EQ(e.base, 1ull << 40);
    EXPECT_EQ(e.size, 4096u);
    e = TraceReader::parse("w 0x10000000010 16 3  # comment", &why);
    ASSERT_EQ(e.kind, TraceReader::Kind::Access);
    EXPECT_TRUE(e.access.write);
    EXPECT_EQ(e.access.size, 16u);
    EXPECT_EQ(e.access.processor, 3u);
    e = TraceReader::parse("r 4096", &why);
    ASSERT_EQ(e.kind, TraceReader::Kind::Access);
    EXPECT_FALSE(e.access.write);
    EXPECT_EQ(e.access.size, 8u);
    EXPECT_EQ(TraceReader::parse("   # only a comment", &why).kind, TraceReader::Kind::End);
    for (const char *bad : {"alloc 4096", "alloc 0x1000 0", "free", "free x", "r", "r 0x1000 0", "r 1 2 3 4",
                            "read 0x1000", "w 0x1000 16 99999999999", "alloc 1 2 3", "r 0x1g"}) {
        why.clear();
        EXPECT_EQ(TraceReader::parse(bad, &why).kind, TraceReader::Kind::Error) << bad;
        EXPECT_FALSE(why.empty()) << bad;
    }
}

TEST(PageSizeTrace, AFileReplaysAndAnErrorNamesItsLine) {
    char path[] = "/tmp/uvm-lab-trace-XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    const std::string text = "# a trace\nalloc 0x10000000000 0x200000\nr 0x10000000000\nw 0x10000000040 8 1\n"
                             "\nfree 0x10000000000\nr 0x10000000000\nbogus line\nr 0x10000000000\n";
    ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    close(fd);
    Simulator s(model(16, 4, 64, 4, 8), Policy::Fixed4K);
    TraceReader r;
    ASSERT_TRUE(r.open(path));
    std::string error;
    EXPECT_FALSE(uvm::lab::replay(r, s, &error));
    EXPECT_EQ(error, "line 8: not alloc, free, r or w");
    EXPECT_EQ(s.stats().accesses, 2u);
    EXPECT_EQ(s.stats().unmapped, 1u);  // the read after the free
    unlink(path);
    TraceReader missing;
    EXPECT_FALSE(missing.open("/nonexistent/trace"));
    EXPECT_NE(missing.error().find("cannot open"), std::string::npos);
}

TEST(PageSizeOutOfCore, FaultsMoveWholePagesAndEvictTheLeastRecent) {
    Simulator s(model(16, 4, 64, 4, 8), Policy::Fixed64K);
    s.set_gpu_memory(128 * K);  // two 64K pages
    ASSERT_EQ(s.allocate(kBase, 1 * M), UVM_OK);
    const uint64_t A = kBase, B = kBase + 64 * K, C = kBase + 128 * K;
    for (uint64_t a : {A, A + 100, B, A, C, B})
        touch(s, a);
    // A, B, C fault; C evicts B (A was used after it); B faults again and evicts A.
    const auto st = s.stats();
    EXPECT_EQ(st.faults, 4u);
    EXPECT_EQ(st.bytes_migrated_in, 4 * 64 * K);
    EXPECT_EQ(st.bytes_migrated_out, 2 * 64 * K);
}

TEST(PageSizeOutOfCore, SmallPagesCutOverFetchUnderOversubscription) {
    // Mosaic's second finding: sparse touches of a working set twice the
    // GPU's memory move far fewer bytes in 4K pages than in 2M pages, and
    // the Mosaic policy (4K moves, 2M translations) keeps the small figure.
    auto moved = [](Policy policy) { return random_run(policy, 128 * M, 20000, 64 * M).bytes_migrated_in; };
    const uint64_t small = moved(Policy::Fixed4K), big = moved(Policy::Fixed2M), mosaic = moved(Policy::Mosaic);
    EXPECT_LT(small * 10, big);
    EXPECT_EQ(mosaic, small);
}

// ---- the C API (include/uvm/uvm_lab.h) ----

#include "uvm/uvm_lab.h"

namespace {

uvm_lab_model_t c_model() {
    uvm_lab_model_t m;
    std::memset(&m, 0, sizeof(m));
    m.sms = 1;
    m.l1_entries = 16;
    m.l1_ways = 4;
    m.l2_entries = 64;
    m.l2_ways = 4;
    m.pwc_entries = 8;
    m.walk_ref_ns = 100;
    return m;
}

}  // namespace

TEST(PageSizeLabApi, RunsAWorkloadAndReportsWhatTheSimulatorCounts) {
    const uvm_lab_model_t m = c_model();
    uvm_lab_t *lab = nullptr;
    ASSERT_EQ(uvm_lab_create(&m, UVM_LAB_PAGES_4K, &lab), UVM_OK);
    ASSERT_EQ(uvm_lab_allocate(lab, kBase, 1 * M), UVM_OK);
    uvm_lab_workload_t w;
    std::memset(&w, 0, sizeof(w));
    w.pattern = UVM_LAB_STRIDED;
    w.footprint = 1 * M;
    w.accesses = 256;
    w.stride = 4096;
    ASSERT_EQ(uvm_lab_run(lab, &w, kBase), UVM_OK);
    uvm_lab_stats_t s;
    ASSERT_EQ(uvm_lab_stats(lab, &s), UVM_OK);
    EXPECT_EQ(s.accesses, 256u);
    EXPECT_EQ(s.l2_misses, 256u);
    EXPECT_EQ(s.walk_refs, 6u + 255u * 2u);
    EXPECT_DOUBLE_EQ(s.time_walks_ns, 100.0 * (6 + 255 * 2));
    EXPECT_EQ(s.allocated_bytes, 1 * M);
    EXPECT_EQ(s.touched_bytes, 1 * M);
    ASSERT_EQ(uvm_lab_destroy(lab), UVM_OK);
}

TEST(PageSizeLabApi, BadInputIsRefusedAndChangesNothing) {
    uvm_lab_model_t m = c_model();
    uvm_lab_t *lab = nullptr;
    EXPECT_EQ(uvm_lab_create(nullptr, UVM_LAB_PAGES_4K, &lab), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_lab_create(&m, UVM_LAB_PAGES_4K, nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_lab_create(&m, static_cast<uvm_lab_policy_t>(7), &lab), UVM_ERR_INVALID_ARGUMENT);
    m.l2_ways = 3;  // 64 entries are not a multiple of 3 ways
    EXPECT_EQ(uvm_lab_create(&m, UVM_LAB_PAGES_4K, &lab), UVM_ERR_INVALID_ARGUMENT);
    m = c_model();
    m.walk_ref_ns = -1;
    EXPECT_EQ(uvm_lab_create(&m, UVM_LAB_PAGES_4K, &lab), UVM_ERR_INVALID_ARGUMENT);
    m = c_model();
    ASSERT_EQ(uvm_lab_create(&m, UVM_LAB_MOSAIC, &lab), UVM_OK);
    ASSERT_EQ(uvm_lab_allocate(lab, kBase, 2 * M), UVM_OK);
    uvm_lab_access_t a;
    std::memset(&a, 0, sizeof(a));
    a.address = kBase;
    a.size = 8;
    uvm_lab_access_t bad[2] = {a, a};
    bad[1].reserved = 1;
    EXPECT_EQ(uvm_lab_access(lab, bad, 2), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_lab_access(lab, nullptr, 1), UVM_ERR_INVALID_ARGUMENT);
    bad[1].reserved = 0;
    bad[1].size = 0;
    EXPECT_EQ(uvm_lab_access(lab, bad, 2), UVM_ERR_INVALID_ARGUMENT);
    uvm_lab_stats_t s;
    ASSERT_EQ(uvm_lab_stats(lab, &s), UVM_OK);
    EXPECT_EQ(s.accesses, 0u);  // the good access before the bad one did not run either
    uvm_lab_workload_t w;
    std::memset(&w, 0, sizeof(w));
    w.footprint = 100;  // under a page
    EXPECT_EQ(uvm_lab_run(lab, &w, kBase), UVM_ERR_INVALID_ARGUMENT);
    w.footprint = 2 * M;
    w.pattern = static_cast<uvm_lab_pattern_t>(42);
    EXPECT_EQ(uvm_lab_run(lab, &w, kBase), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_lab_run(lab, nullptr, kBase), UVM_ERR_INVALID_ARGUMENT);
    char error[64] = {};
    EXPECT_EQ(uvm_lab_replay(lab, "/nonexistent/lab.trace", error, sizeof(error)), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(error).find("cannot open"), std::string::npos);
    EXPECT_EQ(uvm_lab_replay(lab, nullptr, error, sizeof(error)), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_lab_stats(lab, nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_lab_free(lab, kBase + 4 * K), UVM_ERR_NOT_MAPPED);
    ASSERT_EQ(uvm_lab_stats(lab, &s), UVM_OK);
    EXPECT_EQ(s.allocated_bytes, 2 * M);
    EXPECT_EQ(s.coalesced_frames, 1u);
    ASSERT_EQ(uvm_lab_destroy(lab), UVM_OK);
    // A destroyed lab is refused, never touched.
    EXPECT_EQ(uvm_lab_destroy(lab), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(uvm_lab_allocate(lab, kBase, 4 * K), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(uvm_lab_stats(lab, &s), UVM_ERR_INVALID_HANDLE);
    EXPECT_EQ(uvm_lab_destroy(nullptr), UVM_ERR_INVALID_ARGUMENT);
}
