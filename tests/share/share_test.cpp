// Sharing objects between managers and processes (uvm_mem_export /
// uvm_mem_import, docs/sharing.md) on every backend: every mapping kind of
// an imported object with data written on one side and read on the other,
// the memory outliving the exporter's object and the exporter's process
// (SIGKILL), a killed importer leaking nothing, and every refusal.
//
// The other process is this test program again (posix_spawn of
// /proc/self/exe), running run_share_child with its part in UVM_SHARE_CHILD:
// a CUDA process may not fork once it has used the driver.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "share/share_message.h"
#include "tests/uvm/fixtures.h"

extern char **environ;

using namespace uvm_test;

namespace {

constexpr uint64_t K = 1024, M = 1024 * 1024;
constexpr int kChildFd = 100;  // where the child finds its end of the socket

uvm_mem_alloc_params_t shareable(uvm_backing_t backing, uint64_t size) {
    uvm_mem_alloc_params_t p = alloc_params(backing, size, 0);
    p.flags = UVM_MEM_USER_MAPPABLE;
    if (backing == UVM_BACKING_VIDMEM)
        p.chunk_size = 2 * M;
    return p;
}

// A staging sysmem object on `gpu`'s kernel mapping and the CPU: the tests'
// window onto any object through the copy engine.
struct Staging {
    uvm_manager_t *mgr;
    uvm_mem_t *mem = nullptr;
    uint8_t *cpu = nullptr;
    Staging(uvm_manager_t *m, uint32_t gpu, uint64_t size) : mgr(m) {
        uvm_mem_alloc_params_t p = alloc_params(UVM_BACKING_SYSMEM, size, gpu);
        p.flags = UVM_MEM_GPU_MAPPED;
        EXPECT_EQ(uvm_mem_alloc(mgr, &p, &mem), UVM_OK);
        EXPECT_EQ(uvm_mem_map_cpu_kernel(mgr, mem), UVM_OK);
        void *at = nullptr;
        EXPECT_EQ(uvm_mem_cpu_kernel_address(mgr, mem, 0, &at), UVM_OK);
        cpu = static_cast<uint8_t *>(at);
    }
    ~Staging() { uvm_mem_free(mgr, mem); }
};

// Write pattern `seed` into `mem` through `view` on `gpu`.
uvm_status_t write_pattern(uvm_manager_t *mgr, uvm_mem_t *mem, uint32_t gpu, uvm_gpu_view_t view, uint64_t size,
                           uint32_t seed) {
    Staging s(mgr, gpu, size);
    for (uint64_t i = 0; i < size; ++i)
        s.cpu[i] = pattern(i, seed);
    uvm_mem_span_t dst{mem, 0, view}, src{s.mem, 0, UVM_VIEW_KERNEL};
    return uvm_mem_copy(mgr, gpu, &dst, &src, size);
}

// A shareable object of `backing` on GPU 0, in GPU 0's kernel address space,
// holding pattern `seed`; null (with the failure recorded, nothing left
// allocated) where a step failed.
uvm_mem_t *patterned(uvm_manager_t *mgr, uvm_backing_t backing, uint64_t size, uint32_t seed) {
    uvm_mem_alloc_params_t p = shareable(backing, size);
    uvm_mem_t *mem = nullptr;
    uvm_status_t s = uvm_mem_alloc(mgr, &p, &mem);
    EXPECT_EQ(s, UVM_OK) << "alloc";
    if (s != UVM_OK)
        return nullptr;
    s = uvm_mem_map_gpu_kernel(mgr, mem, 0);
    EXPECT_EQ(s, UVM_OK) << "map_gpu_kernel";
    if (s == UVM_OK) {
        s = write_pattern(mgr, mem, 0, UVM_VIEW_KERNEL, size, seed);
        EXPECT_EQ(s, UVM_OK) << "write_pattern";
    }
    if (s != UVM_OK) {
        uvm_mem_free(mgr, mem);
        return nullptr;
    }
    return mem;
}

// The first byte of `mem` (through `view` on `gpu`) that is not pattern
// `seed`, or size where all are; size + 1 where the copy failed.
uint64_t first_wrong(uvm_manager_t *mgr, uvm_mem_t *mem, uint32_t gpu, uvm_gpu_view_t view, uint64_t size,
                     uint32_t seed) {
    Staging s(mgr, gpu, size);
    uvm_mem_span_t dst{s.mem, 0, UVM_VIEW_KERNEL}, src{mem, 0, view};
    if (uvm_mem_copy(mgr, gpu, &dst, &src, size) != UVM_OK)
        return size + 1;
    for (uint64_t i = 0; i < size; ++i)
        if (s.cpu[i] != pattern(i, seed))
            return i;
    return size;
}

struct Child {
    pid_t pid = -1;
    int socket = -1;  // the parent's end
};

// This program again, as the other process of a test: `part` names what it
// does (run_share_child), on backend `backend`.
Child spawn_child(const std::string &part, const std::string &backend, size_t size) {
    Child c;
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0)
        return c;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], kChildFd);  // dup2 clears close-on-exec
    const std::string env = "UVM_SHARE_CHILD=" + part + "," + backend + "," + std::to_string(size);
    std::vector<std::string> envs{env};
    for (char **e = environ; *e; ++e)
        if (std::strncmp(*e, "UVM_SHARE_CHILD=", 16) != 0)
            envs.push_back(*e);
    std::vector<char *> envp;
    for (std::string &e : envs)
        envp.push_back(&e[0]);
    envp.push_back(nullptr);
    char self[] = "/proc/self/exe";
    char *argv[] = {self, nullptr};
    if (posix_spawn(&c.pid, self, &actions, nullptr, argv, envp.data()) != 0)
        c.pid = -1;
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    c.socket = fds[0];
    return c;
}

