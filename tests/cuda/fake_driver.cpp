// A stand-in for libcuda.so.1, for tests on machines without a GPU: the CUDA
// backend loads it when UVM_CUDA_DRIVER_LIBRARY names it, so CI runs the
// backend's code, error paths included, with no driver. It keeps the driver's
// rules that the backend depends on and checks them strictly (a call that
// breaks one fails, as the real driver would, rather than passing quietly):
//
// - A GPU virtual address is a host address. cuMemAddressReserve takes an
//   inaccessible host range, cuMemCreate a memfd of device memory (counted
//   against the GPU's total), cuMemMap maps it into a reservation whole, and
//   cuMemSetAccess opens it; cuMemcpyAsync and cuMemsetD8Async then run on
//   the CPU, at once, over ranges that must be mapped with access, registered,
//   or allocated.
// - A handle released while mapped lives until its last mapping goes.
// - cuMemHostRegister takes a range once; its device pointer is its address.
// - Kernels cannot run: cuModuleLoadData is CUDA_ERROR_NOT_SUPPORTED.
// - Stream capture (CUDA graphs), as the driver documents it
//   (cuThreadExchangeStreamCaptureMode, cuStreamBeginCapture, the capture
//   errors in cuda.h): work queued on a capturing stream is recorded, not
//   run; calls the capture forbids fail and invalidate it, after which
//   cuStreamEndCapture gives no graph. See "Stream capture" below for which
//   calls are which.
//
// GPUs: FAKE_CUDA_GPUS (default 2), each of FAKE_CUDA_MIB MiB (default 1024),
// every pair peers; fake_cuda_retained_contexts counts each GPU's primary
// context retains. FAKE_CUDA_GRANULARITY_NEEDS_CONTEXT set: the granularity
// query wants a context, as the driver's reference says it does not. One lock
// serialises every call. FAKE_CUDA_CAPTURE_TRACE=1 prints the stack of each
// call that invalidates a capture.
#include <cuda.h>
#include <execinfo.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <vector>

