#!/usr/bin/env bash
# Device call 1 of 2026-12-02's tenth session: the CUDA suite with stitched
# long objects on (UVM_STITCH=1 unless set), then in the same session the
# benchmarks of issue 39's targets that are not training runs: the replays of
# the committed traces through the PyTorch allocator's calls against PyTorch's
# caching allocator and cudaMallocAsync, and the held pair against
# cudaMallocAsync's. Google Benchmark comes from .bench-dep (tools/gpu_check.sh).
#
# The suite: each test binary's tests in one process (the sim backend's
# parameters left out: CI runs them), then every test that failed there run
# again alone through ctest, then the tests that are not GoogleTest's. A test
# that fails in one process and passes alone is listed as such.
set -u
cd "$(dirname "$0")/../../.."
. tools/gpu_common.sh
export NCCL_NVLS_ENABLE=0 UVM_STITCH=${UVM_STITCH-1}
out=${OUT:-gpu-logs}; mkdir -p "$out"
t0=$(date +%s)
since() { echo "$(( $(date +%s) - t0 )) s"; }
gpu_device_info "$out/device.txt"
torch=(); tdir=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))' 2>/dev/null) && torch=(-DUVM_TORCH_DIR="$tdir")
gpu_build build-gpu "$out/build.log" "${torch[@]}" || exit 1
echo "built: $(since)"
failed=()
for bin in test_uvm test_cuda test_cuda_capture test_cuda_faults test_share test_alloc_failure test_chunk test_mmu test_topo; do
  [ -x build-gpu/tests/$bin ] || { echo "$bin: not built"; continue; }
  timeout 300 build-gpu/tests/$bin --gtest_filter='-*/sim:*/sim_coherent' > "$out/suite_$bin.txt" 2>&1
  echo "$bin rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \] [0-9]|^\[  SKIPPED \] [0-9]' "$out/suite_$bin.txt" | tr '\n' ' ') $(since)"
  while read -r t; do failed+=("$t"); done < <(grep -E '^\[  FAILED  \] [A-Za-z]' "$out/suite_$bin.txt" | awk '{sub(/,$/, "", $4); print $4}' | sort -u)
done
for t in "${failed[@]}"; do
  re=$(printf '%s' "$t" | sed -e 's/[].*^$()+?{}|\\[]/\\&/g')
  (cd build-gpu && timeout 120 ctest -j1 --output-on-failure -R "^$re( |\$)") > "$out/alone.txt.tmp" 2>&1
  echo "alone: $t: $(grep -E 'tests passed|tests failed' "$out/alone.txt.tmp")"; cat "$out/alone.txt.tmp" >> "$out/suite_alone.txt"
done
rm -f "$out/alone.txt.tmp"
(cd build-gpu && timeout 200 ctest -j1 --output-on-failure \
   -R '^(c_api|example_tour|example_share_peer|python_uvm|python_integrations|python_torch_gpu|python_torch_ext_compiles|soak_sim_short)$') \
   > "$out/suite_others.txt" 2>&1
echo "others: $(grep -E 'tests passed|tests failed' "$out/suite_others.txt") $(since)"
grep -E '\(Failed\)|\(Timeout\)' "$out/suite_others.txt"

# Replays: ns per op and held at peak over live; five committed traces.
{ date -u
  echo "== the library through the PyTorch allocator's calls (replay_torch_path), UVM_STITCH=$UVM_STITCH"
  UVM_BACKEND=cuda build-gpu/bench/bench_replay --benchmark_filter='^replay_torch_path' 2>&1 | grep -E '^replay|ERROR'
  echo "== PyTorch's caching allocator (bench_torch torch_replay)"
  build-gpu/bench/bench_torch --benchmark_filter='torch_replay' 2>&1 | grep -E '^torch|ERROR'
  echo "== cudaMallocAsync (driver_async_replay)"
  build-gpu/bench/bench_replay --benchmark_filter='driver_async_replay' 2>&1 | grep -E '^driver|ERROR'
  echo "== the library again (replay_torch_path)"
  UVM_BACKEND=cuda build-gpu/bench/bench_replay --benchmark_filter='^replay_torch_path' 2>&1 | grep -E '^replay|ERROR'
  echo "== PyTorch again"
  build-gpu/bench/bench_torch --benchmark_filter='torch_replay' 2>&1 | grep -E '^torch|ERROR'
} > "$out/replays.txt" 2>&1
echo "replays: $(since)"

# The held pair (bench/pair_ab.c), one thread pinned, and a budgeted client's,
# against cudaMallocAsync's pair in the same session; two rounds.
gcc -O2 -std=c11 -Iinclude bench/pair_ab.c -o build-gpu/pair_ab -Lbuild-gpu -luvm -lpthread
{ date -u
  for round in 1 2; do
    echo "== round $round: one thread (taskset -c 3)"; LD_LIBRARY_PATH=build-gpu UVM_BACKEND=cuda taskset -c 3 build-gpu/pair_ab 200000 15
    echo "== round $round: a budgeted client"; PAIR_CLIENT=1 LD_LIBRARY_PATH=build-gpu UVM_BACKEND=cuda taskset -c 3 build-gpu/pair_ab 200000 15
    echo "== round $round: cudaMallocAsync's pair (bench_cuda driver_alloc_async)"
    taskset -c 3 build-gpu/bench/bench_cuda --benchmark_filter='driver_alloc_async' --benchmark_repetitions=5 \
      --benchmark_report_aggregates_only=true 2>&1 | grep -E 'median|ERROR'
  done
} > "$out/pair.txt" 2>&1
echo "pair: $(since)"
grep -vE '^\s*$' "$out/pair.txt" | head -40
cat "$out/replays.txt"