// Exit status of the child (-signal where a signal ended it).
int wait_child(Child &c) {
    int status = 0;
    if (c.pid <= 0 || waitpid(c.pid, &status, 0) != c.pid)
        return -1000;
    close(c.socket);
    c.pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

bool hear(int socket) {
    char b = 0;
    return recv(socket, &b, 1, 0) == 1;
}

int open_fd_count() {
    int n = 0;
    for (int fd = 0; fd < 4096; ++fd)
        if (fcntl(fd, F_GETFD) != -1)
            ++n;
    return n;
}

}  // namespace

class ShareTest : public ManagerTest {
protected:
    // The CUDA driver sets up state of its own the first time a process
    // exports or imports a handle, and keeps some device memory for it after
    // (2 MiB and 64 KiB on an H100): a warm-up round first, then the leak
    // check's baseline again. SharingOverAndOver below shows that no round
    // after the first costs anything.
    void SetUp() override {
        ManagerTest::SetUp();
        if (IsSkipped() || HasFatalFailure() || !on_cuda())
            return;
        share_round(0);
        if (other_) {
            ASSERT_EQ(uvm_manager_destroy(other_), UVM_OK);
            other_ = nullptr;
        }
        rebaseline_free_memory();
    }
    // One export, import, map and free of a 4 MiB object (written and read).
    void share_round(uint32_t seed) {
        uvm_mem_t *mem = nullptr, *imported = nullptr;
        ASSERT_NE(mem = patterned(mgr_, UVM_BACKING_VIDMEM, 4 * M, seed), nullptr);
        ASSERT_EQ(pass(mem, &imported), UVM_OK);
        ASSERT_EQ(uvm_mem_map_gpu_kernel(other(), imported, 0), UVM_OK);
        EXPECT_EQ(first_wrong(other(), imported, 0, UVM_VIEW_KERNEL, 4 * M, seed), 4 * M);
        EXPECT_EQ(uvm_mem_free(other(), imported), UVM_OK);
        EXPECT_EQ(uvm_mem_free(mgr_, mem), UVM_OK);
    }

