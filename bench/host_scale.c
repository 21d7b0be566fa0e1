/*
 * host_scale: what the host itself gives N threads of private work, the
 * control for pair_ab's thread figures (bench/results/2026-11-26-h200-runs-clients).
 * Each thread runs steps of its own (nothing shared): "plain" one dependent
 * multiply chain, "xchg" the same plus one locked exchange on a cache line of
 * its own (as a spin lock taken uncontended), "wide" eight chains at once
 * (more of the core's units busy, as the library's calls keep them). Threads
 * are released together by a barrier; the figure is wall time over the steps
 * of one thread, so with no host limit it stays flat from 1 to N threads.
 *
 *   gcc -O2 bench/host_scale.c -o host_scale -lpthread && ./host_scale
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static pthread_barrier_t bar;
static long steps = 2000000;
static int mode;
struct own_line { volatile long v; char pad[120]; };  /* one per thread, lines apart */
static struct own_line slots[64];
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
static void *run(void *arg) {
    long id = (long)arg; unsigned long x = id + 1;
    pthread_barrier_wait(&bar);
    for (long i = 0; i < steps; ++i) {
        if (mode == 2) {
            unsigned long y[8] = {x, x + 1, x + 2, x + 3, x + 4, x + 5, x + 6, x + 7};
            for (int k = 0; k < 40; ++k)
                for (int j = 0; j < 8; ++j) y[j] = y[j] * 6364136223846793005ul + 1442695040888963407ul;
            x = y[0] ^ y[1] ^ y[2] ^ y[3] ^ y[4] ^ y[5] ^ y[6] ^ y[7];
            continue;
        }
        for (int k = 0; k < 40; ++k) x = x * 6364136223846793005ul + 1442695040888963407ul;
        if (mode) __atomic_exchange_n(&slots[id].v, (long)x, __ATOMIC_ACQUIRE);
    }
    slots[id].v = (long)x;
    pthread_barrier_wait(&bar);
    return NULL;
}
int main(void) {
    for (mode = 0; mode < 3; ++mode)
        for (int t = 1; t <= 16; t *= 2) {
            pthread_t ids[16];
            pthread_barrier_init(&bar, NULL, t + 1);
            for (long i = 0; i < t; ++i) pthread_create(&ids[i], NULL, run, (void *)i);
            pthread_barrier_wait(&bar); double t0 = now(); pthread_barrier_wait(&bar);
            double ns = (now() - t0) / steps;
            for (int i = 0; i < t; ++i) pthread_join(ids[i], NULL);
            printf("%s threads %2d: %7.2f ns per step\n", mode == 2 ? "wide " : mode ? "xchg " : "plain", t, ns);
            pthread_barrier_destroy(&bar);
        }
    return 0;
}
