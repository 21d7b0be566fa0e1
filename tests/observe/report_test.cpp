// Reports and metrics (observe/report.h): an OUT_OF_MEMORY leaves a report whose
// numbers match the statistics; the snapshot is JSON a real parser reads;
// the metrics are in the Prometheus text format (promtool checks them where
// it is installed).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "tests/uvm/fixtures.h"
#if defined(UVM_HAVE_NLOHMANN_JSON)
#include <nlohmann/json.hpp>
#endif

using namespace uvm_test;

namespace {

constexpr uint64_t M = 1024 * 1024;

}  // namespace

TEST(Reports, AnOutOfMemoryLeavesAReportThatMatchesTheStatistics) {
    uvm_manager_t *mgr = small_sim(1, 32 * M);
    std::vector<uvm_mem_t *> objs;
    for (int i = 0; i < 7; ++i) {
        const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 4 * M, 0, 0, i % 2 ? UVM_MEM_EVICTABLE : 0);
        uvm_mem_t *m = nullptr;
        ASSERT_EQ(uvm_mem_alloc(mgr, &p, &m), UVM_OK);
        objs.push_back(m);
    }
    uvm_eviction_policy_t off;
    std::memset(&off, 0, sizeof(off));
    off.disabled = 1;
    ASSERT_EQ(uvm_manager_set_eviction_policy(mgr, &off), UVM_OK);
    size_t needed = 0;
    EXPECT_EQ(uvm_oom_report(mgr, UVM_REPORT_TEXT, nullptr, 0, &needed), UVM_ERR_NOT_FOUND);
    const uvm_mem_alloc_params_t big = alloc_params(UVM_BACKING_VIDMEM, 8 * M, 0, 0, 0);
    uvm_mem_t *fail = nullptr;
    ASSERT_EQ(uvm_mem_alloc(mgr, &big, &fail), UVM_ERR_OUT_OF_MEMORY);
    uvm_gpu_stats_t s;
    ASSERT_EQ(uvm_gpu_stats(mgr, 0, &s), UVM_OK);

    const std::string text = fetch([&](char *b, size_t n, size_t *need) {
        return uvm_oom_report(mgr, UVM_REPORT_TEXT, b, n, need);
    });
    EXPECT_NE(text.find("out of memory: alloc of 8.00 MiB"), std::string::npos) << text;
    EXPECT_NE(text.find("client default: 16.00 MiB pinned, 12.00 MiB evictable"), std::string::npos) << text;
    const std::string json = fetch([&](char *b, size_t n, size_t *need) {
        return uvm_oom_report(mgr, UVM_REPORT_JSON, b, n, need);
    });
#if defined(UVM_HAVE_NLOHMANN_JSON)
    const auto j = nlohmann::json::parse(json);
    EXPECT_EQ(j["request"]["size"], 8 * M);
    EXPECT_EQ(j["request"]["call"], "alloc");
    EXPECT_EQ(j["gpu"]["memory_total"], 32 * M);
    EXPECT_EQ(j["gpu"]["held"], s.root_chunks * 2 * M);
    EXPECT_EQ(j["gpu"]["largest_free_block"], s.largest_free_block);
    EXPECT_EQ(j["clients"][0]["pinned"], s.bytes_pinned[0] + s.bytes_pinned[1] + s.bytes_pinned[2]);
    EXPECT_EQ(j["clients"][0]["evictable"], s.bytes_evictable[0] + s.bytes_evictable[1] + s.bytes_evictable[2]);
    EXPECT_EQ(j["largest_objects"].size(), 5u);
    EXPECT_EQ(j["largest_objects"][0]["alloc_size"], 4 * M);
    EXPECT_LT(j["gpu"]["largest_request_that_fits"].get<uint64_t>(), 8 * M);
#else
    EXPECT_EQ(json.front(), '{');
    GTEST_SKIP() << "no JSON parser in this build (nlohmann-json3-dev): the JSON was not parsed";
