// The shared-object message and its transport (share_message.h).
#include "share/share_message.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace uvm::ipc {

namespace {

// Layout (little-endian, as every host this runs on):
//   u32 magic, u16 version, u16 header_bytes, u32 total_bytes, u32 fd_count,
//   u64 size, u64 chunk_size, u8 backing, u8 kind, u16 reserved,
//   u32 segment_count, u8 owner_uuid[16], char owner_pci[16], u64 object_size
// then segment_count x { u32 fd_index, u32 reserved, u64 fd_offset, u64 size, u64 object_offset }.
constexpr size_t kHeaderBytes = 4 + 2 + 2 + 4 + 4 + 8 + 8 + 1 + 1 + 2 + 4 + 16 + 16 + 8;
constexpr size_t kSegmentBytes = 4 + 4 + 8 + 8 + 8;
constexpr size_t kMaxMessageBytes = kHeaderBytes + kMaxShareSegments * kSegmentBytes;

template <typename T>
void put(std::vector<uint8_t> *out, T v) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out->insert(out->end(), b, b + sizeof(T));
}

template <typename T>
T get(const uint8_t *&p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    p += sizeof(T);
    return v;
}

bool fail(std::string *why, const std::string &text) {
    if (why)
        *why = text;
    return false;
}

// The rules a message must keep, whichever side checks them.
bool valid(const ShareMessage &m, std::string *why) {
    const uint64_t c = m.chunk_size;
    if (c != 4096 && c != (64u << 10) && c != (2u << 20))
        return fail(why, "chunk size " + std::to_string(c) + " is not 4K, 64K or 2M");
    if (m.size == 0 || m.size % c != 0)
        return fail(why, "size " + std::to_string(m.size) + " is not a non-zero multiple of the chunk size");
    if (m.object_size == 0 || m.object_size > m.size || m.size - m.object_size >= c)
        return fail(why, "object size " + std::to_string(m.object_size) + " does not round up to " +
                             std::to_string(m.size));
    if (m.backing != ShareBacking::Sysmem && m.backing != ShareBacking::Vidmem)
        return fail(why, "unknown backing");
    if (m.kind != ShareHandleKind::Memfd && m.kind != ShareHandleKind::CudaPosixFd)
        return fail(why, "unknown handle kind");
    if (m.backing == ShareBacking::Sysmem && m.kind != ShareHandleKind::Memfd)
        return fail(why, "sysmem travels as a memfd");
    if (m.fd_count == 0 || m.fd_count > kMaxShareFds)
        return fail(why, "fd count " + std::to_string(m.fd_count) + " is not 1-" + std::to_string(kMaxShareFds));
    if (m.segments.empty() || m.segments.size() > kMaxShareSegments)
        return fail(why, "segment count is not 1-" + std::to_string(kMaxShareSegments));
    if (m.owner_pci[sizeof(m.owner_pci) - 1] != 0)
        return fail(why, "the owner's PCI bus id is not NUL-terminated");
    uint64_t at = 0;
    std::vector<bool> used(m.fd_count, false);
    for (const ShareSegment &s : m.segments) {
        if (s.fd_index >= m.fd_count)
            return fail(why, "a segment names fd " + std::to_string(s.fd_index) + " of " +
                                 std::to_string(m.fd_count));
        if (s.object_offset != at)
            return fail(why, "segments are not contiguous at object offset " + std::to_string(at));
        if (s.size == 0 || s.size % c != 0 || s.fd_offset % c != 0)
            return fail(why, "a segment is not whole chunks");
        if (s.size > m.size - at || s.fd_offset > UINT64_MAX - s.size)
            return fail(why, "a segment reaches beyond the object");
        at += s.size;
        used[s.fd_index] = true;
    }
    if (at != m.size)
        return fail(why, "segments cover " + std::to_string(at) + " of " + std::to_string(m.size) + " bytes");
    for (uint32_t i = 0; i < m.fd_count; ++i)
        if (!used[i])
            return fail(why, "fd " + std::to_string(i) + " is in no segment");
    return true;
}

