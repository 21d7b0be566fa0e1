// Leak and object reports (observe/report.h): teardown leaves a structured
// report of every object still alive (client, size, backing, tag, age), and
// the live-object report refuses bad input.
#include <gtest/gtest.h>

#include <unistd.h>

#include <string>

#include "tests/uvm/fixtures.h"
#if defined(UVM_HAVE_NLOHMANN_JSON)
#include <nlohmann/json.hpp>
#endif

using namespace uvm_test;

namespace {
constexpr uint64_t M = 1024 * 1024;
}  // namespace

#if defined(UVM_HAVE_NLOHMANN_JSON)
TEST(LeakReport, TeardownReportsClientSizeBackingTagAndAge) {
    uvm_manager_t *mgr = small_sim(1, 64 * M);
    uvm_client_t *c = nullptr;
    ASSERT_EQ(uvm_client_create(mgr, "server", &c), UVM_OK);
    alloc_owned(mgr, UVM_BACKING_VIDMEM, 4 * M, c, "kv-cache");
    alloc_owned(mgr, UVM_BACKING_VIDMEM, 4 * M, c, "kv-cache");
    alloc_owned(mgr, UVM_BACKING_SYSMEM, 64 * 1024, nullptr, "staging");
    // Before teardown, the same report of what is live.
    const std::string live = fetch([&](char *b, size_t n, size_t *need) {
        return uvm_objects_report(mgr, UVM_REPORT_JSON, b, n, need);
    });
    EXPECT_EQ(nlohmann::json::parse(live)["objects"].size(), 3u);
    usleep(30 * 1000);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_ERR_LEAKED_OBJECTS);
    const nlohmann::json r = nlohmann::json::parse(
        fetch([&](char *b, size_t n, size_t *need) { return uvm_leak_report(UVM_REPORT_JSON, b, n, need); }));
    EXPECT_EQ(r["report"], "leaked objects");
    EXPECT_EQ(r["object_count"], 3);
    EXPECT_EQ(r["bytes"], 8 * M + 64 * 1024);
    ASSERT_EQ(r["objects"].size(), 3u);
    const auto &first = r["objects"][0];  // the largest first
    EXPECT_EQ(first["client"], "server");
    EXPECT_EQ(first["tag"], "kv-cache");
    EXPECT_EQ(first["backing"], "vidmem");
    EXPECT_EQ(first["alloc_size"], 4 * M);
    EXPECT_GE(first["age_ms"].get<uint64_t>(), 20u);  // the coarse clock is good to a few ms
    EXPECT_EQ(r["objects"][2]["client"], "default");
    EXPECT_EQ(r["objects"][2]["backing"], "sysmem");
    EXPECT_EQ(r["totals"][0]["tag"], "kv-cache");
    EXPECT_EQ(r["totals"][0]["objects"], 2);
    const std::string text =
        fetch([&](char *b, size_t n, size_t *need) { return uvm_leak_report(UVM_REPORT_TEXT, b, n, need); });
    EXPECT_NE(text.find("kv-cache"), std::string::npos);
    EXPECT_NE(text.find("3 objects"), std::string::npos);

    // A clean teardown leaves none.
    uvm_manager_t *clean = small_sim(1, 64 * M);
    EXPECT_EQ(uvm_manager_destroy(clean), UVM_OK);
    size_t needed = 0;
    EXPECT_EQ(uvm_leak_report(UVM_REPORT_TEXT, nullptr, 0, &needed), UVM_ERR_NOT_FOUND);
    EXPECT_EQ(uvm_leak_report(static_cast<uvm_report_format_t>(9), nullptr, 0, &needed), UVM_ERR_INVALID_ARGUMENT);
}
#endif

TEST(LeakReport, ATagTooLongIsRefusedAndNothingIsAllocated) {
    uvm_manager_t *mgr = small_sim(1, 64 * M);
    const std::string tag(64, 't');
    uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 2 * M);
    p.tag = tag.c_str();
    uvm_mem_t *m = nullptr;
    EXPECT_EQ(uvm_mem_alloc(mgr, &p, &m), UVM_ERR_INVALID_ARGUMENT);
    uvm_gpu_stats_t s;
    ASSERT_EQ(uvm_gpu_stats(mgr, 0, &s), UVM_OK);
    EXPECT_EQ(s.vidmem_objects, 0u);
    const std::string ok(63, 't');
    p.tag = ok.c_str();
    ASSERT_EQ(uvm_mem_alloc(mgr, &p, &m), UVM_OK);
    const std::string text =
        fetch([&](char *b, size_t n, size_t *need) { return uvm_objects_report(mgr, UVM_REPORT_TEXT, b, n, need); });
    EXPECT_NE(text.find(ok), std::string::npos);
    EXPECT_EQ(uvm_objects_report(nullptr, UVM_REPORT_TEXT, nullptr, 0, nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_objects_report(mgr, static_cast<uvm_report_format_t>(9), nullptr, 0, nullptr),
              UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_objects_report(mgr, UVM_REPORT_JSON, nullptr, 5, nullptr), UVM_ERR_INVALID_ARGUMENT);
    char tiny[4];
    size_t needed = 0;
    EXPECT_EQ(uvm_objects_report(mgr, UVM_REPORT_TEXT, tiny, sizeof(tiny), &needed), UVM_ERR_BUFFER_TOO_SMALL);
    EXPECT_GT(needed, sizeof(tiny));
    EXPECT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}
