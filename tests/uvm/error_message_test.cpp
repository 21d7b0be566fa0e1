// uvm_last_error_message: why the calling thread's last call failed, naming
// the argument, limit or environment variable at fault; the status's own text
// where the library says nothing more; "success" after a success; per thread.
#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "tests/uvm/fixtures.h"

using namespace uvm_test;

namespace {

constexpr uint64_t K = 1024, M = 1024 * 1024;

std::string message() { return uvm_last_error_message(); }

// UVM_BACKEND set for the test's duration, then as it was.
class ScopedBackendVariable {
  public:
    explicit ScopedBackendVariable(const char *value) {
        const char *old = std::getenv("UVM_BACKEND");
        had_ = old != nullptr;
        if (had_)
            old_ = old;
        setenv("UVM_BACKEND", value, 1);
    }
    ~ScopedBackendVariable() {
        if (had_)
            setenv("UVM_BACKEND", old_.c_str(), 1);
        else
            unsetenv("UVM_BACKEND");
    }

  private:
    bool had_ = false;
    std::string old_;
};

class ErrorMessage : public ::testing::Test {
  protected:
    void SetUp() override { mgr_ = small_sim(2, 64 * M); ASSERT_NE(mgr_, nullptr); }
    void TearDown() override { EXPECT_EQ(uvm_manager_destroy(mgr_), UVM_OK); }
    uvm_manager_t *mgr_ = nullptr;
};

}  // namespace