    // The CUDA driver also keeps device memory (64 KiB on an H100) after a
    // process first shares a handle with another process, whichever way:
    // a test that crosses processes takes one round each way first, then
    // the leak check's baseline again. AnotherProcessReadsAndWrites shows
    // that rounds after those cost nothing.
    void warm_up_across_processes() {
        if (!on_cuda())
            return;
        another_process_reads_and_writes(UVM_BACKING_VIDMEM);  // this process exports
        Child c = spawn_child("export31_wait", GetParam(), 4 * M);  // and imports
        ASSERT_GT(c.pid, 0);
        uvm_mem_t *imported = nullptr;
        EXPECT_EQ(uvm_mem_import(mgr_, c.socket, nullptr, &imported), UVM_OK);
        if (imported)
            EXPECT_EQ(uvm_mem_free(mgr_, imported), UVM_OK);
        kill(c.pid, SIGKILL);
        EXPECT_EQ(wait_child(c), -SIGKILL);
        rebaseline_free_memory();
    }
    // An object of this process, exported to another that checks its
    // pattern and writes another, which is checked here.
    void another_process_reads_and_writes(uvm_backing_t backing) {
        const uint64_t size = 4 * M;
        uvm_mem_t *mem = nullptr;
        ASSERT_NE(mem = patterned(mgr_, backing, size, 21), nullptr);
        Child c = spawn_child("read21_write22", GetParam(), size);
        ASSERT_GT(c.pid, 0);
        ASSERT_EQ(uvm_mem_export(mgr_, mem, c.socket), UVM_OK);
        EXPECT_EQ(wait_child(c), 0) << "the importing process failed";
        EXPECT_EQ(first_wrong(mgr_, mem, 0, UVM_VIEW_KERNEL, size, 22), size);
        EXPECT_EQ(uvm_mem_free(mgr_, mem), UVM_OK);
    }
    // A second manager in this process, as an importer.
    uvm_manager_t *other() {
        if (!other_)
            EXPECT_EQ(make_manager(GetParam(), &other_), UVM_OK);
        return other_;
    }
    void TearDown() override {
        if (other_)
            EXPECT_EQ(uvm_manager_destroy(other_), UVM_OK);
        ManagerTest::TearDown();
    }
    // Sends `mem` from mgr_ and imports it into other(), over a fresh socket pair.
    uvm_status_t pass(uvm_mem_t *mem, uvm_mem_t **out) {
        int fds[2];
        EXPECT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds), 0);
        uvm_status_t s = uvm_mem_export(mgr_, mem, fds[0]);
        if (s == UVM_OK)
            s = uvm_mem_import(other(), fds[1], nullptr, out);
        close(fds[0]);
        close(fds[1]);
        return s;
    }
    uvm_manager_t *other_ = nullptr;
};

INSTANTIATE_TEST_SUITE_P(Backends, ShareTest, ::testing::ValuesIn(backend_names()),
                         [](const auto &info) { return info.param; });

TEST_P(ShareTest, VidmemMapsEveryWayOnTheImporterWithDataBothWays) {
    const uint64_t size = 6 * M + 100;
    uvm_mem_t *mem = nullptr, *imported = nullptr;
    ASSERT_NE(mem = patterned(mgr_, UVM_BACKING_VIDMEM, size, 1), nullptr);
    ASSERT_EQ(pass(mem, &imported), UVM_OK);
    uvm_mem_info_t info;
    ASSERT_EQ(uvm_mem_info(other(), imported, &info), UVM_OK);
    EXPECT_EQ(info.size, size);
    EXPECT_EQ(info.alloc_size, 8 * M);
    EXPECT_EQ(info.backing, UVM_BACKING_VIDMEM);
    EXPECT_EQ(info.gpu, 0u);
    EXPECT_EQ(info.chunk_size, 2 * M);
    // The importer's kernel, user and physical views on the owner, and a peer's kernel view.
    uvm_manager_t *o = other();
    ASSERT_EQ(uvm_mem_map_gpu_kernel(o, imported, 0), UVM_OK);
    ASSERT_EQ(uvm_mem_map_gpu_user(o, imported, 0, 0), UVM_OK);
    EXPECT_EQ(uvm_mem_map_gpu_phys(o, imported, 0), UVM_ERR_ALREADY_MAPPED);  // vidmem on its owner, as any
    EXPECT_EQ(first_wrong(o, imported, 0, UVM_VIEW_KERNEL, size, 1), size);
    EXPECT_EQ(first_wrong(o, imported, 0, UVM_VIEW_USER, size, 1), size);
    EXPECT_EQ(first_wrong(o, imported, 0, UVM_VIEW_PHYSICAL, size, 1), size);
    if (gpus_ > 1) {
        ASSERT_EQ(uvm_mem_map_gpu_kernel(o, imported, 1), UVM_OK);
        EXPECT_EQ(first_wrong(o, imported, 1, UVM_VIEW_KERNEL, size, 1), size);
        ASSERT_EQ(write_pattern(o, imported, 1, UVM_VIEW_KERNEL, size, 2), UVM_OK);  // written by the peer
    } else {
        ASSERT_EQ(write_pattern(o, imported, 0, UVM_VIEW_USER, size, 2), UVM_OK);
    }
    // The exporter sees the importer's bytes.
    EXPECT_EQ(first_wrong(mgr_, mem, 0, UVM_VIEW_KERNEL, size, 2), size);
    // A CPU mapping where the CPU can address vidmem (the coherent sim), else NOT_SUPPORTED as for any vidmem.
    const uvm_status_t cpu = uvm_mem_map_cpu_kernel(o, imported);
    if (GetParam() == "sim_coherent") {
        ASSERT_EQ(cpu, UVM_OK);
        void *at = nullptr;
        ASSERT_EQ(uvm_mem_cpu_kernel_address(o, imported, 0, &at), UVM_OK);
        EXPECT_EQ(static_cast<uint8_t *>(at)[size - 1], pattern(size - 1, 2));
    } else {
        EXPECT_EQ(cpu, UVM_ERR_NOT_SUPPORTED);
    }
    // Imported memory is never evicted.
    EXPECT_NE(uvm_mem_evict(o, imported), UVM_OK);
    EXPECT_EQ(uvm_mem_free(o, imported), UVM_OK);
    EXPECT_EQ(uvm_mem_free(mgr_, mem), UVM_OK);
}

