// The shared-object message: encoding, every refusal, no fd leaked, a fuzz
// of the parser, and memory passed to a child process and written both ways.
#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <random>

#include "share/share_message.h"

using namespace uvm::ipc;

namespace {

constexpr uint64_t M = 1024 * 1024;

int open_fds() {
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    while (readdir(d))
        ++n;
    closedir(d);
    return n;
}

int make_memfd(uint64_t size) {
    const int fd = static_cast<int>(syscall(SYS_memfd_create, "uvm-ipc-test", MFD_CLOEXEC));
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(size)), 0);
    return fd;
}

// A 4 MiB sysmem object of 2M chunks in two memfds, one chunk each.
ShareMessage two_fd_message() {
    ShareMessage m;
    m.size = 4 * M;
    m.object_size = 3 * M + 1;
    m.chunk_size = 2 * M;
    m.backing = ShareBacking::Sysmem;
    m.kind = ShareHandleKind::Memfd;
    m.fd_count = 2;
    m.segments = {{0, 0, 2 * M, 0}, {1, 2 * M, 2 * M, 2 * M}};
    return m;
}

struct Pair {
    int fd[2] = {-1, -1};
    Pair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fd), 0); }
    ~Pair() {
        close(fd[0]);
        close(fd[1]);
    }
};

// Sends raw bytes with `fds` beside them, as a broken or hostile peer would.
void send_raw(int socket, const std::vector<uint8_t> &bytes, const std::vector<int> &fds) {
    iovec io{const_cast<uint8_t *>(bytes.data()), bytes.size()};
    std::vector<char> control(CMSG_SPACE(sizeof(int) * (fds.empty() ? 1 : fds.size())), 0);
    msghdr msg{};
    msg.msg_iov = &io;
    msg.msg_iovlen = 1;
    if (!fds.empty()) {
        msg.msg_control = control.data();
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
        cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
        std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    ASSERT_EQ(sendmsg(socket, &msg, 0), static_cast<ssize_t>(bytes.size()));
}

}  // namespace

TEST(ShareMessage, RoundTripsOverASocketWithItsFds) {
    Pair p;
    const int a = make_memfd(2 * M), b = make_memfd(4 * M);
    std::string why;
    const ShareMessage sent = two_fd_message();
    ASSERT_EQ(send_share(p.fd[0], sent, {a, b}, &why), UVM_OK) << why;
    ShareMessage got;
    std::vector<int> fds;
    ASSERT_EQ(recv_share(p.fd[1], &got, &fds, &why), UVM_OK) << why;
    ASSERT_EQ(fds.size(), 2u);
    EXPECT_EQ(got.size, sent.size);
    EXPECT_EQ(got.chunk_size, sent.chunk_size);
    ASSERT_EQ(got.segments.size(), 2u);
    EXPECT_EQ(got.segments[1].fd_offset, 2 * M);
    // The received fds are the same files: a write through one shows in the other.
    char *mine = static_cast<char *>(mmap(nullptr, 2 * M, PROT_READ | PROT_WRITE, MAP_SHARED, a, 0));
    char *theirs = static_cast<char *>(mmap(nullptr, 2 * M, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0));
    ASSERT_NE(mine, MAP_FAILED);
    ASSERT_NE(theirs, MAP_FAILED);
    std::strcpy(mine, "written by the exporter");
    EXPECT_STREQ(theirs, "written by the exporter");
    munmap(mine, 2 * M);
    munmap(theirs, 2 * M);
    for (int fd : fds)
        close(fd);
    close(a);
    close(b);
}

