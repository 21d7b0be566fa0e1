// The message that carries a shared object between processes (the wire
// format and its transport; share/share.h builds export and import of objects
// on it). A versioned, fixed-layout header, a list of segments, and
// the file descriptors themselves passed beside it over a Unix domain socket
// (SCM_RIGHTS):
//
//   header    magic "UVMS", version, sizes, the object's size, chunk size and
//             backing, the kind of handle the fds are, the owner GPU named by
//             UUID and PCI bus id (never by index: indices differ between
//             processes), the number of fds and of segments
//   segments  where each piece of the object lies: fd index, offset in that
//             fd, size, offset in the object; sorted, contiguous, covering
//             the object exactly
//
// Everything a receiver gets is checked before anything is mapped: the
// magic, the version (a newer one is NOT_SUPPORTED), the lengths, the
// fields, that the fds received are as many as the header says, that each
// memfd is a regular file at least as long as its segments reach. On any
// error every fd received is closed: a bad message leaks nothing.
//
// The socket is a Unix domain socket of type SOCK_SEQPACKET (a message is
// received whole or not at all). Thread safety: the functions keep no state;
// one socket is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "uvm/uvm.h"

namespace uvm::ipc {

constexpr uint32_t kShareMagic = 0x534d5655;  // "UVMS" little-endian
constexpr uint16_t kShareVersion = 1;
constexpr uint32_t kMaxShareFds = 4096;       // per object (8 GiB of 2 MiB roots)
constexpr uint32_t kFdsPerMessage = 250;      // SCM_RIGHTS carries at most SCM_MAX_FD (253) a message
constexpr uint32_t kMaxShareSegments = 4096;

enum class ShareBacking : uint8_t { Sysmem = 1, Vidmem = 2 };
// Memfd: a memfd (sysmem, and sim's vidmem); CudaPosixFd: a CUDA allocation
// handle exported with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.
enum class ShareHandleKind : uint8_t { Memfd = 1, CudaPosixFd = 2 };

struct ShareSegment {
    uint32_t fd_index = 0;
    uint64_t fd_offset = 0;
    uint64_t size = 0;
    uint64_t object_offset = 0;
};

struct ShareMessage {
    uint64_t size = 0;         // bytes the fds hold for the object: whole chunks
    uint64_t object_size = 0;  // the size its owner asked for (in (size - chunk_size, size])
    uint64_t chunk_size = 0;
    ShareBacking backing = ShareBacking::Sysmem;
    ShareHandleKind kind = ShareHandleKind::Memfd;
    uint8_t owner_uuid[16] = {};  // zero for sysmem
    char owner_pci[16] = {};      // "0000:18:00.0", NUL-padded; empty for sysmem
    uint32_t fd_count = 0;
    std::vector<ShareSegment> segments;
};

// The bytes of `m`. INVALID_ARGUMENT where `m` itself breaks a rule that
// decode_share checks (so that nothing is sent that a receiver must refuse).
uvm_status_t encode_share(const ShareMessage &m, std::vector<uint8_t> *out, std::string *why);

// Parses and checks `len` bytes that arrived with `fds_received` fds.
// INVALID_ARGUMENT (with why) for a malformed, truncated or inconsistent
// message; NOT_SUPPORTED for another version.
uvm_status_t decode_share(const uint8_t *bytes, size_t len, uint32_t fds_received, ShareMessage *out,
                          std::string *why);

// Sends `m` with `fds` (m.fd_count of them): the message with the first
// kFdsPerMessage, then continuation messages ("UVMC", part number) with the
// rest. BACKEND (with why: errno) where the socket fails; the caller keeps
// its fds.
uvm_status_t send_share(int socket, const ShareMessage &m, const std::vector<int> &fds, std::string *why);

// Receives one message and its fds (and its continuations), decodes it and
// checks every fd: for Memfd, a regular file at least as long as its
// segments reach. On success
// `fds` holds them (the caller owns them); on any error none is left open.
// NOT_FOUND where the peer closed the socket before a message.
uvm_status_t recv_share(int socket, ShareMessage *m, std::vector<int> *fds, std::string *why);

}  // namespace uvm::ipc
