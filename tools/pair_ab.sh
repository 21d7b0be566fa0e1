#!/usr/bin/env bash
# On a GPU machine: the held vidmem alloc+free pair, A/B against a base tree
# in .ab-base/ (`git archive <base> | tar -x -C .ab-base`, its commit in
# .ab-base/COMMIT, carried to the device), interleaved A B A B in one run,
# pinned to one CPU: one thread at 4K, 64K and 2M; a budgeted client's pair;
# 16 threads at once against one. Then cudaMallocAsync's pair (bench_cuda's
# driver_alloc_async, where Google Benchmark is carried in .bench-dep/) in
# the same session. Builds this tree in build-gpu where it is not built.
# Logs to $OUT/pair_ab.txt.
set -u; export NCCL_NVLS_ENABLE=0
out=${OUT:-gpu-logs}; mkdir -p "$out"; log=$out/pair_ab.txt
rounds=${ROUNDS:-4}
bench_root=(); [ -d .bench-dep ] && bench_root=(-DUVM_BENCHMARK_ROOT="$PWD/.bench-dep")
if [ ! -f build-gpu/libuvm.so ]; then
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release "${bench_root[@]}" >/dev/null &&
    cmake --build build-gpu -j "$(nproc)" --target uvm bench_cuda >/dev/null || { echo "build failed" >> "$log"; exit 1; }
fi
(cd .ab-base && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DUVM_BUILD_TESTS=OFF -DUVM_BUILD_BENCH=OFF >/dev/null &&
   cmake --build build -j "$(nproc)" --target uvm >/dev/null) || { echo "base build failed" >> "$log"; exit 1; }
gcc -O2 -std=c11 -Iinclude bench/pair_ab.c -o pair_ab -Lbuild-gpu -luvm -lpthread || exit 1
cpu=${CPU:-3}
side() {  # side A|B, then the pair_ab arguments
  local lib; lib=$([ "$1" = A ] && echo .ab-base/build || echo build-gpu); shift
  LD_LIBRARY_PATH=$lib UVM_BACKEND=cuda "$@"
}
{
  echo "# held vidmem alloc+free pair, CUDA backend, ns per pair: chunk median min (reps of pairs)"
  echo "# A = $(cat .ab-base/COMMIT 2>/dev/null || echo base), B = this tree; interleaved A B per round, $rounds rounds"
  date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  for round in $(seq 1 "$rounds"); do for s in A B; do
    echo "== $s round $round: one thread (taskset -c $cpu)"; side $s taskset -c "$cpu" ./pair_ab 200000 15
    echo "== $s round $round: a budgeted client (taskset -c $cpu)"; PAIR_CLIENT=1 side $s taskset -c "$cpu" ./pair_ab 200000 15
    echo "== $s round $round: 1 thread, unpinned, 64K"; side $s ./pair_ab 200000 9 64K
    echo "== $s round $round: 16 threads, 64K"; PAIR_THREADS=16 side $s ./pair_ab 50000 9 64K
  done; done
  if [ -x build-gpu/bench/bench_cuda ]; then
    echo "== cudaMallocAsync's pair (bench_cuda driver_alloc_async), same session"
    ./build-gpu/bench/bench_cuda --benchmark_filter='driver_alloc_async' --benchmark_repetitions=5 \
      --benchmark_report_aggregates_only=true 2>&1 | grep -E "median|min|ERROR"
  fi
} >> "$log" 2>&1
cat "$log"