TEST(ShareMessage, ABadMessageToSendIsRefusedBeforeAnythingIsSent) {
    Pair p;
    std::string why;
    std::vector<uint8_t> bytes;
    ShareMessage m = two_fd_message();
    m.chunk_size = 8192;
    EXPECT_EQ(encode_share(m, &bytes, &why), UVM_ERR_INVALID_ARGUMENT);
    EXPECT_NE(why.find("chunk size"), std::string::npos);
    m = two_fd_message();
    m.segments[1].object_offset = 4 * M;  // a gap
    EXPECT_EQ(encode_share(m, &bytes, &why), UVM_ERR_INVALID_ARGUMENT);
    m = two_fd_message();
    m.kind = ShareHandleKind::CudaPosixFd;  // sysmem travels as a memfd
    EXPECT_EQ(encode_share(m, &bytes, &why), UVM_ERR_INVALID_ARGUMENT);
    m = two_fd_message();
    m.object_size = 2 * M;  // rounds up to 2 MiB, not 4
    EXPECT_EQ(encode_share(m, &bytes, &why), UVM_ERR_INVALID_ARGUMENT);
    m = two_fd_message();
    m.segments[1].fd_index = 0;  // fd 1 in no segment
    EXPECT_EQ(encode_share(m, &bytes, &why), UVM_ERR_INVALID_ARGUMENT);
    m = two_fd_message();
    const int a = make_memfd(2 * M);
    EXPECT_EQ(send_share(p.fd[0], m, {a}, &why), UVM_ERR_INVALID_ARGUMENT);  // one fd for two
    close(a);
}

TEST(ShareMessage, EveryMalformedMessageIsRefusedAndLeaksNoFd) {
    std::vector<uint8_t> good;
    std::string why;
    ASSERT_EQ(encode_share(two_fd_message(), &good, &why), UVM_OK);
    struct Case {
        const char *what;
        std::vector<uint8_t> bytes;
        int fds;
        uvm_status_t expect;
    };
    std::vector<Case> cases;
    for (size_t len : {size_t(0), size_t(3), size_t(8), size_t(40), good.size() - 1})
        cases.push_back({"truncated", std::vector<uint8_t>(good.begin(), good.begin() + long(len)), 2,
                         UVM_ERR_INVALID_ARGUMENT});
    std::vector<uint8_t> b = good;
    b[0] ^= 1;
    cases.push_back({"bad magic", b, 2, UVM_ERR_INVALID_ARGUMENT});
    b = good;
    b[4] = 2;
    cases.push_back({"a newer version", b, 2, UVM_ERR_NOT_SUPPORTED});
    b = good;
    b.push_back(0);
    cases.push_back({"a byte too many", b, 2, UVM_ERR_INVALID_ARGUMENT});
    cases.push_back({"one fd too few", good, 1, UVM_ERR_INVALID_ARGUMENT});
    cases.push_back({"one fd too many", good, 3, UVM_ERR_INVALID_ARGUMENT});
    b = good;
    b[18] = 0x60;  // the size (bytes 16-23) from 4 MiB to 6 MiB
    cases.push_back({"a size the segments do not cover", b, 2, UVM_ERR_INVALID_ARGUMENT});
    const int before = open_fds();
    for (const Case &c : cases) {
        Pair p;
        std::vector<int> out;
        for (int i = 0; i < c.fds; ++i)
            out.push_back(make_memfd(4 * M));
        // (A zero-length message reads as the peer closing: the shortest sent is one byte.)
        send_raw(p.fd[0], c.bytes.empty() ? std::vector<uint8_t>{0} : c.bytes, out);
        for (int fd : out)
            close(fd);
        ShareMessage m;
        std::vector<int> fds;
        EXPECT_EQ(recv_share(p.fd[1], &m, &fds, &why), c.expect) << c.what;
        EXPECT_TRUE(fds.empty()) << c.what;
        EXPECT_FALSE(why.empty()) << c.what;
    }
    EXPECT_EQ(open_fds(), before);  // every fd received with a bad message was closed
}