TEST_P(ShareTest, SysmemMapsOnTheCpuAndTheGpusOfTheImporter) {
    const uint64_t size = 3 * M;
    uvm_mem_t *mem = nullptr, *imported = nullptr;
    uvm_mem_alloc_params_t p = shareable(UVM_BACKING_SYSMEM, size);
    ASSERT_EQ(uvm_mem_alloc(mgr_, &p, &mem), UVM_OK);
    ASSERT_EQ(uvm_mem_map_cpu_kernel(mgr_, mem), UVM_OK);
    void *mine = nullptr;
    ASSERT_EQ(uvm_mem_cpu_kernel_address(mgr_, mem, 0, &mine), UVM_OK);
    std::memset(mine, 0x3c, size);
    ASSERT_EQ(pass(mem, &imported), UVM_OK);
    uvm_manager_t *o = other();
    uvm_mem_info_t info;
    ASSERT_EQ(uvm_mem_info(o, imported, &info), UVM_OK);
    EXPECT_EQ(info.backing, UVM_BACKING_SYSMEM);
    EXPECT_EQ(info.size, size);
    ASSERT_EQ(uvm_mem_map_cpu_kernel(o, imported), UVM_OK);
    void *theirs = nullptr;
    ASSERT_EQ(uvm_mem_cpu_kernel_address(o, imported, 0, &theirs), UVM_OK);
    EXPECT_EQ(static_cast<uint8_t *>(theirs)[size - 1], 0x3c);
    void *user = unused_range(info.alloc_size, 2 * M);
    ASSERT_EQ(uvm_mem_map_cpu_user(o, imported, user), UVM_OK);
    EXPECT_EQ(static_cast<uint8_t *>(user)[0], 0x3c);
    for (uint32_t g = 0; g < gpus_; ++g) {
        ASSERT_EQ(uvm_mem_map_gpu_kernel(o, imported, g), UVM_OK);
        ASSERT_EQ(write_pattern(o, imported, g, UVM_VIEW_KERNEL, size, 10 + g), UVM_OK);
        for (uint64_t i = 0; i < size; i += 4093)
            ASSERT_EQ(static_cast<uint8_t *>(mine)[i], pattern(i, 10 + g)) << "GPU " << g << " byte " << i;
    }
    EXPECT_EQ(uvm_mem_free(o, imported), UVM_OK);
    EXPECT_EQ(static_cast<uint8_t *>(mine)[5], pattern(5, 10 + gpus_ - 1));  // the exporter's pages stay
    EXPECT_EQ(uvm_mem_free(mgr_, mem), UVM_OK);
}

TEST_P(ShareTest, TheMemoryOutlivesTheExportersObjectAndIsNeverReusedThere) {
    const uint64_t size = 4 * M;
    uvm_mem_t *mem = nullptr, *imported = nullptr;
    ASSERT_NE(mem = patterned(mgr_, UVM_BACKING_VIDMEM, size, 5), nullptr);
    ASSERT_EQ(pass(mem, &imported), UVM_OK);
    ASSERT_EQ(uvm_mem_free(mgr_, mem), UVM_OK);
    // The exporter's new objects of the same kind get other memory.
    std::vector<uvm_mem_t *> fresh(8);
    for (uvm_mem_t *&f : fresh)
        ASSERT_NE(f = patterned(mgr_, UVM_BACKING_VIDMEM, size, 6), nullptr);
    ASSERT_EQ(uvm_mem_map_gpu_kernel(other(), imported, 0), UVM_OK);
    EXPECT_EQ(first_wrong(other(), imported, 0, UVM_VIEW_KERNEL, size, 5), size);
    for (uvm_mem_t *f : fresh)
        EXPECT_EQ(uvm_mem_free(mgr_, f), UVM_OK);
    EXPECT_EQ(uvm_mem_free(other(), imported), UVM_OK);
}

