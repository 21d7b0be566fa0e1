#!/usr/bin/env bash
# On a GPU machine: the replays of the committed traces (bench_replay
# replay/<trace>/mode:0 and mode:2, and replay_torch_path: the PyTorch
# allocator's calls) A/B against a base tree in .ab-base/ (as
# tools/pair_ab.sh: `git archive <base> | tar -x -C .ab-base`, its commit in
# .ab-base/COMMIT, Google Benchmark carried in .bench-dep/), interleaved A B
# per round in one session; then cudaMallocAsync's replay (driver_async_replay)
# and, where PyTorch is installed, its caching allocator's (bench_torch
# torch_replay), so that every ratio is within one run. Builds this tree in
# build-gpu where its bench_replay is not built. Logs to $OUT/replay_ab.txt.
set -u; export NCCL_NVLS_ENABLE=0
out=${OUT:-gpu-logs}; mkdir -p "$out"; log=$out/replay_ab.txt
rounds=${ROUNDS:-2}
[ -d .bench-dep ] || { echo "no .bench-dep (Google Benchmark): see tools/gpu_check.sh" >> "$log"; exit 1; }
torch=(); tdir=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))' 2>/dev/null) && torch=(-DUVM_TORCH_DIR="$tdir")
cfg=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DUVM_BENCHMARK_ROOT="$PWD/.bench-dep")
if [ ! -x build-gpu/bench/bench_replay ]; then
  cmake -S . -B build-gpu "${cfg[@]}" "${torch[@]}" >/dev/null &&
    cmake --build build-gpu -j "$(nproc)" --target bench_replay >/dev/null || { echo "build failed" >> "$log"; exit 1; }
fi
[ ${#torch[@]} -gt 0 ] && cmake --build build-gpu -j "$(nproc)" --target bench_torch >/dev/null 2>&1
# A folder of its own: tools/pair_ab.sh configures .ab-base/build without the benchmarks.
(cd .ab-base && cmake -S . -B build-bench "${cfg[@]}" -DUVM_BUILD_TESTS=OFF -DUVM_BUILD_BENCH=ON >/dev/null &&
   cmake --build build-bench -j "$(nproc)" --target bench_replay >/dev/null) || { echo "base build failed" >> "$log"; exit 1; }
filter='^replay/trace:./mode:[02]|^replay_torch_path'
{
  echo "# replays, CUDA backend: A = $(cat .ab-base/COMMIT 2>/dev/null || echo base), B = this tree; interleaved A B per round, $rounds rounds"
  date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  for round in $(seq 1 "$rounds"); do
    for s in A B; do
      bin=$([ "$s" = A ] && echo .ab-base/build-bench/bench/bench_replay || echo build-gpu/bench/bench_replay)
      echo "== $s round $round"
      UVM_BACKEND=cuda "$bin" --benchmark_filter="$filter" 2>&1 | grep -E "^replay|ERROR"
    done
  done
  echo "== cudaMallocAsync's replay (driver_async_replay), same session"
  build-gpu/bench/bench_replay --benchmark_filter='driver_async_replay' 2>&1 | grep -E "^driver|ERROR"
  if [ -x build-gpu/bench/bench_torch ]; then
    echo "== PyTorch's caching allocator (bench_torch torch_replay), same session"
    build-gpu/bench/bench_torch --benchmark_filter='torch_replay' 2>&1 | grep -E "^torch|ERROR"
  fi
} >> "$log" 2>&1
cat "$log"
