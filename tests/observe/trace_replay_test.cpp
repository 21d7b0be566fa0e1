// Real allocation traces (PyTorch training steps, bench/traces/) replayed
// through the C API with a GPU kernel mapping for every object: no call
// fails, every object's kernel view is one contiguous range, and everything
// goes back at the end. On sim and, where there is one, on the GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "bench/trace.h"
#include "tests/uvm/fixtures.h"

using namespace uvm_test;

namespace {

class TraceReplay : public ::testing::TestWithParam<std::string> {};

}  // namespace

INSTANTIATE_TEST_SUITE_P(Backends, TraceReplay, ::testing::Values(std::string("sim"), std::string("cuda")),
                         [](const auto &info) { return info.param; });

TEST_P(TraceReplay, EveryObjectOfATrainingTraceGetsAKernelMapping) {
    uvm_manager_params_t p = sim_params(1, 32ull << 30);  // sim: reserved lazily, untouched pages cost nothing
    if (GetParam() == "cuda")
        p.backend = UVM_BACKEND_CUDA;
    uvm_manager_t *mgr = nullptr;
    uvm_status_t made;
    {
        const StitchingOn on;  // long objects may be stitched (chunk/pmm.h)
        made = uvm_manager_create(&p, &mgr);
    }
    if (GetParam() == "cuda" && (made == UVM_ERR_NO_DEVICE || made == UVM_ERR_NOT_SUPPORTED))
        GTEST_SKIP() << "no CUDA GPU here: " << uvm_status_string(made);
    ASSERT_EQ(made, UVM_OK);
    uvm_gpu_info_t gi;
    ASSERT_EQ(uvm_gpu_info(mgr, 0, &gi), UVM_OK);
    const uint64_t free_at_start = gi.memory_free;
    size_t replayed = 0, stitched = 0;
    if (uvm_trace::shipped_traces().empty()) {
        EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
        GTEST_SKIP() << "the traces are gzip files and this build has no zlib (zlib1g-dev)";
    }
    for (const std::string &path : uvm_trace::shipped_traces()) {
        uvm_trace::Trace t;
        std::string error;
        ASSERT_TRUE(uvm_trace::read_trace(path, &t, &error)) << error;
        ASSERT_LT(t.peak_live_bytes, gi.memory_total / 2) << path;
        std::vector<uvm_mem_t *> objects(t.ids, nullptr);
        for (size_t i = 0; i < t.ops.size(); ++i) {
            const uvm_trace::Op &op = t.ops[i];
            if (!op.alloc) {
                ASSERT_EQ(uvm_mem_free(mgr, objects[op.id]), UVM_OK) << t.name << " op " << i;
                objects[op.id] = nullptr;
                continue;
            }
            const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, op.size, 0, 0, UVM_MEM_GPU_MAPPED);
            const uvm_status_t s = uvm_mem_alloc(mgr, &a, &objects[op.id]);
            ASSERT_EQ(s, UVM_OK) << t.name << " op " << i << ": " << op.size << " bytes: " << uvm_status_string(s);
            uvm_mem_info_t info;
            ASSERT_EQ(uvm_mem_info(mgr, objects[op.id], &info), UVM_OK);
            ASSERT_NE(info.gpu_kernel_address, 0u);
            uvm_gpu_phys_address_t pa;
            ASSERT_EQ(uvm_mem_gpu_phys_address(mgr, objects[op.id], 0, 0, info.alloc_size, &pa), UVM_OK);
            // One run, or a stitched long one (chunk/pmm.h): several runs of
            // whole 2 MiB roots, more than four, under its one kernel mapping.
            if (!pa.contiguous) {
                stitched++;
                ASSERT_GT(info.alloc_size, 8ull << 20) << t.name << " op " << i;
                ASSERT_EQ(info.alloc_size % (2ull << 20), 0u) << t.name << " op " << i;
            }
        }
        for (uvm_mem_t *m : objects)
            if (m)
                ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
        replayed++;
    }
    std::printf("stitched objects: %zu\n", stitched);
    EXPECT_EQ(replayed, uvm_trace::shipped_traces().size());
    EXPECT_GE(replayed, 3u) << "a shipped trace is missing";
    uvm_gpu_stats_t st;
    ASSERT_EQ(uvm_gpu_trim(mgr, 0, nullptr), UVM_OK);
    ASSERT_EQ(uvm_gpu_stats(mgr, 0, &st), UVM_OK);
    EXPECT_EQ(st.root_chunks, 0u);
    ASSERT_EQ(uvm_gpu_info(mgr, 0, &gi), UVM_OK);
    EXPECT_GE(gi.memory_free, free_at_start);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

namespace {

// Write `text` to a temporary trace file; its path.
std::string temp_trace(const std::string &text) {
    char path[] = "/tmp/uvm-trace-XXXXXX";
    const int fd = mkstemp(path);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    close(fd);
    return path;
}

}  // namespace

