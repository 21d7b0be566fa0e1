/*
 * share_peer.c - one object seen by two processes on two GPUs
 * (docs/sharing.md): the sharing experiments.
 *
 * The exporter (this process, GPU 0) and the importer (a forked child, which
 * maps what it imports on GPU 1, a peer of GPU 0) each make their own
 * manager after the fork. It measures and prints:
 *
 *   1. peer copy bandwidth in one process: GPU 1's copy engine reading and
 *      writing an object of GPU 0 through its peer mapping;
 *   2. export + import + map latency, 2 MiB and 1 GiB (or --max-mib);
 *   3. the same peer bandwidth through an imported object in the other
 *      process, next to (1), and the data written each way, checked;
 *   4. a producer/consumer ring across the two processes: the producer fills
 *      slots of a vidmem ring on GPU 0, the consumer copies them out on GPU 1
 *      through its imported mapping; head and tail live in a shared sysmem
 *      object both CPUs map;
 *   5. the other way: GPU 0 copying to and from an object of GPU 1 in one
 *      process, and an object of the importer's GPU 1 exported back to this
 *      process, mapped on GPU 0, its bytes checked each way;
 *   6. on CUDA with two GPUs, the driver's own peer copy (cuMemcpyPeerAsync
 *      between cuMemAlloc buffers, on GPU 1's stream) at the same size, next
 *      to (1): what the link gives without the library;
 *   7. budgets and OOM reports per GPU: a client's budget refuses on one GPU
 *      what the other GPU's still takes, and a request for a whole GPU is
 *      OUT_OF_MEMORY on each GPU, the report naming it.
 *
 *   share_peer [--mib N] [--reps R] [--max-mib M] [--slots S] [--slot-kib K] [--messages X]
 *
 * Exit status 0 only when every check passed. On sim (no GPU) it runs on two
 * simulated GPUs; the figures are then the simulator's, not a GPU's.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <uvm/uvm.h>

#define MiB (1024ull * 1024ull)
#define MAX_REPS 64

#define CHECK(call)                                                                                   \
    do {                                                                                              \
        uvm_status_t s_ = (call);                                                                     \
        if (s_ != UVM_OK) {                                                                           \
            fprintf(stderr, "%s: FAILED: %s -> %s (line %d)\n", role, #call, uvm_status_string(s_), \
                    __LINE__);                                                                        \
            exit(1);                                                                                  \
        }                                                                                             \
    } while (0)

static const char *role = "exporter";
static uint64_t mib = 0, max_mib = 1024, slots = 8, slot_kib = 1024, messages = 2000;
static int reps = 10;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return v[n / 2];
}

static void send_u64(int fd, uint64_t v) {
    if (send(fd, &v, sizeof(v), MSG_NOSIGNAL) != (ssize_t)sizeof(v)) {
        fprintf(stderr, "%s: the other process went away\n", role);
        exit(1);
    }
}

static uint64_t recv_u64(int fd) {
    uint64_t v = 0;
    if (recv(fd, &v, sizeof(v), 0) != (ssize_t)sizeof(v)) {
        fprintf(stderr, "%s: the other process went away\n", role);
        exit(1);
    }
    return v;
}

static double as_double(uint64_t v) {
    double d;
    memcpy(&d, &v, sizeof(d));
    return d;
}

static uint64_t of_double(double d) {
    uint64_t v;
    memcpy(&v, &d, sizeof(v));
    return v;
}

static uvm_manager_t *make_manager(uint32_t *gpus) {
    uvm_manager_params_t params;
    memset(&params, 0, sizeof(params));
    params.sim.gpu_count = 2;
    params.sim.vidmem_size = 4096 * MiB;
    uvm_manager_t *mgr = NULL;
    CHECK(uvm_manager_create(&params, &mgr));
    CHECK(uvm_gpu_count(mgr, gpus));
    return mgr;
}

static uvm_mem_t *alloc(uvm_manager_t *mgr, uvm_backing_t backing, uint32_t gpu, uint64_t size, uint32_t flags) {
    uvm_mem_alloc_params_t p;
    memset(&p, 0, sizeof(p));
    p.size = size;
    p.backing = backing;
    p.gpu = gpu;
    p.flags = flags | UVM_MEM_USER_MAPPABLE;
    if (backing == UVM_BACKING_VIDMEM)
        p.chunk_size = 2 * MiB;
    uvm_mem_t *mem = NULL;
    CHECK(uvm_mem_alloc(mgr, &p, &mem));
    return mem;
}

/* Median GB/s of `reps` copies of `size` bytes on `gpu`'s copy engine. */
static double copy_rate(uvm_manager_t *mgr, uint32_t gpu, uvm_mem_t *dst, uvm_mem_t *src, uint64_t size) {
    uvm_mem_span_t d = {dst, 0, UVM_VIEW_KERNEL}, s = {src, 0, UVM_VIEW_KERNEL};
    double rates[MAX_REPS];
    CHECK(uvm_mem_copy(mgr, gpu, &d, &s, size));  /* warm */
    for (int r = 0; r < reps; ++r) {
        const double t0 = now();
        CHECK(uvm_mem_copy(mgr, gpu, &d, &s, size));
        rates[r] = (double)size / (now() - t0) / 1e9;
    }
    return median(rates, reps);
}