TEST_P(ShareTest, SharingOverAndOverCostsNoDeviceMemory) {
    // After the first round (SetUp's on CUDA), every round gives back all it
    // took, with the importing manager made and destroyed each time.
    std::vector<uint64_t> after_first(gpus_);
    for (int round = 0; round < 12; ++round) {
        share_round(static_cast<uint32_t>(round));
        ASSERT_EQ(uvm_manager_destroy(other_), UVM_OK);
        other_ = nullptr;
        for (uint32_t g = 0; g < gpus_; ++g) {
            uvm_gpu_info_t gi;
            ASSERT_EQ(uvm_gpu_trim(mgr_, g, nullptr), UVM_OK);
            ASSERT_EQ(uvm_gpu_info(mgr_, g, &gi), UVM_OK);
            if (round == 0)
                after_first[g] = gi.memory_free;
            else
                EXPECT_GE(gi.memory_free, after_first[g]) << "round " << round << ", GPU " << g;
        }
    }
}

TEST_P(ShareTest, ALargeShareableObjectHoldsOneFdNotOnePerRootChunk) {
    if (on_cuda())
        GTEST_SKIP() << "sim's memfds; CUDA holds driver handles, not fds";
    const int before = open_fd_count();
    uvm_mem_t *mem = nullptr;
    uvm_mem_alloc_params_t p = shareable(UVM_BACKING_VIDMEM, 512 * M);  // 256 root chunks
    ASSERT_EQ(uvm_mem_alloc(mgr_, &p, &mem), UVM_OK);
    EXPECT_LE(open_fd_count(), before + 2);
    ASSERT_EQ(uvm_mem_free(mgr_, mem), UVM_OK);
    for (uint32_t g = 0; g < gpus_; ++g)
        ASSERT_EQ(uvm_gpu_trim(mgr_, g, nullptr), UVM_OK);
    EXPECT_EQ(open_fd_count(), before);
}

TEST_P(ShareTest, TheOwnerIsFoundByUuidOrPciBusIdAndAnUnknownOneIsRefused) {
    uvm_gpu_info_t a, b;
    ASSERT_EQ(uvm_gpu_info(mgr_, 0, &a), UVM_OK);
    static const uint8_t zero[16] = {};
    EXPECT_NE(std::memcmp(a.uuid, zero, 16), 0);
    if (gpus_ > 1) {
        ASSERT_EQ(uvm_gpu_info(mgr_, 1, &b), UVM_OK);
        EXPECT_NE(std::memcmp(a.uuid, b.uuid, 16), 0);
        EXPECT_STRNE(a.pci_bus_id, b.pci_bus_id);
    }
    // Hand-made messages over a memfd: the owner named three ways.
    const bool cuda = on_cuda();
    struct Case {
        const char *what;
        bool uuid, pci;
        uvm_status_t want;
    };
    const Case cases[] = {
        {"a UUID and a PCI bus id no GPU here has", false, false, UVM_ERR_INVALID_GPU},
        {"the right UUID, a wrong PCI bus id", true, false, UVM_OK},
        {"a wrong UUID, the right PCI bus id", false, true, UVM_OK},
    };
    for (const Case &c : cases) {
        uvm::ipc::ShareMessage m;
        m.size = m.object_size = m.chunk_size = 2 * M;
        m.backing = uvm::ipc::ShareBacking::Vidmem;
        m.kind = uvm::ipc::ShareHandleKind::Memfd;  // sim's kind; on CUDA NOT_SUPPORTED comes first
        std::memset(m.owner_uuid, c.uuid ? 0 : 0x77, 16);
        if (c.uuid)
            std::memcpy(m.owner_uuid, a.uuid, 16);
        std::strcpy(m.owner_pci, c.pci ? a.pci_bus_id : "0000:ff:1f.7");
        m.fd_count = 1;
        m.segments = {{0, 0, 2 * M, 0}};
        int fds[2];
        ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds), 0);
        const int memfd = static_cast<int>(syscall(SYS_memfd_create, "share-test", MFD_CLOEXEC));
        ASSERT_EQ(ftruncate(memfd, 2 * M), 0);
        std::string why;
        ASSERT_EQ(uvm::ipc::send_share(fds[0], m, {memfd}, &why), UVM_OK) << why;
        close(memfd);
        uvm_mem_t *got = nullptr;
        const uvm_status_t s = uvm_mem_import(mgr_, fds[1], nullptr, &got);
        EXPECT_EQ(s, cuda ? UVM_ERR_NOT_SUPPORTED : c.want) << c.what;  // a memfd is no CUDA handle
        if (s == UVM_OK) {
            uvm_mem_info_t info;
            ASSERT_EQ(uvm_mem_info(mgr_, got, &info), UVM_OK);
            EXPECT_EQ(info.gpu, 0u) << c.what;
            EXPECT_EQ(uvm_mem_free(mgr_, got), UVM_OK);
        }
        close(fds[0]);
        close(fds[1]);
    }
}