namespace {

constexpr uint64_t k2M = 2ull << 20;

struct Device {
    uint64_t total = 0;
    uint64_t used = 0;
    int retained = 0;
};

struct Handle {
    int fd = -1;
    uint64_t size = 0;
    int device = 0;
    int mappings = 0;
    bool released = false;
    bool exportable = false;  // made with requestedHandleTypes POSIX_FILE_DESCRIPTOR
    bool imported = false;    // another process's memory: not charged to a device here
};

struct Mapping {
    uint64_t size = 0;
    Handle *handle = nullptr;
    bool access = false;
};

struct Stream {
    CUcontext context = nullptr;
    bool blocking = true;   // made without CU_STREAM_NON_BLOCKING: synchronises with the legacy stream
    uint64_t capture = 0;   // the capture sequence it belongs to (0: none)
    uint64_t tail = 0;      // nodes captured on it since it last joined back (a forked stream)
};

// An event: where it was last recorded.
struct Event {
    uint64_t capture = 0;     // recorded inside this capture sequence (0: outside)
    Stream *stream = nullptr;  // ... on this stream, with this many of its nodes before it
    uint64_t tail = 0;
};

// One capture sequence (cuStreamBeginCapture to cuStreamEndCapture).
struct Capture {
    Stream *origin = nullptr;
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
    int thread = 0;  // the thread that began it
    bool invalidated = false;
    uint64_t nodes = 0;
};

struct Graph {
    uint64_t nodes = 0;
};

struct State {
    std::mutex lock;
    bool initialised = false;
    int device_count = 0;
    Device devices[8];
    std::map<uint64_t, uint64_t> reservations;  // start -> size
    std::map<uint64_t, Mapping> mappings;       // start -> mapping
    std::map<uint64_t, uint64_t> registered;    // host start -> size
    std::map<uint64_t, uint64_t> allocations;   // cuMemAlloc and managed: start -> size
    std::map<uint64_t, int> allocation_device;  // cuMemAlloc's device (-1 managed)
    std::set<Stream *> streams;
    std::map<void *, Event> events;
    std::map<uint64_t, Capture> captures;  // ongoing ones, by id
    uint64_t next_capture = 0;
    std::set<Graph *> graphs;
    uint64_t invalidations = 0;  // captures invalidated, for tests
    uint64_t creates = 0;       // cuMemCreate calls, for tests
    uint64_t access_calls = 0;  // cuMemSetAccess calls, for tests
};

State &state() {
    static State s;
    return s;
}

thread_local CUcontext t_current = nullptr;
// The thread's interaction mode with captures (cuThreadExchangeStreamCaptureMode).
thread_local CUstreamCaptureMode t_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
std::atomic<int> g_threads{0};
int thread_number() {
    static thread_local const int n = ++g_threads;
    return n;
}

// A context is its device's ordinal plus one, as a pointer.
CUcontext context_of(int device) { return reinterpret_cast<CUcontext>(static_cast<uintptr_t>(device + 1)); }
int device_of(CUcontext c) { return static_cast<int>(reinterpret_cast<uintptr_t>(c)) - 1; }

bool valid_device(const State &s, CUdevice d) { return d >= 0 && d < s.device_count; }

// The entry of `m` whose range holds [p, p + size), or end().
template <typename Map>
auto holder(Map &m, uint64_t p, uint64_t size) {
    auto it = m.upper_bound(p);
    if (it == m.begin())
        return m.end();
    --it;
    const uint64_t len = [&] {
        if constexpr (std::is_same_v<typename Map::mapped_type, Mapping>)
            return it->second.size;
        else
            return it->second;
    }();
    return p >= it->first && p + size <= it->first + len ? it : m.end();
}

// Whether every byte of [p, p + size) is reachable by a copy: mapped with
// access (over adjacent mappings too), registered, or allocated.
bool reachable(State &s, uint64_t p, uint64_t size) {
    if (size == 0)
        return true;
    if (holder(s.registered, p, size) != s.registered.end() || holder(s.allocations, p, size) != s.allocations.end())
        return true;
    uint64_t at = p;
    const uint64_t end = p + size;
    while (at < end) {
        auto it = s.mappings.upper_bound(at);
        if (it == s.mappings.begin())
            return false;
        --it;
        if (at >= it->first + it->second.size || !it->second.access)
            return false;
        at = it->first + it->second.size;
    }
    return true;
}

CUresult finish_release(Handle *h) {
    if (h->released && h->mappings == 0) {
        close(h->fd);
        delete h;
    }
    return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------
// Stream capture.
//
// Calls a capture forbids, and what they do (the driver's rules as cuda.h
// states them, and PyTorch's allocator bears out):
//  - "Potentially unsafe" calls (cuThreadExchangeStreamCaptureMode): here,
//    every call that allocates, releases, maps or grants access to memory
//    (cuMemAlloc, cuMemAllocManaged, cuMemMap,
//    cuMemSetAccess, cuMemAddressReserve, cuMemAddressFree,
//    cuMemHostRegister, cuMemHostUnregister, cuMemImportFromShareableHandle),
//    and every wait for or query of work's completion outside a capture
//    (cuEventQuery, cuStreamSynchronize of a stream that does not capture).
//    Prohibited where the calling thread's mode says (stream_capability.h):
//    the call fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and every
//    capture that prohibited it is invalidated.
//  - Calls that conflict with a capture, in every mode: cuStreamSynchronize
//    of a capturing stream (UNSUPPORTED); cuEventQuery of an event recorded
//    inside a capture (CAPTURED_EVENT); cuCtxSynchronize while a stream of
//    the context captures, and the frees that synchronise (cuMemFree, "may
//    perform implicit synchronization") while any stream captures
//    (UNSUPPORTED); use of the legacy stream while a blocking
//    stream of its context captures (IMPLICIT); a capturing stream waiting
//    on an event recorded outside its capture (ISOLATION). Each invalidates
//    the capture it conflicts with.
//  - Legal: work queued on a capturing stream (recorded as a node, not run);
//    an event recorded on it (a captured event); another stream waiting on a
//    captured event (it joins the capture, and must join back before the
//    end: UNJOINED otherwise); anything on streams of no capture.
// cuMemCreate, cuMemRelease and cuMemUnmap were in those lists until the
// model tests ran on an H200 (driver 580.159.04): the driver allows them in
// every mode.
// Where real CUDA is looser or stricter than this, the model tests of
// tests/cuda/capture_test.cpp, which run on the real driver too, fail.
// ---------------------------------------------------------------------------

Capture *capture_of(State &s, const Stream *st) {
    if (!st || st->capture == 0)
        return nullptr;
    auto it = s.captures.find(st->capture);
    return it == s.captures.end() ? nullptr : &it->second;
}

bool is_legacy(CUstream stream) { return !stream || stream == CU_STREAM_LEGACY; }

Stream *stream_object(State &s, CUstream stream) {
    if (!stream || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD)
        return nullptr;
    auto *st = reinterpret_cast<Stream *>(stream);
    return s.streams.count(st) ? st : nullptr;
}

// FAKE_CUDA_CAPTURE_TRACE=1: the stack of each call that invalidates a
// capture, on stderr (which library path made the forbidden call).
void invalidate(State &s, Capture &c) {
    if (!c.invalidated) {
        s.invalidations++;
        static const bool trace = [] {
            const char *v = std::getenv("FAKE_CUDA_CAPTURE_TRACE");
            return v && *v && std::strcmp(v, "0") != 0;
        }();
        if (trace) {
            void *frames[32];
            std::fputs("fake_cuda: a capture invalidated by:\n", stderr);
            backtrace_symbols_fd(frames, backtrace(frames, 32), 2);
        }
    }
    c.invalidated = true;
}

// A potentially unsafe call by this thread: CUDA_SUCCESS where its mode lets
// it through, else the captures that prohibit it are invalidated.
CUresult unsafe_call(State &s) {
    if (t_capture_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_SUCCESS;
    bool prohibited = false;
    for (auto &entry : s.captures) {
        Capture &c = entry.second;
        const bool mine = c.thread == thread_number();
        if ((mine && c.mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
            (!mine && t_capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL && c.mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
            invalidate(s, c);
            prohibited = true;
        }
    }
    return prohibited ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

// A call that synchronises with every stream: conflicts with any capture.
CUresult synchronizing_call(State &s) {
    bool conflict = false;
    for (auto &entry : s.captures) {
        invalidate(s, entry.second);
        conflict = true;
    }
    return conflict ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : unsafe_call(s);
}

// Using the legacy stream of the current context: IMPLICIT (and the captures
// invalidated) while a blocking stream of that context captures.
CUresult legacy_use(State &s) {
    bool conflict = false;
    for (auto &entry : s.captures) {
        Capture &c = entry.second;
        if (c.origin && c.origin->blocking && c.origin->context == t_current) {
            invalidate(s, c);
            conflict = true;
        }
    }
    return conflict ? CUDA_ERROR_STREAM_CAPTURE_IMPLICIT : CUDA_SUCCESS;
}

// Work queued on `stream`: OK to run it now; RECORDED where the stream
// captures (a node, not run); or an error.
constexpr CUresult RECORDED = static_cast<CUresult>(-1);
CUresult enqueue(State &s, CUstream stream) {
    if (is_legacy(stream)) {
        const CUresult r = legacy_use(s);
        if (r != CUDA_SUCCESS)
            return r;
    }
    Stream *st = stream_object(s, stream);
    Capture *c = capture_of(s, st);
    if (!c)
        return CUDA_SUCCESS;
    if (c->invalidated)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    c->nodes++;
    st->tail++;
    return RECORDED;
}

#define LOCKED                      \
    State &s = state();             \
    std::lock_guard<std::mutex> guard(s.lock)
#define NEEDS_INIT                  \
    if (!s.initialised)             \
        return CUDA_ERROR_NOT_INITIALIZED
// A primary context works only while retained (the driver destroys it with
// its last release): code that uses a GPU it never opened fails here.
#define NEEDS_CONTEXT                                                                   \
    if (!t_current || !valid_device(s, device_of(t_current)) ||                         \
        s.devices[device_of(t_current)].retained == 0)                                  \
        return CUDA_ERROR_INVALID_CONTEXT
// A potentially unsafe call (see "Stream capture" above).
#define UNSAFE                                        \
    if (const CUresult unsafe = unsafe_call(s))       \
        return unsafe

}  // namespace

extern "C" {

CUresult cuInit(unsigned int flags) {
    LOCKED;
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!s.initialised) {
        const char *gpus = std::getenv("FAKE_CUDA_GPUS");
        const char *mib = std::getenv("FAKE_CUDA_MIB");
        s.device_count = gpus ? std::atoi(gpus) : 2;
        if (s.device_count < 0 || s.device_count > 8)
            s.device_count = 2;
        for (int i = 0; i < s.device_count; ++i)
            s.devices[i].total = (mib ? std::strtoull(mib, nullptr, 10) : 1024) << 20;
        s.initialised = true;
    }
    return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char **text) {
    if (!text)
        return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
        case CUDA_SUCCESS: *text = "no error"; break;
        case CUDA_ERROR_OUT_OF_MEMORY: *text = "out of memory"; break;
        case CUDA_ERROR_INVALID_VALUE: *text = "invalid argument"; break;
        case CUDA_ERROR_NOT_SUPPORTED: *text = "operation not supported"; break;
        case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: *text = "operation not permitted when stream is capturing"; break;
        case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED:
            *text = "operation failed due to a previous error during capture";
            break;
        case CUDA_ERROR_CAPTURED_EVENT: *text = "operation not permitted on an event last recorded in a capturing stream"; break;
        default: *text = "fake driver error"; break;
    }
    return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *version) {
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = CUDA_VERSION;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count) {
    LOCKED;
    NEEDS_INIT;
    *count = s.device_count;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    LOCKED;
    NEEDS_INIT;
    if (!valid_device(s, ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    LOCKED;
    if (!valid_device(s, dev) || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    std::snprintf(name, static_cast<size_t>(len), "Fake CUDA GPU %d", dev);
    return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem(size_t *bytes, CUdevice dev) {
    LOCKED;
    if (!valid_device(s, dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = s.devices[dev].total;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attrib, CUdevice dev) {
    LOCKED;
    if (!valid_device(s, dev))
        return CUDA_ERROR_INVALID_DEVICE;
    switch (attrib) {
        case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: *value = -1; break;
        case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
        case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: *value = 1; break;
        default: *value = 0; break;
    }
    return CUDA_SUCCESS;
}

CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer) {
    LOCKED;
    if (!valid_device(s, dev) || !valid_device(s, peer))
        return CUDA_ERROR_INVALID_DEVICE;
    *can = dev != peer;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetPCIBusId(char *bus, int len, CUdevice dev) {
    LOCKED;
    if (!valid_device(s, dev) || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    std::snprintf(bus, static_cast<size_t>(len), "0000:%02x:00.0", 0x10 + dev);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) {
    LOCKED;
    if (!uuid || !valid_device(s, dev))
        return CUDA_ERROR_INVALID_VALUE;
    std::memset(uuid->bytes, 0, sizeof(uuid->bytes));
    std::snprintf(uuid->bytes, sizeof(uuid->bytes), "fake-gpu-%d", dev % 1000);
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev) {
    LOCKED;
    NEEDS_INIT;
    if (!valid_device(s, dev))
        return CUDA_ERROR_INVALID_DEVICE;
    s.devices[dev].retained++;
    *ctx = context_of(dev);
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
    LOCKED;
    if (!valid_device(s, dev) || s.devices[dev].retained == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    s.devices[dev].retained--;
    return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
    LOCKED;
    if (ctx && !valid_device(s, device_of(ctx)))
        return CUDA_ERROR_INVALID_CONTEXT;
    t_current = ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *ctx) {
    if (!ctx)
        return CUDA_ERROR_INVALID_VALUE;
    *ctx = t_current;
    return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void) {
    LOCKED;
    NEEDS_CONTEXT;
    bool conflict = false;  // a stream of this context captures
    for (auto &entry : s.captures)
        if (entry.second.origin && entry.second.origin->context == t_current) {
            invalidate(s, entry.second);
            conflict = true;
        }
    if (conflict)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    return unsafe_call(s);
}

CUresult cuMemGetInfo(size_t *free, size_t *total) {
    LOCKED;
    NEEDS_CONTEXT;
    const Device &d = s.devices[device_of(t_current)];
    *free = d.total - d.used;
    *total = d.total;
    return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                       CUmemAllocationGranularity_flags) {
    if (!granularity || !prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    if (std::getenv("FAKE_CUDA_GRANULARITY_NEEDS_CONTEXT")) {  // a driver that wants one, for tests
        LOCKED;
        NEEDS_CONTEXT;
    }
    *granularity = k2M;
    return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *out, size_t size, const CUmemAllocationProp *prop,
                     unsigned long long flags) {
    LOCKED;
    NEEDS_INIT;
    // Allowed in every capture mode: the driver (r580, CUDA 13) neither
    // refuses it nor invalidates the capture (CaptureModel.MemCreateDuringCapture).
    if (!out || !prop || flags != 0 || size == 0 || size % k2M != 0 ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !valid_device(s, prop->location.id))
        return CUDA_ERROR_INVALID_VALUE;
    s.creates++;
    Device &d = s.devices[prop->location.id];
    if (size > d.total - d.used)
        return CUDA_ERROR_OUT_OF_MEMORY;
    const int fd = memfd_create("fake-cuda-vidmem", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
        if (fd >= 0)
            close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    auto *h = new Handle{fd, size, prop->location.id, 0, false,
                         prop->requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, false};
    d.used += size;
    *out = reinterpret_cast<CUmemGenericAllocationHandle>(h);
    return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
    LOCKED;
    // Allowed under a capture, as cuMemCreate (CaptureModel.MemCreateDuringCapture).
    auto *h = reinterpret_cast<Handle *>(handle);
    if (!h || h->released)
        return CUDA_ERROR_INVALID_VALUE;
    h->released = true;
    if (!h->imported)
        s.devices[h->device].used -= h->size;
    return finish_release(h);
}

// Sharing: the handle's memfd, dup'd, is its POSIX fd; importing one makes a
// handle over the same pages (the driver's rule: only handles made
// exportable can be exported).
CUresult cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType type, unsigned long long flags) {
    LOCKED;
    auto *h = reinterpret_cast<Handle *>(handle);
    if (!shareable || !h || h->released || flags != 0 || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    if (!h->exportable && !h->imported)
        return CUDA_ERROR_NOT_PERMITTED;
    const int fd = fcntl(h->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *static_cast<int *>(shareable) = fd;
    return CUDA_SUCCESS;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *os_handle,
                                        CUmemAllocationHandleType type) {
    LOCKED;
    NEEDS_INIT;
    UNSAFE;
    const int fd = static_cast<int>(reinterpret_cast<uintptr_t>(os_handle));
    struct stat st;
    if (!handle || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || fstat(fd, &st) != 0 ||
        !S_ISREG(st.st_mode) || st.st_size <= 0 || st.st_size % k2M != 0)
        return CUDA_ERROR_INVALID_VALUE;
    const int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *handle = reinterpret_cast<CUmemGenericAllocationHandle>(
        new Handle{own, static_cast<uint64_t>(st.st_size), 0, 0, false, false, true});
    return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
    LOCKED;
    NEEDS_INIT;
    UNSAFE;
    if (!ptr || size == 0 || size % k2M != 0 || flags != 0 || (alignment & (alignment - 1)) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    const uint64_t align = alignment < k2M ? k2M : alignment;
    void *at = MAP_FAILED;
    if (addr && addr % align == 0)  // a hint, honoured where the range is free
        at = mmap(reinterpret_cast<void *>(addr), size, PROT_NONE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (at == MAP_FAILED) {
        void *wide = mmap(nullptr, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (wide == MAP_FAILED)
            return CUDA_ERROR_OUT_OF_MEMORY;
        const uint64_t base = reinterpret_cast<uint64_t>(wide);
        const uint64_t start = (base + align - 1) & ~(align - 1);
        if (start > base)
            munmap(wide, start - base);
        if (base + size + align > start + size)
            munmap(reinterpret_cast<void *>(start + size), base + size + align - (start + size));
        at = reinterpret_cast<void *>(start);
    }
    s.reservations[reinterpret_cast<uint64_t>(at)] = size;
    *ptr = reinterpret_cast<CUdeviceptr>(at);
    return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
    LOCKED;
    UNSAFE;
    auto it = s.reservations.find(ptr);
    if (it == s.reservations.end() || it->second != size)
        return CUDA_ERROR_INVALID_VALUE;
    // The driver refuses to free a range that still has mappings.
    auto m = s.mappings.lower_bound(ptr);
    if (m != s.mappings.end() && m->first < ptr + size)
        return CUDA_ERROR_INVALID_VALUE;
    munmap(reinterpret_cast<void *>(ptr), size);
    s.reservations.erase(it);
    return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
    LOCKED;
    UNSAFE;
    auto *h = reinterpret_cast<Handle *>(handle);
    if (!h || h->released || offset != 0 || size != h->size || flags != 0 ||
        holder(s.reservations, ptr, size) == s.reservations.end())
        return CUDA_ERROR_INVALID_VALUE;
    auto next = s.mappings.lower_bound(ptr);
    if (next != s.mappings.end() && next->first < ptr + size)
        return CUDA_ERROR_INVALID_VALUE;
    if (next != s.mappings.begin()) {
        auto prev = std::prev(next);
        if (prev->first + prev->second.size > ptr)
            return CUDA_ERROR_INVALID_VALUE;
    }
    if (mmap(reinterpret_cast<void *>(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED, h->fd, 0) == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    h->mappings++;
    s.mappings[ptr] = Mapping{size, h, false};
    return CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    LOCKED;
    // Neither unsafe nor synchronising under a capture on the driver (r580,
    // CUDA 13: CaptureModel.UnmapDuringCapture).
    auto it = s.mappings.find(ptr);
    if (it == s.mappings.end() || it->second.size != size)
        return CUDA_ERROR_INVALID_VALUE;
    // Back to an inaccessible part of the reservation.
    mmap(reinterpret_cast<void *>(ptr), size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1,
         0);
    Handle *h = it->second.handle;
    s.mappings.erase(it);
    h->mappings--;
    return finish_release(h);
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
    LOCKED;
    UNSAFE;
    if (!desc || count == 0 || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    s.access_calls++;
    bool open = false;
    for (size_t i = 0; i < count; ++i) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || !valid_device(s, desc[i].location.id))
            return CUDA_ERROR_INVALID_DEVICE;
        open |= desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
    // The range must be mapped throughout, over whole mappings.
    const auto it = s.mappings.find(ptr);
    uint64_t at = ptr;
    for (auto m = it; at < ptr + size; ++m) {
        if (m == s.mappings.end() || m->first != at)
            return CUDA_ERROR_INVALID_VALUE;
        at += m->second.size;
    }
    if (at != ptr + size)
        return CUDA_ERROR_INVALID_VALUE;
    for (auto m = it; m != s.mappings.end() && m->first < ptr + size; ++m) {
        // Access is kept per range here, not per device: open where any has it.
        if (open) {
            m->second.access = true;
            mprotect(reinterpret_cast<void *>(m->first), m->second.size, PROT_READ | PROT_WRITE);
        }
    }
    return CUDA_SUCCESS;
}

CUresult cuMemHostRegister(void *p, size_t size, unsigned int) {
    LOCKED;
    NEEDS_CONTEXT;
    UNSAFE;
    const uint64_t at = reinterpret_cast<uint64_t>(p);
    if (!p || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    auto next = s.registered.lower_bound(at);
    if ((next != s.registered.end() && next->first < at + size) ||
        (next != s.registered.begin() && std::prev(next)->first + std::prev(next)->second > at))
        return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    s.registered[at] = size;
    return CUDA_SUCCESS;
}

CUresult cuMemHostUnregister(void *p) {
    LOCKED;
    UNSAFE;
    if (s.registered.erase(reinterpret_cast<uint64_t>(p)) == 0)
        return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    return CUDA_SUCCESS;
}

CUresult cuMemHostGetDevicePointer(CUdeviceptr *out, void *p, unsigned int flags) {
    LOCKED;
    if (!out || flags != 0 || holder(s.registered, reinterpret_cast<uint64_t>(p), 1) == s.registered.end())
        return CUDA_ERROR_INVALID_VALUE;
    *out = reinterpret_cast<CUdeviceptr>(p);
    return CUDA_SUCCESS;
}

static CUresult allocate(State &s, CUdeviceptr *out, size_t size, int device) {
    if (!out || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (device >= 0 && size > s.devices[device].total - s.devices[device].used)
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (device >= 0)
        s.devices[device].used += size;
    s.allocations[reinterpret_cast<uint64_t>(p)] = size;
    s.allocation_device[reinterpret_cast<uint64_t>(p)] = device;
    *out = reinterpret_cast<CUdeviceptr>(p);
    return CUDA_SUCCESS;
}

static CUresult deallocate(State &s, CUdeviceptr p) {
    auto it = s.allocations.find(p);
    if (it == s.allocations.end())
        return CUDA_ERROR_INVALID_VALUE;
    const int device = s.allocation_device[p];
    if (device >= 0)
        s.devices[device].used -= it->second;
    munmap(reinterpret_cast<void *>(p), it->second);
    s.allocations.erase(it);
    s.allocation_device.erase(p);
    return CUDA_SUCCESS;
}

CUresult cuMemAlloc(CUdeviceptr *out, size_t size) {
    LOCKED;
    NEEDS_CONTEXT;
    UNSAFE;
    return allocate(s, out, size, device_of(t_current));
}

CUresult cuMemAllocManaged(CUdeviceptr *out, size_t size, unsigned int) {
    LOCKED;
    NEEDS_CONTEXT;
    UNSAFE;
    return allocate(s, out, size, -1);
}

CUresult cuMemFree(CUdeviceptr p) {
    LOCKED;
    if (const CUresult r = synchronizing_call(s))
        return r;
    return deallocate(s, p);
}

CUresult cuMemAllocAsync(CUdeviceptr *out, size_t size, CUstream) {
    LOCKED;
    NEEDS_CONTEXT;
    return allocate(s, out, size, device_of(t_current));
}

CUresult cuMemFreeAsync(CUdeviceptr p, CUstream) {
    LOCKED;
    return deallocate(s, p);
}

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev) {
    LOCKED;
    if (!pool || !valid_device(s, dev))
        return CUDA_ERROR_INVALID_VALUE;
    *pool = reinterpret_cast<CUmemoryPool>(static_cast<uintptr_t>(0x1000 + dev));
    return CUDA_SUCCESS;
}

CUresult cuMemPoolGetAttribute(CUmemoryPool, CUmemPool_attribute, void *value) {
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    std::memset(value, 0, sizeof(uint64_t));
    return CUDA_SUCCESS;
}

CUresult cuMemPoolSetAttribute(CUmemoryPool, CUmemPool_attribute, void *value) {
    return value ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static bool managed(State &s, CUdeviceptr p, size_t size) {
    auto it = holder(s.allocations, p, size);
    return it != s.allocations.end() && s.allocation_device[it->first] == -1;
}

CUresult cuMemAdvise(CUdeviceptr p, size_t size, CUmem_advise, CUmemLocation) {
    LOCKED;
    return managed(s, p, size) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t size, CUmemLocation, unsigned int flags, CUstream) {
    LOCKED;
    return managed(s, p, size) && flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuStreamCreate(CUstream *out, unsigned int flags) {
    LOCKED;
    NEEDS_CONTEXT;
    auto *st = new Stream{t_current, (flags & CU_STREAM_NON_BLOCKING) == 0};
    s.streams.insert(st);
    *out = reinterpret_cast<CUstream>(st);
    return CUDA_SUCCESS;
}

CUresult cuStreamDestroy(CUstream stream) {
    LOCKED;
    auto *st = reinterpret_cast<Stream *>(stream);
    if (s.streams.erase(st) == 0)
        return CUDA_ERROR_INVALID_HANDLE;
    delete st;
    return CUDA_SUCCESS;
}

// The null stream, a default stream (legacy, per-thread) of the current
// context, or one this driver made.
static bool valid_stream(State &s, CUstream stream) {
    if (stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD)
        return t_current && valid_device(s, device_of(t_current));
    return !stream || s.streams.count(reinterpret_cast<Stream *>(stream)) != 0;
}

CUresult cuStreamSynchronize(CUstream stream) {
    LOCKED;
    if (!valid_stream(s, stream))
        return CUDA_ERROR_INVALID_HANDLE;
    if (is_legacy(stream))
        if (const CUresult r = legacy_use(s))
            return r;
    if (Capture *c = capture_of(s, stream_object(s, stream))) {
        // Its work is not run, only recorded: there is nothing to wait for.
        const bool was = c->invalidated;
        invalidate(s, *c);
        return was ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    return unsafe_call(s);
}

CUresult cuStreamGetCtx(CUstream stream, CUcontext *ctx) {
    LOCKED;
    if (!stream || !valid_stream(s, stream))
        return CUDA_ERROR_INVALID_HANDLE;
    *ctx = reinterpret_cast<Stream *>(stream)->context;
    return CUDA_SUCCESS;
}

CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int) {
    LOCKED;
    auto e = s.events.find(event);
    if (!valid_stream(s, stream) || e == s.events.end())
        return CUDA_ERROR_INVALID_HANDLE;
    if (is_legacy(stream))
        if (const CUresult r = legacy_use(s))
            return r;
    Stream *st = stream_object(s, stream);
    Capture *mine = capture_of(s, st);
    auto found = e->second.capture ? s.captures.find(e->second.capture) : s.captures.end();
    Capture *theirs = found == s.captures.end() ? nullptr : &found->second;  // an ended capture's: none
    if (mine && mine->invalidated)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (mine && theirs != mine) {
        // A dependency across the capture's boundary: on work outside it
        // (or in another capture).
        invalidate(s, *mine);
        if (theirs)
            invalidate(s, *theirs);
        return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
    }
    if (theirs && !mine) {
        // A fork: the stream joins the capture of the event's stream.
        if (!st)
            return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;  // the legacy stream cannot join
        st->capture = e->second.capture;
        st->tail = 0;
        return CUDA_SUCCESS;
    }
    if (mine) {
        // Within the capture: a forked stream whose last work the event
        // covers has joined back.
        Stream *from = e->second.stream;
        if (from && from != st && e->second.tail == from->tail)
            from->tail = 0;
    }
    return CUDA_SUCCESS;
}

CUresult cuEventCreate(CUevent *out, unsigned int) {
    LOCKED;
    NEEDS_CONTEXT;
    void *e = std::malloc(1);
    s.events[e] = Event{};
    *out = static_cast<CUevent>(e);
    return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent event, CUstream stream) {
    LOCKED;
    auto e = s.events.find(event);
    if (!valid_stream(s, stream) || e == s.events.end())
        return CUDA_ERROR_INVALID_HANDLE;
    if (is_legacy(stream))
        if (const CUresult r = legacy_use(s))
            return r;
    Stream *st = stream_object(s, stream);
    Capture *c = capture_of(s, st);
    if (c && c->invalidated)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    e->second = c ? Event{st->capture, st, st->tail} : Event{};
    return CUDA_SUCCESS;
}

CUresult cuEventQuery(CUevent event) {
    LOCKED;
    auto e = s.events.find(event);
    if (e == s.events.end())
        return CUDA_ERROR_INVALID_HANDLE;
    if (e->second.capture) {
        // Last recorded inside a capture: it stands for work that never runs.
        auto c = s.captures.find(e->second.capture);
        if (c != s.captures.end())
            invalidate(s, c->second);
        return CUDA_ERROR_CAPTURED_EVENT;
    }
    return unsafe_call(s);  // work is done at once
}

CUresult cuEventDestroy(CUevent event) {
    LOCKED;
    if (s.events.erase(event) == 0)
        return CUDA_ERROR_INVALID_HANDLE;
    std::free(event);
    return CUDA_SUCCESS;
}

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t size, CUstream stream) {
    LOCKED;
    if (!valid_stream(s, stream))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!reachable(s, dst, size) || !reachable(s, src, size))
        return CUDA_ERROR_INVALID_VALUE;
    if (const CUresult r = enqueue(s, stream))
        return r == RECORDED ? CUDA_SUCCESS : r;
    std::memmove(reinterpret_cast<void *>(dst), reinterpret_cast<const void *>(src), size);
    return CUDA_SUCCESS;
}

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t size, CUstream stream) {
    LOCKED;
    if (!valid_stream(s, stream))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!reachable(s, dst, size))
        return CUDA_ERROR_INVALID_VALUE;
    if (const CUresult r = enqueue(s, stream))
        return r == RECORDED ? CUDA_SUCCESS : r;
    std::memset(reinterpret_cast<void *>(dst), value, size);
    return CUDA_SUCCESS;
}

CUresult cuStreamBeginCapture(CUstream stream, CUstreamCaptureMode mode) {
    LOCKED;
    Stream *st = stream_object(s, stream);
    // The legacy stream cannot capture; nor, here, the per-thread one. A
    // stream that captures already is in the wrong state for it.
    if (!st || mode < CU_STREAM_CAPTURE_MODE_GLOBAL || mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    if (st->capture)
        return CUDA_ERROR_ILLEGAL_STATE;
    st->capture = ++s.next_capture;
    st->tail = 0;
    Capture &c = s.captures[st->capture];
    c.origin = st;
    c.mode = mode;
    c.thread = thread_number();
    return CUDA_SUCCESS;
}

CUresult cuStreamEndCapture(CUstream stream, CUgraph *graph) {
    LOCKED;
    Stream *st = stream_object(s, stream);
    Capture *c = capture_of(s, st);
    if (!graph)
        return CUDA_ERROR_INVALID_VALUE;
    if (!c)
        return CUDA_ERROR_ILLEGAL_STATE;
    if (c->origin != st)
        return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;  // a forked stream, not the one that began it
    if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && c->thread != thread_number())
        return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    const uint64_t id = st->capture;
    bool unjoined = false;
    for (Stream *other : s.streams)
        if (other->capture == id) {
            unjoined = unjoined || (other != st && other->tail != 0);
            other->capture = 0;
            other->tail = 0;
        }
    const Capture done = *c;
    s.captures.erase(id);
    *graph = nullptr;
    if (done.invalidated)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (unjoined) {
        s.invalidations++;
        return CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
    }
    auto *g = new Graph{done.nodes};
    s.graphs.insert(g);
    *graph = reinterpret_cast<CUgraph>(g);
    return CUDA_SUCCESS;
}

static CUresult capture_status(State &s, CUstream stream, CUstreamCaptureStatus *status, cuuint64_t *id) {
    if (!status || !valid_stream(s, stream))
        return CUDA_ERROR_INVALID_VALUE;
    if (is_legacy(stream))
        for (auto &entry : s.captures)
            if (entry.second.origin && entry.second.origin->blocking && entry.second.origin->context == t_current)
                return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;  // asking breaks nothing
    const Stream *st = stream_object(s, stream);
    const Capture *c = capture_of(s, st);
    *status = !c ? CU_STREAM_CAPTURE_STATUS_NONE
                 : c->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if (id)
        *id = c ? st->capture : 0;
    return CUDA_SUCCESS;
}

CUresult cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus *status) {
    LOCKED;
    return capture_status(s, stream, status, nullptr);
}

CUresult cuStreamGetCaptureInfo(CUstream stream, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                                const CUgraphNode **dependencies, const CUgraphEdgeData **edges, size_t *count) {
    LOCKED;
    if ((edges && !dependencies))
        return CUDA_ERROR_INVALID_VALUE;
    const CUresult r = capture_status(s, stream, status, id);
    if (r != CUDA_SUCCESS)
        return r;
    // No graph nodes are made here: none to show.
    if (graph)
        *graph = nullptr;
    if (dependencies)
        *dependencies = nullptr;
    if (edges)
        *edges = nullptr;
    if (count)
        *count = 0;
    return CUDA_SUCCESS;
}

CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
    if (!mode || *mode < CU_STREAM_CAPTURE_MODE_GLOBAL || *mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    std::swap(*mode, t_capture_mode);
    return CUDA_SUCCESS;
}

CUresult cuGraphDestroy(CUgraph graph) {
    LOCKED;
    auto *g = reinterpret_cast<Graph *>(graph);
    if (s.graphs.erase(g) == 0)
        return CUDA_ERROR_INVALID_VALUE;
    delete g;
    return CUDA_SUCCESS;
}

CUresult cuModuleLoadData(CUmodule *, const void *) { return CUDA_ERROR_NOT_SUPPORTED; }
CUresult cuModuleUnload(CUmodule) { return CUDA_ERROR_INVALID_HANDLE; }
CUresult cuModuleGetFunction(CUfunction *, CUmodule, const char *) { return CUDA_ERROR_INVALID_HANDLE; }
CUresult cuLaunchKernel(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
                        unsigned int, unsigned int, CUstream, void **, void **) {
    return CUDA_ERROR_INVALID_HANDLE;
}

// For tests: the calling thread's current context (as cuCtxGetCurrent), for
// code that sees the driver only through the library.
CUcontext fake_cuda_current_context() { return t_current; }

// For tests: how many times cuMemCreate ("cuMemCreate") or cuMemSetAccess
// ("cuMemSetAccess") has been called; 0 for any other name.
uint64_t fake_cuda_call_count(const char *name) {
    LOCKED;
    if (std::strcmp(name, "cuMemCreate") == 0)
        return s.creates;
    if (std::strcmp(name, "cuMemSetAccess") == 0)
        return s.access_calls;
    return 0;
}

// For tests: how many times `device`'s primary context is retained now (-1
// for no such device), as nvidia-smi shows a process on a GPU only while it
// holds a context there.
int fake_cuda_retained_contexts(int device) {
    LOCKED;
    return valid_device(s, device) ? s.devices[device].retained : -1;
}

// For tests: how many capture sequences have been invalidated so far.
uint64_t fake_cuda_capture_invalidations() {
    LOCKED;
    return s.invalidations;
}

// For tests: the nodes a captured graph holds (the work recorded into it); 0
// for a graph the fake did not make.
uint64_t fake_cuda_graph_nodes(CUgraph graph) {
    LOCKED;
    auto *g = reinterpret_cast<Graph *>(graph);
    return s.graphs.count(g) ? g->nodes : 0;
}

// For tests: the device memory the fake holds (handles and cuMemAlloc), all GPUs.
uint64_t fake_cuda_device_bytes_used() {
    LOCKED;
    uint64_t used = 0;
    for (int i = 0; i < s.device_count; ++i)
        used += s.devices[i].used;
    return used;
}

}  // extern "C"