void close_all(std::vector<int> *fds) {
    for (int fd : *fds)
        close(fd);
    fds->clear();
}

}  // namespace

uvm_status_t encode_share(const ShareMessage &m, std::vector<uint8_t> *out, std::string *why) {
    if (!out || !valid(m, why))
        return UVM_ERR_INVALID_ARGUMENT;
    std::vector<uint8_t> b;
    b.reserve(kHeaderBytes + m.segments.size() * kSegmentBytes);
    put<uint32_t>(&b, kShareMagic);
    put<uint16_t>(&b, kShareVersion);
    put<uint16_t>(&b, static_cast<uint16_t>(kHeaderBytes));
    put<uint32_t>(&b, static_cast<uint32_t>(kHeaderBytes + m.segments.size() * kSegmentBytes));
    put<uint32_t>(&b, m.fd_count);
    put<uint64_t>(&b, m.size);
    put<uint64_t>(&b, m.chunk_size);
    put<uint8_t>(&b, static_cast<uint8_t>(m.backing));
    put<uint8_t>(&b, static_cast<uint8_t>(m.kind));
    put<uint16_t>(&b, 0);
    put<uint32_t>(&b, static_cast<uint32_t>(m.segments.size()));
    b.insert(b.end(), m.owner_uuid, m.owner_uuid + 16);
    b.insert(b.end(), m.owner_pci, m.owner_pci + 16);
    put<uint64_t>(&b, m.object_size);
    for (const ShareSegment &s : m.segments) {
        put<uint32_t>(&b, s.fd_index);
        put<uint32_t>(&b, 0);
        put<uint64_t>(&b, s.fd_offset);
        put<uint64_t>(&b, s.size);
        put<uint64_t>(&b, s.object_offset);
    }
    *out = std::move(b);
    return UVM_OK;
}

namespace {

// decode_share but for the fd count, which recv_share knows only once the
// continuations are in.
uvm_status_t parse_share(const uint8_t *bytes, size_t len, ShareMessage *out, std::string *why) {
    if (len < 8) {
        fail(why, "truncated: " + std::to_string(len) + " bytes");
        return UVM_ERR_INVALID_ARGUMENT;
    }
    const uint8_t *p = bytes;
    const uint32_t magic = get<uint32_t>(p);
    const uint16_t version = get<uint16_t>(p);
    const uint16_t header = get<uint16_t>(p);
    if (magic != kShareMagic) {
        fail(why, "not a shared-object message (bad magic)");
        return UVM_ERR_INVALID_ARGUMENT;
    }
    if (version != kShareVersion) {
        fail(why, "message version " + std::to_string(version) + ", this library reads " +
                      std::to_string(kShareVersion));
        return UVM_ERR_NOT_SUPPORTED;
    }
    if (header != kHeaderBytes || len < kHeaderBytes) {
        fail(why, "truncated or malformed header (" + std::to_string(len) + " bytes)");
        return UVM_ERR_INVALID_ARGUMENT;
    }
    ShareMessage m;
    const uint32_t total = get<uint32_t>(p);
    m.fd_count = get<uint32_t>(p);
    m.size = get<uint64_t>(p);
    m.chunk_size = get<uint64_t>(p);
    m.backing = static_cast<ShareBacking>(get<uint8_t>(p));
    m.kind = static_cast<ShareHandleKind>(get<uint8_t>(p));
    const uint16_t reserved = get<uint16_t>(p);
    const uint32_t count = get<uint32_t>(p);
    std::memcpy(m.owner_uuid, p, 16);
    p += 16;
    std::memcpy(m.owner_pci, p, 16);
    p += 16;
    m.object_size = get<uint64_t>(p);
    if (reserved != 0 || count > kMaxShareSegments || total != kHeaderBytes + uint64_t(count) * kSegmentBytes ||
        total != len) {
        fail(why, "the lengths disagree: " + std::to_string(len) + " bytes received, " + std::to_string(total) +
                      " announced, " + std::to_string(count) + " segments");
        return UVM_ERR_INVALID_ARGUMENT;
    }
    m.segments.resize(count);
    for (ShareSegment &s : m.segments) {
        s.fd_index = get<uint32_t>(p);
        const uint32_t pad = get<uint32_t>(p);
        s.fd_offset = get<uint64_t>(p);
        s.size = get<uint64_t>(p);
        s.object_offset = get<uint64_t>(p);
        if (pad != 0) {
            fail(why, "a segment's reserved field is not zero");
            return UVM_ERR_INVALID_ARGUMENT;
        }
    }
    if (!valid(m, why))
        return UVM_ERR_INVALID_ARGUMENT;
    *out = std::move(m);
    return UVM_OK;
}

uvm_status_t check_fd_count(const ShareMessage &m, size_t fds_received, std::string *why) {
    if (m.fd_count == fds_received)
        return UVM_OK;
    fail(why, std::to_string(fds_received) + " fds received, the header says " + std::to_string(m.fd_count));
    return UVM_ERR_INVALID_ARGUMENT;
}

}  // namespace

