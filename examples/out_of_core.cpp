/*
 * out_of_core.cpp - the second main job: a working set three times the GPU's
 * memory, streamed through it with eviction.
 *
 * It writes every object of the working set once (each allocation that finds
 * the GPU full evicts the coldest objects to host memory), then reads every
 * object back and checks every byte (each read brings its object back,
 * evicting others), and prints the evictions, restores and the rate of each
 * pass. Exit status 0 only when every byte came back.
 *
 *   out_of_core [--gpu-mib N] [--times T] [--object-mib M]   (out_of_core --help)
 *
 * The GPU memory it works in is N MiB (default 256): on sim, a simulated GPU
 * of that size; on a real GPU, what is left once a pinned ballast object holds
 * the rest (so a 3x working set fits this machine's host memory). T is the
 * working set over N (default 3), M the size of each object (default 16).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <uvm/uvm.h>

#include "tools/cli.h"

#define CHECK(call)                                                                           \
    do {                                                                                      \
        uvm_status_t s_ = (call);                                                             \
        if (s_ != UVM_OK) {                                                                   \
            fprintf(stderr, "FAILED: %s -> %s (line %d)\n", #call, uvm_status_string(s_), __LINE__); \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Word i of object k. */
static uint64_t word(uint64_t k, uint64_t i) { return (k << 40) ^ (i * 0x9E3779B97F4A7C15ull); }

