// Real allocation traces (PyTorch training steps, bench/traces/) replayed
// through the C API with a GPU kernel mapping for every object: no call
// fails, every object's kernel view is one contiguous range, and everything
// goes back at the end. On sim and, where there is one, on the GPU.
#include <gtest/gtest.h>

#include <cstring>
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
    uvm_manager_params_t p = sim_params(1, 16ull << 30);  // sim: reserved lazily, untouched pages cost nothing
    if (GetParam() == "cuda")
        p.backend = UVM_BACKEND_CUDA;
    uvm_manager_t *mgr = nullptr;
    const uvm_status_t made = uvm_manager_create(&p, &mgr);
    if (GetParam() == "cuda" && (made == UVM_ERR_NO_DEVICE || made == UVM_ERR_NOT_SUPPORTED))
        GTEST_SKIP() << "no CUDA GPU here: " << uvm_status_string(made);
    ASSERT_EQ(made, UVM_OK);
    uvm_gpu_info_t gi;
    ASSERT_EQ(uvm_gpu_info(mgr, 0, &gi), UVM_OK);
    const uint64_t free_at_start = gi.memory_free;
    size_t replayed = 0;
    for (const std::string &path : uvm_trace::shipped_traces()) {
        uvm_trace::Trace t;
        ASSERT_TRUE(uvm_trace::read_trace(path, &t)) << path;
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
            ASSERT_TRUE(pa.contiguous) << t.name << " op " << i;
        }
        for (uvm_mem_t *m : objects)
            if (m)
                ASSERT_EQ(uvm_mem_free(mgr, m), UVM_OK);
        replayed++;
    }
    EXPECT_EQ(replayed, 2u) << "the shipped traces are missing";
    uvm_gpu_stats_t st;
    ASSERT_EQ(uvm_gpu_trim(mgr, 0, nullptr), UVM_OK);
    ASSERT_EQ(uvm_gpu_stats(mgr, 0, &st), UVM_OK);
    EXPECT_EQ(st.root_chunks, 0u);
    ASSERT_EQ(uvm_gpu_info(mgr, 0, &gi), UVM_OK);
    EXPECT_GE(gi.memory_free, free_at_start);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}
