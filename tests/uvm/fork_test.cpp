// fork(): the child gets a clear status from its parent's managers and
// touches nothing of theirs; managers it makes itself work; the parent's go
// on as before. (Sim: the CUDA driver itself cannot be used in a child
// forked after it was initialised.)
#include <gtest/gtest.h>

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
