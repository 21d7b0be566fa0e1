// A model-based fuzzer of the C API (libFuzzer's entry point, and the same
// code replays a corpus without libFuzzer: replay_main.cpp).
//
// The input is a program: each operation is a byte choosing the call and
// bytes for its arguments, decoded against the state so far (which object,
// which GPU, which view, which address). Every call goes to a manager of two
// small simulated GPUs, and to a reference model of what the manager must
// hold: the live objects, their size and chunk size, every mapping (CPU
// kernel and user, GPU physical, kernel and user per GPU), the one user
// address, and the bytes each object holds. After each call the fuzzer checks
//  - the status: exactly the one the model predicts where the rules decide it
//    (a freed or foreign handle, a bad GPU, a mapping that exists or not, an
//    offset out of range, a misaligned address, bad parameters); one of a
//    small set where the outcome depends on resources the model does not
//    track (OUT_OF_MEMORY under exhaustion, ADDRESS_IN_USE for a user
//    address the host took, NOT_SUPPORTED where an object is pinned down);
//  - uvm_mem_info of every live object against the model;
//  - the manager's object counts;
//  - the bytes, read back through the CPU, of objects whose content the model
//    knows (made zeroed, then written by memsets and copies).
// Sharing: an object exported (the model says which can be) and imported
// into the same manager is a second object over the same memory, which then
// maps, copies and frees as any other (their bytes are no longer predicted).
// Streams (sim): create, hold and release work (uvm_sim_stream_hold),
// synchronize and destroy (BUSY exactly while held work of the stream, or of
// one it waits for, is in flight), record_use, alloc_async and free_async;
// an object a held stream uses cannot be evicted (BUSY), and a freed one may
// stay counted (and charged to its client) until its work is done.
// Pressure watermarks on held memory and on clients' budgets: after every
// call the queue is drained and each event checked against the model's
// state of its watermark (set: the state the usage gives, no event; then
// alternating, each true of its usage, the last true of the usage now).
// The trace: start, stop, export, and its info against the model.
// Sleep and wake (uvm_pressure.h): sleepable clients, their objects' own
// sleep modes, sleep with each params' mode (and bad ones), wake; while a
// client sleeps every call that needs its vidmem objects' memory gives
// ASLEEP exactly (maps, copies, memsets, GPU addresses, eviction, restore,
// export, its vidmem allocations), while unmaps, frees and reads about them
// work; its budget, the bytes it gave back and its host image are checked,
// and the bytes come back kept or zeroed as the modes said. A sleep BUSY for
// an object shared with another process changes nothing.
// Release thresholds and growth slack set on each GPU, with every call
// after them judged as before. Objects freed and allocated again in pairs
// that nothing else touches (uvm/mem.h, mem_park): a client's parked bytes
// stay charged to it, as vidmem_cached, and leave its object count.
// A mismatch or a crash is a finding: it becomes a regression test (the
// input goes to tests/fuzz/corpus, which CI replays on every run).
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "uvm/uvm.h"

namespace {

constexpr uint64_t K = 1024, M = 1024 * 1024;
constexpr uint32_t kGpus = 2;
constexpr uint64_t kVidmem = 32 * M;  // small, so that exhaustion and eviction happen
constexpr size_t kMaxOps = 96;

[[noreturn]] void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::fprintf(stderr, "uvm api fuzz: mismatch: ");
    std::vfprintf(stderr, fmt, ap);
    std::fprintf(stderr, "\n");
    va_end(ap);
    std::abort();
}

// The input, read as bytes; zeroes once it runs out.
struct Input {
    const uint8_t *data;
    size_t size;
    size_t at = 0;
    bool more() const { return at < size; }
    uint8_t byte() { return at < size ? data[at++] : 0; }
    uint32_t pick(uint32_t n) { return n ? byte() % n : 0; }
    uint16_t u16() { return static_cast<uint16_t>(byte() | (byte() << 8)); }
};

struct ModelObject {
    uvm_mem_t *handle = nullptr;
    uvm_backing_t backing = UVM_BACKING_SYSMEM;
    uint64_t size = 0, alloc_size = 0, chunk_size = 0;
    uint32_t gpu = 0, flags = 0;
    bool cpu_kernel = false, cpu_user = false;
    uint32_t phys = 0, kernel = 0, user = 0;  // masks by GPU (phys: explicit, not the owner's)
    uint64_t user_address = 0;
    bool known = false;          // the model knows the bytes
    std::vector<uint8_t> bytes;  // alloc_size of them where known
    uint64_t discards = 0;
    uvm_client_t *client = nullptr;  // null: the manager's default client
    std::vector<uvm_stream_t *> users;  // live streams whose work it tracks (record_use, alloc_async)
    uint32_t sleep_mode = UVM_SLEEP_DEFAULT;  // its own (uvm_mem_set_sleep_mode)
    bool shared = false;  // exported (its client's sleep is BUSY)

    bool vidmem() const { return backing == UVM_BACKING_VIDMEM; }
    bool evictable() const { return vidmem() && (flags & (UVM_MEM_EVICTABLE | UVM_MEM_DISCARDABLE)); }
    bool has_phys(uint32_t g) const { return (vidmem() && g == gpu) || ((phys >> g) & 1u); }
    uint32_t user_refs() const {
        return (cpu_user ? 1u : 0u) + static_cast<uint32_t>(__builtin_popcount(user));
    }
    // The one user address goes with the last user mapping.
    void drop_unused_user_address() {
        if (user_refs() == 0)
            user_address = 0;
    }
};

struct ModelClient {
    uvm_client_t *handle = nullptr;
    uint64_t budget[kGpus] = {};  // 0 = unlimited
    uint64_t sysmem_budget = 0;
    bool sleepable = false, asleep = false;
    uint64_t sleep_host = 0;  // the host image of the kept bytes, while asleep
};

struct ModelStream {
    uvm_stream_t *handle = nullptr;
    uint32_t held = 0;  // work held with uvm_sim_stream_hold, not yet released
    uint64_t holds = 0, releases = 0;  // made so far (releases finish the oldest first)
    // Work of other streams it waits for (a stream-ordered free of an object
    // they use): done once that stream has released `holds` of its holds.
    std::vector<std::pair<uvm_stream_t *, uint64_t>> waits;
};

// A freed object whose memory may still wait for stream work: its client
// may still be charged for it until then.
struct ModelRetiring {
    uvm_client_t *client = nullptr;
    bool sysmem = false;
    uint32_t gpu = 0;
    uint64_t alloc_size = 0;
};

// The watermarks set on one usage (a GPU's held memory, or a client's
// budget on a GPU or sysmem) and the state of each, as the events said.
struct ModelMarks {
    uvm_client_t *client = nullptr;  // null: the GPU's held memory
    uint32_t gpu = 0;                // or UVM_CLIENT_SYSMEM
    std::vector<uint32_t> percents;
    std::vector<bool> above;
};

const char *name(uvm_status_t s) { return uvm_status_string(s); }

// UVM_FUZZ_STATS=1: at exit, how often each call gave each status (to see
// what a corpus reaches). UVM_FUZZ_LOG=1: every call checked and its status,
// as they come (to read a failing input).
struct Tally {
    std::map<std::string, uint64_t> counts;
    bool on = std::getenv("UVM_FUZZ_STATS") != nullptr;
    bool log = std::getenv("UVM_FUZZ_LOG") != nullptr;
    ~Tally() {
        for (const auto &c : counts)
            std::fprintf(stderr, "%10" PRIu64 "  %s\n", c.second, c.first.c_str());
    }
    void note(const char *what, uvm_status_t s) {
        if (on)
            counts[std::string(what) + " -> " + name(s)]++;
        if (log)
            std::fprintf(stderr, "%s -> %s\n", what, name(s));
    }
};
Tally g_tally;

class Fuzz {
public:
    explicit Fuzz(Input &in) : in_(in) {}

    void run() {
        uvm_manager_params_t p;
        std::memset(&p, 0, sizeof(p));
        p.backend = UVM_BACKEND_SIM;
        p.sim.gpu_count = kGpus;
        p.sim.vidmem_size = kVidmem;
        coherent_ = in_.byte() & 1;
        p.sim.cpu_coherent = coherent_;
        if (uvm_manager_create(&p, &mgr_) != UVM_OK)
            fail("manager_create");
        // A region of addresses for CPU and GPU user mappings, kept free.
        void *r = mmap(nullptr, kUserSpan, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (r == MAP_FAILED)
            fail("mmap");
        munmap(r, kUserSpan);
        user_base_ = (reinterpret_cast<uint64_t>(r) + 2 * M - 1) & ~(2 * M - 1);
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, share_) != 0)
            fail("socketpair");
        for (size_t n = 0; n < kMaxOps && in_.more(); ++n) {
            step();
            check_all();
        }
        // Every hold released first: a stream may wait for another's held work.
        for (ModelStream &ms : streams_)
            for (; ms.held; --ms.held)
                expect(uvm_sim_stream_release(mgr_, ms.handle), UVM_OK, "teardown stream_release");
        for (ModelStream &ms : streams_)
            expect(uvm_stream_destroy(mgr_, ms.handle), UVM_OK, "teardown stream_destroy");
        streams_.clear();
        retire_bound_ = 0;  // every stream is gone: nothing waits for work
        retiring_.clear();
        for (ModelObject &o : objects_)
            o.users.clear();
        check_all();
        for (ModelObject &o : objects_)
            expect(uvm_mem_free(mgr_, o.handle), UVM_OK, "teardown free");
        objects_.clear();
        check_all();
        for (uint64_t range : ranges_)
            expect(uvm_user_range_release(mgr_, range), UVM_OK, "teardown release");
        for (const ModelClient &mc : clients_)
            expect(uvm_client_destroy(mgr_, mc.handle), UVM_OK, "teardown client_destroy");
        const uvm_status_t s = uvm_manager_destroy(mgr_);
        if (s != UVM_OK)
            fail("manager_destroy gave %s with every object freed", name(s));
        close(share_[0]);
        close(share_[1]);
        // Handles of a destroyed manager are never dereferenced: nothing to check.
    }

