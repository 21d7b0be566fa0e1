#include "cuda/driver_api.h"
#include "cuda/context_guard.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

namespace uvm::cuda {

namespace {

// What each entry point does to the audit: the resource it makes or
// releases, and whether a test may fail it.
enum class Resource { None, Handle, Reservation, Mapping, Registration, Allocation, Stream, Event, Module, Context, Count };
enum class Effect { None, Make, Release };
struct Rule {
    bool failable;
    Effect effect;
    Resource resource;
};
constexpr Rule kPlain{true, Effect::None, Resource::None};
constexpr Rule kUnfailable{false, Effect::None, Resource::None};
constexpr Rule make(Resource r) { return {true, Effect::Make, r}; }
constexpr Rule release(Resource r) { return {false, Effect::Release, r}; }

template <auto Member>
constexpr Rule kRule = kPlain;
#define UVM_CUDA_RULE(name, rule) \
    template <>                   \
    constexpr Rule kRule<&DriverApi::name> = rule;
UVM_CUDA_RULE(cuGetErrorString, kUnfailable)
UVM_CUDA_RULE(cuCtxSetCurrent, kUnfailable)  // of a retained primary context
UVM_CUDA_RULE(cuCtxGetCurrent, kUnfailable)
// Swapping the thread's capture mode: a scope that set one must be able to put
// the caller's back.
UVM_CUDA_RULE(cuThreadExchangeStreamCaptureMode, kUnfailable)
UVM_CUDA_RULE(cuMemCreate, make(Resource::Handle))
UVM_CUDA_RULE(cuMemRelease, release(Resource::Handle))
UVM_CUDA_RULE(cuMemImportFromShareableHandle, make(Resource::Handle))
UVM_CUDA_RULE(cuMemAddressReserve, make(Resource::Reservation))
UVM_CUDA_RULE(cuMemAddressFree, release(Resource::Reservation))
UVM_CUDA_RULE(cuMemMap, make(Resource::Mapping))
UVM_CUDA_RULE(cuMemUnmap, release(Resource::Mapping))
UVM_CUDA_RULE(cuMemHostRegister, make(Resource::Registration))
UVM_CUDA_RULE(cuMemHostUnregister, release(Resource::Registration))
UVM_CUDA_RULE(cuMemAlloc, make(Resource::Allocation))
UVM_CUDA_RULE(cuMemAllocManaged, make(Resource::Allocation))
UVM_CUDA_RULE(cuMemAllocAsync, make(Resource::Allocation))
UVM_CUDA_RULE(cuMemFree, release(Resource::Allocation))
UVM_CUDA_RULE(cuMemFreeAsync, release(Resource::Allocation))
UVM_CUDA_RULE(cuStreamCreate, make(Resource::Stream))
UVM_CUDA_RULE(cuStreamDestroy, release(Resource::Stream))
UVM_CUDA_RULE(cuEventCreate, make(Resource::Event))
UVM_CUDA_RULE(cuEventDestroy, release(Resource::Event))
UVM_CUDA_RULE(cuModuleLoadData, make(Resource::Module))
UVM_CUDA_RULE(cuModuleUnload, release(Resource::Module))
UVM_CUDA_RULE(cuDevicePrimaryCtxRetain, make(Resource::Context))
UVM_CUDA_RULE(cuDevicePrimaryCtxRelease, release(Resource::Context))
#undef UVM_CUDA_RULE

struct Audit {
    std::atomic<int64_t> live[static_cast<int>(Resource::Count)] = {};
    std::atomic<uint64_t> calls{0};
    std::atomic<uint64_t> fail_at{0};  // 0 = nothing armed
    std::atomic<bool> persistent{false};
    std::atomic<int> result{CUDA_SUCCESS};
    std::atomic<bool> fired{false};
};
Audit g_audit;
DriverApi g_driver;  // the library's own entry points, behind the audited ones

// The audited entry point for the DriverApi member M.
template <typename Fn, Fn DriverApi::*M>
struct Audited;
template <typename... A, CUresult (*DriverApi::*M)(A...)>
struct Audited<CUresult (*)(A...), M> {
    static CUresult CUDAAPI call(A... args) {
        constexpr Rule rule = kRule<M>;
        if (rule.failable && g_audit.fail_at.load(std::memory_order_relaxed) != 0) {
            const uint64_t call = ++g_audit.calls;
            const uint64_t at = g_audit.fail_at.load();
            if (call == at || (g_audit.persistent.load() && call > at && at != 0)) {
                g_audit.fired = true;
                return static_cast<CUresult>(g_audit.result.load());
            }
        }
        const CUresult r = (g_driver.*M)(args...);
        if (rule.effect != Effect::None && r == CUDA_SUCCESS)
            g_audit.live[static_cast<int>(rule.resource)] += rule.effect == Effect::Make ? 1 : -1;
        return r;
    }
};

// The driver-call profile (UVM_DRIVER_PROFILE): a layer over the audited
// entry points, put in the table at load only where it is asked for, so that
// an unprofiled process pays nothing for it. Each entry point counts its
// calls and the nanoseconds they took, in counters of its own (one relaxed
// add each: threads contend only where they call the same function).
struct ProfileSlot {
    const char *label = nullptr;
    std::atomic<uint64_t> calls{0};
    std::atomic<uint64_t> ns{0};
};
std::vector<ProfileSlot *> &profile_slots() {
    static std::vector<ProfileSlot *> slots;  // filled once, at load
    return slots;
}

template <typename Fn, Fn DriverApi::*M>
struct Profiled;
template <typename... A, CUresult (*DriverApi::*M)(A...)>
struct Profiled<CUresult (*)(A...), M> {
    static ProfileSlot slot;
    static CUresult CUDAAPI call(A... args) {
        const auto t0 = std::chrono::steady_clock::now();
        const CUresult r = Audited<CUresult (*)(A...), M>::call(args...);
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
        slot.calls.fetch_add(1, std::memory_order_relaxed);
        slot.ns.fetch_add(static_cast<uint64_t>(ns.count()), std::memory_order_relaxed);
        return r;
    }
};
template <typename... A, CUresult (*DriverApi::*M)(A...)>
ProfileSlot Profiled<CUresult (*)(A...), M>::slot;

// Where the profile goes at exit: the file UVM_DRIVER_PROFILE names, or
// stderr for "1" (or "-").
const char *g_profile_path = nullptr;

void write_profile() {
    std::vector<ProfileSlot *> slots = profile_slots();
    std::sort(slots.begin(), slots.end(), [](const ProfileSlot *a, const ProfileSlot *b) {
        return a->ns.load() > b->ns.load();
    });
    const bool to_stderr = !std::strcmp(g_profile_path, "1") || !std::strcmp(g_profile_path, "-");
    FILE *out = to_stderr ? stderr : std::fopen(g_profile_path, "w");
    if (!out)
        return;
    std::fprintf(out, "# uvm driver-call profile (UVM_DRIVER_PROFILE): calls, total us, mean ns\n");
    for (const ProfileSlot *slot : slots)
        if (slot->calls.load())
            std::fprintf(out, "%-40s %12llu %14.1f %10.0f\n", slot->label,
                         static_cast<unsigned long long>(slot->calls.load()), slot->ns.load() / 1e3,
                         static_cast<double>(slot->ns.load()) / static_cast<double>(slot->calls.load()));
    if (!to_stderr)
        std::fclose(out);
}

// The exported symbol cuda.h's macros turn a name into (cuMemAlloc ->
// cuMemAlloc_v2): the ABI that decltype(&::name) describes. We resolve those
// exact symbols rather than asking cuGetProcAddress for a base name, which
// returns the newest ABI of that name whatever the header declares (it gives
// cuCtxSynchronize_v2(CUcontext) for cuCtxSynchronize(void), for instance).
#define UVM_CUDA_SYMBOL_TEXT(x) #x
#define UVM_CUDA_SYMBOL(x) UVM_CUDA_SYMBOL_TEXT(x)

const char *library_name() {
    const char *chosen = std::getenv("UVM_CUDA_DRIVER_LIBRARY");
    return chosen && *chosen ? chosen : "libcuda.so.1";
}

// Why load() failed, for driver_load_error (written once, before driver_api returns).
char g_load_error[512];

DriverApi *load() {
    void *lib = dlopen(library_name(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        std::snprintf(g_load_error, sizeof(g_load_error), "no CUDA driver: %s", why ? why : library_name());
        return nullptr;
    }
    DriverApi *api = &g_driver;
    bool complete = true;
#define UVM_CUDA_LOOKUP(name)                                                              \
    {                                                                                      \
        void *fn = dlsym(lib, UVM_CUDA_SYMBOL(name));                                      \
        if (!fn) {                                                                         \
            if (std::getenv("UVM_DEBUG"))                                                  \
                std::fprintf(stderr, "uvm: the CUDA driver lacks %s\n", UVM_CUDA_SYMBOL(name)); \
            if (complete)                                                                  \
                std::snprintf(g_load_error, sizeof(g_load_error),                          \
                              "the CUDA driver %s lacks %s: older than the cuda.h the "    \
                              "library was built with", library_name(), UVM_CUDA_SYMBOL(name)); \
            complete = false;                                                              \
        }                                                                                  \
        api->name = reinterpret_cast<decltype(api->name)>(fn);                             \
    }
    UVM_CUDA_DRIVER_FUNCTIONS(UVM_CUDA_LOOKUP)
#undef UVM_CUDA_LOOKUP
    if (!complete)
        return nullptr;  // a driver too old for the cuda.h we were built with
    auto *audited = new DriverApi();
    const char *profile = std::getenv("UVM_DRIVER_PROFILE");
    if (profile && *profile && std::strcmp(profile, "0") != 0) {
        g_profile_path = profile;
#define UVM_CUDA_PROFILED(name)                                                                 \
    {                                                                                           \
        using P = Profiled<decltype(DriverApi::name), &DriverApi::name>;                        \
        P::slot.label = UVM_CUDA_SYMBOL_TEXT(name);                                              \
        profile_slots().push_back(&P::slot);                                                    \
        audited->name = &P::call;                                                               \
    }
        UVM_CUDA_DRIVER_FUNCTIONS(UVM_CUDA_PROFILED)
#undef UVM_CUDA_PROFILED
        std::atexit(write_profile);
        return audited;
    }
#define UVM_CUDA_AUDITED(name) audited->name = &Audited<decltype(DriverApi::name), &DriverApi::name>::call;
    UVM_CUDA_DRIVER_FUNCTIONS(UVM_CUDA_AUDITED)
#undef UVM_CUDA_AUDITED
    return audited;
}

}  // namespace

const DriverApi *driver_api() {
    static std::once_flag once;
    static DriverApi *api = nullptr;
    std::call_once(once, [] { api = load(); });
    return api;
}

const char *driver_library_name() { return library_name(); }

const char *driver_load_error() {
    driver_api();  // loaded once; the text is written before this returns
    return g_load_error;
}

DriverAudit driver_audit() {
    auto live = [](Resource r) { return g_audit.live[static_cast<int>(r)].load(); };
    DriverAudit a;
    a.handles = live(Resource::Handle);
    a.reservations = live(Resource::Reservation);
    a.mappings = live(Resource::Mapping);
    a.registrations = live(Resource::Registration);
    a.allocations = live(Resource::Allocation);
    a.streams = live(Resource::Stream);
    a.events = live(Resource::Event);
    a.modules = live(Resource::Module);
    a.contexts = live(Resource::Context);
    a.failable_calls = g_audit.calls.load();
    return a;
}

void driver_fail_call(uint64_t n, CUresult result, bool persistent) {
    g_audit.fail_at = 0;
    g_audit.calls = 0;
    g_audit.fired = false;
    g_audit.result = static_cast<int>(result);
    g_audit.persistent = persistent;
    g_audit.fail_at = n;
}

bool driver_fault_fired() { return g_audit.fired.load(); }

const char *driver_error_string(CUresult result) {
    const char *text = nullptr;
    const DriverApi *api = driver_api();
    if (api && api->cuGetErrorString(result, &text) == CUDA_SUCCESS && text)
        return text;
    return "unknown CUDA error";
}

uint64_t reservable_gpu_address(uint64_t size, uint64_t align) {
    const DriverApi *api = driver_api();
    CUdevice dev;
    CUcontext ctx;
    if (!api || api->cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        api->cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS)
        return 0;
    CUdeviceptr p = 0;
    {  // the caller's context is back before the retain is released
        const ContextGuard context(*api, ctx);
        // The driver reserves whole 2 MiB units.
        constexpr uint64_t k2M = 2ull << 20;
        const uint64_t span = (size + k2M - 1) & ~(k2M - 1);
        if (api->cuMemAddressReserve(&p, span, align < k2M ? k2M : align, 0, 0) == CUDA_SUCCESS)
            api->cuMemAddressFree(p, span);
        else
            p = 0;
    }
    api->cuDevicePrimaryCtxRelease(dev);
    return p;
}

}  // namespace uvm::cuda
