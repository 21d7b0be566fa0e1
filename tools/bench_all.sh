#!/usr/bin/env bash
# Build and run every benchmark program on this machine, in one run, and write
# the results: raw Google Benchmark JSON per program and results.md, a table of
# medians and of ratios to the baselines measured in the same run.
#   tools/bench_all.sh [out-dir]     (default bench/results/<date>-<gpu>; REPS=10)
# On a GPU machine it also builds bench_runtime (CUDA runtime baselines, nvcc)
# and bench_torch (PyTorch's caching allocator) where they can be built.
# Google Benchmark may come from a prefix: UVM_BENCHMARK_ROOT=.bench-dep (see gpu_check.sh).
# BENCH_PROGRAMS="bench_alloc bench_map" runs some programs only (a run split over
# several commands into one folder); the table is made from every JSON file there.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
reps=${REPS:-10}
build=${BUILD_DIR:-build-bench}  # BUILD_DIR=build-gpu reuses the GPU check's build
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c |
       awk '{n=$1; $1=""; gsub(/^ +| +$/,""); gsub(/NVIDIA /,""); split($0,w," "); printf "%s%sx%s", sep, w[1], n; sep="+"}' |
       tr 'A-Z' 'a-z')
out=${1:-bench/results/$(date -u +%F)-${gpus:-sim}}
mkdir -p "$out"

opts=(-DCMAKE_BUILD_TYPE=Release -DUVM_BUILD_TESTS=OFF)
root=${UVM_BENCHMARK_ROOT:-}
[ -z "$root" ] && [ -d .bench-dep ] && root=$PWD/.bench-dep
[ -n "$root" ] && opts+=(-DUVM_BENCHMARK_ROOT="$root")
nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
[ -n "$nvcc" ] && [ -n "$gpus" ] && opts+=(-DUVM_BENCH_CUDA_RUNTIME=ON -DCMAKE_CUDA_COMPILER="$nvcc")
torch=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null || true)
if [ -n "$torch" ] && [ -n "$gpus" ]; then
  abi=$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
  opts+=(-DUVM_TORCH_DIR="$torch" -DUVM_TORCH_CXX11_ABI="$abi")
fi
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S . -B "$build" "${gen[@]}" "${opts[@]}" > "$out/build.log" 2>&1 &&
  cmake --build "$build" -j "$(nproc)" >> "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }

{
  echo "date: $(date -u '+%F %H:%M UTC')"
  echo "command: REPS=$reps tools/bench_all.sh $*"
  echo "host: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)," \
       "$(ls -d /sys/devices/system/node/node* 2>/dev/null | wc -l) NUMA node(s), THP $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version,pci.bus_id --format=csv,noheader 2>/dev/null |
    sed 's/^/gpu: /'
  [ -n "$torch" ] && echo "pytorch: $(python3 -c 'import torch; print(torch.__version__)')"
} >> "$out/device.txt"
nvidia-smi topo -m > "$out/nvidia-smi-topo.txt" 2>&1 || true
"$build"/uvm-tool topo > "$out/uvm-tool-topo.txt" 2>&1 || true

for b in ${BENCH_PROGRAMS:-bench_alloc bench_map bench_copy bench_replay bench_stream bench_evict bench_cuda bench_runtime bench_torch}; do
  [ -x "$build/bench/$b" ] || { echo "$b: not built here" >> "$out/device.txt"; continue; }
  echo "== $b"
  # PyTorch's allocator is a one-GPU measurement; each program gets a time limit
  # so that one stuck program cannot cost the rest of the run.
  env=(); [ "$b" = bench_torch ] && env=(CUDA_VISIBLE_DEVICES=0)
  env "${env[@]}" timeout "${BENCH_TIMEOUT:-300}" "$build"/bench/$b --benchmark_repetitions="$reps" \
      --benchmark_report_aggregates_only=true \
      --benchmark_out="$out/$b.json" --benchmark_out_format=json > "$out/$b.txt" 2>&1
  echo "$b: exit $?" >> "$out/device.txt"
  grep -E "ERROR" "$out/$b.txt" | head -5
done
python3 tools/bench_table.py "$out" > "$out/results.md" && cat "$out/results.md"
# One archive of the whole run, for machines that hand back few files.
tar -czf "$out.tar.gz" -C "$(dirname "$out")" "$(basename "$out")"