uvm_status_t decode_share(const uint8_t *bytes, size_t len, uint32_t fds_received, ShareMessage *out,
                          std::string *why) {
    if (!bytes || !out)
        return UVM_ERR_INVALID_ARGUMENT;
    ShareMessage m;
    if (uvm_status_t s = parse_share(bytes, len, &m, why))
        return s;
    if (uvm_status_t s = check_fd_count(m, fds_received, why))
        return s;
    *out = std::move(m);
    return UVM_OK;
}

namespace {

constexpr uint32_t kContinueMagic = 0x434d5655;  // "UVMC"

// A message header over one buffer and room for its fds.
msghdr one_buffer_message(iovec *io, std::vector<char> *control) {
    msghdr msg{};
    msg.msg_iov = io;
    msg.msg_iovlen = 1;
    msg.msg_control = control->data();
    msg.msg_controllen = control->size();
    return msg;
}

// One sendmsg of `bytes` with `count` fds.
uvm_status_t send_part(int socket, const void *bytes, size_t len, const int *fds, size_t count, std::string *why) {
    iovec io{const_cast<void *>(bytes), len};
    std::vector<char> control(CMSG_SPACE(sizeof(int) * count), 0);
    msghdr msg = one_buffer_message(&io, &control);
    cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * count);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * count);
    ssize_t n;
    do {
        n = sendmsg(socket, &msg, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n != static_cast<ssize_t>(len)) {
        fail(why, std::string("sendmsg: ") + (n < 0 ? std::strerror(errno) : "short write"));
        return UVM_ERR_BACKEND;
    }
    return UVM_OK;
}

// One recvmsg into `bytes`; every fd that came is appended to *fds, whatever
// else is wrong. *len: the bytes read (0: the peer closed). False (with
// why) on a socket error or a cut-short message.
bool recv_part(int socket, std::vector<uint8_t> *bytes, size_t *len, std::vector<int> *fds, uvm_status_t *status,
               std::string *why) {
    iovec io{bytes->data(), bytes->size()};
    std::vector<char> control(CMSG_SPACE(sizeof(int) * kFdsPerMessage), 0);
    msghdr msg = one_buffer_message(&io, &control);
    ssize_t n;
    do {
        n = recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    for (cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < count; ++i) {
                int fd;
                std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                fds->push_back(fd);
            }
        }
    if (n < 0) {
        *status = UVM_ERR_BACKEND;
        return fail(why, std::string("recvmsg: ") + std::strerror(errno));
    }
    if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
        *status = UVM_ERR_INVALID_ARGUMENT;
        return fail(why, "the message or its fds were cut short");
    }
    *len = static_cast<size_t>(n);
    return true;
}

}  // namespace