int main(int argc, char **argv) {
    uint64_t gpu_mib = 256, times = 3, object_mib = 16;
    CLI::App app{"The out-of-core job: a working set several times the GPU's memory, written once and read back "
                 "through eviction, every byte checked.",
                 "out_of_core"};
    uvm::cli::set_conventions(app);
    const CLI::Validator even([](std::string &v) { return std::strtoull(v.c_str(), NULL, 10) % 2 ? "'" + v + "' is odd" : ""; }, "");
    app.add_option("--gpu-mib", gpu_mib, "GPU memory for the job: a simulated GPU of that size, or what a pinned "
                                         "ballast leaves of a real one (even, at least 8)")
        ->type_name("N")
        ->check(uvm::cli::whole_number(8, 1ull << 30))
        ->check(even)
        ->capture_default_str();
    app.add_option("--times", times, "The working set over the GPU memory")
        ->type_name("T")
        ->check(uvm::cli::whole_number(1, 1024))
        ->capture_default_str();
    app.add_option("--object-mib", object_mib, "Each object's size (even, at most half the GPU's)")
        ->type_name("M")
        ->check(uvm::cli::whole_number(2, 1ull << 29))
        ->check(even)
        ->capture_default_str();
    const int refused = uvm::cli::parse(app, argc, argv);
    if (refused >= 0)
        return refused;
    if (object_mib > gpu_mib / 2)
        return uvm::cli::refuse(app, "--object-mib " + std::to_string(object_mib) + " is more than half of --gpu-mib " +
                                         std::to_string(gpu_mib));
    const uint64_t MiB = 1ull << 20, object = object_mib * MiB;
    uvm_manager_params_t params;
    memset(&params, 0, sizeof(params));
    params.sim.gpu_count = 1;
    params.sim.vidmem_size = gpu_mib * MiB;
    uvm_manager_t *mgr;
    CHECK(uvm_manager_create(&params, &mgr));
    uvm_backend_kind_t kind;
    CHECK(uvm_manager_backend(mgr, &kind));
    uvm_gpu_info_t gi;
    CHECK(uvm_gpu_info(mgr, 0, &gi));

    /* On a real GPU, a pinned ballast leaves the job gpu_mib of it. */
    uvm_mem_t *ballast = NULL;
    if (kind == UVM_BACKEND_CUDA) {
        if (gi.memory_free < (gpu_mib + 512) * MiB) {
            fprintf(stderr, "the GPU has only %llu MiB free\n", (unsigned long long)(gi.memory_free / MiB));
            return 1;
        }
        uvm_mem_alloc_params_t p;
        memset(&p, 0, sizeof(p));
        p.backing = UVM_BACKING_VIDMEM;
        p.size = (gi.memory_free / MiB - gpu_mib) * MiB;
        p.size -= p.size % (2 * MiB);
        CHECK(uvm_mem_alloc(mgr, &p, &ballast));
    }
    const uint64_t count = gpu_mib * times / object_mib;
    printf("%s: %s, %llu MiB of GPU memory for the job, working set %llu x %llu MiB = %llu MiB (%llux)\n",
           kind == UVM_BACKEND_CUDA ? "cuda" : "sim", gi.name, (unsigned long long)gpu_mib,
           (unsigned long long)count, (unsigned long long)object_mib,
           (unsigned long long)(count * object_mib), (unsigned long long)times);

    /* A host staging object the copy engine reaches. */
    uvm_mem_alloc_params_t sp;
    memset(&sp, 0, sizeof(sp));
    sp.size = object;
    uvm_mem_t *staging;
    CHECK(uvm_mem_alloc(mgr, &sp, &staging));
    CHECK(uvm_mem_map_gpu_phys(mgr, staging, 0));
    CHECK(uvm_mem_map_cpu_kernel(mgr, staging));
    uint64_t *host;
    CHECK(uvm_mem_cpu_kernel_address(mgr, staging, 0, (void **)&host));

    uvm_mem_t **objs = static_cast<uvm_mem_t **>(calloc(count, sizeof(*objs)));
    if (!objs)
        return 1;
    uvm_mem_alloc_params_t op;
    memset(&op, 0, sizeof(op));
    op.size = object;
    op.backing = UVM_BACKING_VIDMEM;
    op.chunk_size = UVM_PAGE_SIZE_2M;
    op.flags = UVM_MEM_EVICTABLE;

    uvm_gpu_stats_t s0, s1, s2;
    CHECK(uvm_gpu_stats(mgr, 0, &s0));
    double fill = 0, start = now();
    for (uint64_t k = 0; k < count; ++k) {
        double t = now();
        for (uint64_t i = 0; i < object / 8; ++i)
            host[i] = word(k, i);
        fill += now() - t;
        CHECK(uvm_mem_alloc(mgr, &op, &objs[k]));
        uvm_mem_span_t d = {objs[k], 0, UVM_VIEW_PHYSICAL}, s = {staging, 0, UVM_VIEW_PHYSICAL};
        CHECK(uvm_mem_copy(mgr, 0, &d, &s, object));
    }
    const double write_s = now() - start - fill;
    CHECK(uvm_gpu_stats(mgr, 0, &s1));

    uint64_t wrong = 0;
    double check = 0;
    start = now();
    for (uint64_t k = 0; k < count; ++k) {
        uvm_mem_span_t d = {staging, 0, UVM_VIEW_PHYSICAL}, s = {objs[k], 0, UVM_VIEW_PHYSICAL};
        CHECK(uvm_mem_copy(mgr, 0, &d, &s, object));  /* brings it back, evicting others */
        double t = now();
        for (uint64_t i = 0; i < object / 8; ++i)
            wrong += host[i] != word(k, i);
        check += now() - t;
    }
    const double read_s = now() - start - check;
    CHECK(uvm_gpu_stats(mgr, 0, &s2));

    const double set_gb = (double)(count * object) / 1e9;
    printf("write pass: %.2f s, %.2f GB/s of working set; %llu evictions (%.0f MiB out)\n", write_s,
           set_gb / write_s, (unsigned long long)(s1.evictions - s0.evictions),
           (double)(s1.bytes_evicted - s0.bytes_evicted) / MiB);
    printf("read pass:  %.2f s, %.2f GB/s of working set; %llu restores (%.0f MiB in), %llu evictions (%.0f MiB out)\n",
           read_s, set_gb / read_s, (unsigned long long)(s2.restores - s1.restores),
           (double)(s2.bytes_restored - s1.bytes_restored) / MiB,
           (unsigned long long)(s2.evictions - s1.evictions), (double)(s2.bytes_evicted - s1.bytes_evicted) / MiB);
    const double moved = (double)(s2.bytes_evicted - s0.bytes_evicted + s2.bytes_restored - s0.bytes_restored);
    printf("moved %.0f MiB between vidmem and host memory in %.2f s of passes: %.2f GB/s overall\n", moved / MiB,
           write_s + read_s, moved / 1e9 / (write_s + read_s));
    printf("%s: %llu wrong words in %llu MiB\n", wrong ? "FAILED" : "ok", (unsigned long long)wrong,
           (unsigned long long)(count * object_mib));

    for (uint64_t k = 0; k < count; ++k)
        CHECK(uvm_mem_free(mgr, objs[k]));
    free(objs);
    CHECK(uvm_mem_free(mgr, staging));
    if (ballast)
        CHECK(uvm_mem_free(mgr, ballast));
    CHECK(uvm_manager_destroy(mgr));
    return wrong ? 1 : 0;
}
