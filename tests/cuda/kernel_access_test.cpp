// A GPU kernel reads and writes through each kind of GPU mapping the manager
// makes: kernel views of sysmem (DMA) and of vidmem of every chunk size (the
// physical window), a user mapping at the caller's address (remappable
// handles) and at addresses the manager picks, and a peer's mapping of
// another GPU's vidmem. The kernel is PTX embedded here, loaded
// with cuModuleLoadData: the library itself needs no nvcc. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cuda/driver_api.h"
#include "tests/uvm/fixtures.h"

namespace {

// dst[i] = src[i] + 1 for i < n, one thread per byte.
const char kAddOnePtx[] = R"(
.version 7.8
.target sm_80
.address_size 64
.visible .entry add_one(.param .u64 dst, .param .u64 src, .param .u64 n)
{
    .reg .pred p;
    .reg .b16 h<3>;
    .reg .b32 r<5>;
    .reg .b64 rd<8>;
    ld.param.u64 rd1, [dst];
    ld.param.u64 rd2, [src];
    ld.param.u64 rd3, [n];
    mov.u32 r1, %ctaid.x;
    mov.u32 r2, %ntid.x;
    mov.u32 r3, %tid.x;
    mad.lo.s32 r4, r1, r2, r3;
    cvt.u64.u32 rd4, r4;
    setp.ge.u64 p, rd4, rd3;
    @p bra DONE;
    add.s64 rd5, rd2, rd4;
    ld.global.u8 h1, [rd5];
    add.s16 h2, h1, 1;
    add.s64 rd6, rd1, rd4;
    st.global.u8 [rd6], h2;
DONE:
    ret;
}
)";

constexpr uint64_t M = 1024 * 1024;
constexpr uint64_t kSize = 4 * M;

class KernelAccess : public uvm_test::ManagerTest {
protected:
    void SetUp() override {
        ManagerTest::SetUp();
        if (IsSkipped() || HasFatalFailure())
            return;
        api_ = uvm::cuda::driver_api();
        ASSERT_NE(api_, nullptr);
        for (uint32_t g = 0; g < gpus_ && g < 2; ++g) {
            uvm_test::PtxKernel k;
            uvm_test::load_ptx_kernel(api_, static_cast<int>(g), kAddOnePtx, "add_one", &k);
            ASSERT_FALSE(HasFatalFailure());
            devices_.push_back(k.device);
            contexts_.push_back(k.context);
            modules_.push_back(k.module);
            functions_.push_back(k.function);
        }
    }
    void TearDown() override {
        for (size_t g = 0; g < modules_.size(); ++g) {
            api_->cuCtxSetCurrent(contexts_[g]);
            api_->cuModuleUnload(modules_[g]);
            api_->cuDevicePrimaryCtxRelease(devices_[g]);
        }
        ManagerTest::TearDown();
    }
    // Run add_one on GPU `gpu` from `src` to `dst` (GPU virtual addresses).
    void add_one(uint32_t gpu, uint64_t dst, uint64_t src) {
        ASSERT_EQ(api_->cuCtxSetCurrent(contexts_[gpu]), CUDA_SUCCESS);
        CUdeviceptr d = dst, s = src;
        uint64_t n = kSize;
        void *args[] = {&d, &s, &n};
        ASSERT_EQ(api_->cuLaunchKernel(functions_[gpu], static_cast<unsigned>(kSize / 256), 1, 1, 256, 1, 1, 0,
                                       nullptr, args, nullptr),
                  CUDA_SUCCESS);
        ASSERT_EQ(api_->cuCtxSynchronize(), CUDA_SUCCESS);
    }
    // The object's address in `gpu`'s kernel space, mapping it the first time.
    uint64_t kernel_va(uvm_mem_t *mem, uint32_t gpu) {
        uint64_t va = 0;
        if (uvm_mem_gpu_kernel_address(mgr_, mem, gpu, 0, &va) == UVM_OK)
            return va;
        EXPECT_EQ(uvm_mem_map_gpu_kernel(mgr_, mem, gpu), UVM_OK);
        EXPECT_EQ(uvm_mem_gpu_kernel_address(mgr_, mem, gpu, 0, &va), UVM_OK);
        return va;
    }
    std::vector<uint8_t> read(uvm_mem_t *mem, uint32_t gpu) { return read_back(mem, kSize, gpu); }
    void expect_plus(const std::vector<uint8_t> &got, int plus, const char *what) {
        size_t wrong = 0;
        for (uint64_t i = 0; i < kSize; ++i)
            wrong += got[i] != static_cast<uint8_t>(uvm_test::pattern(i, 5) + plus);
        EXPECT_EQ(wrong, 0u) << what;
    }

    const uvm::cuda::DriverApi *api_ = nullptr;
    std::vector<CUdevice> devices_;
    std::vector<CUcontext> contexts_;
    std::vector<CUmodule> modules_;
    std::vector<CUfunction> functions_;
};

}  // namespace

