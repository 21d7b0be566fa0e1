/*
 * pair_ab: the held vidmem alloc+free pair, for A/B runs of two builds of
 * the library in one session (bench/results/2026-11-24-h100-house/). Built
 * against the public header and linked to whichever libuvm.so the loader
 * finds first (LD_LIBRARY_PATH), so one binary times both builds; under
 * `valgrind --tool=callgrind` it counts instructions per pair.
 *
 *   pair_ab [pairs-per-rep] [reps] [4K|64K|2M]    prints: chunk  median-ns  min-ns
 *
 * PAIR_CLIENT=1: the objects belong to a client with a budget (1 TiB, never
 * reached), so the budget's charge and release are on the pair.
 * PAIR_CLIENT=ab: both in one process, one thread, the reps alternating
 * (plain, budgeted, plain, ...): prints the plain and the budgeted medians
 * and the median of the reps' ratios. What a process's placement does to a
 * pair (which moved the two in separate processes by up to 1.6x) then
 * falls on both alike.
 * PAIR_STREAM=1: the runtimes' pair instead, uvm_mem_alloc_gpu and
 * uvm_mem_free_async on one stream (bench_stream's runtime_pair): an object
 * kept whole by its stream and taken back (stream/parked_objects.h).
 * PAIR_THREADS=N: N threads run pairs at once, each its own; the figure is
 * wall time over all threads' pairs (ns per pair of the whole process), so
 * the rate over one thread's is the scaling. The threads are made once and
 * released together by a barrier for each rep, so that neither their
 * creation and exit nor a late start is in the time.
 *
 * Instructions per pair: the difference between two callgrind runs of one
 * chunk size with N and 2N pairs, over N (set-up and teardown cancel out).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>

#include <uvm/uvm.h>

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct run {
    uvm_manager_t *mgr;
    uvm_stream_t *stream;        /* PAIR_STREAM: the runtimes' pair on it */
    uvm_mem_alloc_params_t p;
    long pairs;
    int failed;
    int reps;                    /* threaded runs: reps between the barriers */
    pthread_barrier_t *barrier;  /* threaded runs: start and end of each rep */
};

/* A run of `pairs` pairs of `p`, on `stream` where not NULL. */
static void init_run(struct run *r, uvm_manager_t *mgr, uvm_stream_t *stream, const uvm_mem_alloc_params_t *p,
                     long pairs) {
    memset(r, 0, sizeof(*r));
    r->mgr = mgr;
    r->stream = stream;
    r->p = *p;
    r->pairs = pairs;
}

static void run_pairs(struct run *r) {
    if (r->stream) {
        for (long i = 0; i < r->pairs; ++i) {
            uvm_mem_t *m;
            uint64_t address;
            if (uvm_mem_alloc_gpu(r->mgr, &r->p, r->stream, &m, &address) != UVM_OK ||
                uvm_mem_free_async(r->mgr, m, r->stream) != UVM_OK) {
                r->failed = 1;
                break;
            }
        }
        return;
    }
    for (long i = 0; i < r->pairs; ++i) {
        uvm_mem_t *m;
        if (uvm_mem_alloc(r->mgr, &r->p, &m) != UVM_OK || uvm_mem_free(r->mgr, m) != UVM_OK) {
            r->failed = 1;
            break;
        }
    }
}

static void *pairs_thread(void *arg) {
    struct run *r = (struct run *)arg;
    for (int rep = 0; rep < r->reps; ++rep) {
        pthread_barrier_wait(r->barrier);
        run_pairs(r);
        pthread_barrier_wait(r->barrier);
    }
    return NULL;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp);
    return v[n / 2];
}

/* PAIR_CLIENT=ab: `p` plain, then owned by `client`, rep by rep. */
static void ab_pairs(uvm_manager_t *mgr, uvm_stream_t *stream, uvm_mem_alloc_params_t p, uvm_client_t *client,
                     long pairs, int reps, const char *name) {
    struct run r[2];
    for (int k = 0; k < 2; ++k) {
        p.client = k ? client : NULL;
        init_run(&r[k], mgr, stream, &p, 1000);
        run_pairs(&r[k]);  /* warm */
        r[k].pairs = pairs;
    }
    double *ns = calloc((size_t)reps * 3, sizeof(double));
    double *plain = ns, *budgeted = ns + reps, *ratio = ns + 2 * reps;
    for (int i = 0; i < reps; ++i) {
        for (int k = 0; k < 2; ++k) {
            const double t0 = now_ns();
            run_pairs(&r[k]);
            (k ? budgeted : plain)[i] = (now_ns() - t0) / (double)pairs;
        }
        ratio[i] = budgeted[i] / plain[i];
    }
    if (r[0].failed || r[1].failed) {
        fprintf(stderr, "pair failed\n");
        exit(1);
    }
    printf("%-4s %8.1f %8.1f %8.3f\n", name, median(plain, reps), median(budgeted, reps), median(ratio, reps));
    free(ns);
}

