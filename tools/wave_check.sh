#!/usr/bin/env bash
# On one GPU, in one command of under ten minutes: the checks of the
# allocation path and PyTorch issues (39, 40, 41) that need a real driver.
#   1. tools/capture_gpu_check.sh: the build, capture tests on the real
#      driver, private pools, the runtimes' allocator, the graph checks;
#   2. the runtimes' pair by address and the free roots across pools on the
#      real driver (test_uvm, test_cuda_faults), each GPU opened at first use
#      (test_cuda LazyGpus: skips with one GPU);
#   3. with two GPUs or more: what a process's manager holds on each GPU it
#      sees (nvidia-smi), before and after its first allocation on GPU 0;
#   4. tools/step_profile.py, one round, as time allows.
# Everything under $OUT in one tar (wave_logs.tar.gz) with summary.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-wave-logs}
mkdir -p "$out"
logs=$(mktemp -d /tmp/wave.XXXXXX)
start=$(date +%s)
export NCCL_NVLS_ENABLE=0
finish() {
  echo "total: $(( $(date +%s) - start )) s" | tee -a "$logs/summary.txt"
  cp "$logs/summary.txt" "$out/" 2>/dev/null
  tar -czf "$out/wave_logs.tar.gz" -C "$logs" .
}
trap finish EXIT
OUT=$logs/capture BUDGET=${CAPTURE_BUDGET:-250} bash tools/capture_gpu_check.sh > "$logs/capture.txt" 2>&1
echo "capture_gpu_check rc=$?" | tee "$logs/summary.txt"
cat "$logs/capture/summary.txt" >> "$logs/summary.txt" 2>/dev/null
. tools/gpu_common.sh
gpu_python_env build-gpu
cmake --build build-gpu -j "$(nproc)" --target test_cuda test_cuda_faults > "$logs/build2.log" 2>&1 || tail -20 "$logs/build2.log"
{
  timeout 90 build-gpu/tests/test_uvm --gtest_filter='*RuntimeCalls*/cuda:*PairByAddress*'
  timeout 90 build-gpu/tests/test_cuda_faults --gtest_filter='FreeRootsAcrossPools*'
  timeout 60 build-gpu/tests/test_cuda --gtest_filter='LazyGpus.*:Cuda/KernelAccess.*'
} > "$logs/real_driver.log" 2>&1
grep -E "^\[  (PASSED|FAILED|SKIPPED) \]" "$logs/real_driver.log" | tee -a "$logs/summary.txt"
if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -ge 2 ]; then
  timeout 60 python3 tools/manager_cost.py --alloc-mib 64 > "$logs/manager_cost.txt" 2>&1
  tail -1 "$logs/manager_cost.txt" | tee -a "$logs/summary.txt"
fi
left=$(( ${BUDGET:-560} - ($(date +%s) - start) ))
if [ $left -gt 100 ]; then
  timeout $left python3 tools/step_profile.py --out "$logs/prof" --rounds 1 --steps 12 > "$logs/step_profile.txt" 2>&1
  head -12 "$logs/prof/step_profile.md" 2>/dev/null | tee -a "$logs/summary.txt"
fi
