// fork(): the child gets a clear status from its parent's managers and
// touches nothing of theirs; managers it makes itself work; the parent's go
// on as before. (Sim: the CUDA driver itself cannot be used in a child
// forked after it was initialised.)
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "tests/uvm/fixtures.h"

using namespace uvm_test;

namespace {

constexpr uint64_t M = 1024 * 1024;

// In the child: the exit code says which check failed (0: all held).
int child_checks(uvm_manager_t *parent, uvm_mem_t *object) {
    const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 2 * M);
    uvm_mem_t *m = nullptr;
    if (uvm_mem_alloc(parent, &p, &m) != UVM_ERR_FORKED || m != nullptr)
        return 1;
    if (uvm_mem_free(parent, object) != UVM_ERR_FORKED)
        return 2;
    uvm_mem_info_t info;
    if (uvm_mem_info(parent, object, &info) != UVM_ERR_FORKED)
        return 3;
    uvm_gpu_stats_t st;
    if (uvm_gpu_stats(parent, 0, &st) != UVM_ERR_FORKED)
        return 4;
    if (uvm_manager_destroy(parent) != UVM_ERR_FORKED)
        return 5;
    if (std::strstr(uvm_status_string(UVM_ERR_FORKED), "parent") == nullptr)
        return 6;
    // A manager of its own works.
    uvm_manager_params_t mp = sim_params(1, 64 * M);
    uvm_manager_t *own = nullptr;
    if (uvm_manager_create(&mp, &own) != UVM_OK)
        return 7;
    if (uvm_mem_alloc(own, &p, &m) != UVM_OK || uvm_mem_free(own, m) != UVM_OK)
        return 8;
    if (uvm_manager_destroy(own) != UVM_OK)
        return 9;
    return 0;
}

}  // namespace

TEST(Fork, AChildIsRefusedItsParentsManagersAndMakesItsOwn) {
    uvm_manager_t *mgr = small_sim(1, 64 * M);
    const uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_VIDMEM, 4 * M);
    uvm_mem_t *object = nullptr;
    ASSERT_EQ(uvm_mem_alloc(mgr, &p, &object), UVM_OK);
    uvm_gpu_stats_t before;
    ASSERT_EQ(uvm_gpu_stats(mgr, 0, &before), UVM_OK);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0)
        _exit(child_checks(mgr, object));
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's check that failed (see child_checks)";
    // The parent's manager and object are as they were.
    uvm_gpu_stats_t after;
    ASSERT_EQ(uvm_gpu_stats(mgr, 0, &after), UVM_OK);
    EXPECT_EQ(after.vidmem_objects, before.vidmem_objects);
    uvm_mem_info_t info;
    ASSERT_EQ(uvm_mem_info(mgr, object, &info), UVM_OK);
    EXPECT_EQ(info.alloc_size, 4 * M);
    uvm_mem_t *more = nullptr;
    ASSERT_EQ(uvm_mem_alloc(mgr, &p, &more), UVM_OK);
    EXPECT_EQ(uvm_mem_free(mgr, more), UVM_OK);
    EXPECT_EQ(uvm_mem_free(mgr, object), UVM_OK);
    EXPECT_EQ(uvm_manager_destroy(mgr), UVM_OK);
}

namespace {

// In a child process: the GPU's free memory as the driver says it (through
// a manager of its own on CUDA), written to `fd`; 0 where there is no GPU.
void report_free_memory(int fd) {
    uvm_manager_params_t p;
    std::memset(&p, 0, sizeof(p));
    p.backend = UVM_BACKEND_CUDA;
    uvm_manager_t *mgr = nullptr;
    uint64_t free_bytes = 0;
    if (uvm_manager_create(&p, &mgr) == UVM_OK) {
        uvm_gpu_info_t gi;
        if (uvm_gpu_info(mgr, 0, &gi) == UVM_OK)
            free_bytes = gi.memory_free;
        uvm_manager_destroy(mgr);
    }
    (void)!write(fd, &free_bytes, sizeof(free_bytes));
}

// Run `body(fd)` in a child process and read back what it wrote.
template <typename F>
uint64_t in_child(F &&body) {
    int fds[2];
    if (pipe(fds) != 0)
        return 0;
    const pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        body(fds[1]);
        _exit(0);
    }
    close(fds[1]);
    uint64_t value = 0;
    if (read(fds[0], &value, sizeof(value)) != sizeof(value))
        value = 0;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return value;
}

}  // namespace

// A process killed in the middle of its allocations leaves no GPU memory
// behind: the driver takes back what its handles held. The parent never
// touches the GPU itself; fresh children measure before and after.
TEST(Fork, AProcessKilledMidAllocationLeavesNoGpuMemory) {
    // The driver cannot be used in a child forked after this process loaded
    // it (an earlier test in the same run did): run alone, as ctest does.
    if (void *loaded = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD)) {
        dlclose(loaded);
        GTEST_SKIP() << "the CUDA driver is loaded in this process already; run this test alone (ctest does)";
    }
    const uint64_t before = in_child(report_free_memory);
    if (before == 0)
        GTEST_SKIP() << "no CUDA GPU here";
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        uvm_manager_params_t p;
        std::memset(&p, 0, sizeof(p));
        p.backend = UVM_BACKEND_CUDA;
        uvm_manager_t *mgr = nullptr;
        if (uvm_manager_create(&p, &mgr) != UVM_OK)
            _exit(1);
        // 64 MiB objects until killed (at most 8 GiB: far below what the GPU has).
        const uvm_mem_alloc_params_t a = alloc_params(UVM_BACKING_VIDMEM, 64 * M, 0, 0, UVM_MEM_GPU_MAPPED);
        for (int i = 0; i < 128; ++i) {
            uvm_mem_t *m = nullptr;
            if (uvm_mem_alloc(mgr, &a, &m) != UVM_OK)
                break;
            const uint64_t n = static_cast<uint64_t>(i + 1);
            (void)!write(fds[1], &n, sizeof(n));
        }
        pause();  // killed here, or earlier
        _exit(0);
    }
    close(fds[1]);
    uint64_t made = 0;
    while (made < 16 && read(fds[0], &made, sizeof(made)) == sizeof(made)) {
    }
    kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    close(fds[0]);
    EXPECT_TRUE(WIFSIGNALED(status));
    EXPECT_GE(made, 16u) << "the child made fewer objects than the test waits for";
    // The driver may take a moment to tear the dead process's context down.
    uint64_t after = 0;
    for (int attempt = 0; attempt < 50; ++attempt) {
        after = in_child(report_free_memory);
        if (after + 64 * M >= before)
            break;
        usleep(100 * 1000);
    }
    EXPECT_GE(after + 64 * M, before) << "free before " << (before >> 20) << " MiB, after " << (after >> 20)
                                      << " MiB: the killed process's memory is still held";
}