int main(int argc, char **argv) {
    const long pairs = argc > 1 ? atol(argv[1]) : 200000;
    const int reps = argc > 2 ? atoi(argv[2]) : 15;
    uvm_manager_t *mgr = NULL;
    uvm_status_t s = uvm_manager_create(NULL, &mgr);
    if (s != UVM_OK) {
        fprintf(stderr, "manager: %s\n", uvm_status_string(s));
        return 1;
    }
    uvm_backend_kind_t kind;
    uvm_manager_backend(mgr, &kind);
    const char *client_env = getenv("PAIR_CLIENT");
    const char *threads_env = getenv("PAIR_THREADS");
    const char *stream_env = getenv("PAIR_STREAM");
    const int threads = threads_env ? atoi(threads_env) : 1;
    if (threads < 1 || threads > 256) {
        fprintf(stderr, "PAIR_THREADS: 1 to 256\n");
        return 1;
    }
    uvm_client_t *client = NULL;
    const int ab = client_env && !strcmp(client_env, "ab");
    if (ab && threads > 1) {
        fprintf(stderr, "PAIR_CLIENT=ab: one thread\n");
        return 1;
    }
    if (client_env && (client_env[0] == '1' || ab)) {
        if (uvm_client_create(mgr, "pair", &client) != UVM_OK ||
            uvm_client_set_budget(mgr, client, 0, 1ull << 40) != UVM_OK) {
            fprintf(stderr, "client failed\n");
            return 1;
        }
    }
    const int on_stream = stream_env && stream_env[0] == '1';
    if (on_stream && threads > 1) {
        fprintf(stderr, "PAIR_STREAM: one thread\n");
        return 1;
    }
    uvm_stream_t *stream = NULL;
    if (on_stream && uvm_stream_create(mgr, 0, NULL, &stream) != UVM_OK) {
        fprintf(stderr, "stream failed\n");
        return 1;
    }
    printf("backend %s%s%s, %d thread%s\n", kind == UVM_BACKEND_CUDA ? "cuda" : "sim",
           ab ? ", plain and budgeted alternating (median plain, budgeted, ratio)"
              : client ? ", a client with a budget" : "", stream ? ", the runtimes' pair on a stream" : "", threads,
           threads > 1 ? "s" : "");
    const uint64_t chunks[3] = {UVM_PAGE_SIZE_4K, UVM_PAGE_SIZE_64K, UVM_PAGE_SIZE_2M};
    const char *only = argc > 3 ? argv[3] : NULL;
    const char *names[3] = {"4K", "64K", "2M"};
    for (int c = 0; c < 3; ++c) {
        if (only && strcmp(only, names[c]) != 0)
            continue;
        uvm_mem_alloc_params_t p;
        memset(&p, 0, sizeof(p));
        p.backing = UVM_BACKING_VIDMEM;
        p.size = chunks[c];
        p.chunk_size = chunks[c];
        p.client = ab ? NULL : client;
        if (ab) {
            ab_pairs(mgr, stream, p, client, pairs, reps, names[c]);
            continue;
        }
        /* Warm: the memory is held by the PMM before timing starts. */
        struct run warm;
        init_run(&warm, mgr, stream, &p, 1000);
        run_pairs(&warm);
        if (warm.failed) {
            fprintf(stderr, "warm-up failed\n");
            return 1;
        }
        double *ns = calloc((size_t)reps, sizeof(double));
        struct run runs[256];
        pthread_t ids[256];
        pthread_barrier_t barrier;
        for (int t = 0; t < threads; ++t) {
            init_run(&runs[t], mgr, stream, &p, pairs);
            runs[t].reps = reps;
            runs[t].barrier = &barrier;
        }
        if (threads > 1) {
            pthread_barrier_init(&barrier, NULL, (unsigned)threads + 1);
            for (int t = 0; t < threads; ++t)
                if (pthread_create(&ids[t], NULL, pairs_thread, &runs[t]) != 0) {
                    fprintf(stderr, "pthread_create failed\n");
                    return 1;
                }
        }
        for (int r = 0; r < reps; ++r) {
            double t0;
            if (threads == 1) {
                t0 = now_ns();
                run_pairs(&runs[0]);
            } else {
                pthread_barrier_wait(&barrier);  /* all start */
                t0 = now_ns();
                pthread_barrier_wait(&barrier);  /* all done */
            }
            ns[r] = (now_ns() - t0) / ((double)pairs * threads);
        }
        if (threads > 1) {
            for (int t = 0; t < threads; ++t)
                pthread_join(ids[t], NULL);
            pthread_barrier_destroy(&barrier);
        }
        for (int t = 0; t < threads; ++t)
            if (runs[t].failed) {
                fprintf(stderr, "pair failed\n");
                return 1;
            }
        const double med = median(ns, reps);  /* sorts: ns[0] is the fastest */
        printf("%-4s %8.1f %8.1f\n", names[c], med, ns[0]);
        free(ns);
    }
    if (stream && uvm_stream_destroy(mgr, stream) != UVM_OK)
        return 1;
    if (client && uvm_client_destroy(mgr, client) != UVM_OK)
        return 1;
    return uvm_manager_destroy(mgr) == UVM_OK ? 0 : 1;
}
