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
 *      object both CPUs map.
 *
 *   share_peer [--mib N] [--reps R] [--max-mib M] [--slots S] [--slot-kib K] [--messages X]
 *
 * Exit status 0 only when every check passed. On sim (no GPU) it runs on two
 * simulated GPUs; the figures are then the simulator's, not a GPU's.
 */
#define _GNU_SOURCE
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
            fprintf(stderr, "%s: FAILED: %s -> %s (line %d)\n", role, #call, uvm_last_error_message(), \
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
    CHECK(uvm_mem_free(mgr, a));
    CHECK(uvm_mem_free(mgr, b));

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
    CHECK(uvm_manager_destroy(mgr));

    printf("peer copy, %llu MiB, medians of %d (GPU %u's copy engine, GB/s):\n", (unsigned long long)mib, reps, peer);
    printf("  one process:        read %8.2f   write %8.2f\n", one_read, one_write);
    printf("  imported object:    read %8.2f   write %8.2f   (%.1f%% / %.1f%% of one process)\n", imp_read,
           imp_write, 100 * imp_read / one_read, 100 * imp_write / one_write);
    printf("export + import + map on GPU %u, medians of %d: 2 MiB %.1f us, %llu MiB %.1f us\n", peer, reps,
           latency[0] * 1e6, (unsigned long long)(sizes[1] / MiB), latency[1] * 1e6);
    printf("ring across processes: %llu messages of %llu KiB in %llu slots: %.0f messages/s, %.2f GB/s, %llu wrong\n",
           (unsigned long long)messages, (unsigned long long)slot_kib, (unsigned long long)slots,
           (double)messages / ring_s, (double)(messages * slot) / ring_s / 1e9, (unsigned long long)wrong);
    printf("%s\n", failures ? "FAILED" : "ok: every check passed");
    return failures ? 1 : 0;
}
