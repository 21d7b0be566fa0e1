#!/usr/bin/env bash
# CUDA graphs on a GPU machine (issue 40, items 1 and 2), from a fresh
# checkout with nothing built: PyTorch (with Triton) and transformers
# installed, no network needed. Builds build-gpu (cmake + ninja), then:
#  1. test_cuda_capture on the real driver: the driver's capture rules, and
#     allocation, stream-ordered free and private pools under a capture in
#     each capture mode (CaptureAllocation/*);
#  2. test_uvm's private-pool tests (PoolTest/* on sim and cuda, PrivatePool.*);
#  3. test_torch_alloc on the real driver: the runtimes' allocator, a graph's
#     private pool among its checks;
#  4. tools/torch_graph_check.py: torch.cuda.graph over a GPT-2 forward,
#     torch.compile(mode="reduce-overhead") and make_graphed_callables, each
#     under PyTorch's allocator and under uvm.torch.enable(), outputs
#     compared bit for bit.
# uvm.torch's C++ side is compiled beside the C build. Everything goes to
# $OUT (or ./capture-logs): device.txt, build.log, torch_ext_build.log,
# c_tests.log, graph/ (graph_check.md, graph_check.json, each run's log) and
# summary.txt. Exit status 1 where any part failed. BUDGET (seconds, 340 by
# default) bounds the whole: the graph checks get what the build and the C
# tests left of it (at least 60 s), a run past it killed and reported.
#   tools/capture_gpu_check.sh
# Without a GPU, over the stand-in driver (the C tests; the graph checks
# need PyTorch with CUDA):
#   BUILD_DIR=build UVM_CUDA_DRIVER_LIBRARY=$PWD/build/tests/libuvm_fake_cuda.so tools/capture_gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-capture-logs}
build=${BUILD_DIR:-build-gpu}
budget=${BUDGET:-340}
mkdir -p "$out/graph"
start=$(date +%s)
. tools/gpu_common.sh

{
  echo "date: $(date -u '+%F %H:%M UTC')"
  echo "command: tools/capture_gpu_check.sh (commit ${UVM_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)})"
  echo "driver library: ${UVM_CUDA_DRIVER_LIBRARY:-libcuda.so.1}"
  python3 -c 'import torch, sys; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
  python3 -c 'import transformers; print("transformers", transformers.__version__)' 2>&1 | tail -1
} > "$out/device.txt"
command -v nvidia-smi > /dev/null && gpu_device_info "$out/device.tmp" && cat "$out/device.tmp" >> "$out/device.txt" &&
  rm -f "$out/device.tmp"
cat "$out/device.txt"

gpu_python_env "$build"
# The extension needs PyTorch's headers, not the library: built meanwhile.
( python3 -c 'import uvm.torch; print(uvm.torch.build_extension())' > "$out/torch_ext_build.log" 2>&1 ) &
ext_pid=$!
gpu_build "$build" "$out/build.log" -- uvm uvm_torch_alloc test_cuda_capture test_uvm test_torch_alloc || {
  wait $ext_pid
  echo "build failed: $out/build.log"
  exit 1
}
echo "build: $(( $(date +%s) - start )) s"

rc=0
{
  echo "== test_cuda_capture (${UVM_CUDA_DRIVER_LIBRARY:-real driver})"
  timeout 180 "./$build/tests/test_cuda_capture"; echo "rc=$?"
  echo "== private pools (sim and cuda)"
  timeout 120 "./$build/tests/test_uvm" --gtest_filter='*/PoolTest.*:PrivatePool.*'; echo "rc=$?"
  echo "== test_torch_alloc (${UVM_CUDA_DRIVER_LIBRARY:-real driver})"
  timeout 120 "./$build/tests/test_torch_alloc"; echo "rc=$?"
} > "$out/c_tests.log" 2>&1
grep -E "^== |^rc=|PASSED|FAILED|SKIPPED \[|every check" "$out/c_tests.log"
grep -q "^rc=[1-9]" "$out/c_tests.log" && rc=1
echo "C tests: $(( $(date +%s) - start )) s"

wait $ext_pid
tail -1 "$out/torch_ext_build.log"
left=$(( budget - ($(date +%s) - start) ))
[ $left -lt 60 ] && left=60
python3 tools/torch_graph_check.py --out "$out/graph" --budget $left > "$out/graph/graph_check.log" 2>&1 || rc=1
cat "$out/graph/graph_check.md" 2>/dev/null || tail -20 "$out/graph/graph_check.log"

{
  echo "C tests:"
  grep -E "^== |^rc=|\[  PASSED  \]|\[  FAILED  \]|\[  SKIPPED \] [0-9]|every check" "$out/c_tests.log"
  echo "graph checks:"
  grep -E "^(gpt2_graph|compile_mlp|graphed_callables): " "$out/graph/graph_check.log"
  echo "total: $(( $(date +%s) - start )) s, rc=$rc"
} > "$out/summary.txt"
cat "$out/summary.txt"
exit $rc
