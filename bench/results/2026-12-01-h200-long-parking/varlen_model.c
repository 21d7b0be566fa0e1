/* A stand-in-driver model of the varlen workload's allocations (each step a
 * sequence length L: per layer four activations kept and a transient,
 * a logits tensor, then frees in reverse), through uvm_torch_malloc/free.
 * Built against build/libuvm_torch_alloc.so; run as README.md says. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
void *uvm_torch_malloc(ssize_t size, int device, void *stream);
void uvm_torch_free(void *ptr, size_t size, int device, void *stream);
/* A step of a transformer whose sequence length L changes every step:
   per layer a few activations of L*k bytes kept until the backward, a
   logits tensor of L*100 KiB, then frees in reverse (the backward). */
int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 20;
    int fixed = argc > 2 ? atoi(argv[2]) : 0;
    void *keep[256]; size_t ks[256];
    unsigned seed = 7;
    for (int s = 0; s < steps; ++s) {
        seed = seed * 1103515245u + 12345u;
        size_t L = fixed ? 1024 : 256 + (seed >> 8) % 768;
        int n = 0;
        for (int layer = 0; layer < 12; ++layer) {
            size_t sz[4] = {L * 12288, L * 49152, L * 12288, L * 1536 + 4096};
            for (int k = 0; k < 4; ++k) {
                ks[n] = sz[k];
                keep[n] = uvm_torch_malloc(sz[k], 0, 0);
                if (!keep[n]) { fprintf(stderr, "oom\n"); return 1; }
                /* a transient beside */
                void *t = uvm_torch_malloc(sz[k] / 2 + 65536, 0, 0);
                uvm_torch_free(t, 0, 0, 0);
                n++;
            }
        }
        ks[n] = L * 102400; keep[n] = uvm_torch_malloc(ks[n], 0, 0); n++;
        while (n--) uvm_torch_free(keep[n], ks[n], 0, 0);
    }
    return 0;
}