uvm_status_t send_share(int socket, const ShareMessage &m, const std::vector<int> &fds, std::string *why) {
    std::vector<uint8_t> bytes;
    if (uvm_status_t s = encode_share(m, &bytes, why))
        return s;
    if (fds.size() != m.fd_count) {
        fail(why, "the message names " + std::to_string(m.fd_count) + " fds, " + std::to_string(fds.size()) +
                      " given");
        return UVM_ERR_INVALID_ARGUMENT;
    }
    size_t sent = std::min<size_t>(fds.size(), kFdsPerMessage);
    if (uvm_status_t s = send_part(socket, bytes.data(), bytes.size(), fds.data(), sent, why))
        return s;
    for (uint32_t part = 1; sent < fds.size(); ++part) {
        const size_t count = std::min<size_t>(fds.size() - sent, kFdsPerMessage);
        const uint32_t words[3] = {kContinueMagic, part, static_cast<uint32_t>(count)};
        if (uvm_status_t s = send_part(socket, words, sizeof(words), fds.data() + sent, count, why))
            return s;
        sent += count;
    }
    return UVM_OK;
}

uvm_status_t recv_share(int socket, ShareMessage *m, std::vector<int> *fds, std::string *why) {
    if (!m || !fds)
        return UVM_ERR_INVALID_ARGUMENT;
    fds->clear();
    // One byte more than the largest message: a longer one shows as truncated (MSG_TRUNC).
    std::vector<uint8_t> bytes(kMaxMessageBytes + 1);
    size_t n = 0;
    uvm_status_t status = UVM_OK;
    // Every fd that arrives is taken as it comes, whatever else is wrong:
    // then every error path closes them all and none can leak.
    if (!recv_part(socket, &bytes, &n, fds, &status, why)) {
        close_all(fds);
        return status;
    }
    if (n == 0 && fds->empty()) {
        fail(why, "the peer closed the socket");
        return UVM_ERR_NOT_FOUND;
    }
    // A message is checked whole, but for its fd count, before any
    // continuation is waited for: a bad header is refused at once.
    ShareMessage decoded;
    if (uvm_status_t s = parse_share(bytes.data(), n, &decoded, why)) {
        close_all(fds);
        return s;
    }
    const uint32_t want = decoded.fd_count;
    // The continuations, where the first part came full and more are announced.
    for (uint32_t part = 1; fds->size() < want && fds->size() == size_t(part) * kFdsPerMessage; ++part) {
        std::vector<uint8_t> words(sizeof(uint32_t) * 3 + 1);
        size_t got = 0;
        const size_t before = fds->size();
        if (!recv_part(socket, &words, &got, fds, &status, why)) {
            close_all(fds);
            return status;
        }
        uint32_t w[3] = {0, 0, 0};
        if (got == sizeof(w))
            std::memcpy(w, words.data(), sizeof(w));
        if (got != sizeof(w) || w[0] != kContinueMagic || w[1] != part || w[2] == 0 ||
            w[2] != fds->size() - before) {
            close_all(fds);
            fail(why, "continuation " + std::to_string(part) + " of the message is malformed or missing");
            return UVM_ERR_INVALID_ARGUMENT;
        }
    }
    if (uvm_status_t s = check_fd_count(decoded, fds->size(), why)) {
        close_all(fds);
        return s;
    }
    if (decoded.kind == ShareHandleKind::Memfd) {
        std::vector<uint64_t> reach(fds->size(), 0);
        for (const ShareSegment &s : decoded.segments)
            reach[s.fd_index] = std::max(reach[s.fd_index], s.fd_offset + s.size);
        for (size_t i = 0; i < fds->size(); ++i) {
            struct stat st;
            if (fstat((*fds)[i], &st) != 0 || !S_ISREG(st.st_mode)) {
                close_all(fds);
                fail(why, "fd " + std::to_string(i) + " is not a memfd (not a regular file)");
                return UVM_ERR_INVALID_ARGUMENT;
            }
            if (static_cast<uint64_t>(st.st_size) < reach[i]) {
                close_all(fds);
                fail(why, "fd " + std::to_string(i) + " holds " + std::to_string(st.st_size) +
                              " bytes, its segments reach " + std::to_string(reach[i]));
                return UVM_ERR_INVALID_ARGUMENT;
            }
        }
    }
    *m = std::move(decoded);
    return UVM_OK;
}

}  // namespace uvm::ipc
