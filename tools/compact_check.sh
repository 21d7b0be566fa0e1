#!/usr/bin/env bash
# Compaction on a GPU (issue 45), in one command of a few minutes:
#   1. the build with the CUDA backend (tools/gpu_common.sh);
#   2. the compaction tests against the real driver: objects without views
#      of their memory move on the copy engine with every byte, the one with
#      a kernel mapping stays, the emptied handles go back, and a driver
#      failure at each call of a compaction keeps every byte and leaks
#      nothing (test_cuda_faults: CudaCompact.*); then the sim's, for the
#      record (test_uvm: Compact*);
#   3. bench/bench_compact on the GPU: the fragmenting workload without
#      anything, with uvm_gpu_trim and with uvm_gpu_compact every 5 steps
#      (held over live, OOMs, bytes moved, ms per compaction: the copy
#      engine's cost), at adaptive, 4K and 64K chunks;
#   4. PyTorch, where it is installed: uvm.torch.compact() after
#      torch.cuda.synchronize() keeps every tensor and counts in
#      uvm.torch.memory_stats() (tests/python/test_torch_gpu.py).
# Everything under $OUT (compact_check/), a summary on stdout.
set -uo pipefail
cd "$(dirname "$0")/.."
. tools/gpu_common.sh
out=${OUT:-/tmp}/compact_check
mkdir -p "$out"
gpu_device_info "$out/device.txt"
gpu_build build-gpu "$out/build.log" -DUVM_BUILD_BENCH=ON -- test_cuda_faults test_uvm bench_compact uvm || exit 1
build-gpu/tests/test_cuda_faults --gtest_filter='CudaCompact.*' > "$out/cuda_compact_test.txt" 2>&1
echo "CudaCompact (real driver): $(tail -1 "$out/cuda_compact_test.txt")"
build-gpu/tests/test_uvm --gtest_filter='Compact*' > "$out/sim_compact_test.txt" 2>&1
echo "Compact* (sim): $(tail -1 "$out/sim_compact_test.txt")"
{
  build-gpu/bench/bench_compact --steps 60
  for c in 4 64; do build-gpu/bench/bench_compact --steps 30 --chunk-kib "$c" --max-mib 4; done
} > "$out/bench_compact.txt" 2>&1
cat "$out/bench_compact.txt"
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  gpu_python_env build-gpu
  python3 tests/python/test_torch_gpu.py -v > "$out/torch_gpu.txt" 2>&1
  echo "test_torch_gpu.py: $(tail -1 "$out/torch_gpu.txt")"
fi