private:
    static constexpr uint64_t kUserSpan = 256 * M;

    void expect(uvm_status_t got, uvm_status_t want, const char *what) {
        g_tally.note(what, got);
        if (got != want)
            fail("%s: gave %s, the model says %s", what, name(got), name(want));
    }
    // An evictable object that is out comes back first for most calls, and
    // that can find no room: OUT_OF_MEMORY where the model says OK.
    // (The object comes back before the call's own checks run.)
    void expect_or_no_room(uvm_status_t got, uvm_status_t want, const ModelObject *o, const char *what) {
        if (got == UVM_ERR_OUT_OF_MEMORY && o && o->evictable()) {
            g_tally.note(what, got);
            return;
        }
        expect(got, want, what);
    }
    // A GPU mapping the rules allow may still find no memory for its tables or
    // a pinned-down object (NOT_SUPPORTED); an unmap may find no room to bring
    // an evicted object back first.
    void expect_mapping(uvm_status_t got, uvm_status_t want, const ModelObject *o, bool map, const char *what) {
        if (want == UVM_OK && map)
            expect_one_of(got, want, {UVM_ERR_OUT_OF_MEMORY, UVM_ERR_NOT_SUPPORTED}, what);
        else
            expect_or_no_room(got, want, o, what);
    }
    // `got` is `want`, or one of the resource outcomes allowed here.
    void expect_one_of(uvm_status_t got, uvm_status_t want, std::initializer_list<uvm_status_t> also,
                       const char *what) {
        g_tally.note(what, got);
        if (got == want)
            return;
        for (uvm_status_t a : also)
            if (got == a)
                return;
        fail("%s: gave %s, the model says %s", what, name(got), name(want));
    }

    // An object to act on: a live one mostly, sometimes a freed handle or null.
    ModelObject *choose(uvm_mem_t **handle) {
        const uint32_t c = in_.byte();
        if (c % 16 == 15 && !freed_.empty()) {
            *handle = freed_[c % freed_.size()];
            return nullptr;
        }
        if (c % 16 == 14) {
            *handle = nullptr;
            return nullptr;
        }
        if (objects_.empty()) {
            *handle = nullptr;
            return nullptr;
        }
        ModelObject *o = &objects_[c % objects_.size()];
        *handle = o->handle;
        return o;
    }
    // The status every call on a handle gives before anything else.
    static uvm_status_t handle_status(const ModelObject *o, uvm_mem_t *h) {
        if (o)
            return UVM_OK;
        return h ? UVM_ERR_INVALID_HANDLE : UVM_ERR_INVALID_ARGUMENT;
    }
    // Calls that name a GPU check it before the handle.
    static uvm_status_t gpu_handle_status(const ModelObject *o, uvm_mem_t *h, uint32_t g) {
        return g >= kGpus ? UVM_ERR_INVALID_GPU : handle_status(o, h);
    }
    ModelClient *model_client(uvm_client_t *h) {
        for (ModelClient &mc : clients_)
            if (mc.handle == h)
                return &mc;
        return nullptr;
    }
    // Whether the object's memory is given back by its client's sleep now:
    // every call that needs it gives ASLEEP.
    bool asleep(const ModelObject *o) {
        if (!o || !o->vidmem() || !o->client)
            return false;
        const ModelClient *mc = model_client(o->client);
        return mc && mc->asleep;
    }
    bool resident(const ModelObject &o) {
        if (!o.evictable())
            return true;
        uvm_residency_t r;
        expect(uvm_mem_residency(mgr_, o.handle, &r), UVM_OK, "residency");
        return r.resident != 0;
    }
    uint32_t choose_gpu() {
        const uint32_t g = in_.byte();
        return g % 8 == 7 ? kGpus + g % 3 : g % kGpus;  // now and then one that does not exist
    }

    void step() {
        const uint8_t op = in_.byte();
        if (op >= 234) {  // (older inputs that had these bytes decode differently now)
            more_step(op - 234u);
            return;
        }
        switch (op % 18) {
            case 0: case 1: alloc(); break;
            case 2: free_one(); break;
            case 3: cpu_kernel(); break;
            case 4: cpu_user(); break;
            case 5: gpu_phys(); break;
            case 6: gpu_kernel(); break;
            case 7: gpu_user(); break;
            case 8: memset_op(); break;
            case 9: copy_op(); break;
            case 10: addresses(); break;
            case 11: evict_op(); break;
            case 12: trim(); break;
            case 13: ranges(); break;
            case 14: touch(); break;
            case 15: clients(); break;
            case 16: share(); break;
            default: verify_bytes(); break;
        }
    }

    // Sizes around the chunk-size boundaries, and some absurd ones.
    uint64_t choose_size() {
        static const uint64_t sizes[] = {1,      4 * K - 1, 4 * K,      60 * K,  64 * K, 64 * K + 1, 200 * K,
                                         1 * M,  2 * M - 1, 2 * M,      2 * M + 4 * K, 3 * M, 5 * M,
                                         12 * M, 30 * M,    33 * M,     0,       ~0ull};
        return sizes[in_.pick(sizeof(sizes) / sizeof(sizes[0]))];
    }

    static uint64_t adaptive_chunk(uvm_backing_t b, uint64_t size) {
        if (b == UVM_BACKING_SYSMEM)
            return size >= 2 * M ? 2 * M : 4 * K;
        return size < 64 * K ? 4 * K : size < 2 * M ? 64 * K : 2 * M;
    }

    void alloc(uvm_stream_t *stream = nullptr) {
        uvm_mem_alloc_params_t a;
        std::memset(&a, 0, sizeof(a));
        const uint32_t kind = in_.byte();
        a.backing = static_cast<uvm_backing_t>(kind % 3 == 2 && kind % 7 == 0 ? 2 : kind % 2);
        a.size = choose_size();
        a.gpu = choose_gpu();
        static const uint64_t chunks[] = {0, 0, 0, 4 * K, 64 * K, 2 * M, 8 * K};
        a.chunk_size = chunks[in_.pick(7)];
        const uint32_t f = in_.byte();
        a.flags = f & (UVM_MEM_ZERO | UVM_MEM_EVICTABLE | UVM_MEM_USER_MAPPABLE | UVM_MEM_GPU_MAPPED);
        if (f & 0x40)
            a.flags |= UVM_MEM_DISCARDABLE;
        if ((f & 0x80) && (f & 0x20))
            a.flags |= 1u << 12;  // unknown
        // In a client now and then (a live one, or one destroyed).
        ModelClient *client = nullptr;
        bool dead_client = false;
        if ((f & 0x80) && !(f & 0x20)) {
            const uint32_t c = in_.byte();
            if (c % 8 == 7 && !dead_clients_.empty()) {
                a.client = dead_clients_[c % dead_clients_.size()];
                dead_client = true;
            } else if (!clients_.empty()) {
                client = &clients_[c % clients_.size()];
                a.client = client->handle;
            }
        }
        uvm_mem_t *h = nullptr;
        const uvm_status_t s = stream ? uvm_mem_alloc_async(mgr_, &a, stream, &h) : uvm_mem_alloc(mgr_, &a, &h);

        // What the rules decide.
        uvm_status_t want = UVM_OK;
        if (dead_client) {
            expect(s, UVM_ERR_INVALID_HANDLE, "alloc in a destroyed client");
            return;
        }
        // Before the checks of the rest: no vidmem for a client asleep.
        if (client && client->asleep && a.size && a.backing == UVM_BACKING_VIDMEM && a.gpu < kGpus) {
            expect(s, UVM_ERR_ASLEEP, "alloc of vidmem in an asleep client");
            return;
        }
        const uint64_t chunk = a.chunk_size ? a.chunk_size : adaptive_chunk(a.backing, a.size);
        const bool sys = a.backing == UVM_BACKING_SYSMEM;
        // In the order the manager checks them (mem_alloc).
        // Size 0 is checked as any size would be, then gives no object (uvm.h).
        if ((sys && a.size > (1ull << 48)) || (a.flags & (1u << 12)))
            want = UVM_ERR_INVALID_ARGUMENT;
        else if (a.gpu >= kGpus)
            want = UVM_ERR_INVALID_GPU;
        else if (!sys && a.size > (1ull << 48))
            want = UVM_ERR_OUT_OF_MEMORY;  // larger than any GPU, of any size
        else if (a.chunk_size == 8 * K)
            want = UVM_ERR_PAGE_SIZE_NOT_SUPPORTED;
        else if ((a.flags & (UVM_MEM_EVICTABLE | UVM_MEM_DISCARDABLE)) && a.backing != UVM_BACKING_VIDMEM)
            want = UVM_ERR_INVALID_ARGUMENT;
        else if (!sys && ((a.size + chunk - 1) / chunk) * chunk > kVidmem)
            want = UVM_ERR_OUT_OF_MEMORY;  // more than the GPU has
        else if (a.backing == UVM_BACKING_MANAGED)
            want = UVM_ERR_NOT_SUPPORTED;  // managed memory is the CUDA backend's
        if (want != UVM_OK) {
            expect(s, want, "alloc (bad parameters)");
            return;
        }
        if (a.size == 0) {
            expect(s, UVM_OK, "alloc of size 0");
            if (h)
                fail("alloc of size 0 gave a handle");
            return;
        }
        // Vidmem may not fit: OUT_OF_MEMORY (after eviction tried).
        expect_one_of(s, UVM_OK, {UVM_ERR_OUT_OF_MEMORY}, "alloc");
        if (s != UVM_OK) {
            if (sys && !(client && client->sysmem_budget))
                fail("sysmem alloc of %" PRIu64 " gave OUT_OF_MEMORY with no budget to keep", a.size);
            return;
        }
        ModelObject o;
        o.handle = h;
        o.backing = a.backing;
        o.size = a.size;
        o.chunk_size = chunk;
        o.alloc_size = (a.size + chunk - 1) / chunk * chunk;
        o.gpu = a.gpu;
        o.flags = a.flags;
        if (a.flags & UVM_MEM_GPU_MAPPED) {
            o.kernel = 1u << a.gpu;
            if (sys)
                o.phys = 1u << a.gpu;
        }
        // Fresh sysmem is zero; vidmem only when asked. Small objects only:
        // the model keeps their bytes.
        // On a stream, memory freed there may come back zeroed in the stream's
        // order only: its bytes are not predicted.
        o.known = !stream && (sys || (a.flags & UVM_MEM_ZERO)) && o.alloc_size <= 8 * M;
        if (stream)
            o.users.push_back(stream);
        if (o.known)
            o.bytes.assign(o.alloc_size, 0);
        o.client = a.client;
        objects_.push_back(std::move(o));
        residency_may_have_changed();
        // An allocation that succeeded left its client within its budget.
        if (client) {
            uvm_client_info_t ci;
            expect(uvm_client_info(mgr_, client->handle, &ci), UVM_OK, "client_info");
            const uint64_t used = sys ? ci.sysmem_used : ci.vidmem_used[a.gpu];
            const uint64_t budget = sys ? client->sysmem_budget : client->budget[a.gpu];
            if (budget && used > budget)
                fail("an allocation took its client to %" PRIu64 " bytes, over its budget of %" PRIu64, used,
                     budget);
        }
    }

    // Clients: create (names of 0 to 64 characters), destroy (BUSY while it
    // owns objects), budgets.
    void clients() {
        const uint32_t c = in_.byte();
        switch (c % 4) {
            case 0: {
                static const size_t lengths[] = {6, 1, 63, 0, 64};
                const size_t n = lengths[(c / 4) % 5];
                const std::string nm = std::string(n, 'c');
                uvm_client_t *h = nullptr;
                const uvm_status_t s = uvm_client_create(mgr_, nm.c_str(), &h);
                expect(s, n >= 1 && n <= 63 ? UVM_OK : UVM_ERR_INVALID_ARGUMENT, "client_create");
                if (s == UVM_OK) {
                    ModelClient mc;
                    mc.handle = h;
                    clients_.push_back(mc);
                }
                return;
            }
            case 1: {
                if (clients_.empty() || (c & 0x80)) {
                    if (!dead_clients_.empty())
                        expect(uvm_client_destroy(mgr_, dead_clients_[0]), UVM_ERR_INVALID_HANDLE,
                               "client_destroy of a destroyed client");
                    return;
                }
                const size_t i = (c / 4) % clients_.size();
                bool owns = false;
                for (const ModelObject &o : objects_)
                    owns |= o.client == clients_[i].handle;
                bool retiring = false;
                for (const ModelRetiring &r : retiring_)
                    retiring |= r.client == clients_[i].handle;
                const uvm_status_t s = uvm_client_destroy(mgr_, clients_[i].handle);
                if (!owns && retiring)  // its freed objects may still wait for stream work
                    expect_one_of(s, UVM_OK, {UVM_ERR_BUSY}, "client_destroy");
                else
                    expect(s, owns ? UVM_ERR_BUSY : UVM_OK, "client_destroy");
                if (s == UVM_OK) {
                    marks_.erase(std::remove_if(marks_.begin(), marks_.end(),
                                                [&](const ModelMarks &mm) { return mm.client == clients_[i].handle; }),
                                 marks_.end());
                    dead_clients_.push_back(clients_[i].handle);
                    clients_.erase(clients_.begin() + static_cast<long>(i));
                }
                return;
            }
            default: {
                static const uint64_t budgets[] = {0, 4 * M, 8 * M, 16 * M, 64 * M};
                const uint64_t bytes = budgets[(c / 4) % 5];
                const uint32_t which = in_.byte() % 4;  // GPU 0, 1, sysmem, a GPU that does not exist
                const uint32_t gpu = which < kGpus ? which : which == 2 ? UVM_CLIENT_SYSMEM : kGpus + 1;
                if (clients_.empty())
                    return;
                ModelClient &mc = clients_[(c / 32) % clients_.size()];
                const uvm_status_t s = uvm_client_set_budget(mgr_, mc.handle, gpu, bytes);
                expect(s, which == 3 ? UVM_ERR_INVALID_GPU : UVM_OK, "client_set_budget");
                if (s == UVM_OK) {
                    if (gpu == UVM_CLIENT_SYSMEM)
                        mc.sysmem_budget = bytes;
                    else
                        mc.budget[gpu] = bytes;
                }
                return;
            }
        }
    }

    // Export an object and import it into the same manager again: a second
    // object over the same memory. Exportable: USER_MAPPABLE sysmem, and
    // USER_MAPPABLE vidmem of 2M chunks that is not evictable.
    void share() {
        uvm_mem_t *h;
        ModelObject *o = choose(&h);
        const uvm_status_t s = uvm_mem_export(mgr_, h, share_[0]);
        uvm_status_t want = handle_status(o, h);
        if (want == UVM_OK && asleep(o))
            want = UVM_ERR_ASLEEP;  // nothing is sent
        if (want == UVM_OK) {
            const bool mappable = (o->flags & UVM_MEM_USER_MAPPABLE) != 0;
            const bool ok = mappable && (o->backing == UVM_BACKING_SYSMEM ||
                                         (o->vidmem() && o->chunk_size == 2 * M && !o->evictable()));
            if (!ok)
                want = UVM_ERR_NOT_SUPPORTED;
        }
        expect(s, want, "export");
        if (s != UVM_OK)
            return;
        const size_t index = static_cast<size_t>(o - objects_.data());
        o->shared = true;  // from the first export on, even where the import below fails
        uvm_mem_t *got = nullptr;
        const uvm_status_t r = uvm_mem_import(mgr_, share_[1], nullptr, &got);
        // The import area may be full; an fd per imported 2 MiB may pass the process's limit.
        expect_one_of(r, UVM_OK, {UVM_ERR_OUT_OF_MEMORY, UVM_ERR_NO_HOST_MEMORY}, "import");
        if (r != UVM_OK)
            return;
        ModelObject copy;
        const ModelObject &from = objects_[index];
        copy.handle = got;
        copy.backing = from.backing;
        copy.size = from.size;
        copy.alloc_size = from.alloc_size;
        copy.chunk_size = from.chunk_size;
        copy.gpu = from.gpu;
        copy.flags = UVM_MEM_USER_MAPPABLE;
        copy.shared = true;
        // Two objects over the same bytes: the model stops predicting them.
        objects_[index].known = false;
        objects_[index].bytes.clear();
        objects_.push_back(std::move(copy));
    }

    void free_one() {
        uvm_mem_t *h;
        ModelObject *o = choose(&h);
        const uvm_status_t s = uvm_mem_free(mgr_, h);
        expect(s, h ? handle_status(o, h) : UVM_OK, "free");  // NULL: a size-0 allocation's handle
        if (s == UVM_OK && o && !o->users.empty()) {
            retire_bound_++;
            retire(*o);
        }
        if (!o)
            return;
        freed_.push_back(h);
        objects_.erase(objects_.begin() + (o - objects_.data()));
    }

    void cpu_kernel() {
        uvm_mem_t *h;
        ModelObject *o = choose(&h);
        const bool map = in_.byte() & 1;
        const uvm_status_t s = map ? uvm_mem_map_cpu_kernel(mgr_, h) : uvm_mem_unmap_cpu_kernel(mgr_, h);
        uvm_status_t want = handle_status(o, h);
        if (want == UVM_OK && map && asleep(o)) {
            expect(s, UVM_ERR_ASLEEP, "map_cpu_kernel of an asleep object");
            return;
        }
        if (want == UVM_OK) {
            if (map && o->cpu_kernel)
                want = UVM_ERR_ALREADY_MAPPED;
            else if (map && o->vidmem() && !coherent_)
                want = UVM_ERR_NOT_SUPPORTED;
            else if (!map && !o->cpu_kernel)
                want = UVM_ERR_NOT_MAPPED;
        }
        if (want == UVM_OK && map && o->vidmem())
            expect_one_of(s, want, {UVM_ERR_OUT_OF_MEMORY}, "map_cpu_kernel");  // evicted, no room back
        else
            expect_or_no_room(s, want, o, map ? "map_cpu_kernel" : "unmap_cpu_kernel");
        if (s == UVM_OK)
            o->cpu_kernel = map;
    }

    // A user address: fresh in the fuzzer's region, the object's own, another
    // object's, misaligned, or 0.
    uint64_t choose_user_address(const ModelObject *o, uint64_t align) {
        const uint32_t c = in_.byte();
        switch (c % 8) {
            case 0: return 0;
            case 1: return o && o->user_address ? o->user_address : user_base_;
            case 2:
                for (const ModelObject &x : objects_)
                    if (x.user_address && &x != o)
                        return x.user_address;
                return user_base_ + 4 * K;
            case 3: return user_base_ + align / 2 + 4 * K * (c % 3 == 0);  // misaligned for big chunks
            default: {
                const uint64_t slot = (c / 8) % 16;  // 16 slots of 16 MiB
                return user_base_ + slot * 16 * M;
            }
        }
    }

    // The status a user mapping's address gives, from the object's state.
    uvm_status_t user_address_status(const ModelObject &o, uint64_t address, uint64_t align) const {
        if (address % align != 0)
            return UVM_ERR_MISALIGNED;
        if (o.user_refs() > 0 && address != 0 && address != o.user_address)
            return UVM_ERR_INVALID_ARGUMENT;
        return UVM_OK;
    }

    void cpu_user() {
        uvm_mem_t *h;
        ModelObject *o = choose(&h);
        const bool map = in_.byte() & 1;
        if (!map) {
            const uvm_status_t s = uvm_mem_unmap_cpu_user(mgr_, h);
            uvm_status_t want = handle_status(o, h);
            if (want == UVM_OK && !o->cpu_user)
                want = UVM_ERR_NOT_MAPPED;
            expect_or_no_room(s, want, o, "unmap_cpu_user");
            if (s == UVM_OK) {
                o->cpu_user = false;
                o->drop_unused_user_address();
            }
            return;
        }
        const uint64_t address = choose_user_address(o, 4 * K);
        const uvm_status_t s = uvm_mem_map_cpu_user(mgr_, h, reinterpret_cast<void *>(address));
        uvm_status_t want = handle_status(o, h);
        if (want == UVM_OK && asleep(o)) {
            expect(s, UVM_ERR_ASLEEP, "map_cpu_user of an asleep object");
            return;
        }
        if (want == UVM_OK) {
            if (address == 0)
                want = UVM_ERR_INVALID_ARGUMENT;
            else if (address % (4 * K))
                want = UVM_ERR_MISALIGNED;
            else if (o->cpu_user)
                want = UVM_ERR_ALREADY_MAPPED;
            else if ((o->vidmem() && !coherent_) || (!o->vidmem() && !(o->flags & UVM_MEM_USER_MAPPABLE)))
                want = UVM_ERR_NOT_SUPPORTED;
            else if (o->user_refs() > 0 && address != o->user_address)
                want = UVM_ERR_INVALID_ARGUMENT;
        }
        if (want == UVM_OK)
            expect_one_of(s, want, {UVM_ERR_ADDRESS_IN_USE, UVM_ERR_OUT_OF_MEMORY}, "map_cpu_user");
        else
            expect_or_no_room(s, want, o, "map_cpu_user");
        if (s == UVM_OK) {
            o->cpu_user = true;
            o->user_address = address;
        }
    }

    void gpu_phys() {
        uvm_mem_t *h;
        ModelObject *o = choose(&h);
        const uint32_t g = choose_gpu();
        const bool map = in_.byte() & 1;
        const uvm_status_t s = map ? uvm_mem_map_gpu_phys(mgr_, h, g) : uvm_mem_unmap_gpu_phys(mgr_, h, g);
        uvm_status_t want = gpu_handle_status(o, h, g);
        if (want == UVM_OK && map && asleep(o)) {
            expect(s, UVM_ERR_ASLEEP, "map_gpu_phys of an asleep object");
            return;
        }
        const bool unmap_asleep = want == UVM_OK && !map && asleep(o);  // needs none of its memory
        if (want == UVM_OK) {
            if (map && o->has_phys(g))
                want = UVM_ERR_ALREADY_MAPPED;
            else if (!map && o->vidmem() && g == o->gpu)
                want = UVM_ERR_NOT_SUPPORTED;
            else if (!map && !o->has_phys(g))
                want = UVM_ERR_NOT_MAPPED;
        }
        if (unmap_asleep)
            expect(s, want, "unmap_gpu_phys of an asleep object");
        else
            expect_mapping(s, want, o, map, map ? "map_gpu_phys" : "unmap_gpu_phys");
        if (s != UVM_OK)
            return;
        if (map) {
            o->phys |= 1u << g;
        } else {
            // Unmapping the physical mapping takes that GPU's virtual ones first.
            o->phys &= ~(1u << g);
            o->kernel &= ~(1u << g);
            o->user &= ~(1u << g);
            o->drop_unused_user_address();
        }
    }

    void gpu_kernel() {
        uvm_mem_t *h;
        ModelObject *o = choose(&h);
        const uint32_t g = choose_gpu();
        const bool map = in_.byte() & 1;
        const uvm_status_t s = map ? uvm_mem_map_gpu_kernel(mgr_, h, g) : uvm_mem_unmap_gpu_kernel(mgr_, h, g);
        uvm_status_t want = gpu_handle_status(o, h, g);
        if (want == UVM_OK && map && asleep(o)) {
            expect(s, UVM_ERR_ASLEEP, "map_gpu_kernel of an asleep object");
            return;
        }
        const bool unmap_asleep = want == UVM_OK && !map && asleep(o);
        if (want == UVM_OK) {
            if (map && ((o->kernel >> g) & 1u))
                want = UVM_ERR_ALREADY_MAPPED;
            else if (!map && !((o->kernel >> g) & 1u))
                want = UVM_ERR_NOT_MAPPED;
        }
        if (unmap_asleep)
            expect(s, want, "unmap_gpu_kernel of an asleep object");
        else
            expect_mapping(s, want, o, map, map ? "map_gpu_kernel" : "unmap_gpu_kernel");
        if (s != UVM_OK)
            return;
        if (map) {
            o->kernel |= 1u << g;
            if (!o->has_phys(g))
                o->phys |= 1u << g;  // made on the way, and kept
        } else {
            o->kernel &= ~(1u << g);
        }
    }

    void gpu_user() {
        uvm_mem_t *h;
        ModelObject *o = choose(&h);
        const uint32_t g = choose_gpu();
        const bool map = in_.byte() & 1;
        if (!map) {
            const uvm_status_t s = uvm_mem_unmap_gpu_user(mgr_, h, g);
            uvm_status_t want = gpu_handle_status(o, h, g);
            const bool unmap_asleep = want == UVM_OK && asleep(o);
            if (want == UVM_OK && !((o->user >> g) & 1u))
                want = UVM_ERR_NOT_MAPPED;
            if (unmap_asleep)
                expect(s, want, "unmap_gpu_user of an asleep object");
            else
                expect_or_no_room(s, want, o, "unmap_gpu_user");
            if (s == UVM_OK) {
                o->user &= ~(1u << g);
                o->drop_unused_user_address();
            }
            return;
        }
        const uint64_t align = o ? o->chunk_size : 4 * K;
        const uint64_t address = choose_user_address(o, align);
        const uvm_status_t s = uvm_mem_map_gpu_user(mgr_, h, g, address);
        uvm_status_t want = gpu_handle_status(o, h, g);
        if (want == UVM_OK && asleep(o)) {
            expect(s, UVM_ERR_ASLEEP, "map_gpu_user of an asleep object");
            return;
        }
        if (want == UVM_OK) {
            // Alignment first (of the address the mapping goes to: 0 takes the
            // object's, which a CPU user mapping may have set 4 KiB aligned),
            // then the mapping, then the object's one user address.
            const uint64_t at = address ? address : o->user_refs() > 0 ? o->user_address : 0;
            if (at % align != 0)
                want = UVM_ERR_MISALIGNED;
            else if ((o->user >> g) & 1u)
                want = UVM_ERR_ALREADY_MAPPED;
            else
                want = user_address_status(*o, address, align);
        }
        if (want == UVM_OK)
            expect_one_of(s, want, {UVM_ERR_ADDRESS_IN_USE, UVM_ERR_OUT_OF_MEMORY, UVM_ERR_NOT_SUPPORTED},
                          "map_gpu_user");
        else
            expect_or_no_room(s, want, o, "map_gpu_user");
        if (s != UVM_OK)
            return;
        o->user |= 1u << g;
        if (!o->has_phys(g))
            o->phys |= 1u << g;
        uvm_mem_info_t i;
        expect(uvm_mem_info(mgr_, h, &i), UVM_OK, "info after map_gpu_user");
        if (address && i.user_address != address)
            fail("map_gpu_user at %#" PRIx64 " gave user address %#" PRIx64, address, i.user_address);
        if (o->user_address && i.user_address != o->user_address)
            fail("map_gpu_user moved the object's user address");
        o->user_address = i.user_address;
    }

    // A span on `g` through one of the three views, and whether the model
    // says the mapping it needs exists.
    struct Span {
        uvm_mem_span_t span;
        ModelObject *o;
        bool mapped;
    };
    Span choose_span(uint32_t g) {
        Span sp;
        uvm_mem_t *h;
        sp.o = choose(&h);
        sp.span.mem = h;
        sp.span.view = static_cast<uvm_gpu_view_t>(in_.pick(3));
        const uint64_t limit = sp.o ? sp.o->alloc_size : 64 * K;
        const uint32_t c = in_.byte();
        sp.span.offset = c == 255 ? limit + 4 * K : (limit * c / 256) & ~uint64_t(7);
        sp.mapped = false;
        if (sp.o && g < kGpus) {
            switch (sp.span.view) {
                case UVM_VIEW_KERNEL: sp.mapped = (sp.o->kernel >> g) & 1u; break;
                case UVM_VIEW_USER: sp.mapped = (sp.o->user >> g) & 1u; break;
                default: sp.mapped = sp.o->has_phys(g); break;
            }
        }
        return sp;
    }
    uint64_t choose_length(const Span &a, const Span *b) {
        uint64_t room = a.o && a.span.offset < a.o->alloc_size ? a.o->alloc_size - a.span.offset : 4 * K;
        if (b && b->o && b->span.offset < b->o->alloc_size)
            room = std::min(room, b->o->alloc_size - b->span.offset);
        const uint32_t c = in_.byte();
        if (c == 255)
            return room + 1;  // one past the end
        if (c == 254)
            return 0;
        return std::max<uint64_t>(1, room * c / 253);
    }
    static bool in_range(const Span &sp, uint64_t size) {
        return sp.span.offset <= sp.o->alloc_size && size <= sp.o->alloc_size - sp.span.offset;
    }

    // The status of a copy (src set) or memset, in the order the manager
    // checks (copy_engine_op): arguments, GPU, handles, residency, ranges,
    // overlap, mappings.
    uvm_status_t ce_status(uint32_t g, const Span &d, const Span *src, uint64_t size, bool *may_lack_room) {
        *may_lack_room = false;
        if (!d.span.mem || (src && !src->span.mem) || size == 0)
            return UVM_ERR_INVALID_ARGUMENT;
        if (g >= kGpus)
            return UVM_ERR_INVALID_GPU;
        if (!d.o || (src && !src->o))
            return UVM_ERR_INVALID_HANDLE;
        // The destination is made resident first, then the source.
        if (asleep(d.o))
            return UVM_ERR_ASLEEP;
        if (src && asleep(src->o)) {
            *may_lack_room = d.o->evictable();
            return UVM_ERR_ASLEEP;
        }
        *may_lack_room = d.o->evictable() || (src && src->o->evictable());
        if (!in_range(d, size) || (src && !in_range(*src, size)))
            return UVM_ERR_OUT_OF_RANGE;
        if (src && d.o == src->o && d.span.offset < src->span.offset + size &&
            src->span.offset < d.span.offset + size)
            return UVM_ERR_INVALID_ARGUMENT;  // overlapping ranges of one object
        if (!d.mapped || (src && !src->mapped))
            return UVM_ERR_NOT_MAPPED;
        return UVM_OK;
    }

    void check_ce(uvm_status_t s, uvm_status_t want, bool may_lack_room, const char *what, const Span &d,
                  const Span *src) {
        g_tally.note(what, s);
        if (s == want || (s == UVM_ERR_OUT_OF_MEMORY && may_lack_room))
            return;
        fail("%s: gave %s, the model says %s (dst %s flags %#x view %d, src %s flags %#x view %d)", what, name(s),
             name(want), d.o ? (d.o->vidmem() ? "vidmem" : "sysmem") : "-", d.o ? d.o->flags : 0, d.span.view,
             src && src->o ? (src->o->vidmem() ? "vidmem" : "sysmem") : "-", src && src->o ? src->o->flags : 0,
             src ? src->span.view : -1);
    }

    void memset_op() {
        const uint32_t g = choose_gpu();
        Span d = choose_span(g);
        const uint64_t size = choose_length(d, nullptr);
        const uint8_t value = in_.byte();
        const uvm_status_t s = uvm_mem_memset(mgr_, g, &d.span, value, size);
        bool may_lack_room = false;
        const uvm_status_t want = ce_status(g, d, nullptr, size, &may_lack_room);  // before reading the flag
        check_ce(s, want, may_lack_room, "memset", d, nullptr);
        if (s == UVM_OK && d.o->known)
            std::memset(d.o->bytes.data() + d.span.offset, value, size);
    }

    void copy_op() {
        const uint32_t g = choose_gpu();
        Span d = choose_span(g);
        Span src = choose_span(g);
        const uint64_t size = choose_length(d, &src);
        const uvm_status_t s = uvm_mem_copy(mgr_, g, &d.span, &src.span, size);
        bool may_lack_room = false;
        const uvm_status_t want = ce_status(g, d, &src, size, &may_lack_room);  // before reading the flag
        check_ce(s, want, may_lack_room, "copy", d, &src);
        if (s != UVM_OK)
            return;
        if (d.o->known && src.o->known)
            std::memcpy(d.o->bytes.data() + d.span.offset, src.o->bytes.data() + src.span.offset, size);
        else
            d.o->known = false;
    }

    void addresses() {
        uvm_mem_t *h;
        ModelObject *o = choose(&h);
        const uint32_t g = choose_gpu();
        const uint64_t limit = o ? o->alloc_size : 4 * K;
        const uint64_t offset = in_.byte() == 255 ? limit : limit * in_.byte() / 256;
        const uvm_status_t base = handle_status(o, h);
        const bool in_range = o && offset < o->alloc_size;
        void *p = nullptr;
        uvm_status_t s = uvm_mem_cpu_kernel_address(mgr_, h, offset, &p);
        if (base == UVM_OK && in_range)
            expect(s, o->cpu_kernel ? UVM_OK : UVM_ERR_NOT_MAPPED, "cpu_kernel_address");
        else if (s == UVM_OK)
            fail("cpu_kernel_address of a bad handle or offset gave OK");
        s = uvm_mem_cpu_user_address(mgr_, h, offset, &p);
        if (base == UVM_OK && in_range) {
            expect(s, o->cpu_user ? UVM_OK : UVM_ERR_NOT_MAPPED, "cpu_user_address");
            if (s == UVM_OK && reinterpret_cast<uint64_t>(p) != o->user_address + offset)
                fail("cpu_user_address is not the user address plus the offset");
        } else if (s == UVM_OK) {
            fail("cpu_user_address of a bad handle or offset gave OK");
        }
        uint64_t va = 0;
        s = uvm_mem_gpu_kernel_address(mgr_, h, g, offset, &va);
        if (base == UVM_OK && g < kGpus && asleep(o)) {
            // The GPU's addresses need the memory: asleep before any range.
            expect(s, UVM_ERR_ASLEEP, "gpu_kernel_address of an asleep object");
            uvm_gpu_phys_address_t pa;
            expect(uvm_mem_gpu_user_address(mgr_, h, g, offset, &va), UVM_ERR_ASLEEP,
                   "gpu_user_address of an asleep object");
            expect(uvm_mem_gpu_phys_address(mgr_, h, g, offset, 1, &pa), UVM_ERR_ASLEEP,
                   "gpu_phys_address of an asleep object");
            return;
        }
        if (base == UVM_OK && in_range && g < kGpus)
            expect_one_of(s, ((o->kernel >> g) & 1u) ? UVM_OK : UVM_ERR_NOT_MAPPED, {UVM_ERR_OUT_OF_MEMORY},
                          "gpu_kernel_address");
        else if (s == UVM_OK)
            fail("gpu_kernel_address of a bad handle, GPU or offset gave OK");
        s = uvm_mem_gpu_user_address(mgr_, h, g, offset, &va);
        if (base == UVM_OK && in_range && g < kGpus) {
            expect_one_of(s, ((o->user >> g) & 1u) ? UVM_OK : UVM_ERR_NOT_MAPPED, {UVM_ERR_OUT_OF_MEMORY},
                          "gpu_user_address");
            if (s == UVM_OK && va != o->user_address + offset)
                fail("gpu_user_address is not the user address plus the offset");
        } else if (s == UVM_OK) {
            fail("gpu_user_address of a bad handle, GPU or offset gave OK");
        }
        uvm_gpu_phys_address_t pa;
        s = uvm_mem_gpu_phys_address(mgr_, h, g, offset, 1, &pa);
        if (base == UVM_OK && in_range && g < kGpus)
            expect_one_of(s, o->has_phys(g) ? UVM_OK : UVM_ERR_NOT_MAPPED, {UVM_ERR_OUT_OF_MEMORY},
                          "gpu_phys_address");
        else if (s == UVM_OK)
            fail("gpu_phys_address of a bad handle, GPU or offset gave OK");
    }

    void evict_op() {
        uvm_mem_t *h;
        ModelObject *o = choose(&h);
        const bool evict = in_.byte() & 1;
        bool was_resident = true;
        if (o && o->evictable()) {
            uvm_residency_t r;
            expect(uvm_mem_residency(mgr_, h, &r), UVM_OK, "residency before evict");
            was_resident = r.resident;
        }
        const uvm_status_t s = evict ? uvm_mem_evict(mgr_, h) : uvm_mem_make_resident(mgr_, h);
        const uvm_status_t base = handle_status(o, h);
        if (base != UVM_OK) {
            expect(s, base, evict ? "evict" : "make_resident");
            return;
        }
        if (asleep(o) && (!evict || was_resident)) {
            // Eviction and restore need the memory (an object out already stays so).
            expect(s, UVM_ERR_ASLEEP, evict ? "evict of an asleep object" : "make_resident of an asleep object");
            return;
        }
        if (evict && !o->evictable())
            expect(s, UVM_ERR_NOT_SUPPORTED, "evict of an object that is not evictable vidmem");
        else if (evict && !was_resident)
            expect(s, UVM_OK, "evict of an object already out");
        else if (evict && (o->cpu_kernel || o->cpu_user || (o->phys & ~(1u << o->gpu)) ||
                           ((o->kernel | o->user) & ~(1u << o->gpu))))
            expect(s, UVM_ERR_NOT_SUPPORTED, "evict of an object with CPU or peer mappings");
        else if (evict && busy(*o) == 2)
            expect(s, UVM_ERR_BUSY, "evict of an object a held stream's work uses");
        else if (evict && busy(*o) == 1)
            expect_one_of(s, UVM_ERR_BUSY, {UVM_OK, UVM_ERR_OUT_OF_MEMORY, UVM_ERR_NO_HOST_MEMORY}, "evict");
        else
            expect_one_of(s, UVM_OK, {UVM_ERR_OUT_OF_MEMORY, UVM_ERR_NO_HOST_MEMORY},
                          evict ? "evict" : "make_resident");
        residency_may_have_changed();
    }

    void touch() {
        uvm_mem_t *h;
        ModelObject *o = choose(&h);
        expect(uvm_mem_touch(mgr_, h), handle_status(o, h), "touch");
    }

    void trim() {
        const uint32_t g = choose_gpu();
        uint64_t released = 0;
        expect(uvm_gpu_trim(mgr_, g, &released), g < kGpus ? UVM_OK : UVM_ERR_INVALID_GPU, "trim");
    }

    void ranges() {
        const uint32_t c = in_.byte();
        if (c & 1) {
            const uint64_t size = (c % 5) * 2 * M + ((c & 0x80) ? 4 * K : 0);
            uint64_t at = 0;
            const uvm_status_t s = uvm_user_range_reserve(mgr_, size, &at);
            if (size == 0 || size % (2 * M))
                expect(s, UVM_ERR_INVALID_ARGUMENT, "user_range_reserve (bad size)");
            else
                expect_one_of(s, UVM_OK, {UVM_ERR_OUT_OF_MEMORY}, "user_range_reserve");
            if (s == UVM_OK)
                ranges_.push_back(at);
            return;
        }
        if (ranges_.empty() || (c & 2)) {
            expect(uvm_user_range_release(mgr_, user_base_ + 3 * M), UVM_ERR_INVALID_ARGUMENT,
                   "user_range_release of no range");
            return;
        }
        const size_t i = (c >> 2) % ranges_.size();
        const uvm_status_t s = uvm_user_range_release(mgr_, ranges_[i]);
        expect_one_of(s, UVM_OK, {UVM_ERR_ADDRESS_IN_USE}, "user_range_release");
        if (s == UVM_OK)
            ranges_.erase(ranges_.begin() + static_cast<long>(i));
    }

    // Discardable objects may lose their bytes whenever an eviction can run.
    void residency_may_have_changed() {
        for (ModelObject &o : objects_) {
            if (!(o.flags & UVM_MEM_DISCARDABLE))
                continue;
            uvm_residency_t r;
            expect(uvm_mem_residency(mgr_, o.handle, &r), UVM_OK, "residency");
            if (r.discards != o.discards) {
                o.discards = r.discards;
                if (o.known)
                    std::fill(o.bytes.begin(), o.bytes.end(), 0);  // back in vidmem, zeroes
            }
        }
    }

    // Read an object's bytes through a CPU mapping (made for the purpose and
    // taken away again where the model had none) and compare with the model.
    void verify_bytes() {
        uvm_mem_t *h;
        ModelObject *o = choose(&h);
        if (!o || !o->known || (o->vidmem() && !coherent_) || asleep(o))
            return;  // an asleep object's CPU mapping reads undefined bytes until the wake
        const bool had = o->cpu_kernel;
        if (!had) {
            const uvm_status_t s = uvm_mem_map_cpu_kernel(mgr_, h);
            if (s == UVM_ERR_OUT_OF_MEMORY)
                return;  // evicted and no room to come back
            expect(s, UVM_OK, "map_cpu_kernel to verify");
        }
        void *p = nullptr;
        expect(uvm_mem_cpu_kernel_address(mgr_, h, 0, &p), UVM_OK, "cpu_kernel_address to verify");
        residency_may_have_changed();
        if (o->known && std::memcmp(p, o->bytes.data(), o->alloc_size) != 0) {
            const auto *b = static_cast<const uint8_t *>(p);
            size_t i = 0;
            while (b[i] == o->bytes[i])
                ++i;
            fail("object bytes differ at offset %zu of %" PRIu64 ": %u, the model says %u", i, o->alloc_size,
                 b[i], o->bytes[i]);
        }
        if (!had)
            expect(uvm_mem_unmap_cpu_kernel(mgr_, h), UVM_OK, "unmap_cpu_kernel after verify");
    }

    // Streams and held work (uvm_sim_stream_hold), watermarks, the trace.
    void more_step(uint32_t op) {
        if (op <= 11)
            stream_op(op);
        else if (op <= 17)
            watermarks_op();
        else if (op <= 19)
            trace_op();
        else
            policy_op();
    }

    // A live stream, sometimes a destroyed one or null (*model null then).
    uvm_stream_t *choose_stream(ModelStream **model) {
        const uint32_t c = in_.byte();
        *model = nullptr;
        if (c % 16 == 15 && !dead_streams_.empty())
            return dead_streams_[c % dead_streams_.size()];
        if (c % 16 == 14 || streams_.empty())
            return nullptr;
        *model = &streams_[c % streams_.size()];
        return (*model)->handle;
    }
    static uvm_status_t stream_status(const ModelStream *ms, uvm_stream_t *h) {
        return ms ? UVM_OK : h ? UVM_ERR_INVALID_HANDLE : UVM_ERR_INVALID_ARGUMENT;
    }
    const ModelStream *find_stream(uvm_stream_t *h) const {
        for (const ModelStream &ms : streams_)
            if (ms.handle == h)
                return &ms;
        return nullptr;
    }
    // Whether a stream's work so far cannot finish: 2 yes (work of its own
    // held), 1 perhaps (it waits for another stream's work that may be
    // held), 0 no.
    int stream_blocked(const ModelStream &ms, int depth = 0) const {
        if (ms.held)
            return 2;
        for (const auto &w : ms.waits) {
            const ModelStream *other = find_stream(w.first);
            if (other && depth < 8 && (other->releases < w.second || stream_blocked(*other, depth + 1)))
                return 1;
        }
        return 0;
    }
    // The same for an object: the most blocked of the streams it tracks.
    int busy(const ModelObject &o) const {
        int b = 0;
        for (uvm_stream_t *u : o.users)
            if (const ModelStream *ms = find_stream(u))
                b = std::max(b, stream_blocked(*ms));
        return b;
    }
    // `got` against a model that says `blocked` (stream_blocked): BUSY where
    // it must, either where it may.
    void expect_blocked(uvm_status_t got, int blocked, const char *what) {
        if (blocked == 1)
            expect_one_of(got, UVM_ERR_BUSY, {UVM_OK}, what);
        else
            expect(got, blocked ? UVM_ERR_BUSY : UVM_OK, what);
    }
    // A freed object that may wait for stream work (its client's charge with it).
    void retire(const ModelObject &o) {
        retiring_.push_back({o.client, !o.vidmem(), o.gpu, o.alloc_size});
    }

    void stream_op(uint32_t op) {
        if (op <= 1) {
            const uint32_t g = choose_gpu();
            if (streams_.size() >= 4)
                return;
            uvm_stream_t *h = nullptr;
            const uvm_status_t s = uvm_stream_create(mgr_, g, nullptr, &h);
            expect(s, g < kGpus ? UVM_OK : UVM_ERR_INVALID_GPU, "stream_create");
            if (s == UVM_OK) {
                ModelStream ms;
                ms.handle = h;
                streams_.push_back(ms);
            }
            return;
        }
        ModelStream *ms;
        uvm_stream_t *sh = choose_stream(&ms);
        const uvm_status_t base = stream_status(ms, sh);
        switch (op) {
            case 2: case 3: {
                if (ms && ms->held >= 3)
                    return;
                const uvm_status_t s = uvm_sim_stream_hold(mgr_, sh);
                expect(s, base, "sim_stream_hold");
                if (s == UVM_OK) {
                    ms->held++;
                    ms->holds++;
                }
                return;
            }
            case 4: case 5: {
                const uvm_status_t s = uvm_sim_stream_release(mgr_, sh);
                expect(s, base != UVM_OK ? base : ms->held ? UVM_OK : UVM_ERR_INVALID_ARGUMENT, "sim_stream_release");
                if (s == UVM_OK) {
                    ms->held--;
                    ms->releases++;
                }
                return;
            }
            case 6: {
                const uvm_status_t s = uvm_stream_synchronize(mgr_, sh);
                if (base != UVM_OK)
                    expect(s, base, "stream_synchronize");
                else
                    expect_blocked(s, stream_blocked(*ms), "stream_synchronize");
                return;
            }
            case 7: {
                const uvm_status_t s = uvm_stream_destroy(mgr_, sh);
                if (base != UVM_OK)
                    expect(s, base, "stream_destroy");
                else
                    expect_blocked(s, stream_blocked(*ms), "stream_destroy");
                if (s == UVM_OK) {
                    for (ModelStream &other : streams_)  // its work is done: nothing waits for it
                        other.waits.erase(std::remove_if(other.waits.begin(), other.waits.end(),
                                                         [&](const auto &w) { return w.first == sh; }),
                                          other.waits.end());
                    // Objects that tracked it no longer wait for it.
                    for (ModelObject &o : objects_)
                        o.users.erase(std::remove(o.users.begin(), o.users.end(), sh), o.users.end());
                    dead_streams_.push_back(sh);
                    streams_.erase(streams_.begin() + (ms - streams_.data()));
                }
                return;
            }
            case 8: case 9: {
                uvm_mem_t *h;
                ModelObject *o = choose(&h);
                const uvm_status_t s = uvm_mem_record_use(mgr_, h, sh);
                expect(s, base != UVM_OK ? base : handle_status(o, h), "record_use");
                if (s == UVM_OK && std::find(o->users.begin(), o->users.end(), sh) == o->users.end())
                    o->users.push_back(sh);
                return;
            }
            case 10: {
                uvm_mem_t *h;
                ModelObject *o = choose(&h);
                const uvm_status_t s = uvm_mem_free_async(mgr_, h, sh);
                // NULL: a size-0 allocation's handle, freed by doing nothing.
                expect(s, base != UVM_OK ? base : h ? handle_status(o, h) : UVM_OK, "free_async");
                if (s != UVM_OK || !o)
                    return;
                // The stream now waits for the work of the object's other streams so far.
                for (uvm_stream_t *u : o->users)
                    if (u != sh)
                        if (const ModelStream *other = find_stream(u))
                            ms->waits.push_back({u, other->holds});
                retire_bound_++;  // its memory may wait for the stream
                retire(*o);
                forget(o);
                return;
            }
            default:
                if (ms)
                    alloc(sh);
                return;
        }
    }

    // The object is freed: out of the model.
    void forget(ModelObject *o) {
        freed_.push_back(o->handle);
        objects_.erase(objects_.begin() + (o - objects_.data()));
    }

    // The level a set of watermarks judges: held memory of the GPU's total,
    // or the client's use of its budget (the model's).
    bool level(const ModelMarks &mm, uint64_t *used, uint64_t *limit) {
        if (!mm.client) {
            uvm_gpu_stats_t gs;
            expect(uvm_gpu_stats(mgr_, mm.gpu, &gs), UVM_OK, "gpu_stats");
            *used = gs.held_bytes;  // what the manager holds from the driver (uvm_pressure.h)
            *limit = kVidmem;
            return true;
        }
        for (const ModelClient &mc : clients_)
            if (mc.handle == mm.client) {
                uvm_client_info_t ci;
                expect(uvm_client_info(mgr_, mc.handle, &ci), UVM_OK, "client_info");
                const bool sys = mm.gpu == UVM_CLIENT_SYSMEM;
                *used = sys ? ci.sysmem_used : ci.vidmem_used[mm.gpu];
                *limit = sys ? mc.sysmem_budget : mc.budget[mm.gpu];
                return true;
            }
        return false;
    }
    static bool reached(uint64_t used, uint64_t limit, uint32_t percent) {
        return limit && used * 100 >= static_cast<uint64_t>(percent) * limit;
    }

    void watermarks_op() {
        const uint32_t c = in_.byte();
        uint32_t count = c % 5;  // 0 removes them
        if (c % 32 == 31)
            count = 17;  // too many
        uint32_t percents[17] = {};
        bool bad = count > 16;
        for (uint32_t i = 0; i < count; ++i) {
            percents[i] = in_.byte() % 104;  // 0 and 101..103 are refused
            bad |= percents[i] == 0 || percents[i] > 100;
        }
        // GPU 0, 1, sysmem, or one that does not exist; for the GPU's held memory or a client.
        const uint32_t which = (c / 8) % 4;
        const uint32_t gpu = which < kGpus ? which : which == 2 ? UVM_CLIENT_SYSMEM : kGpus + 1;
        uvm_client_t *client = nullptr;
        bool dead = false;
        if (c & 0x80) {
            if (!clients_.empty() && (c & 0x40)) {
                client = clients_[in_.byte() % clients_.size()].handle;
            } else if (!dead_clients_.empty()) {
                client = dead_clients_[0];
                dead = true;
            }
        }
        const uvm_status_t s = uvm_pressure_watermarks(mgr_, client, gpu, percents, count);
        uvm_status_t want = UVM_OK;
        const bool sys = gpu == UVM_CLIENT_SYSMEM;
        if (bad)
            want = UVM_ERR_INVALID_ARGUMENT;
        else if ((!client && sys) || (!sys && gpu >= kGpus))
            want = UVM_ERR_INVALID_GPU;
        else if (dead)
            want = UVM_ERR_INVALID_HANDLE;
        expect(s, want, "pressure_watermarks");
        if (s != UVM_OK)
            return;
        marks_.erase(std::remove_if(marks_.begin(), marks_.end(),
                                    [&](const ModelMarks &mm) { return mm.client == client && mm.gpu == gpu; }),
                     marks_.end());
        if (count == 0)
            return;
        // Each starts in the state the usage gives now, queueing nothing (uvm_pressure.h).
        ModelMarks mm;
        mm.client = client;
        mm.gpu = gpu;
        mm.percents.assign(percents, percents + count);
        std::sort(mm.percents.begin(), mm.percents.end());
        mm.percents.erase(std::unique(mm.percents.begin(), mm.percents.end()), mm.percents.end());
        uint64_t used = 0, limit = 0;
        level(mm, &used, &limit);
        for (uint32_t p : mm.percents)
            mm.above.push_back(reached(used, limit, p));
        marks_.push_back(std::move(mm));
    }

    // Every queued event is a crossing of a watermark that is set, the other
    // way from its last one and true of the usage it carries; once the queue
    // is empty, every watermark's state is true of the usage now.
    void check_pressure_events() {
        uvm_pressure_event_t ev[64];
        uint32_t n = 0;
        do {
            expect(uvm_pressure_events(mgr_, ev, 64, &n), UVM_OK, "pressure_events");
            for (uint32_t i = 0; i < n; ++i) {
                const uvm_pressure_event_t &e = ev[i];
                ModelMarks *mm = nullptr;
                for (ModelMarks &m : marks_)
                    if (m.client == e.client && m.gpu == e.gpu)
                        mm = &m;
                if (!mm)
                    fail("a pressure event of %u%% on GPU %u for no watermark set", e.percent, e.gpu);
                size_t k = 0;
                while (k < mm->percents.size() && mm->percents[k] != e.percent)
                    ++k;
                if (k == mm->percents.size())
                    fail("a pressure event of %u%%, a watermark not set", e.percent);
                if (mm->above[k] == (e.rising != 0))
                    fail("two %s events in a row at %u%%", e.rising ? "rising" : "falling", e.percent);
                mm->above[k] = e.rising != 0;
                if (reached(e.used, e.limit, e.percent) != (e.rising != 0))
                    fail("a %s event at %u%% untrue of its usage %" PRIu64 " of %" PRIu64,
                         e.rising ? "rising" : "falling", e.percent, e.used, e.limit);
            }
        } while (n == 64);
        for (const ModelMarks &mm : marks_) {
            uint64_t used = 0, limit = 0;
            if (!level(mm, &used, &limit))
                continue;
            for (size_t k = 0; k < mm.percents.size(); ++k)
                if (mm.above[k] != reached(used, limit, mm.percents[k]))
                    fail("the events left %u%% %s at a usage of %" PRIu64 " of %" PRIu64, mm.percents[k],
                         mm.above[k] ? "above" : "below", used, limit);
        }
    }

    void trace_op() {
        const uint32_t c = in_.byte();
        switch (c % 3) {
            case 0: {
                static const uint64_t rings[] = {64 * K, 128 * K, 1 * K, 64 * K - 1};
                const uint64_t ring = rings[(c / 3) % 4];
                const uvm_status_t s = uvm_trace_start(mgr_, ring);
                expect(s, ring < 64 * K ? UVM_ERR_INVALID_ARGUMENT : trace_on_ ? UVM_ERR_BUSY : UVM_OK, "trace_start");
                if (s == UVM_OK)
                    trace_on_ = trace_started_ = true;
                break;
            }
            case 1: {
                const uvm_status_t s = uvm_trace_stop(mgr_);
                expect(s, trace_on_ ? UVM_OK : UVM_ERR_NOT_FOUND, "trace_stop");
                trace_on_ = false;
                break;
            }
            default: {
                const uvm_trace_format_t f = (c / 3) % 2 ? UVM_TRACE_SVG : UVM_TRACE_CHROME_JSON;
                size_t needed = 0;
                const uvm_status_t s = uvm_trace_export(mgr_, f, nullptr, 0, &needed);
                expect(s, trace_started_ ? UVM_ERR_BUFFER_TOO_SMALL : UVM_ERR_NOT_FOUND, "trace_export (size)");
                if (s != UVM_ERR_BUFFER_TOO_SMALL)
                    break;
                std::string text(needed + 4096, '\0');  // it may grow between calls while on
                size_t again = 0;
                expect(uvm_trace_export(mgr_, f, &text[0], text.size(), &again), UVM_OK, "trace_export");
                if (again < 2 || text[again - 1] != '\0')
                    fail("trace_export: %zu bytes without their terminating zero", again);
                break;
            }
        }
        uvm_trace_info_t ti;
        expect(uvm_trace_info(mgr_, &ti), UVM_OK, "trace_info");
        if (!!ti.enabled != trace_on_)
            fail("trace_info: enabled %d, the model says %d", ti.enabled, trace_on_);
    }

    // Sleep and wake, objects' sleep modes, release thresholds, growth slack,
    // and freed objects parked with their client.
    void policy_op() {
        const uint32_t c = in_.byte();
        switch (c % 8) {
            case 0: {
                static const size_t lengths[] = {5, 1, 63, 0, 64};
                const size_t n = lengths[(c / 8) % 5];
                uvm_client_t *h = nullptr;
                const uvm_status_t s = uvm_client_create_sleepable(mgr_, std::string(n, 's').c_str(), &h);
                expect(s, n >= 1 && n <= 63 ? UVM_OK : UVM_ERR_INVALID_ARGUMENT, "client_create_sleepable");
                if (s == UVM_OK) {
                    ModelClient mc;
                    mc.handle = h;
                    mc.sleepable = true;
                    clients_.push_back(mc);
                }
                return;
            }
            case 1: case 2: sleep_op(c / 8); return;
            case 3: wake_op(c / 8); return;
            case 4: {
                uvm_mem_t *h;
                ModelObject *o = choose(&h);
                static const uint32_t modes[] = {UVM_SLEEP_DEFAULT, UVM_SLEEP_KEEP, UVM_SLEEP_DISCARD, 9};
                const uint32_t mode = modes[(c / 8) % 4];
                const uvm_status_t s = uvm_mem_set_sleep_mode(mgr_, h, static_cast<uvm_sleep_mode_t>(mode));
                uvm_status_t want = handle_status(o, h);
                if (want == UVM_OK && mode > UVM_SLEEP_DISCARD)
                    want = UVM_ERR_INVALID_ARGUMENT;
                expect(s, want, "mem_set_sleep_mode");
                if (s == UVM_OK)
                    o->sleep_mode = mode;
                return;
            }
            case 5: case 6: {
                static const uint64_t values[] = {0, 2 * M, 8 * M, ~0ull};
                const uint32_t g = choose_gpu();
                const uint64_t bytes = values[(c / 8) % 4];
                const bool threshold = c % 8 == 5;
                const uvm_status_t s = threshold ? uvm_gpu_set_release_threshold(mgr_, g, bytes)
                                                 : uvm_gpu_set_growth_slack(mgr_, g, bytes);
                expect(s, g < kGpus ? UVM_OK : UVM_ERR_INVALID_GPU,
                       threshold ? "gpu_set_release_threshold" : "gpu_set_growth_slack");
                return;
            }
            default: park_pairs(c / 8); return;
        }
    }

    // The client a sleep or wake names: a live one, a destroyed one or null.
    ModelClient *choose_client(uvm_client_t **h) {
        const uint32_t c = in_.byte();
        *h = nullptr;
        if (c % 8 == 7 && !dead_clients_.empty()) {
            *h = dead_clients_[c % dead_clients_.size()];
            return nullptr;
        }
        if (c % 8 == 6 || clients_.empty())
            return nullptr;
        ModelClient *mc = &clients_[c % clients_.size()];
        *h = mc->handle;
        return mc;
    }
    static uvm_status_t client_status(const ModelClient *mc, uvm_client_t *h) {
        return mc ? UVM_OK : h ? UVM_ERR_INVALID_HANDLE : UVM_ERR_INVALID_ARGUMENT;
    }
    bool any_stream_blocked() const {
        for (const ModelStream &ms : streams_)
            if (stream_blocked(ms))
                return true;
        return false;
    }

    void sleep_op(uint32_t how) {
        uvm_client_t *h;
        ModelClient *mc = choose_client(&h);
        static const char *const tags[] = {"kv-cache"};
        uvm_sleep_params_t p;
        std::memset(&p, 0, sizeof(p));
        bool null_params = false, bad = false;
        switch (how % 6) {
            case 0: null_params = true; break;
            case 1: p.mode = UVM_SLEEP_KEEP; break;
            case 2: p.mode = UVM_SLEEP_DISCARD; break;
            case 3: p.tags = tags; p.tag_count = 1; p.tags_mode = UVM_SLEEP_DISCARD; break;  // no object has the tag
            case 4: p.mode = static_cast<uvm_sleep_mode_t>(5); bad = true; break;
            default: p.tag_count = 1; bad = true; break;  // counted, not given
        }
        const uvm_status_t s = uvm_client_sleep(mgr_, h, null_params ? nullptr : &p);
        uvm_status_t want = client_status(mc, h);
        if (want == UVM_OK && bad)
            want = UVM_ERR_INVALID_ARGUMENT;
        else if (want == UVM_OK && !mc->sleepable)
            want = UVM_ERR_NOT_SUPPORTED;
        if (want != UVM_OK || mc->asleep) {
            expect(s, want, "client_sleep");  // asleep already: OK, nothing changes
            return;
        }
        bool shared = false;
        for (const ModelObject &o : objects_)
            shared |= o.client == h && o.vidmem() && o.shared;
        bool may_busy = any_stream_blocked();  // work it must wait for may never finish
        if (shared)
            expect(s, UVM_ERR_BUSY, "client_sleep with an object shared with another process");
        else if (may_busy)
            expect_one_of(s, UVM_OK, {UVM_ERR_BUSY, UVM_ERR_OUT_OF_MEMORY, UVM_ERR_NO_HOST_MEMORY}, "client_sleep");
        else
            expect_one_of(s, UVM_OK, {UVM_ERR_OUT_OF_MEMORY, UVM_ERR_NO_HOST_MEMORY}, "client_sleep");
        if (s != UVM_OK)
            return;  // all or nothing
        mc->asleep = true;
        mc->sleep_host = 0;
        const uvm_sleep_mode_t mode = null_params || p.mode == UVM_SLEEP_DEFAULT ? UVM_SLEEP_KEEP : p.mode;
        for (ModelObject &o : objects_) {
            if (o.client != h || !o.vidmem() || !resident(o))
                continue;  // an evicted object keeps its bytes in host memory as it is
            const uint32_t m = o.sleep_mode != UVM_SLEEP_DEFAULT ? o.sleep_mode : static_cast<uint32_t>(mode);
            if (m == UVM_SLEEP_KEEP)
                mc->sleep_host += o.alloc_size;
            else if (o.known)
                std::fill(o.bytes.begin(), o.bytes.end(), 0);  // back zeroed
        }
    }

    void wake_op(uint32_t) {
        uvm_client_t *h;
        ModelClient *mc = choose_client(&h);
        const uvm_status_t s = uvm_client_wake(mgr_, h);
        uvm_status_t want = client_status(mc, h);
        if (want == UVM_OK && !mc->sleepable)
            want = UVM_ERR_NOT_SUPPORTED;
        if (want != UVM_OK || !mc->asleep) {
            expect(s, want, "client_wake");
            return;
        }
        // Its memory may be taken meanwhile, or its budget lowered: it stays asleep.
        expect_one_of(s, UVM_OK, {UVM_ERR_OUT_OF_MEMORY}, "client_wake");
        if (s == UVM_OK) {
            mc->asleep = false;
            mc->sleep_host = 0;
            residency_may_have_changed();  // the wake may evict to make room
        }
    }

    // Pairs of an allocation and its free that nothing else touches (no
    // handle is looked at in between): the pair's object is parked with its
    // thread (uvm/mem.h, mem_park) and the next pair takes it whole.
    void park_pairs(uint32_t how) {
        uvm_mem_alloc_params_t a;
        std::memset(&a, 0, sizeof(a));
        a.backing = UVM_BACKING_VIDMEM;
        a.size = how % 2 ? 64 * K : 4 * K;
        a.gpu = (how / 2) % kGpus;
        ModelClient *mc = nullptr;
        if ((how / 4) % 2 && !clients_.empty()) {
            mc = &clients_[(how / 8) % clients_.size()];
            a.client = mc->handle;
        }
        for (uint32_t i = 0; i < 1 + (how / 16) % 4; ++i) {
            uvm_mem_t *h = nullptr;
            const uvm_status_t s = uvm_mem_alloc(mgr_, &a, &h);
            if (mc && mc->asleep) {
                expect(s, UVM_ERR_ASLEEP, "park pair: alloc in an asleep client");
                return;
            }
            expect_one_of(s, UVM_OK, {UVM_ERR_OUT_OF_MEMORY}, "park pair: alloc");
            if (s != UVM_OK)
                return;
            expect(uvm_mem_free(mgr_, h), UVM_OK, "park pair: free");
            freed_.push_back(h);
        }
        residency_may_have_changed();
    }

    // Every live object as the model says, and the counts.
    void check_all() {
        uvm_manager_stats_t ms;
        expect(uvm_manager_stats(mgr_, &ms), UVM_OK, "manager_stats");
        // Freed objects whose stream work is not done are still counted until released.
        if (ms.objects < objects_.size() || ms.objects > objects_.size() + retire_bound_)
            fail("the manager has %" PRIu64 " objects, the model %zu (+ up to %zu waiting for streams)", ms.objects,
                 objects_.size(), retire_bound_);
        check_pressure_events();
        for (const ModelObject &o : objects_) {
            uvm_mem_info_t i;
            expect(uvm_mem_info(mgr_, o.handle, &i), UVM_OK, "info");
            if (i.size != o.size || i.alloc_size != o.alloc_size || i.chunk_size != o.chunk_size ||
                i.backing != o.backing || i.gpu != o.gpu || i.flags != o.flags)
                fail("info: size %" PRIu64 "/%" PRIu64 " chunk %" PRIu64 " backing %d gpu %u flags %#x; model "
                     "%" PRIu64 "/%" PRIu64 " chunk %" PRIu64 " backing %d gpu %u flags %#x",
                     i.size, i.alloc_size, i.chunk_size, i.backing, i.gpu, i.flags, o.size, o.alloc_size,
                     o.chunk_size, o.backing, o.gpu, o.flags);
            if (!!i.cpu_kernel_mapped != o.cpu_kernel || !!i.cpu_user_mapped != o.cpu_user)
                fail("info: cpu mappings %d/%d, model %d/%d", i.cpu_kernel_mapped, i.cpu_user_mapped,
                     o.cpu_kernel, o.cpu_user);
            bool resident = true;
            if (o.evictable()) {
                uvm_residency_t r;
                expect(uvm_mem_residency(mgr_, o.handle, &r), UVM_OK, "residency");
                resident = r.resident;
            }
            const uint32_t phys = o.phys | (o.vidmem() ? 1u << o.gpu : 0u);
            // While evicted, the owner's virtual mappings are down (they come back with it).
            const uint32_t kernel = resident ? o.kernel : 0, user = resident ? o.user : 0;
            if (i.gpu_phys_mask != phys || i.gpu_kernel_mask != kernel || i.gpu_user_mask != user)
                fail("info: phys/kernel/user masks %#x/%#x/%#x, model %#x/%#x/%#x (resident %d)", i.gpu_phys_mask,
                     i.gpu_kernel_mask, i.gpu_user_mask, phys, kernel, user, resident);
            if (i.user_address != o.user_address)
                fail("info: user address %#" PRIx64 ", model %#" PRIx64, i.user_address, o.user_address);
        }
        for (uvm_mem_t *h : freed_) {
            uvm_mem_info_t i;
            expect(uvm_mem_info(mgr_, h, &i), UVM_ERR_INVALID_HANDLE, "info of a freed handle");
        }
        // Each client holds what its objects hold: resident vidmem by GPU
        // (evicted bytes count against no budget), sysmem, and the count.
        for (const ModelClient &mc : clients_) {
            uvm_client_info_t ci;
            expect(uvm_client_info(mgr_, mc.handle, &ci), UVM_OK, "client_info");
            uint64_t vid[kGpus] = {}, sys = 0, count = 0, given_back[kGpus] = {};
            for (const ModelObject &o : objects_) {
                if (o.client != mc.handle)
                    continue;
                count++;
                if (!o.vidmem()) {
                    sys += o.alloc_size;
                    continue;
                }
                uvm_residency_t r;
                r.resident = 1;
                if (o.evictable())
                    expect(uvm_mem_residency(mgr_, o.handle, &r), UVM_OK, "residency");
                // Asleep, its memory is out of the budget, given back.
                (mc.asleep ? given_back : vid)[o.gpu] += r.resident ? o.alloc_size : 0;
            }
            // Freed objects still waiting for stream work may still be charged.
            uint64_t more_vid[kGpus] = {}, more_sys = 0, more_count = 0;
            for (const ModelRetiring &r : retiring_)
                if (r.client == mc.handle) {
                    more_count++;
                    (r.sysmem ? more_sys : more_vid[r.gpu]) += r.alloc_size;
                }
            // Objects freed and parked with the client (mem_park) stay charged, as cached.
            for (uint32_t g = 0; g < kGpus; ++g)
                vid[g] += ci.vidmem_cached[g];
            if (mc.sleepable && (ci.vidmem_cached[0] || ci.vidmem_cached[1]))
                fail("a sleepable client's objects were parked (its roots are its own)");
            auto within = [](uint64_t got, uint64_t want, uint64_t more) { return got >= want && got <= want + more; };
            if (!within(ci.objects, count, more_count) || !within(ci.sysmem_used, sys, more_sys) ||
                !within(ci.vidmem_used[0], vid[0], more_vid[0]) || !within(ci.vidmem_used[1], vid[1], more_vid[1]))
                fail("client: %" PRIu64 " objects, vidmem %" PRIu64 "/%" PRIu64 ", sysmem %" PRIu64 "; the model "
                     "%" PRIu64 ", %" PRIu64 "/%" PRIu64 ", %" PRIu64,
                     ci.objects, ci.vidmem_used[0], ci.vidmem_used[1], ci.sysmem_used, count, vid[0], vid[1], sys);
            if (ci.vidmem_budget[0] != mc.budget[0] || ci.vidmem_budget[1] != mc.budget[1] ||
                ci.sysmem_budget != mc.sysmem_budget)
                fail("client budgets differ from the model's");
            if (!!ci.sleepable != mc.sleepable || !!ci.asleep != mc.asleep)
                fail("client: sleepable %d asleep %d, the model %d %d", ci.sleepable, ci.asleep, mc.sleepable,
                     mc.asleep);
            if (ci.vidmem_asleep[0] != given_back[0] || ci.vidmem_asleep[1] != given_back[1])
                fail("client: %" PRIu64 "/%" PRIu64 " bytes given back asleep, the model %" PRIu64 "/%" PRIu64,
                     ci.vidmem_asleep[0], ci.vidmem_asleep[1], given_back[0], given_back[1]);
            if (ci.sleep_host_bytes != mc.sleep_host)
                fail("client: a host image of %" PRIu64 " bytes, the model %" PRIu64, ci.sleep_host_bytes,
                     mc.sleep_host);
        }
    }

    Input &in_;
    uvm_manager_t *mgr_ = nullptr;
    bool coherent_ = false;
    int share_[2] = {-1, -1};  // export and import go through this socket pair
    uint64_t user_base_ = 0;
    std::vector<ModelObject> objects_;
    std::vector<uvm_mem_t *> freed_;
    std::vector<uint64_t> ranges_;
    std::vector<ModelClient> clients_;
    std::vector<uvm_client_t *> dead_clients_;
    std::vector<ModelStream> streams_;
    std::vector<uvm_stream_t *> dead_streams_;
    size_t retire_bound_ = 0;  // freed objects that may still wait for stream work
    std::vector<ModelRetiring> retiring_;
    std::vector<ModelMarks> marks_;
    bool trace_on_ = false, trace_started_ = false;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Input in{data, size};
    Fuzz(in).run();
    return 0;
}