TEST(ErrorMessageCreate, AnUnknownBackendVariableIsNamedWithTheChoices) {
    ScopedBackendVariable bogus("bogus");
    uvm_manager_t *mgr = nullptr;
    EXPECT_EQ(uvm_manager_create(nullptr, &mgr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(message(), "UVM_BACKEND=bogus: no such backend; sim or cuda");
    EXPECT_EQ(mgr, nullptr);
}

TEST(ErrorMessageCreate, TooManyGpusNamesTheFieldAndTheLimit) {
    uvm_manager_params_t p = sim_params(100, 64 * M);
    uvm_manager_t *mgr = nullptr;
    EXPECT_EQ(uvm_manager_create(&p, &mgr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(message(), "sim.gpu_count 100 is over the limit of 32 GPUs (UVM_MAX_GPUS)");
    p = sim_params(1, 3 * M);
    EXPECT_EQ(uvm_manager_create(&p, &mgr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(message(), "sim.vidmem_size 3 MiB is not a multiple of 2 MiB");
    p = sim_params(1, 64 * M);
    p.backend = static_cast<uvm_backend_kind_t>(9);
    EXPECT_EQ(uvm_manager_create(&p, &mgr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_NE(message().find("params->backend 9: no such backend"), std::string::npos) << message();
    EXPECT_EQ(uvm_manager_create(nullptr, nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(message(), "out is NULL");
    // A success says so, and forgets the failure before it.
    p = sim_params(1, 64 * M);
    ASSERT_EQ(uvm_manager_create(&p, &mgr), UVM_OK);
    EXPECT_EQ(message(), "success");
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

// uvm_mem_alloc's argument checks (uvm/mem.cpp, check_alloc) name the field.
TEST_F(ErrorMessage, AllocationsNameTheSizeAndTheLimit) {
    uvm_mem_t *m = nullptr;
    uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_SYSMEM, 1ull << 63);
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(message(), "size 8 EiB is over the maximum object size, 256 TiB");
    // GPU memory of such a size is more than the GPU holds, whatever the
    // size (PyTorch's test_out_of_memory asks 800,000,000 GiB): out of memory.
    p = alloc_params(UVM_BACKING_VIDMEM, 858993459200000000ull);
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_ERR_OUT_OF_MEMORY);
    EXPECT_NE(message().find("is more than GPU 0's memory"), std::string::npos) << message();
    p = alloc_params(UVM_BACKING_VIDMEM, ~0ull);
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_ERR_OUT_OF_MEMORY);
    p = alloc_params(UVM_BACKING_VIDMEM, ~0ull, 7);
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_ERR_INVALID_GPU);
    p = alloc_params(UVM_BACKING_VIDMEM, 4 * K, 5);
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_ERR_INVALID_GPU);
    EXPECT_EQ(message(), "gpu 5 is out of range: the manager has 2 GPUs (0 to 1)");
    p = alloc_params(UVM_BACKING_VIDMEM, 4 * K, 0, 8 * K);
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_ERR_PAGE_SIZE_NOT_SUPPORTED);
    EXPECT_NE(message().find("chunk_size 8 KiB"), std::string::npos) << message();
    p = alloc_params(UVM_BACKING_SYSMEM, 4 * K, 0, 0, UVM_MEM_EVICTABLE);
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(message(), "flags: UVM_MEM_EVICTABLE is for vidmem only");
    p = alloc_params(UVM_BACKING_SYSMEM, 4 * K, 0, 0, 1u << 20);
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(message(), "flags 0x100000: unknown flag bits 0x100000");
    p = alloc_params(static_cast<uvm_backing_t>(7), 4 * K);
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_NE(message().find("backing 7: no such backing"), std::string::npos) << message();
    p = alloc_params(UVM_BACKING_SYSMEM, 4 * K);
    p.tag = "a tag longer than sixty-three characters, which is as long as a tag can be";
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(message(), "tag is longer than 63 characters");
    p = alloc_params(UVM_BACKING_VIDMEM, 64 * M + 4 * K);
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_ERR_OUT_OF_MEMORY);
    EXPECT_EQ(message(), "size 65540 KiB is more than GPU 0's memory, 64 MiB");
    EXPECT_EQ(uvm_mem_alloc(mgr_, nullptr, &m), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(message(), "params is NULL");
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(message(), "out is NULL");
    uvm_client_t *client = nullptr;
    ASSERT_EQ(uvm_client_create(mgr_, "gone", &client), UVM_OK);
    ASSERT_EQ(uvm_client_destroy(mgr_, client), UVM_OK);
    p.client = client;
    EXPECT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_ERR_INVALID_HANDLE);
    EXPECT_NE(message().find(": destroyed, or of another manager"), std::string::npos) << message();
    EXPECT_EQ(m, nullptr);
}

TEST_F(ErrorMessage, HandlesGpusAndNullsAreNamed) {
    uvm_mem_info_t info;
    EXPECT_EQ(uvm_mem_info(nullptr, nullptr, &info), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(message(), "the manager handle is NULL");
    EXPECT_EQ(uvm_mem_info(mgr_, nullptr, &info), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(message(), "the object handle is NULL");
    uvm_mem_t *m = nullptr;
    const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_SYSMEM, 4 * K);
    ASSERT_EQ(uvm_mem_alloc(mgr_, &p, &m), UVM_OK);
    EXPECT_EQ(uvm_mem_info(mgr_, m, nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(message(), "out is NULL");
    void *cpu = nullptr;
    EXPECT_EQ(uvm_mem_cpu_kernel_address(mgr_, m, 8 * K, &cpu), UVM_ERR_OUT_OF_RANGE);
    EXPECT_EQ(message(), "offset 8192 is past the object's end (4 KiB)");
    EXPECT_EQ(uvm_mem_cpu_kernel_address(mgr_, m, 0, &cpu), UVM_ERR_NOT_MAPPED);
    EXPECT_EQ(message(), "the object has no CPU kernel mapping");
    ASSERT_EQ(uvm_mem_free(mgr_, m), UVM_OK);
    EXPECT_EQ(uvm_mem_info(mgr_, m, &info), UVM_ERR_INVALID_HANDLE);
    EXPECT_NE(message().find(": freed, or of another manager"), std::string::npos) << message();
    EXPECT_EQ(uvm_gpu_trim(mgr_, 2, nullptr), UVM_ERR_INVALID_GPU);
    EXPECT_EQ(message(), "gpu 2 is out of range: the manager has 2 GPUs (0 to 1)");
    uvm_mem_alloc_params_t placed = alloc_params(UVM_BACKING_SYSMEM, 4 * K);
    placed.placement.kind = UVM_PLACEMENT_NODE;
    placed.placement.node = 63;
    EXPECT_EQ(uvm_mem_alloc(mgr_, &placed, &m), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(message(), "placement.node 63: no such NUMA node in the topology");
    EXPECT_EQ(uvm_mem_alloc_gpu(mgr_, &placed, nullptr, &m, nullptr), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(message(), "gpu_address is NULL");
    uvm_client_t *client = nullptr;
    ASSERT_EQ(uvm_client_create(mgr_, "c", &client), UVM_OK);
    const uint32_t percents[] = {50, 101};
    EXPECT_EQ(uvm_pressure_watermarks(mgr_, client, 0, percents, 2), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(message(), "percents[1] is 101: a watermark is 1 to 100");
    ASSERT_EQ(uvm_client_destroy(mgr_, client), UVM_OK);
    EXPECT_EQ(uvm_client_set_budget(mgr_, client, 0, M), UVM_ERR_INVALID_HANDLE);
    EXPECT_NE(message().find(": destroyed, or of another manager"), std::string::npos) << message();
}

// A failure the library says nothing more about gives the status's own
// text, never the words of an earlier failure.
TEST_F(ErrorMessage, AFailureWithoutWordsOfItsOwnGivesTheStatusText) {
    EXPECT_EQ(uvm_gpu_trim(mgr_, 9, nullptr), UVM_ERR_INVALID_GPU);
    EXPECT_NE(message(), uvm_status_string(UVM_ERR_INVALID_GPU));
    uvm_mem_t *m = nullptr;
    EXPECT_EQ(uvm_mem_lookup_gpu_kernel(mgr_, 0, 0x1000, &m, nullptr), UVM_ERR_NOT_FOUND);
    EXPECT_EQ(message(), uvm_status_string(UVM_ERR_NOT_FOUND));
    uint32_t count = 0;
    EXPECT_EQ(uvm_gpu_count(mgr_, &count), UVM_OK);
    EXPECT_EQ(message(), "success");
}

// Each thread reads its own last call's message, whatever others do between.
TEST_F(ErrorMessage, TheMessageIsPerThread) {
    uvm_mem_info_t info;
    EXPECT_EQ(uvm_mem_info(mgr_, nullptr, &info), UVM_ERR_INVALID_ARGUMENT);
    const std::string mine = message();
    EXPECT_EQ(mine, "the object handle is NULL");
    std::string fresh, theirs, theirs_after_success;
    std::thread other([&] {
        fresh = message();  // a thread that has made no call: nothing failed
        EXPECT_EQ(uvm_gpu_trim(mgr_, 7, nullptr), UVM_ERR_INVALID_GPU);
        theirs = message();
        uint32_t count = 0;
        EXPECT_EQ(uvm_gpu_count(mgr_, &count), UVM_OK);
        theirs_after_success = message();
    });
    other.join();
    EXPECT_EQ(message(), mine);
    EXPECT_EQ(fresh, "success");
    EXPECT_EQ(theirs, "gpu 7 is out of range: the manager has 2 GPUs (0 to 1)");
    EXPECT_EQ(theirs_after_success, "success");
    // Many threads failing differently at once: each keeps its own words.
    std::vector<std::thread> threads;
    std::atomic<int> wrong{0};
    for (uint32_t t = 0; t < 8; ++t)
        threads.emplace_back([&, t] {
            const std::string want = "gpu " + std::to_string(10 + t) + " is out of range: the manager has 2 GPUs (0 to 1)";
            for (int i = 0; i < 200; ++i) {
                if (uvm_gpu_trim(mgr_, 10 + t, nullptr) != UVM_ERR_INVALID_GPU || message() != want)
                    ++wrong;
            }
        });
    for (auto &t : threads)
        t.join();
    EXPECT_EQ(wrong.load(), 0);
    EXPECT_EQ(message(), mine);
}
