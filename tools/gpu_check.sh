#!/usr/bin/env bash
# On a GPU machine: build with the CUDA backend, run the whole suite (one test
# at a time, so the device-memory leak checks see only their own test), the
# main job and the CUDA benchmark. Logs go to $OUT (or ./gpu-logs).
# Google Benchmark is not on the GPU machines: carry it in .bench-dep/ (ignored
# by git), made on a machine that has it:
#   mkdir -p .bench-dep/lib .bench-dep/include && cp -r /usr/include/benchmark .bench-dep/include/ &&
#   cp /usr/lib/x86_64-linux-gnu/libbenchmark.so.1.7.1 .bench-dep/lib/libbenchmark.so &&
#   cp .bench-dep/lib/libbenchmark.so .bench-dep/lib/libbenchmark.so.1debian
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-logs}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
. tools/gpu_common.sh
gpu_device_info "$out/device.txt"
gpu_build build-gpu "$out/build.log" || exit 1
(cd build-gpu && ctest -j1 --output-on-failure > "$out/ctest.log" 2>&1); rc=$?
grep -E "tests passed|Failed|\*\*\*" "$out/ctest.log" | tail -25
UVM_BACKEND=cuda ./build-gpu/uvm_tour > "$out/tour.log" 2>&1; echo "tour rc=$?"
./build-gpu/uvm-tool gpus; ./build-gpu/uvm-tool topo | tee "$out/topo.txt"
if [ -x build-gpu/bench/bench_cuda ] && [ -z "${NO_BENCH:-}" ]; then
  ./build-gpu/bench/bench_cuda --benchmark_repetitions=${REPS:-10} --benchmark_report_aggregates_only=true \
     --benchmark_filter="${BENCH_FILTER:-.}" \
     --benchmark_out="$out/bench_cuda.json" --benchmark_out_format=json > "$out/bench_cuda.txt" 2>&1
  grep -E "median|Skip|ERROR" "$out/bench_cuda.txt"
fi
exit $rc
