// The shared-object message and its transport (share_message.h).
#include "ipc/share_message.h"

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
//   u32 segment_count, u8 owner_uuid[16], char owner_pci[16]
// then segment_count x { u32 fd_index, u32 reserved, u64 fd_offset, u64 size, u64 object_offset }.
constexpr size_t kHeaderBytes = 4 + 2 + 2 + 4 + 4 + 8 + 8 + 1 + 1 + 2 + 4 + 16 + 16;
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

uvm_status_t decode_share(const uint8_t *bytes, size_t len, uint32_t fds_received, ShareMessage *out,
                          std::string *why) {
    if (!bytes || !out)
        return UVM_ERR_INVALID_ARGUMENT;
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
    if (m.fd_count != fds_received) {
        fail(why, std::to_string(fds_received) + " fds received, the header says " + std::to_string(m.fd_count));
        return UVM_ERR_INVALID_ARGUMENT;
    }
    *out = std::move(m);
    return UVM_OK;
}

uvm_status_t send_share(int socket, const ShareMessage &m, const std::vector<int> &fds, std::string *why) {
    std::vector<uint8_t> bytes;
    if (uvm_status_t s = encode_share(m, &bytes, why))
        return s;
    if (fds.size() != m.fd_count) {
        fail(why, "the message names " + std::to_string(m.fd_count) + " fds, " + std::to_string(fds.size()) +
                      " given");
        return UVM_ERR_INVALID_ARGUMENT;
    }
    iovec io{bytes.data(), bytes.size()};
    std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()), 0);
    msghdr msg{};
    msg.msg_iov = &io;
    msg.msg_iovlen = 1;
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    ssize_t n;
    do {
        n = sendmsg(socket, &msg, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n != static_cast<ssize_t>(bytes.size())) {
        fail(why, std::string("sendmsg: ") + (n < 0 ? std::strerror(errno) : "short write"));
        return UVM_ERR_BACKEND;
    }
    return UVM_OK;
}

uvm_status_t recv_share(int socket, ShareMessage *m, std::vector<int> *fds, std::string *why) {
    if (!m || !fds)
        return UVM_ERR_INVALID_ARGUMENT;
    fds->clear();
    // One byte more than the largest message: a longer one shows as truncated (MSG_TRUNC).
    std::vector<uint8_t> bytes(kMaxMessageBytes + 1);
    iovec io{bytes.data(), bytes.size()};
    std::vector<char> control(CMSG_SPACE(sizeof(int) * kMaxShareFds), 0);
    msghdr msg{};
    msg.msg_iov = &io;
    msg.msg_iovlen = 1;
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    ssize_t n;
    do {
        n = recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    // Take every fd that arrived first, whatever else is wrong: then none can leak.
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
        close_all(fds);
        fail(why, std::string("recvmsg: ") + std::strerror(errno));
        return UVM_ERR_BACKEND;
    }
    if (n == 0 && fds->empty()) {
        fail(why, "the peer closed the socket");
        return UVM_ERR_NOT_FOUND;
    }
    if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
        close_all(fds);
        fail(why, "the message or its fds were cut short");
        return UVM_ERR_INVALID_ARGUMENT;
    }
    ShareMessage decoded;
    if (uvm_status_t s = decode_share(bytes.data(), static_cast<size_t>(n), static_cast<uint32_t>(fds->size()),
                                      &decoded, why)) {
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