// A bad or truncated trace names its line and what is wrong, and reads nothing.
TEST(TraceFiles, BadOrTruncatedFilesSayWhereAndWhy) {
    struct Case {
        const char *text;
        const char *where;  // ":<line>: " expected in the error
        const char *what;   // and this
    };
    const Case cases[] = {
        {"# c\na 0 4096\nx 1\n", ":3: ", "unknown operation 'x'"},
        {"a 0 4096\na 1\n", ":2: ", "without a size"},
        {"a 0 0\n", ":1: ", "an alloc of 0 bytes"},
        {"a 0 -5\n", ":1: ", "an alloc of -5 bytes"},
        {"a 0 4096\na 0 4096\n", ":2: ", "allocated twice"},
        {"a 0 4096\nf 1\n", ":2: ", "not alive"},
        {"a 0 4096\nf 0\nf 0\n", ":3: ", "not alive"},
        {"a 99999999 4096\n", ":1: ", "beyond"},
        {"a 0 4096 7\n", ":1: ", "unexpected '7'"},
        {"a 0 4096\nf", ":2: ", "cut short"},
        {"a 0 4096\na 1 40", ":2: ", "cut short"},
        {"# 3 allocs, 1 frees\na 0 4096\nf 0\na 1 8192\n", ":4: ", "truncated"},
        {"# only a comment\n", ":1: ", "no operations"},
        {"f\n", ":1: ", "expected"},
    };
    for (const Case &c : cases) {
        const std::string path = temp_trace(c.text);
        uvm_trace::Trace t;
        t.name = "untouched";
        std::string error;
        EXPECT_FALSE(uvm_trace::read_trace(path, &t, &error)) << c.text;
        EXPECT_NE(error.find(path + c.where), std::string::npos) << c.text << " -> " << error;
        EXPECT_NE(error.find(c.what), std::string::npos) << c.text << " -> " << error;
        EXPECT_EQ(t.name, "untouched");
        std::remove(path.c_str());
    }
    std::string error;
    uvm_trace::Trace t;
    EXPECT_FALSE(uvm_trace::read_trace("/nonexistent/x.trace", &t, &error));
    EXPECT_NE(error.find("cannot open"), std::string::npos);
    // A good one, with its header read.
    const std::string path =
        temp_trace("# pytorch peaks: allocated 12288 reserved 2097152\n# 2 allocs, 1 frees\na 0 4096\na 1 8192\nf 0\n");
    ASSERT_TRUE(uvm_trace::read_trace(path, &t, &error)) << error;
    EXPECT_EQ(t.ops.size(), 3u);
    EXPECT_EQ(t.peak_live_bytes, 12288u);
    EXPECT_EQ(t.torch_peak_allocated, 12288u);
    EXPECT_EQ(t.torch_peak_reserved, 2097152u);
    std::remove(path.c_str());
}

// The memory held from the GPU at each chunk-size policy on the real traces,
// on sim (the page-size lab's numbers on real size distributions): never
// less than the live bytes, and the table is printed for the record.
TEST(TracePolicies, HeldAgainstLiveAtEachChunkSizePolicy) {
    const auto paths = uvm_trace::shipped_traces();
    if (paths.empty())
        GTEST_SKIP() << "the traces are gzip files and this build has no zlib (zlib1g-dev)";
    struct Policy {
        const char *name;
        uint64_t chunk;
    };
    const Policy policies[] = {{"adaptive", 0}, {"2M", UVM_PAGE_SIZE_2M}, {"64K", UVM_PAGE_SIZE_64K}};
    std::printf("%-12s %-9s %12s %12s %12s %8s %8s\n", "trace", "policy", "live MiB", "chunks MiB", "held MiB",
                "chunks/l", "held/l");
    for (const std::string &path : paths) {
        uvm_trace::Trace t;
        std::string error;
        ASSERT_TRUE(uvm_trace::read_trace(path, &t, &error)) << error;
        for (const Policy &pol : policies) {
            uvm_manager_t *mgr = small_sim(1, 64ull << 30);  // reserved lazily
            std::vector<uvm_mem_t *> objects(t.ids, nullptr);
            uint64_t live = 0, chunks = 0, peak_live = 0, peak_chunks = 0, peak_held = 0;
            std::vector<uint64_t> alloc_size(t.ids, 0), asked(t.ids, 0);
            for (const uvm_trace::Op &op : t.ops) {
                if (!op.alloc) {
                    ASSERT_EQ(uvm_mem_free(mgr, objects[op.id]), UVM_OK);
                    objects[op.id] = nullptr;
                    chunks -= alloc_size[op.id];
                    live -= asked[op.id];
                    continue;
                }
                const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, op.size, 0, pol.chunk);
                ASSERT_EQ(uvm_mem_alloc(mgr, &a, &objects[op.id]), UVM_OK) << t.name << " " << pol.name;
                uvm_mem_info_t info;
                ASSERT_EQ(uvm_mem_info(mgr, objects[op.id], &info), UVM_OK);
                alloc_size[op.id] = info.alloc_size;
                asked[op.id] = op.size;
                live += op.size;
                chunks += info.alloc_size;
                // Held: what the GPU has given (its free memory gone), read
                // without uvm_gpu_stats, which would flush the thread's chunk
                // cache and so change where the next objects go.
                uvm_gpu_info_t gi;
                ASSERT_EQ(uvm_gpu_info(mgr, 0, &gi), UVM_OK);
                const uint64_t held = gi.memory_total - gi.memory_free;
                peak_live = std::max(peak_live, live);
                peak_chunks = std::max(peak_chunks, chunks);
                peak_held = std::max(peak_held, held);
                ASSERT_GE(chunks, live);
                ASSERT_GE(held, chunks) << "the GPU gave less than the objects hold";
            }
            for (uvm_mem_t *m : objects)
                if (m)
                    ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
            EXPECT_EQ(peak_live, t.peak_live_bytes) << t.name;
            std::printf("%-12s %-9s %12.1f %12.1f %12.1f %8.3f %8.3f\n", t.name.c_str(), pol.name,
                        peak_live / 1048576.0, peak_chunks / 1048576.0, peak_held / 1048576.0,
                        double(peak_chunks) / peak_live, double(peak_held) / peak_live);
            EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
        }
    }
}