INSTANTIATE_TEST_SUITE_P(Cuda, KernelAccess, ::testing::Values(std::string("cuda")),
                         [](const auto &) { return std::string("cuda"); });

TEST_P(KernelAccess, ReadsAndWritesThroughEveryMappingKind) {
    uvm_mem_t *sys = alloc(UVM_BACKING_SYSMEM, kSize);
    uvm_mem_t *big = alloc(UVM_BACKING_VIDMEM, kSize, 0, 2 * M);
    uvm_mem_t *small = alloc(UVM_BACKING_VIDMEM, kSize, 0, 64 * 1024);
    uvm_mem_t *user = alloc(UVM_BACKING_VIDMEM, kSize, 0, 2 * M, UVM_MEM_USER_MAPPABLE);
    uint8_t *host = cpu(sys);
    for (uint64_t i = 0; i < kSize; ++i)
        host[i] = uvm_test::pattern(i, 5);

    // sysmem (DMA view) -> 2M vidmem (window view)
    add_one(0, kernel_va(big, 0), kernel_va(sys, 0));
    expect_plus(read(big, 0), 1, "kernel view of sysmem -> kernel mapping of 2M vidmem");
    // 2M vidmem -> 64K vidmem (window view)
    add_one(0, kernel_va(small, 0), kernel_va(big, 0));
    expect_plus(read(small, 0), 2, "2M vidmem -> window view of 64K vidmem");
    // 64K vidmem -> user mapping of 2M vidmem
    const uint64_t addr = gpu_user_range(kSize, 2 * M);
    ASSERT_EQ(uvm_mem_map_gpu_user(mgr_, user, 0, addr), UVM_OK);
    add_one(0, addr, kernel_va(small, 0));
    expect_plus(read(user, 0), 3, "window view -> user mapping");
    // The user mapping back into sysmem, through its DMA view: the CPU sees it.
    add_one(0, kernel_va(sys, 0), addr);
    for (uint64_t i = 0; i < kSize; i += 4097)
        ASSERT_EQ(host[i], static_cast<uint8_t>(uvm_test::pattern(i, 5) + 4)) << i;

    if (peers()) {
        // GPU 1 reads GPU 0's vidmem through its own mapping of it, and writes
        // GPU 0's 64K vidmem through the window view.
        add_one(1, kernel_va(small, 1), kernel_va(user, 1));
        expect_plus(read(small, 0), 4, "peer: GPU 1 reads GPU 0's 2M vidmem, writes its 64K vidmem");
    }
    for (uvm_mem_t *m : {sys, big, small, user})
        ASSERT_EQ(uvm_mem_free(mgr_, m), UVM_OK);
}

// Every vidmem object is kernel-mappable at once, whatever its chunk size,
// and a user mapping whose address the manager picks reaches the same bytes,
// on the owner and on a peer.
TEST_P(KernelAccess, EveryChunkSizeThroughKernelAndPickedUserAddresses) {
    uvm_mem_t *sys = alloc(UVM_BACKING_SYSMEM, kSize, 0, 0, UVM_MEM_GPU_MAPPED);
    uint8_t *host = cpu(sys);
    for (uint64_t i = 0; i < kSize; ++i)
        host[i] = uvm_test::pattern(i, 5);
    uint64_t src = kernel_va(sys, 0);
    int plus = 0;
    for (uint64_t chunk : {uint64_t(4096), uint64_t(65536), 2 * M}) {
        uvm_mem_t *vid = alloc(UVM_BACKING_VIDMEM, kSize, 0, chunk, UVM_MEM_GPU_MAPPED);
        const uvm_mem_info_t i = info(vid);
        ASSERT_NE(i.gpu_kernel_address, 0u) << chunk;
        add_one(0, i.gpu_kernel_address, src);
        expect_plus(read(vid, 0), ++plus, "kernel view");
        ASSERT_EQ(uvm_mem_map_gpu_user(mgr_, vid, 0, 0), UVM_OK) << chunk;
        const uint64_t user = info(vid).user_address;
        ASSERT_NE(user, 0u);
        uvm_mem_t *next = alloc(UVM_BACKING_VIDMEM, kSize, 0, chunk, UVM_MEM_GPU_MAPPED);
        add_one(0, info(next).gpu_kernel_address, user);
        expect_plus(read(next, 0), ++plus, "picked user address -> kernel view");
        if (peers()) {
            ASSERT_EQ(uvm_mem_map_gpu_user(mgr_, next, 1, 0), UVM_OK);
            add_one(1, info(vid).user_address, info(next).user_address);
            expect_plus(read(vid, 0), ++plus, "peer: picked user addresses on GPU 1");
            ASSERT_EQ(uvm_mem_free(mgr_, next), UVM_OK);
            ASSERT_EQ(uvm_mem_free(mgr_, vid), UVM_OK);
            plus = 0;
            continue;
        }
        ASSERT_EQ(uvm_mem_free(mgr_, vid), UVM_OK);
        ASSERT_EQ(uvm_mem_free(mgr_, next), UVM_OK);
        plus = 0;
    }
    ASSERT_EQ(uvm_mem_free(mgr_, sys), UVM_OK);
}