TEST(ShareMessage, TheWrongKindOrSizeOfFdIsRefused) {
    std::string why;
    const int before = open_fds();
    {
        Pair p;
        int pipe_fds[2];
        ASSERT_EQ(pipe(pipe_fds), 0);
        const int a = make_memfd(2 * M);
        ASSERT_EQ(send_share(p.fd[0], two_fd_message(), {a, pipe_fds[0]}, &why), UVM_OK);
        close(a);
        close(pipe_fds[0]);
        close(pipe_fds[1]);
        ShareMessage m;
        std::vector<int> fds;
        EXPECT_EQ(recv_share(p.fd[1], &m, &fds, &why), UVM_ERR_INVALID_ARGUMENT);
        EXPECT_NE(why.find("not a memfd"), std::string::npos) << why;
        EXPECT_TRUE(fds.empty());
    }
    {
        Pair p;
        const int a = make_memfd(2 * M), small = make_memfd(2 * M);  // segment 1 reaches 4 MiB into it
        ASSERT_EQ(send_share(p.fd[0], two_fd_message(), {a, small}, &why), UVM_OK);
        close(a);
        close(small);
        ShareMessage m;
        std::vector<int> fds;
        EXPECT_EQ(recv_share(p.fd[1], &m, &fds, &why), UVM_ERR_INVALID_ARGUMENT);
        EXPECT_NE(why.find("segments reach"), std::string::npos) << why;
    }
    {
        Pair p;
        close(p.fd[0]);
        p.fd[0] = -1;
        ShareMessage m;
        std::vector<int> fds;
        EXPECT_EQ(recv_share(p.fd[1], &m, &fds, &why), UVM_ERR_NOT_FOUND);  // the peer went away
    }
    EXPECT_EQ(open_fds(), before);
}

TEST(ShareMessage, TheParserSurvivesRandomMutations) {
    std::vector<uint8_t> good;
    ShareMessage m = two_fd_message();
    m.backing = ShareBacking::Vidmem;
    std::strcpy(m.owner_pci, "0000:18:00.0");
    std::string why;
    ASSERT_EQ(encode_share(m, &good, &why), UVM_OK);
    std::mt19937_64 rng(7);
    int accepted = 0;
    for (int i = 0; i < 50000; ++i) {
        std::vector<uint8_t> b = good;
        const int edits = 1 + int(rng() % 4);
        for (int e = 0; e < edits; ++e) {
            switch (rng() % 3) {
                case 0: b[rng() % b.size()] ^= uint8_t(1u << (rng() % 8)); break;
                case 1: b[rng() % b.size()] = uint8_t(rng()); break;
                default: b.resize(rng() % (b.size() + 1)); if (b.empty()) b.push_back(0); break;
            }
        }
        ShareMessage out;
        const uvm_status_t s = decode_share(b.data(), b.size(), uint32_t(rng() % 4), &out, &why);
        if (s == UVM_OK) {
            ++accepted;
            // Whatever was accepted keeps every rule: encoding it again gives the same bytes.
            std::vector<uint8_t> again;
            ASSERT_EQ(encode_share(out, &again, &why), UVM_OK) << why;
            EXPECT_EQ(again, b);
        } else {
            EXPECT_TRUE(s == UVM_ERR_INVALID_ARGUMENT || s == UVM_ERR_NOT_SUPPORTED);
        }
    }
    EXPECT_LT(accepted, 50000);
}

TEST(ShareMessage, AChildProcessMapsTheMemoryAndBothWrite) {
    Pair p;
    const int a = make_memfd(2 * M), b = make_memfd(4 * M);
    char *first = static_cast<char *>(mmap(nullptr, 2 * M, PROT_READ | PROT_WRITE, MAP_SHARED, a, 0));
    ASSERT_NE(first, MAP_FAILED);
    std::memset(first, 0x5a, 2 * M);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        // The importer: receive, check the exporter's bytes, write its own back.
        close(a);
        close(b);
        ShareMessage m;
        std::vector<int> fds;
        std::string why;
        if (recv_share(p.fd[1], &m, &fds, &why) != UVM_OK)
            _exit(10);
        char *view = static_cast<char *>(mmap(nullptr, 2 * M, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0));
        if (view == MAP_FAILED)
            _exit(11);
        for (uint64_t i = 0; i < 2 * M; ++i)
            if (view[i] != 0x5a)
                _exit(12);
        std::memset(view, 0xa5, M);
        _exit(0);
    }
    std::string why;
    ASSERT_EQ(send_share(p.fd[0], two_fd_message(), {a, b}, &why), UVM_OK) << why;
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
    EXPECT_EQ(static_cast<unsigned char>(first[0]), 0xa5);
    EXPECT_EQ(static_cast<unsigned char>(first[M - 1]), 0xa5);
    EXPECT_EQ(static_cast<unsigned char>(first[M]), 0x5a);
    munmap(first, 2 * M);
    close(a);
    close(b);
}