TEST_P(ShareTest, ThreadsExportAndImportAtOnce) {
    // Export and import are thread-safe: 8 threads, each with its own socket
    // pair, share their own objects both ways between the two managers.
    ASSERT_NE(other(), nullptr);
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int t = 0; t < 8; ++t)
        threads.emplace_back([&, t] {
            int fds[2];
            if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0) {
                failures++;
                return;
            }
            for (int i = 0; i < 20; ++i) {
                const bool vid = (i + t) % 2 == 0;
                uvm_manager_t *from = i % 3 ? mgr_ : other(), *to = from == mgr_ ? other() : mgr_;
                uvm_mem_alloc_params_t p = shareable(vid ? UVM_BACKING_VIDMEM : UVM_BACKING_SYSMEM, 2 * M);
                uvm_mem_t *mem = nullptr, *got = nullptr;
                if (uvm_mem_alloc(from, &p, &mem) != UVM_OK || uvm_mem_export(from, mem, fds[0]) != UVM_OK ||
                    uvm_mem_import(to, fds[1], nullptr, &got) != UVM_OK) {
                    failures++;
                } else {
                    uvm_mem_info_t info;
                    if (uvm_mem_info(to, got, &info) != UVM_OK || info.size != 2 * M ||
                        uvm_mem_free(to, got) != UVM_OK)
                        failures++;
                }
                if (mem && uvm_mem_free(from, mem) != UVM_OK)
                    failures++;
            }
            close(fds[0]);
            close(fds[1]);
        });
    for (std::thread &t : threads)
        t.join();
    EXPECT_EQ(failures.load(), 0);
}