// A sleepable client's objects, at every chunk size, read and written by a
// kernel through the pointers the caller was given before the sleep: the
// kernel address and a user address the manager picked. The memory went
// back to the driver in between and came back under the same addresses.
TEST_P(KernelAccess, ASleptClientsObjectsAreUsedThroughTheirOldPointersAfterTheWake) {
    uvm_mem_t *sys = alloc(UVM_BACKING_SYSMEM, kSize, 0, 0, UVM_MEM_GPU_MAPPED);
    uint8_t *host = cpu(sys);
    for (uint64_t i = 0; i < kSize; ++i)
        host[i] = uvm_test::pattern(i, 5);
    const uint64_t src = kernel_va(sys, 0);
    uvm_client_t *client = nullptr;
    ASSERT_EQ(uvm_client_create_sleepable(mgr_, "weights", &client), UVM_OK);
    struct Slept {
        uvm_mem_t *mem;
        uint64_t kernel, user;
    };
    std::vector<Slept> objects;
    for (uint64_t chunk : {uint64_t(4096), uint64_t(65536), 2 * M}) {
        uvm_mem_alloc_params_t p = uvm::alloc_params(UVM_BACKING_VIDMEM, kSize, 0, chunk, UVM_MEM_GPU_MAPPED);
        p.client = client;
        Slept s{};
        ASSERT_EQ(uvm_mem_alloc(mgr_, &p, &s.mem), UVM_OK) << chunk;
        s.kernel = info(s.mem).gpu_kernel_address;
        ASSERT_EQ(uvm_mem_map_gpu_user(mgr_, s.mem, 0, 0), UVM_OK) << chunk;
        s.user = info(s.mem).user_address;
        add_one(0, s.kernel, src);  // pattern + 1, written through the kernel address
        objects.push_back(s);
    }
    ASSERT_EQ(uvm_client_sleep(mgr_, client, nullptr), UVM_OK);
    ASSERT_EQ(uvm_client_wake(mgr_, client), UVM_OK);
    uvm_mem_t *out = alloc(UVM_BACKING_VIDMEM, kSize, 0, 0, UVM_MEM_GPU_MAPPED);
    for (const Slept &s : objects) {
        EXPECT_EQ(info(s.mem).gpu_kernel_address, s.kernel);
        EXPECT_EQ(info(s.mem).user_address, s.user);
        add_one(0, info(out).gpu_kernel_address, s.kernel);
        expect_plus(read(out, 0), 2, "read through the old kernel address after the wake");
        add_one(0, info(out).gpu_kernel_address, s.user);
        expect_plus(read(out, 0), 2, "read through the old user address after the wake");
        add_one(0, s.user, src);
        expect_plus(read(s.mem, 0), 1, "written through the old user address after the wake");
        ASSERT_EQ(uvm_mem_free(mgr_, s.mem), UVM_OK);
    }
    ASSERT_EQ(uvm_mem_free(mgr_, out), UVM_OK);
    ASSERT_EQ(uvm_client_destroy(mgr_, client), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, sys), UVM_OK);
}

// A runtime enables a pair once (as PyTorch does before a copy between GPUs)
// and GPU 1 then reaches GPU 0's objects at GPU 0's own addresses, those made
// before the call and after it, with no mapping of its own.
TEST_P(KernelAccess, APeerEnabledOnceReachesTheOwnersAddresses) {
    if (!peers())
        GTEST_SKIP() << "needs two GPUs with peer access";
    uvm_mem_t *sys = alloc(UVM_BACKING_SYSMEM, kSize);
    uvm_mem_t *before = alloc(UVM_BACKING_VIDMEM, kSize, 0, 2 * M);
    uint8_t *host = cpu(sys);
    for (uint64_t i = 0; i < kSize; ++i)
        host[i] = uvm_test::pattern(i, 5);
    ASSERT_EQ(uvm_gpu_enable_peer_access(mgr_, 1, 0), UVM_OK);
    uvm_mem_t *after = alloc(UVM_BACKING_VIDMEM, kSize, 0, 64 * 1024);
    add_one(0, kernel_va(after, 0), kernel_va(sys, 0));
    add_one(1, kernel_va(before, 0), kernel_va(after, 0));
    expect_plus(read(before, 0), 2, "GPU 1 through GPU 0's addresses, an object made before and one after");
    uvm_mem_info_t info;
    ASSERT_EQ(uvm_mem_info(mgr_, before, &info), UVM_OK);
    EXPECT_EQ(info.gpu_phys_mask & 2u, 0u) << "no mapping of GPU 1's was made";
    for (uvm_mem_t *m : {sys, before, after})
        ASSERT_EQ(uvm_mem_free(mgr_, m), UVM_OK);
}
