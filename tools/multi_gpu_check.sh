#!/usr/bin/env bash
# On a machine with two GPUs or more (issue 42), in one command of about nine
# minutes on two H100s joined by NVLink:
#   1. the build with the CUDA backend (tools/gpu_common.sh, no benchmarks);
#   2. the CUDA suite on every GPU: each test that uses a GPU in a process of
#      its own (ctest -j1), the peer tests included, with every leak check's
#      baseline and end logged (UVM_TEST_MEMORY_LOG: whose memory a failed
#      check misses), the GPUs' used memory before and after;
#   3. tools/share_check.sh: the sharing and CUDA tests in one process each,
#      and build/share_peer's figures (peer copies both ways against the
#      driver's cuMemcpyPeer, export/import across processes on different
#      GPUs both ways, budgets and OOM reports per GPU);
#   4. `uvm-tool topo` and `uvm-tool peers`, nvidia-smi's topology and links;
#   5. PyTorch: what a process's manager costs on each GPU it sees, a model
#      across two GPUs in one process (tests/python/test_two_gpus.py), then
#      GPT-2 under DistributedDataParallel on every GPU (bench/train_torch.py
#      --ddp): PyTorch's caching allocator, expandable_segments, cudaMallocAsync
#      and uvm.torch.enable(), alternating, two rounds, and once the library
#      with each rank seeing its own GPU only (what the library's contexts on
#      the other GPUs cost), as many runs as the time left allows.
# A summary on stdout at the end; every log in one tar under $OUT
# (multi_gpu_logs.tar.gz) with summary.md beside it.
#   BUDGET_S=540   seconds for the whole script (the DDP runs take what is left)
#   SUITE_S=240    at most this long for the suite (what is left is listed)
#   DDP_STEPS=30 DDP_ROUNDS=2 DDP_ALLOCS=default,expandable,async,uvm
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
budget=${BUDGET_S:-540}
left() { echo $(( budget - ($(date +%s) - start) )); }
final=${OUT:-multi-gpu-logs}
mkdir -p "$final"
logs=$(mktemp -d /tmp/multi-gpu.XXXXXX)
export NCCL_NVLS_ENABLE=0
. tools/gpu_common.sh
summary=$logs/summary.md
rc=0  # 1 where any part failed
say() { echo "$*" | tee -a "$summary"; }
phase() { say ""; say "## $1 (at $(( $(date +%s) - start )) s)"; }

finish() {
  say ""
  say "total: $(( $(date +%s) - start )) s"
  cp "$summary" "$final/summary.md"
  tar -czf "$final/multi_gpu_logs.tar.gz" -C "$logs" . 2>/dev/null
  echo "logs: $final/multi_gpu_logs.tar.gz ($(du -h "$final/multi_gpu_logs.tar.gz" | cut -f1))"
}
trap finish EXIT

gpu_device_info "$logs/device.txt"
{ nvidia-smi nvlink -s; nvidia-smi nvlink -c; } > "$logs/nvlink.txt" 2>&1
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
say "# Two GPUs and more (issue 42): $(date -u '+%F %H:%M UTC'), commit ${UVM_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader 2>&1 | sed 's/^/    /' | tee -a "$summary"
grep -E "^GPU[0-9]" "$logs/device.txt" | head -8 | sed 's/^/    topo: /' | tee -a "$summary"

phase "1. build"
build=build-gpu
gpu_build $build "$logs/build.log" -DUVM_BUILD_BENCH=OFF -- uvm uvm_torch_alloc test_uvm test_cuda test_cuda_faults \
  test_share test_share_message test_topo share_peer uvm-tool || { say "build FAILED"; exit 1; }
say "build: $(( $(date +%s) - start )) s"
gpu_python_env $build
# uvm.torch's C++ side, built while the suite runs (CPU only, no GPU touched):
# the ranks of a DDP run would otherwise all build it at once.
python3 bench/train_torch.py --build-extension > "$logs/torch_extension.log" 2>&1 &
ext_pid=$!

phase "2. the CUDA suite on $gpus GPUs (a process a test)"
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader > "$logs/used_before_suite.txt" 2>&1
gpu_tests='/cuda( |$)|^LazyGpus\.|^Operations/DriverFaults\.|^DriverFaultsCreate\.|^CudaContext\.|^DriverAudit\.|^FaultInjection\.ForwardsEveryCapabilityOfTheCudaBackend$|^Cuda/|^DriverCosts\.|^Fork\.|^Topology\.|^Placement\.'
(cd $build && UVM_TEST_MEMORY_LOG=1 timeout "${SUITE_S:-240}" ctest -j1 -V -R "$gpu_tests" \
   > "$logs/ctest.log" 2>&1); suite_rc=$?