TEST_P(ShareTest, WhatCannotBeSharedIsRefusedAndNothingChanges) {
    ASSERT_NE(other(), nullptr);  // made before the fds are counted
    int fds[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds), 0);
    const int before = open_fd_count();
    struct Case {
        const char *what;
        uvm_mem_alloc_params_t params;
    };
    std::vector<Case> cases;
    cases.push_back({"private sysmem", alloc_params(UVM_BACKING_SYSMEM, 2 * M, 0)});
    cases.push_back({"vidmem without UVM_MEM_USER_MAPPABLE", alloc_params(UVM_BACKING_VIDMEM, 2 * M, 0)});
    uvm_mem_alloc_params_t small = shareable(UVM_BACKING_VIDMEM, 128 * K);
    small.chunk_size = 64 * K;
    cases.push_back({"vidmem of 64K chunks", small});
    uvm_mem_alloc_params_t evictable = shareable(UVM_BACKING_VIDMEM, 2 * M);
    evictable.flags |= UVM_MEM_EVICTABLE;
    cases.push_back({"evictable vidmem", evictable});
    for (const Case &c : cases) {
        uvm_mem_t *mem = nullptr;
        ASSERT_EQ(uvm_mem_alloc(mgr_, &c.params, &mem), UVM_OK) << c.what;
        EXPECT_EQ(uvm_mem_export(mgr_, mem, fds[0]), UVM_ERR_NOT_SUPPORTED) << c.what;
        EXPECT_EQ(uvm_mem_free(mgr_, mem), UVM_OK) << c.what;
    }
    uvm_mem_t *mem = nullptr;
    uvm_mem_alloc_params_t p = shareable(UVM_BACKING_VIDMEM, 2 * M);
    ASSERT_EQ(uvm_mem_alloc(mgr_, &p, &mem), UVM_OK);
    EXPECT_EQ(uvm_mem_export(mgr_, mem, -1), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_mem_export(nullptr, mem, fds[0]), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_mem_export(other(), mem, fds[0]), UVM_ERR_INVALID_HANDLE);  // another manager's handle
    int dead[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, dead), 0);
    close(dead[1]);
    EXPECT_EQ(uvm_mem_export(mgr_, mem, dead[0]), UVM_ERR_BACKEND);  // nobody at the other end
    close(dead[0]);
    EXPECT_EQ(uvm_mem_free(mgr_, mem), UVM_OK);
    EXPECT_EQ(uvm_mem_export(mgr_, mem, fds[0]), UVM_ERR_INVALID_HANDLE);  // freed
    // Import: bad arguments, a malformed message, the peer gone.
    uvm_mem_t *out = nullptr;
    EXPECT_EQ(uvm_mem_import(mgr_, -1, nullptr, &out), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(uvm_mem_import(mgr_, fds[1], nullptr, nullptr), UVM_ERR_INVALID_ARGUMENT);
    const char junk[] = "not a message";
    ASSERT_EQ(send(fds[0], junk, sizeof(junk), 0), static_cast<ssize_t>(sizeof(junk)));
    EXPECT_EQ(uvm_mem_import(mgr_, fds[1], nullptr, &out), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(out, nullptr);
    close(fds[0]);
    EXPECT_EQ(uvm_mem_import(mgr_, fds[1], nullptr, &out), UVM_ERR_NOT_FOUND);
    close(fds[1]);
    for (uint32_t g = 0; g < gpus_; ++g) {  // pooled memory may hold fds (the stand-in driver's handles)
        ASSERT_EQ(uvm_gpu_trim(mgr_, g, nullptr), UVM_OK);
        ASSERT_EQ(uvm_gpu_trim(other(), g, nullptr), UVM_OK);
    }
    EXPECT_EQ(open_fd_count(), before - 2);  // nothing left open but what was closed here
}

TEST_P(ShareTest, AnImportIsChargedToItsClientAndRefusedOverBudget) {
    uvm_mem_t *mem = nullptr, *imported = nullptr;
    uvm_mem_alloc_params_t p = shareable(UVM_BACKING_VIDMEM, 4 * M);
    ASSERT_EQ(uvm_mem_alloc(mgr_, &p, &mem), UVM_OK);
    uvm_client_t *client = nullptr;
    ASSERT_EQ(uvm_client_create(other(), "importer", &client), UVM_OK);
    ASSERT_EQ(uvm_client_set_budget(other(), client, 0, 2 * M), UVM_OK);
    int fds[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds), 0);
    ASSERT_EQ(uvm_mem_export(mgr_, mem, fds[0]), UVM_OK);
    EXPECT_EQ(uvm_mem_import(other(), fds[1], client, &imported), UVM_ERR_OUT_OF_MEMORY);  // 4 MiB > 2 MiB
    ASSERT_EQ(uvm_client_set_budget(other(), client, 0, 8 * M), UVM_OK);
    ASSERT_EQ(uvm_mem_export(mgr_, mem, fds[0]), UVM_OK);
    ASSERT_EQ(uvm_mem_import(other(), fds[1], client, &imported), UVM_OK);
    uvm_client_info_t ci;
    ASSERT_EQ(uvm_client_info(other(), client, &ci), UVM_OK);
    EXPECT_EQ(ci.objects, 1u);
    EXPECT_EQ(ci.vidmem_used[0], 4 * M);
    EXPECT_EQ(uvm_mem_free(other(), imported), UVM_OK);
    EXPECT_EQ(uvm_client_destroy(other(), client), UVM_OK);
    EXPECT_EQ(uvm_mem_free(mgr_, mem), UVM_OK);
    close(fds[0]);
    close(fds[1]);
}

// ---- Across processes ----

TEST_P(ShareTest, AnotherProcessReadsAndWritesAnExportedObject) {
    warm_up_across_processes();
    for (int round = 0; round < 3; ++round)
        for (uvm_backing_t backing : {UVM_BACKING_VIDMEM, UVM_BACKING_SYSMEM})
            another_process_reads_and_writes(backing);
}