/* Whether every byte of `mem` (through GPU `gpu`'s kernel view) is `value`. */
static int all_bytes(uvm_manager_t *mgr, uint32_t gpu, uvm_mem_t *mem, uint64_t size, uint8_t value) {
    uvm_mem_t *host = alloc(mgr, UVM_BACKING_SYSMEM, gpu, size, UVM_MEM_GPU_MAPPED);
    CHECK(uvm_mem_map_cpu_kernel(mgr, host));
    void *p = NULL;
    CHECK(uvm_mem_cpu_kernel_address(mgr, host, 0, &p));
    uvm_mem_span_t d = {host, 0, UVM_VIEW_KERNEL}, s = {mem, 0, UVM_VIEW_KERNEL};
    CHECK(uvm_mem_copy(mgr, gpu, &d, &s, size));
    int ok = 1;
    for (uint64_t i = 0; i < size && ok; ++i)
        ok = ((uint8_t *)p)[i] == value;
    CHECK(uvm_mem_free(mgr, host));
    return ok;
}

/* ---- The driver's own peer copy (6), loaded at run time as the library loads it ---- */

typedef int drv_result;  /* CUresult: 0 is success */
typedef unsigned long long drv_ptr;
struct driver {
    drv_result (*init)(unsigned);
    drv_result (*device_get)(int *, int);
    drv_result (*retain)(void **, int);
    drv_result (*release)(int);
    drv_result (*get_current)(void **);
    drv_result (*set_current)(void *);
    drv_result (*enable_peer)(void *, unsigned);
    drv_result (*mem_alloc)(drv_ptr *, size_t);
    drv_result (*mem_free)(drv_ptr);
    drv_result (*stream_create)(void **, unsigned);
    drv_result (*stream_destroy)(void *);
    drv_result (*stream_sync)(void *);
    drv_result (*copy_peer)(drv_ptr, void *, drv_ptr, void *, size_t, void *);
};

/* Median GB/s of cuMemcpyPeerAsync of `size` bytes from GPU `from` to GPU
 * `to` on a stream of GPU 1, both ways in *read (0 -> 1) and *write
 * (1 -> 0); 0 where the driver cannot be loaded or refuses. */