[ $suite_rc = 0 ] || rc=1
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader > "$logs/used_after_suite.txt" 2>&1
grep -E "tests passed|tests failed|Total Test time" "$logs/ctest.log" | tee -a "$summary"
[ $suite_rc = 124 ] && say "suite cut at ${SUITE_S:-240} s: $(grep -cE 'Test +#' "$logs/ctest.log") tests ran"
grep -E "^\s+[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess aborted|Exception|Not Run)\)" "$logs/ctest.log" | sed 's/^/    /' | tee -a "$summary"
# Each failed leak check with what it says about whose memory is missing,
# and the two stream tests' baselines and ends either way.
grep -E "memory not given back" "$logs/ctest.log" | head -10 | tee -a "$summary"
grep -E "\[memory\] .*(RandomStreamOrderedWork|StressThreadsOnTheirOwnStreams).*/cuda" "$logs/ctest.log" | head -16 | tee -a "$summary"
say "tests skipped: $(grep -cE '^ *[0-9]+/[0-9]+ Test +#.*Skipped' "$logs/ctest.log") (ctest.log says why)"
say "peer tests run and passed: $(grep -E '^ *[0-9]+/[0-9]+ Test +#' "$logs/ctest.log" | grep -iE 'peer' | grep -c ' Passed')"
say "GPU memory used before / after the suite (MiB): $(tr '\n' ' ' < "$logs/used_before_suite.txt")/ $(tr '\n' ' ' < "$logs/used_after_suite.txt")"
# The driver's own memory for streams, with one context and with two (DriverCosts).
grep -oE "\[driver-cost\].*" "$logs/ctest.log" | tee -a "$summary"

phase "3. tools/share_check.sh"
OUT=$logs/share REPS=10 timeout 150 tools/share_check.sh > "$logs/share_check.log" 2>&1
share_rc=$?; say "share_check rc=$share_rc"; [ $share_rc = 0 ] || rc=1
# Each binary's count, and each failed test once (its line with the time).
grep -E "^\[  PASSED  \]|^\[  FAILED  \] .*\([0-9]+ ms\)$" "$logs/share_check.log" | head -24 | tee -a "$summary"
sed -n '/^share_peer:/,$p' "$logs/share/share_peer.txt" 2>/dev/null | tee -a "$summary"

phase "4. topology"
{ ./$build/uvm-tool topo; echo; ./$build/uvm-tool peers; } > "$logs/uvm_tool_topo_peers.txt" 2>&1
sed 's/^/    /' "$logs/uvm_tool_topo_peers.txt" | head -40 | tee -a "$summary"
# The link's rate per direction: GPU 0's active links times each one's rate.
say "NVLink of GPU 0 (nvidia-smi nvlink -s): $(awk '/^GPU 0:/ {on = 1; next} /^GPU [0-9]+:/ {on = 0}
  on && /Link [0-9]+: [0-9.]+ GB\/s/ {n++; r = $(NF-1)} END {if (n) printf "%d links x %s GB/s = %.0f GB/s per direction", n, r, n * r; else print "none listed"}' "$logs/nvlink.txt")"

phase "5. PyTorch on $gpus GPUs"
wait $ext_pid; say "uvm.torch extension: $(tail -1 "$logs/torch_extension.log")"
# What a process's manager costs on each GPU it sees: nothing until it uses
# one (each GPU is opened at its first use, docs/cuda_backend.md).
python3 tools/manager_cost.py > "$logs/manager_cost.txt" 2>&1
say "$(tail -1 "$logs/manager_cost.txt")"
# A model across two GPUs in one process (item 3).
timeout 120 python3 tests/python/test_two_gpus.py > "$logs/python_two_gpus.log" 2>&1
py_rc=$?; [ $py_rc = 0 ] || rc=1
say "tests/python/test_two_gpus.py rc=$py_rc ($(grep -E '^(OK|FAILED|Ran|skipped)' "$logs/python_two_gpus.log" | tr '\n' ' '))"
grep -E "^(FAIL|ERROR):" "$logs/python_two_gpus.log" | tee -a "$summary"
say ""
say "GPT-2 under DistributedDataParallel on $gpus GPUs:"
# Alternating, round after round, the library with each rank seeing its own
# GPU once after the first round; no run starts that would end past the budget.
DDP_DEADLINE=$(( start + budget - 15 )) DDP_RUN_TIMEOUT=150 timeout $(( $(left) > 30 ? $(left) : 30 )) \
  python3 bench/train_torch.py --ddp "$logs/ddp" "${DDP_STEPS:-30}" "${DDP_ROUNDS:-2}" \
  "${DDP_ALLOCS:-default,expandable,async,uvm},uvm_own_gpu" > "$logs/ddp.log" 2>&1
ddp_rc=$?; say "ddp rc=$ddp_rc"; [ $ddp_rc = 0 ] || rc=1
if [ -f "$logs/ddp/results.md" ]; then tee -a "$summary" < "$logs/ddp/results.md"; else tail -20 "$logs/ddp.log" | tee -a "$summary"; fi
exit $rc