TEST_P(ShareTest, AKilledExporterDoesNotTakeTheImportersData) {
    warm_up_across_processes();
    const uint64_t size = 4 * M;
    Child c = spawn_child("export31_wait", GetParam(), size);
    ASSERT_GT(c.pid, 0);
    uvm_mem_t *imported = nullptr;
    ASSERT_EQ(uvm_mem_import(mgr_, c.socket, nullptr, &imported), UVM_OK);
    // A peer's mapping made before the kill (GPU 1 of a pair) is kept too.
    const bool peer = peers();
    if (peer)
        ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr_, imported, 1), UVM_OK);
    kill(c.pid, SIGKILL);
    EXPECT_EQ(wait_child(c), -SIGKILL);
    ASSERT_EQ(uvm_mem_map_gpu_kernel(mgr_, imported, 0), UVM_OK);
    EXPECT_EQ(first_wrong(mgr_, imported, 0, UVM_VIEW_KERNEL, size, 31), size);
    if (peer) {
        EXPECT_EQ(first_wrong(mgr_, imported, 1, UVM_VIEW_KERNEL, size, 31), size) << "through the peer";
        ASSERT_EQ(write_pattern(mgr_, imported, 1, UVM_VIEW_KERNEL, size, 33), UVM_OK);
        EXPECT_EQ(first_wrong(mgr_, imported, 0, UVM_VIEW_KERNEL, size, 33), size) << "the peer's write, on the owner";
    }
    ASSERT_EQ(write_pattern(mgr_, imported, 0, UVM_VIEW_KERNEL, size, 32), UVM_OK);
    EXPECT_EQ(first_wrong(mgr_, imported, 0, UVM_VIEW_KERNEL, size, 32), size);
    if (peer)
        EXPECT_EQ(first_wrong(mgr_, imported, 1, UVM_VIEW_KERNEL, size, 32), size) << "the owner's write, on the peer";
    EXPECT_EQ(uvm_mem_free(mgr_, imported), UVM_OK);
}

TEST_P(ShareTest, AKilledImporterLeaksNothingInTheExporter) {
    warm_up_across_processes();
    const uint64_t size = 8 * M;
    uvm_mem_t *mem = nullptr;
    ASSERT_NE(mem = patterned(mgr_, UVM_BACKING_VIDMEM, size, 41), nullptr);
    Child c = spawn_child("import_wait", GetParam(), size);
    ASSERT_GT(c.pid, 0);
    ASSERT_EQ(uvm_mem_export(mgr_, mem, c.socket), UVM_OK);
    ASSERT_TRUE(hear(c.socket));  // imported and mapped
    kill(c.pid, SIGKILL);
    EXPECT_EQ(wait_child(c), -SIGKILL);
    EXPECT_EQ(first_wrong(mgr_, mem, 0, UVM_VIEW_KERNEL, size, 41), size);
    EXPECT_EQ(uvm_mem_free(mgr_, mem), UVM_OK);
    // TearDown: every GPU has its memory back (after trim), no object is left.
}

// The other process of the tests above (skipped when run on its own).
// The other process of a sharing test: this program again, started by
// spawn_child with its part in UVM_SHARE_CHILD. It does its part and exits
// before GoogleTest's main runs, with 0 where every step held, else the
// number of the step that failed (the parent checks the exit status).
static int run_share_child(const std::string &spec) {
    const size_t a = spec.find(','), b = spec.find(',', a + 1);
    if (a == std::string::npos || b == std::string::npos)
        return 90;
    const std::string part = spec.substr(0, a), backend = spec.substr(a + 1, b - a - 1);
    const uint64_t size = std::strtoull(spec.c_str() + b + 1, nullptr, 10);
    uvm_manager_t *mgr = nullptr;
    if (make_manager(backend, &mgr) != UVM_OK)
        return 91;
    if (part == "read21_write22" || part == "import_wait") {
        uvm_mem_t *mem = nullptr;
        if (uvm_mem_import(mgr, kChildFd, nullptr, &mem) != UVM_OK)
            return 92;
        if (uvm_mem_map_gpu_kernel(mgr, mem, 0) != UVM_OK)
            return 93;
        if (part == "import_wait") {
            const char go = 1;  // one byte: "go on" (the parent hears it)
            if (send(kChildFd, &go, 1, MSG_NOSIGNAL) != 1)
                return 94;
            pause();  // until killed
        }
        if (first_wrong(mgr, mem, 0, UVM_VIEW_KERNEL, size, 21) != size)
            return 95;
        if (write_pattern(mgr, mem, 0, UVM_VIEW_KERNEL, size, 22) != UVM_OK)
            return 96;
        if (uvm_mem_free(mgr, mem) != UVM_OK)
            return 97;
    } else if (part == "export31_wait") {
        uvm_mem_t *mem = patterned(mgr, UVM_BACKING_VIDMEM, size, 31);
        if (!mem)
            return 98;
        if (uvm_mem_export(mgr, mem, kChildFd) != UVM_OK)
            return 99;
        pause();  // until killed
    } else {
        return 100;  // an unknown part
    }
    return uvm_manager_destroy(mgr) == UVM_OK ? 0 : 101;
}

// Runs while the program's static objects are made, before GoogleTest's main.
static const bool g_share_child_ran = [] {
    if (const char *spec = std::getenv("UVM_SHARE_CHILD"))
        _exit(run_share_child(spec));
    return false;
}();