#endif
    // Another thread has no report; a small buffer is refused untouched.
    std::thread([&] {
        size_t n = 0;
        EXPECT_EQ(uvm_oom_report(mgr, UVM_REPORT_JSON, nullptr, 0, &n), UVM_ERR_NOT_FOUND);
    }).join();
    char tiny[4] = {'x', 'x', 'x', 'x'};
    EXPECT_EQ(uvm_oom_report(mgr, UVM_REPORT_TEXT, tiny, sizeof(tiny), &needed), UVM_ERR_BUFFER_TOO_SMALL);
    EXPECT_EQ(tiny[0], 'x');
    EXPECT_EQ(uvm_oom_report(mgr, static_cast<uvm_report_format_t>(7), tiny, sizeof(tiny), &needed),
              UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_oom_report(mgr, UVM_REPORT_TEXT, nullptr, 10, &needed), UVM_ERR_INVALID_ARGUMENT);
    for (uvm_mem_t *m : objs)
        ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

TEST(Reports, ARequestLargerThanTheGpuIsAnOutOfMemoryWithItsReport) {
    uvm_manager_t *mgr = small_sim(1, 32 * M);
    size_t needed = 0;
    EXPECT_EQ(uvm_oom_report(mgr, UVM_REPORT_TEXT, nullptr, 0, &needed), UVM_ERR_NOT_FOUND);
    // Larger than the GPU: never served, and said as cudaMalloc says it.
    const uvm_mem_alloc_params_t huge = alloc_params(UVM_BACKING_VIDMEM, 64 * M, 0, 0, 0);
    uvm_mem_t *m = nullptr;
    EXPECT_EQ(uvm_mem_alloc(mgr, &huge, &m), UVM_ERR_OUT_OF_MEMORY);
    EXPECT_EQ(m, nullptr);
    const std::string text = fetch([&](char *b, size_t n, size_t *need) {
        return uvm_oom_report(mgr, UVM_REPORT_TEXT, b, n, need);
    });
    EXPECT_NE(text.find("out of memory: alloc of 64.00 MiB"), std::string::npos) << text;
    // Nothing was taken or moved for it: a request that fits is served.
    const uvm_mem_alloc_params_t fits = alloc_params(UVM_BACKING_VIDMEM, 16 * M, 0, 0, 0);
    ASSERT_EQ(uvm_mem_alloc(mgr, &fits, &m), UVM_OK);
    EXPECT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

TEST(Reports, TheSnapshotCountsEveryObject) {
    uvm_manager_t *mgr = small_sim(1, 64 * M);
    std::vector<uvm_mem_t *> objs;
    for (uint64_t size : {uint64_t(4096), uint64_t(5000), uint64_t(64 * 1024), 2 * M, 3 * M}) {
        for (uvm_backing_t b : {UVM_BACKING_VIDMEM, UVM_BACKING_SYSMEM}) {
            const uvm_mem_alloc_params_t p = alloc_params(b, size, 0, 0, 0);
            uvm_mem_t *m = nullptr;
            ASSERT_EQ(uvm_mem_alloc(mgr, &p, &m), UVM_OK);
            objs.push_back(m);
        }
    }
    const std::string json = fetch([&](char *b, size_t n, size_t *need) { return uvm_manager_snapshot(mgr, b, n, need); });
#if defined(UVM_HAVE_NLOHMANN_JSON)
    const auto j = nlohmann::json::parse(json);
    EXPECT_EQ(j["manager"]["objects"], objs.size());
    uint64_t counted = 0, vid_bytes = 0;
    for (const char *b : {"vidmem", "sysmem", "managed"})
        for (const auto &c : j["objects"][b]) {
            counted += c["count"].get<uint64_t>();
            EXPECT_GE(c["le"].get<uint64_t>(), c["bytes"].get<uint64_t>() / c["count"].get<uint64_t>());
            if (std::string(b) == "vidmem")
                vid_bytes += c["bytes"].get<uint64_t>();
        }
    EXPECT_EQ(counted, objs.size());
    uvm_gpu_stats_t s;
    ASSERT_EQ(uvm_gpu_stats(mgr, 0, &s), UVM_OK);
    EXPECT_EQ(vid_bytes, s.bytes_pinned[0] + s.bytes_pinned[1] + s.bytes_pinned[2]);
    EXPECT_EQ(j["gpus"][0]["chunks"]["2M"]["pinned"], s.bytes_pinned[2]);
#else
    EXPECT_EQ(json.front(), '{');
#endif
    for (uvm_mem_t *m : objs)
        ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// Every sample line is `name{labels} value` under a family with HELP and
// TYPE; counters end in _total; promtool agrees where it is installed.
TEST(Reports, MetricsAreThePrometheusTextFormat) {
    uvm_manager_t *mgr = small_sim(1, 64 * M);
    const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 6 * M, 0, 0, UVM_MEM_EVICTABLE);
    uvm_mem_t *m = nullptr;
    ASSERT_EQ(uvm_mem_alloc(mgr, &p, &m), UVM_OK);
    ASSERT_EQ(uvm_mem_evict(mgr, m), UVM_OK);
    const std::string text = fetch([&](char *b, size_t n, size_t *need) { return uvm_manager_metrics(mgr, b, n, need); });
    const std::regex sample(R"(^(uvm_[a-z_]+)(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? [0-9]+$)");
    const std::regex type(R"(^# TYPE (uvm_[a-z_]+) (gauge|counter)$)");
    std::set<std::string> typed, counters;
    std::istringstream in(text);
    std::string line;
    size_t samples = 0;
    while (std::getline(in, line)) {
        std::smatch mt;
        if (std::regex_match(line, mt, type)) {
            typed.insert(mt[1]);
            if (mt[2] == "counter") {
                counters.insert(mt[1]);
                EXPECT_NE(mt[1].str().find("_total"), std::string::npos) << line;
            }
            continue;
        }
        if (line.rfind("# HELP ", 0) == 0)
            continue;
        ASSERT_TRUE(std::regex_match(line, mt, sample)) << line;
        EXPECT_TRUE(typed.count(mt[1])) << "a sample before its TYPE: " << line;
        samples++;
    }
    EXPECT_GT(samples, 20u);
    EXPECT_NE(text.find("uvm_gpu_evictions_total{gpu=\"0\"} 1\n"), std::string::npos);
    EXPECT_NE(text.find("uvm_gpu_evicted_host_bytes{gpu=\"0\"} 6291456\n"), std::string::npos);
    if (std::system("command -v promtool >/dev/null 2>&1") == 0) {
        char path[] = "/tmp/uvm-metrics-XXXXXX";
        const int fd = mkstemp(path);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
        close(fd);
        const std::string cmd = std::string("promtool check metrics < ") + path + " >/dev/null 2>&1";
        EXPECT_EQ(std::system(cmd.c_str()), 0) << "promtool check metrics failed on:\n" << text;
        unlink(path);
    } else {
        std::printf("promtool is not installed (Debian package prometheus): the format was checked by pattern only\n");
    }
    ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

TEST(Reports, EveryBadArgumentIsRefusedWithItsStatus) {
    size_t n = 0;
    char buf[8];
    EXPECT_EQ(uvm_manager_snapshot(nullptr, buf, sizeof(buf), &n), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_manager_metrics(nullptr, buf, sizeof(buf), &n), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_oom_report(nullptr, UVM_REPORT_TEXT, buf, sizeof(buf), &n), UVM_ERR_INVALID_ARGUMENT);
    uvm_manager_t *mgr = small_sim(1, 32 * M);
    EXPECT_EQ(uvm_manager_snapshot(mgr, nullptr, 5, &n), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_manager_metrics(mgr, buf, sizeof(buf), nullptr), UVM_ERR_BUFFER_TOO_SMALL);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}
