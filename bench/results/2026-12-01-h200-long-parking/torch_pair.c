/* PyTorch's calls into the library (uvm_torch_malloc + uvm_torch_free) in a
 * loop, for callgrind on the stand-in driver:
 *   torch_pair PAIRS SIZE [ALTERNATE]
 * ALTERNATE 1: every other request is SIZE + 2 MiB, so that no parked
 * object fits the next one (the long miss path). Instructions per pair: the
 * difference between runs of N and 2N pairs, over N. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
void *uvm_torch_malloc(ssize_t size, int device, void *stream);
void uvm_torch_free(void *ptr, size_t size, int device, void *stream);
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    size_t size = argc > 2 ? strtoull(argv[2], 0, 0) : (1 << 20);
    int alternate = argc > 3 && atoi(argv[3]) != 0;
    void *keep = uvm_torch_malloc(4096, 0, 0);
    for (long i = 0; i < n; ++i) {
        size_t sz = size + (alternate ? (size_t)(i & 1) * 2097152 : 0);
        void *p = uvm_torch_malloc(sz, 0, 0);
        if (!p) { fprintf(stderr, "alloc failed at %ld\n", i); return 1; }
        uvm_torch_free(p, sz, 0, 0);
    }
    uvm_torch_free(keep, 4096, 0, 0);
    return 0;
}