static void driver_peer_rates(uint64_t size, double *read, double *write) {
    *read = *write = 0;
    /* The driver the library loads (the stand-in driver in CI, which has no peer copy). */
    const char *named = getenv("UVM_CUDA_DRIVER_LIBRARY");
    void *lib = dlopen(named && *named ? named : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return;
    struct driver d;
    memset(&d, 0, sizeof(d));
#define SYM(field, name) (*(void **)&d.field = dlsym(lib, name)) != NULL
    const int loaded = SYM(init, "cuInit") && SYM(device_get, "cuDeviceGet") &&
                       SYM(retain, "cuDevicePrimaryCtxRetain") && SYM(release, "cuDevicePrimaryCtxRelease_v2") &&
                       SYM(get_current, "cuCtxGetCurrent") && SYM(set_current, "cuCtxSetCurrent") &&
                       SYM(enable_peer, "cuCtxEnablePeerAccess") && SYM(mem_alloc, "cuMemAlloc_v2") &&
                       SYM(mem_free, "cuMemFree_v2") && SYM(stream_create, "cuStreamCreate") &&
                       SYM(stream_destroy, "cuStreamDestroy_v2") && SYM(stream_sync, "cuStreamSynchronize") &&
                       SYM(copy_peer, "cuMemcpyPeerAsync");
#undef SYM
    int dev[2];
    void *ctx[2] = {NULL, NULL}, *saved = NULL, *stream = NULL;
    drv_ptr buf[2] = {0, 0};
    if (!loaded || d.init(0) || d.device_get(&dev[0], 0) || d.device_get(&dev[1], 1) || d.get_current(&saved)) {
        dlclose(lib);
        return;
    }
    int ok = !d.retain(&ctx[0], dev[0]) && !d.retain(&ctx[1], dev[1]);
    for (int g = 0; g < 2 && ok; ++g) {
        ok = !d.set_current(ctx[g]) && !d.mem_alloc(&buf[g], size);
        /* Peer access each way; already enabled (by an earlier run in this process) is fine too. */
        const drv_result peer = ok ? d.enable_peer(ctx[1 - g], 0) : 1;
        ok = ok && (peer == 0 || peer == 704 /* CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED */);
    }
    ok = ok && !d.set_current(ctx[1]) && !d.stream_create(&stream, 1 /* non-blocking */);
    for (int way = 0; way < 2 && ok; ++way) {
        const int to = way == 0 ? 1 : 0, from = 1 - to;
        double rates[MAX_REPS];
        ok = !d.copy_peer(buf[to], ctx[to], buf[from], ctx[from], size, stream) && !d.stream_sync(stream);  /* warm */
        for (int r = 0; r < reps && ok; ++r) {
            const double t0 = now();
            ok = !d.copy_peer(buf[to], ctx[to], buf[from], ctx[from], size, stream) && !d.stream_sync(stream);
            rates[r] = (double)size / (now() - t0) / 1e9;
        }
        if (ok)
            *(way == 0 ? read : write) = median(rates, reps);
    }
    if (stream)
        d.stream_destroy(stream);
    for (int g = 0; g < 2; ++g) {
        if (buf[g]) {
            d.set_current(ctx[g]);
            d.mem_free(buf[g]);
        }
        if (ctx[g])
            d.release(dev[g]);
    }
    d.set_current(saved);
    dlclose(lib);
}

/* ---- The importer (the child, GPU 1) ---- */

static int importer(int sock) {
    role = "importer";
    uint32_t gpus = 0;
    uvm_manager_t *mgr = make_manager(&gpus);
    const uint32_t gpu = gpus > 1 ? 1 : 0;
    int failures = 0;
    send_u64(sock, 1);  /* ready */
    mib = recv_u64(sock);  /* the exporter picks the size for its backend */

    /* 2. Latency: import + map on our GPU, against the exporter's clock reading before it exported. */
    for (;;) {
        const uint64_t size = recv_u64(sock);
        if (size == 0)
            break;
        for (int r = 0; r < reps; ++r) {
            uvm_mem_t *mem = NULL;
            CHECK(uvm_mem_import(mgr, sock, NULL, &mem));
            CHECK(uvm_mem_map_gpu_kernel(mgr, mem, gpu));
            const double t1 = now();
            const double t0 = as_double(recv_u64(sock));
            send_u64(sock, of_double(t1 - t0));
            CHECK(uvm_mem_free(mgr, mem));
            recv_u64(sock);  /* the exporter freed its side */
        }
    }

    /* 3. Bandwidth through the imported object, and data both ways. */
    const uint64_t size = mib * MiB;
    uvm_mem_t *shared = NULL;
    CHECK(uvm_mem_import(mgr, sock, NULL, &shared));
    CHECK(uvm_mem_map_gpu_kernel(mgr, shared, gpu));
    uvm_mem_t *local = alloc(mgr, UVM_BACKING_VIDMEM, gpu, size, UVM_MEM_GPU_MAPPED);
    if (!all_bytes(mgr, gpu, shared, size, 0x5a)) {
        fprintf(stderr, "importer: the exporter's bytes did not arrive\n");
        failures++;
    }
    const double read = copy_rate(mgr, gpu, local, shared, size);
    uvm_mem_span_t d = {local, 0, UVM_VIEW_KERNEL};
    CHECK(uvm_mem_memset(mgr, gpu, &d, 0xa5, size));
    const double write = copy_rate(mgr, gpu, shared, local, size);
    send_u64(sock, of_double(read));
    send_u64(sock, of_double(write));
    recv_u64(sock);  /* the exporter checked our bytes */
    CHECK(uvm_mem_free(mgr, local));
    CHECK(uvm_mem_free(mgr, shared));

    /* 5. The other way: an object of our GPU to the exporter, which maps it on its GPU 0. */
    uvm_mem_t *mine = alloc(mgr, UVM_BACKING_VIDMEM, gpu, size, UVM_MEM_GPU_MAPPED);
    uvm_mem_span_t m = {mine, 0, UVM_VIEW_KERNEL};
    CHECK(uvm_mem_memset(mgr, gpu, &m, 0x3c, size));
    CHECK(uvm_mem_export(mgr, mine, sock));
    recv_u64(sock);  /* the exporter read ours and wrote its own */
    const int back = all_bytes(mgr, gpu, mine, size, 0xc3);
    if (!back) {
        fprintf(stderr, "importer: the exporter's bytes did not arrive in our object\n");
        failures++;
    }
    send_u64(sock, (uint64_t)back);
    CHECK(uvm_mem_free(mgr, mine));

    /* 4. The ring's consumer. */
    uvm_mem_t *ring = NULL, *control = NULL;
    CHECK(uvm_mem_import(mgr, sock, NULL, &ring));
    CHECK(uvm_mem_import(mgr, sock, NULL, &control));
    CHECK(uvm_mem_map_gpu_kernel(mgr, ring, gpu));
    CHECK(uvm_mem_map_cpu_kernel(mgr, control));
    void *c = NULL;
    CHECK(uvm_mem_cpu_kernel_address(mgr, control, 0, &c));
    volatile uint64_t *head = (uint64_t *)c, *tail = (uint64_t *)c + 8;
    const uint64_t slot = slot_kib * 1024;
    uvm_mem_t *out = alloc(mgr, UVM_BACKING_SYSMEM, gpu, slot, UVM_MEM_GPU_MAPPED);
    CHECK(uvm_mem_map_cpu_kernel(mgr, out));
    void *o = NULL;
    CHECK(uvm_mem_cpu_kernel_address(mgr, out, 0, &o));
    send_u64(sock, 1);  /* ready */
    uint64_t wrong = 0;
    for (uint64_t m = 0; m < messages; ++m) {
        while (__atomic_load_n(head, __ATOMIC_ACQUIRE) <= m)
            ;
        uvm_mem_span_t dst = {out, 0, UVM_VIEW_KERNEL}, src = {ring, (m % slots) * slot, UVM_VIEW_KERNEL};
        CHECK(uvm_mem_copy(mgr, gpu, &dst, &src, slot));
        const uint8_t want = (uint8_t)(m * 7 + 1);
        if (((uint8_t *)o)[0] != want || ((uint8_t *)o)[slot - 1] != want)
            wrong++;
        __atomic_store_n(tail, m + 1, __ATOMIC_RELEASE);
    }
    send_u64(sock, wrong);
    if (wrong)
        failures++;
    CHECK(uvm_mem_free(mgr, out));
    CHECK(uvm_mem_free(mgr, ring));
    CHECK(uvm_mem_free(mgr, control));
    CHECK(uvm_manager_destroy(mgr));
    return failures ? 1 : 0;
}

/* ---- Budgets and OOM reports per GPU (7) ---- */

/* Whether this thread's last OOM report names GPU `gpu` (and, where
 * `client` is given, that client and its budget). */
static int report_names(uvm_manager_t *mgr, uint32_t gpu, const char *client, uint64_t budget_mib) {
    static char text[1 << 16];
    size_t needed = 0;
    if (uvm_oom_report(mgr, UVM_REPORT_TEXT, text, sizeof(text), &needed) != UVM_OK)
        return 0;
    char want[96];
    snprintf(want, sizeof(want), "GPU %u,", gpu);
    int ok = strstr(text, want) != NULL;
    if (client) {
        snprintf(want, sizeof(want), "in client %s (budget %llu.00 MiB)", client, (unsigned long long)budget_mib);
        ok = ok && strstr(text, want) != NULL;
    }
    const char *end = strchr(text, '\n');
    printf("  GPU %u report: %.*s%s\n", gpu, end ? (int)(end - text) : 80, text, ok ? "" : "  [does not name it]");
    return ok;
}

/* A client's budget on each GPU refuses what the other GPU's budget still
 * takes, and a request of a whole GPU is OUT_OF_MEMORY on each GPU with the
 * report naming it (eviction off: nothing to evict). 1 where all held. */
static int budgets_per_gpu(uvm_manager_t *mgr) {
    const uint64_t budget_mib[2] = {64, 32};
    uvm_client_t *c = NULL;
    CHECK(uvm_client_create(mgr, "pair", &c));
    int ok = 1;
    for (uint32_t g = 0; g < 2; ++g)
        CHECK(uvm_client_set_budget(mgr, c, g, budget_mib[g] * MiB));
    for (uint32_t g = 0; g < 2; ++g) {
        /* 48 MiB: over GPU 1's budget, within GPU 0's. */
        uvm_mem_alloc_params_t p;
        memset(&p, 0, sizeof(p));
        p.size = 48 * MiB;
        p.backing = UVM_BACKING_VIDMEM;
        p.gpu = g;
        p.client = c;
        uvm_mem_t *m = NULL;
        const uvm_status_t s = uvm_mem_alloc(mgr, &p, &m);
        const uvm_status_t want = 48 > budget_mib[g] ? UVM_ERR_OUT_OF_MEMORY : UVM_OK;
        printf("  48 MiB in client pair on GPU %u (budget %llu MiB): %s\n", g, (unsigned long long)budget_mib[g],
               uvm_status_string(s));
        ok = ok && s == want;
        if (s == UVM_OK)
            CHECK(uvm_mem_free(mgr, m));
        else
            ok = report_names(mgr, g, "pair", budget_mib[g]) && ok;
    }
    CHECK(uvm_client_destroy(mgr, c));
    uvm_eviction_policy_t off = {1, 0};
    CHECK(uvm_manager_set_eviction_policy(mgr, &off));
    for (uint32_t g = 0; g < 2; ++g) {
        uvm_gpu_info_t gi;
        CHECK(uvm_gpu_info(mgr, g, &gi));
        uvm_mem_alloc_params_t p;
        memset(&p, 0, sizeof(p));
        p.size = gi.memory_total;  /* a whole GPU: the driver's context alone makes it too much */
        p.backing = UVM_BACKING_VIDMEM;
        p.gpu = g;
        p.chunk_size = 2 * MiB;
        uvm_mem_t *m = NULL, *more = NULL;
        const double t0 = now();
        uvm_status_t s = uvm_mem_alloc(mgr, &p, &m);
        if (s == UVM_OK) {  /* a GPU with nothing else on it (sim): 2 MiB more is too much */
            p.size = 2 * MiB;
            s = uvm_mem_alloc(mgr, &p, &more);
        }
        printf("  the whole of GPU %u (%llu MiB)%s: %s in %.0f ms\n", g, (unsigned long long)(gi.memory_total / MiB),
               m ? " and 2 MiB more" : "", uvm_status_string(s), (now() - t0) * 1e3);
        ok = s == UVM_ERR_OUT_OF_MEMORY && report_names(mgr, g, NULL, 0) && ok;
        if (more)
            CHECK(uvm_mem_free(mgr, more));
        if (m)
            CHECK(uvm_mem_free(mgr, m));
        CHECK(uvm_gpu_trim(mgr, g, NULL));
    }
    return ok;
}

/* ---- The exporter (this process, GPU 0) ---- */

int main(int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i += 2) {
        const uint64_t v = strtoull(argv[i + 1], NULL, 10);
        if (!strcmp(argv[i], "--mib")) mib = v;
        else if (!strcmp(argv[i], "--reps")) reps = (int)v;
        else if (!strcmp(argv[i], "--max-mib")) max_mib = v;
        else if (!strcmp(argv[i], "--slots")) slots = v;
        else if (!strcmp(argv[i], "--slot-kib")) slot_kib = v;
        else if (!strcmp(argv[i], "--messages")) messages = v;
        else {
            fprintf(stderr, "usage: share_peer [--mib N] [--reps R] [--max-mib M] [--slots S] [--slot-kib K] [--messages X]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > MAX_REPS || slots == 0 || slot_kib == 0 || max_mib < 2) {
        fprintf(stderr, "share_peer: --reps 1-%d, --slots and --slot-kib above 0, --max-mib 2 or more\n", MAX_REPS);
        return 2;
    }
    /* Each 2 MiB of exported vidmem travels as an fd (and on sim is one while it
     * lives): a 1 GiB object needs more than the usual soft limit of 1,024. */
    struct rlimit files;
    if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
        files.rlim_cur = files.rlim_max;
        setrlimit(RLIMIT_NOFILE, &files);
    }
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
        perror("socketpair");
        return 1;
    }
    /* Fork before either side touches a GPU: a CUDA process cannot fork after. */
    const pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 1;
    }
    if (child == 0) {
        close(pair[0]);
        _exit(importer(pair[1]));
    }
    close(pair[1]);
    const int sock = pair[0];
    uint32_t gpus = 0;
    uvm_manager_t *mgr = make_manager(&gpus);
    uvm_backend_kind_t kind;
    CHECK(uvm_manager_backend(mgr, &kind));
    if (mib == 0)
        mib = kind == UVM_BACKEND_CUDA ? 256 : 32;
    const uint64_t size = mib * MiB;
    const uint32_t peer = gpus > 1 ? 1 : 0;
    uvm_gpu_info_t g0, g1;
    CHECK(uvm_gpu_info(mgr, 0, &g0));
    CHECK(uvm_gpu_info(mgr, peer, &g1));
    printf("share_peer: %s backend; exporter on GPU 0 (%s, %s), importer maps it on GPU %u (%s)%s\n",
           kind == UVM_BACKEND_CUDA ? "cuda" : "sim", g0.name, g0.pci_bus_id, peer, g1.name,
           gpus > 1 ? "" : " (one GPU: no peer)");
    recv_u64(sock);  /* the importer is ready */
    send_u64(sock, mib);
    int failures = 0;

    /* 1. One process: GPU `peer` copies to and from an object of GPU 0. */
    uvm_mem_t *a = alloc(mgr, UVM_BACKING_VIDMEM, 0, size, 0), *b = alloc(mgr, UVM_BACKING_VIDMEM, peer, size, 0);
    CHECK(uvm_mem_map_gpu_kernel(mgr, a, peer));
    CHECK(uvm_mem_map_gpu_kernel(mgr, b, peer));
    const double one_read = copy_rate(mgr, peer, b, a, size);
    const double one_write = copy_rate(mgr, peer, a, b, size);
    /* 5. The other way: GPU 0 copies to and from the object of GPU `peer`. */
    double rev_read = one_read, rev_write = one_write;  /* one GPU: the same copies */
    if (peer != 0) {
        CHECK(uvm_mem_map_gpu_kernel(mgr, a, 0));
        CHECK(uvm_mem_map_gpu_kernel(mgr, b, 0));
        rev_read = copy_rate(mgr, 0, a, b, size);
        rev_write = copy_rate(mgr, 0, b, a, size);
    }
    CHECK(uvm_mem_free(mgr, a));
    CHECK(uvm_mem_free(mgr, b));
    /* 6. The driver's own peer copy of the same size, in this process. */
    double drv_read = 0, drv_write = 0;
    if (kind == UVM_BACKEND_CUDA && gpus > 1)
        driver_peer_rates(size, &drv_read, &drv_write);

    /* 2. Export + import + map latency. */
    double latency[2] = {0, 0};
    const uint64_t sizes[2] = {2 * MiB, (max_mib < 1024 ? max_mib : 1024) * MiB};
    for (int s = 0; s < 2; ++s) {
        send_u64(sock, sizes[s]);
        double t[MAX_REPS];
        for (int r = 0; r < reps; ++r) {
            uvm_mem_t *x = alloc(mgr, UVM_BACKING_VIDMEM, 0, sizes[s], 0);
            const double t0 = now();
            CHECK(uvm_mem_export(mgr, x, sock));
            send_u64(sock, of_double(t0));
            t[r] = as_double(recv_u64(sock));
            CHECK(uvm_mem_free(mgr, x));
            send_u64(sock, 1);
        }
        latency[s] = median(t, reps);
    }
    send_u64(sock, 0);

    /* 3. Through an imported object. */
    uvm_mem_t *shared = alloc(mgr, UVM_BACKING_VIDMEM, 0, size, UVM_MEM_GPU_MAPPED);
    uvm_mem_span_t d = {shared, 0, UVM_VIEW_KERNEL};
    CHECK(uvm_mem_memset(mgr, 0, &d, 0x5a, size));
    CHECK(uvm_mem_export(mgr, shared, sock));
    const double imp_read = as_double(recv_u64(sock)), imp_write = as_double(recv_u64(sock));
    if (!all_bytes(mgr, 0, shared, size, 0xa5)) {
        fprintf(stderr, "exporter: the importer's bytes did not arrive\n");
        failures++;
    }
    send_u64(sock, 1);
    CHECK(uvm_mem_free(mgr, shared));

    /* 5. The importer's object of its GPU, here, mapped on GPU 0. */
    uvm_mem_t *theirs = NULL;
    CHECK(uvm_mem_import(mgr, sock, NULL, &theirs));
    CHECK(uvm_mem_map_gpu_kernel(mgr, theirs, 0));
    if (!all_bytes(mgr, 0, theirs, size, 0x3c)) {
        fprintf(stderr, "exporter: the importer's object did not arrive on GPU 0\n");
        failures++;
    }
    uvm_mem_t *near = alloc(mgr, UVM_BACKING_VIDMEM, 0, size, UVM_MEM_GPU_MAPPED);
    const double back_read = copy_rate(mgr, 0, near, theirs, size);
    uvm_mem_span_t n = {near, 0, UVM_VIEW_KERNEL};
    CHECK(uvm_mem_memset(mgr, 0, &n, 0xc3, size));
    const double back_write = copy_rate(mgr, 0, theirs, near, size);
    CHECK(uvm_mem_free(mgr, near));
    CHECK(uvm_mem_free(mgr, theirs));
    send_u64(sock, 1);
    if (!recv_u64(sock))
        failures++;  /* our bytes did not arrive in the importer's object (it said so) */

    /* 4. The ring's producer. */
    const uint64_t slot = slot_kib * 1024;
    uvm_mem_t *ring = alloc(mgr, UVM_BACKING_VIDMEM, 0, slots * slot, UVM_MEM_GPU_MAPPED);
    uvm_mem_t *control = alloc(mgr, UVM_BACKING_SYSMEM, 0, 4096, 0);
    CHECK(uvm_mem_map_cpu_kernel(mgr, control));
    void *c = NULL;
    CHECK(uvm_mem_cpu_kernel_address(mgr, control, 0, &c));
    memset(c, 0, 4096);
    volatile uint64_t *head = (uint64_t *)c, *tail = (uint64_t *)c + 8;  /* a cache line apart */
    CHECK(uvm_mem_export(mgr, ring, sock));
    CHECK(uvm_mem_export(mgr, control, sock));
    recv_u64(sock);  /* the consumer is ready */
    const double r0 = now();
    for (uint64_t m = 0; m < messages; ++m) {
        while (m - __atomic_load_n(tail, __ATOMIC_ACQUIRE) >= slots)
            ;  /* full */
        uvm_mem_span_t dst = {ring, (m % slots) * slot, UVM_VIEW_KERNEL};
        CHECK(uvm_mem_memset(mgr, 0, &dst, (uint8_t)(m * 7 + 1), slot));
        __atomic_store_n(head, m + 1, __ATOMIC_RELEASE);
    }
    while (__atomic_load_n(tail, __ATOMIC_ACQUIRE) < messages)
        ;
    const double ring_s = now() - r0;
    const uint64_t wrong = recv_u64(sock);
    if (wrong)
        failures++;
    CHECK(uvm_mem_free(mgr, ring));
    CHECK(uvm_mem_free(mgr, control));

    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        failures++;

    /* 7. Budgets and OOM reports per GPU (the importer is gone: its context too). */
    if (gpus > 1)
        printf("budgets and OOM reports per GPU:\n");
    const int budgets_ok = gpus > 1 ? budgets_per_gpu(mgr) : 1;
    if (!budgets_ok)
        failures++;
    CHECK(uvm_manager_destroy(mgr));

    printf("peer copy, %llu MiB, medians of %d (GPU %u's copy engine, GB/s):\n", (unsigned long long)mib, reps, peer);
    printf("  one process:        read %8.2f   write %8.2f\n", one_read, one_write);
    printf("  imported object:    read %8.2f   write %8.2f   (%.1f%% / %.1f%% of one process)\n", imp_read,
           imp_write, 100 * imp_read / one_read, 100 * imp_write / one_write);
    if (drv_read > 0)
        printf("  driver cuMemcpyPeerAsync, cuMemAlloc buffers: 0->1 %8.2f   1->0 %8.2f   (one process: %.1f%% / %.1f%% of it)\n",
               drv_read, drv_write, 100 * one_read / drv_read, 100 * one_write / drv_write);
    else if (kind == UVM_BACKEND_CUDA && gpus > 1)
        printf("  driver cuMemcpyPeerAsync: not measured (a driver without it, or a step refused)\n");
    printf("the other way (GPU 0's copy engine, an object of GPU %u), GB/s:\n", peer);
    printf("  one process:        read %8.2f   write %8.2f\n", rev_read, rev_write);
    printf("  imported from GPU %u's process: read %8.2f   write %8.2f   (%.1f%% / %.1f%% of one process)\n", peer,
           back_read, back_write, 100 * back_read / rev_read, 100 * back_write / rev_write);
    printf("budgets and OOM reports per GPU (above): %s\n", gpus < 2 ? "one GPU: not run" : budgets_ok ? "ok" : "FAILED");
    printf("export + import + map on GPU %u, medians of %d: 2 MiB %.1f us, %llu MiB %.1f us\n", peer, reps,
           latency[0] * 1e6, (unsigned long long)(sizes[1] / MiB), latency[1] * 1e6);
    printf("ring across processes: %llu messages of %llu KiB in %llu slots: %.0f messages/s, %.2f GB/s, %llu wrong\n",
           (unsigned long long)messages, (unsigned long long)slot_kib, (unsigned long long)slots,
           (double)messages / ring_s, (double)(messages * slot) / ring_s / 1e9, (unsigned long long)wrong);
    printf("%s\n", failures ? "FAILED" : "ok: every check passed");
    return failures ? 1 : 0;
}
