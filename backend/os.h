// The Linux interfaces the backends use (mmap, memfd, madvise), with one set
// of fallback definitions for constants that older C library headers lack:
// one place, as mimalloc keeps its OS layer in src/prim/. A fallback is the
// kernel's own value; a kernel too old for the call then refuses it (EINVAL),
// which the callers already handle as they would any failed mmap or madvise.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

// mmap: map at the address given, never over an existing mapping (Linux 4.17).
#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
// memfd_create: close the fd on exec (Linux 3.17).
#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#endif
// madvise: fault the pages in, writable, now (Linux 5.14).
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
