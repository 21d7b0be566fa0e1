#!/usr/bin/env bash
# On a GPU machine: the suite (tools/gpu_check.sh, no benchmarks) and the held
# vidmem pair A/B against a base tree in .ab-base/ (git archive <base> there,
# carried to the device), interleaved in one run. Logs to $OUT.
set -u; export NCCL_NVLS_ENABLE=0
NO_BENCH=1 OUT=$OUT tools/gpu_check.sh > $OUT/gpu_check.txt 2>&1; echo "gpu_check rc=$?" >> $OUT/gpu_check.txt
(cd .ab-base && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DUVM_BUILD_TESTS=OFF -DUVM_BUILD_BENCH=OFF >/dev/null && cmake --build build -j16 --target uvm >/dev/null) || echo "base build failed" >> $OUT/pair_ab.txt
gcc -O2 -std=c11 -Iinclude bench/pair_ab.c -o pair_ab -Lbuild-gpu -luvm
{ echo "# held vidmem alloc+free pair, CUDA backend, ns: chunk median min (15 reps x 200000 pairs); A = dae3be7 (base), B = this tree; interleaved A B A B"; date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader;
for round in 1 2; do for side in A B; do lib=$([ $side = A ] && echo .ab-base/build || echo build-gpu); echo "== $side round $round"; LD_LIBRARY_PATH=$lib UVM_BACKEND=cuda ./pair_ab 200000 15; done; done; } >> $OUT/pair_ab.txt 2>&1
cat $OUT/gpu_check.txt; cat $OUT/pair_ab.txt; nvidia-smi --query-gpu=memory.used --format=csv
