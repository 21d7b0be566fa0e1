#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
void *uvm_torch_malloc(ssize_t size, int device, void *stream);
void uvm_torch_free(void *ptr, size_t size, int device, void *stream);
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    size_t size = argc > 2 ? strtoull(argv[2], 0, 0) : (1 << 20);
    void *keep = uvm_torch_malloc(4096, 0, 0);
    for (long i = 0; i < n; ++i) {
        size_t sz = size + (i & 1) * 2097152; void *p = uvm_torch_malloc(sz, 0, 0);
        if (!p) { fprintf(stderr, "alloc failed at %ld\n", i); return 1; }
        uvm_torch_free(p, sz, 0, 0);
    }
    uvm_torch_free(keep, 4096, 0, 0);
    return 0;
}
