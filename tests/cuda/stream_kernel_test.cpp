// Trackers on a real GPU: a kernel that spins until the test releases it
// uses an object while the object is freed and its memory asked for again.
// The memory is not handed out before the kernel ends (the kernel's late
// writes land in the old memory, not in the new object), and memory freed on
// the kernel's stream is reused on that stream at once. Skips without a GPU.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "cuda/driver_api.h"
#include "tests/uvm/fixtures.h"

namespace {

// Thread 0 spins until *flag != 0 (or about half a minute has passed, so a
// failing test cannot leave the GPU spinning), then the block fills `words`
// 32-bit words at dst with `value`.
const char kSpinFillPtx[] = R"(
.version 7.8
.target sm_80
.address_size 64
.visible .entry spin_fill(.param .u64 flag, .param .u64 dst, .param .u64 words, .param .u32 value)
{
    .reg .pred p, q;
    .reg .b32 r<5>;
    .reg .b64 rd<8>;
    ld.param.u64 rd1, [flag];
    ld.param.u64 rd2, [dst];
    ld.param.u64 rd3, [words];
    ld.param.u32 r1, [value];
    mov.u32 r2, %tid.x;
    setp.ne.u32 p, r2, 0;
    @p bra WAITED;
    mov.u64 rd7, 0;
SPIN:
    ld.volatile.global.u32 r3, [rd1];
    setp.ne.u32 q, r3, 0;
    @q bra WAITED;
    add.u64 rd7, rd7, 1;
    setp.lt.u64 q, rd7, 33554432;
    @q bra SPIN;
WAITED:
    bar.sync 0;
    cvt.u64.u32 rd4, r2;
LOOP:
    setp.ge.u64 p, rd4, rd3;
    @p bra DONE;
    shl.b64 rd5, rd4, 2;
    add.s64 rd6, rd2, rd5;
    st.global.u32 [rd6], r1;
    add.u64 rd4, rd4, 256;
    bra.uni LOOP;
DONE:
    ret;
}
)";

constexpr uint64_t M = 1024 * 1024;

class StreamKernel : public uvm_test::ManagerTest {
protected:
    void SetUp() override {
        ManagerTest::SetUp();
        if (IsSkipped() || HasFatalFailure())
            return;
        api_ = uvm::cuda::driver_api();
        ASSERT_NE(api_, nullptr);
        uvm_test::PtxKernel k;
        uvm_test::load_ptx_kernel(api_, 0, kSpinFillPtx, "spin_fill", &k);
        ASSERT_FALSE(HasFatalFailure());
        dev_ = k.device;
        ctx_ = k.context;
        mod_ = k.module;
        fn_ = k.function;
        warm_up_streams();
        flag_ = alloc(UVM_BACKING_SYSMEM, 4096, 0, 0, UVM_MEM_GPU_MAPPED);
        std::memset(cpu(flag_), 0, 4096);
    }
    void TearDown() override {
        if (mod_) {
            release();
            api_->cuCtxSetCurrent(ctx_);
            api_->cuCtxSynchronize();
            api_->cuModuleUnload(mod_);
            api_->cuDevicePrimaryCtxRelease(dev_);
        }
        if (flag_)
            EXPECT_EQ(uvm_mem_free(mgr_, flag_), UVM_OK);
        ManagerTest::TearDown();
    }
    void launch(CUstream stream, uint64_t dst, uint64_t bytes, uint32_t value) {
        CUdeviceptr f = info(flag_).gpu_kernel_address, d = dst;
        uint64_t words = bytes / 4;
        void *args[] = {&f, &d, &words, &value};
        ASSERT_EQ(api_->cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
        ASSERT_EQ(api_->cuLaunchKernel(fn_, 1, 1, 1, 256, 1, 1, 0, stream, args, nullptr), CUDA_SUCCESS);
    }
    void release() {
        if (flag_)
            reinterpret_cast<std::atomic<uint32_t> *>(cpu(flag_))->store(1);
    }
    uint64_t phys(uvm_mem_t *mem) {
        uvm_gpu_phys_address_t pa;
        EXPECT_EQ(uvm_mem_gpu_phys_address(mgr_, mem, 0, 0, 1, &pa), UVM_OK);
        return pa.address;
    }
    uint64_t wrong_words(uvm_mem_t *mem, uint32_t value, uint64_t size) {
        const std::vector<uint8_t> bytes = read_back(mem, size);
        uint64_t wrong = 0;
        for (uint64_t i = 0; i + 4 <= size; i += 4) {
            uint32_t w;
            std::memcpy(&w, &bytes[i], 4);
            wrong += w != value;
        }
        return wrong;
    }

    const uvm::cuda::DriverApi *api_ = nullptr;
    CUdevice dev_ = 0;
    CUcontext ctx_ = nullptr;
    CUmodule mod_ = nullptr;
    CUfunction fn_ = nullptr;
    uvm_mem_t *flag_ = nullptr;
};

}  // namespace

INSTANTIATE_TEST_SUITE_P(Cuda, StreamKernel, ::testing::Values(std::string("cuda")),
                         [](const auto &) { return std::string("cuda"); });

TEST_P(StreamKernel, MemoryAKernelStillUsesIsNotReusedBeforeItEnds) {
    uvm_stream_t *s = nullptr;
    ASSERT_EQ(uvm_stream_create(mgr_, 0, nullptr, &s), UVM_OK);
    void *native = nullptr;
    ASSERT_EQ(uvm_stream_native(mgr_, s, &native), UVM_OK);
    ASSERT_NE(native, nullptr);

    uvm_mem_t *a = alloc(UVM_BACKING_VIDMEM, 2 * M, 0, 2 * M, UVM_MEM_GPU_MAPPED);
    const uint64_t a_phys = phys(a);
    launch(static_cast<CUstream>(native), info(a).gpu_kernel_address, 2 * M, 0xAAAAAAAAu);
    ASSERT_EQ(uvm_mem_record_use(mgr_, a, s), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, a), UVM_OK);  // returns while the kernel spins
    EXPECT_EQ(manager_stats().retiring_objects, 1u);

    uvm_mem_t *b = alloc(UVM_BACKING_VIDMEM, 2 * M, 0, 2 * M);
    EXPECT_NE(phys(b), a_phys) << "memory a running kernel uses was handed out again";
    uvm_mem_span_t d{b, 0, UVM_VIEW_PHYSICAL};
    ASSERT_EQ(uvm_mem_memset(mgr_, 0, &d, 0x55, 2 * M), UVM_OK);

    // Stream-ordered: freed on the kernel's stream, reused there at once, by nobody else.
    uvm_mem_alloc_params_t p = uvm_test::alloc_params(UVM_BACKING_VIDMEM, 64 * 1024, 0, 0, 0);
    uvm_mem_t *c = nullptr, *e = nullptr, *f = nullptr;
    ASSERT_EQ(uvm_mem_alloc_async(mgr_, &p, s, &c), UVM_OK);
    const uint64_t c_phys = phys(c);
    ASSERT_EQ(uvm_mem_free_async(mgr_, c, s), UVM_OK);
    ASSERT_EQ(uvm_mem_alloc(mgr_, &p, &e), UVM_OK);
    EXPECT_NE(phys(e), c_phys);
    ASSERT_EQ(uvm_mem_alloc_async(mgr_, &p, s, &f), UVM_OK);
    EXPECT_EQ(phys(f), c_phys);

    release();
    ASSERT_EQ(uvm_stream_synchronize(mgr_, s), UVM_OK);
    EXPECT_EQ(manager_stats().retiring_objects, 0u);
    EXPECT_EQ(wrong_words(b, 0x55555555u, 2 * M), 0u) << "the kernel's late writes landed in a live object";
    for (uvm_mem_t *m : {b, e, f})
        ASSERT_EQ(uvm_mem_free(mgr_, m), UVM_OK);
    ASSERT_EQ(uvm_stream_destroy(mgr_, s), UVM_OK);
}

// An allocation that finds the GPU full waits for memory freed on a stream
// whose kernel still runs, and gets it once the kernel ends (rather than
// OUT_OF_MEMORY). The GPU is filled by a ballast of the driver's own memory
// that leaves less than the request free; another thread lets the kernel end.
TEST_P(StreamKernel, AnAllocationThatFindsTheGpuFullWaitsForMemoryFreedOnABusyStream) {
    uvm_stream_t *s = nullptr;
    ASSERT_EQ(uvm_stream_create(mgr_, 0, nullptr, &s), UVM_OK);
    void *native = nullptr;
    ASSERT_EQ(uvm_stream_native(mgr_, s, &native), UVM_OK);
    constexpr uint64_t kObject = 128 * M;
    // Kernel-mapped: the kernel writes it through its kernel address.
    uvm_mem_alloc_params_t p = uvm_test::alloc_params(UVM_BACKING_VIDMEM, kObject, 0, 2 * M, UVM_MEM_GPU_MAPPED);
    uvm_mem_t *a = nullptr;
    ASSERT_EQ(uvm_mem_alloc_async(mgr_, &p, s, &a), UVM_OK);
    const uint64_t a_phys = phys(a);
    launch(static_cast<CUstream>(native), info(a).gpu_kernel_address, kObject, 0xAAAAAAAAu);
    ASSERT_EQ(uvm_mem_free_async(mgr_, a, s), UVM_OK);  // pooled on s; the kernel still writes it
    ASSERT_EQ(uvm_gpu_trim(mgr_, 0, nullptr), UVM_OK);  // nothing cached: the next request needs the driver
    ASSERT_EQ(api_->cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
    size_t free_bytes = 0, total = 0;
    ASSERT_EQ(api_->cuMemGetInfo(&free_bytes, &total), CUDA_SUCCESS);
    CUdeviceptr ballast = 0;
    ASSERT_GT(free_bytes, 96 * M);
    ASSERT_EQ(api_->cuMemAlloc(&ballast, free_bytes - 64 * M), CUDA_SUCCESS);  // 64 MiB left: half the request
    std::thread ender([this] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        release();
    });
    uvm_mem_t *b = nullptr;
    const uvm_status_t status = uvm_mem_alloc(mgr_, &p, &b);
    ender.join();
    EXPECT_EQ(status, UVM_OK) << "failed rather than wait for the stream's work";
    if (status == UVM_OK) {
        EXPECT_EQ(phys(b), a_phys) << "not the memory the stream's work gave back";
        EXPECT_EQ(manager_stats().stream_pool_bytes, 0u);
        uvm_mem_span_t d{b, 0, UVM_VIEW_PHYSICAL};
        ASSERT_EQ(uvm_mem_memset(mgr_, 0, &d, 0x55, kObject), UVM_OK);
        EXPECT_EQ(wrong_words(b, 0x55555555u, kObject), 0u) << "the kernel wrote after the memory was handed out";
        EXPECT_EQ(uvm_mem_free(mgr_, b), UVM_OK);
    }
    ASSERT_EQ(api_->cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
    EXPECT_EQ(api_->cuMemFree(ballast), CUDA_SUCCESS);
    ASSERT_EQ(uvm_stream_destroy(mgr_, s), UVM_OK);
}

// The caller's own CUstream: adopted, never destroyed by the manager; one of
// another GPU's context is refused.
TEST_P(StreamKernel, NativeStreamsOfTheCallerAreAdoptedNotOwned) {
    CUstream mine = nullptr;
    ASSERT_EQ(api_->cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
    ASSERT_EQ(api_->cuStreamCreate(&mine, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    uvm_stream_t *s = nullptr;
    ASSERT_EQ(uvm_stream_create(mgr_, 0, mine, &s), UVM_OK);
    void *native = nullptr;
    ASSERT_EQ(uvm_stream_native(mgr_, s, &native), UVM_OK);
    EXPECT_EQ(native, static_cast<void *>(mine));
    uvm_mem_t *a = alloc(UVM_BACKING_VIDMEM, 2 * M, 0, 2 * M, UVM_MEM_GPU_MAPPED);
    launch(mine, info(a).gpu_kernel_address, 2 * M, 0x01020304u);
    ASSERT_EQ(uvm_mem_record_use(mgr_, a, s), UVM_OK);
    release();
    ASSERT_EQ(uvm_stream_destroy(mgr_, s), UVM_OK);  // waits for the kernel
    EXPECT_EQ(wrong_words(a, 0x01020304u, 2 * M), 0u);
    EXPECT_EQ(api_->cuStreamDestroy(mine), CUDA_SUCCESS) << "the manager destroyed a stream it does not own";
    ASSERT_EQ(uvm_mem_free(mgr_, a), UVM_OK);
    if (gpus_ > 1) {
        CUdevice dev1;
        CUcontext ctx1;
        CUstream other = nullptr;
        ASSERT_EQ(api_->cuDeviceGet(&dev1, 1), CUDA_SUCCESS);
        ASSERT_EQ(api_->cuDevicePrimaryCtxRetain(&ctx1, dev1), CUDA_SUCCESS);
        ASSERT_EQ(api_->cuCtxSetCurrent(ctx1), CUDA_SUCCESS);
        ASSERT_EQ(api_->cuStreamCreate(&other, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
        uvm_stream_t *bad = nullptr;
        EXPECT_EQ(uvm_stream_create(mgr_, 0, other, &bad), UVM_ERR_INVALID_ARGUMENT) << "a stream of GPU 1 for GPU 0";
        EXPECT_EQ(api_->cuStreamDestroy(other), CUDA_SUCCESS);
        api_->cuDevicePrimaryCtxRelease(dev1);
    }
}
