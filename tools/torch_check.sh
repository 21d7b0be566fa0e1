#!/usr/bin/env bash
# On a GPU machine with PyTorch, transformers, torchvision, CuPy and
# numba-cuda installed (no network needed): build with the CUDA backend, run
# the runtimes' C tests on the real driver (the allocator library, the
# runtime calls, the caller's context), the Python integration tests, then
# bench/train_torch.py: GPT-2 and ResNet-50 training under PyTorch's caching
# allocator, backend:cudaMallocAsync and uvm.torch.enable(), each in its own
# process, and the checks (OOM as torch.cuda.OutOfMemoryError with the
# report, two MemPool clients under budgets, CuPy bit-identical to its own
# pool, a Numba kernel over EMM memory, sleep_wake: a GPT-2's weights and
# optimizer state put to sleep between training steps, their memory used by
# a second process, woken, the final loss against a run that never slept,
# with the sleep's and the wake's seconds and GiB). Everything goes to $OUT (or
# ./torch-logs): device.txt, build.log, c_tests.log, python_tests.log,
# train.log, results.md and results.json. Under 8 minutes on one H100.
# CHECKS_ONLY=1: the build and bench/train_torch.py's checks alone (no C or
# Python tests, no training), about a minute after the build.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-torch-logs}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
start=$(date +%s)
{
  echo "date: $(date -u '+%F %H:%M UTC')"
  echo "command: tools/torch_check.sh (commit ${UVM_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)})"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader | sed 's/^/gpu: /'
  python3 -c 'import torch, sys; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
  for m in transformers torchvision cupy numba numba_cuda; do
    python3 -c "import $m; print('$m', getattr($m, '__version__', '?'))" 2>/dev/null || echo "$m: not installed"
  done
  echo "host: $(nproc) CPUs"
} > "$out/device.txt" 2>&1
cat "$out/device.txt"

build=build-gpu
. tools/gpu_common.sh
gpu_build $build "$out/build.log" -- uvm uvm_torch_alloc test_torch_alloc test_uvm test_cuda_faults || exit 1
echo "build: $(( $(date +%s) - start )) s"

rc=0
gpu_python_env $build
if [ "${CHECKS_ONLY:-0}" = 1 ]; then
  python3 bench/train_torch.py --checks "$out" > "$out/train.log" 2>&1 || rc=1
  cat "$out/results.md" 2>/dev/null || tail -30 "$out/train.log"
  echo "total: $(( $(date +%s) - start )) s, rc=$rc"
  exit $rc
fi
{
  echo "== test_torch_alloc (real driver)"; ./$build/tests/test_torch_alloc; echo "rc=$?"
  echo "== runtime calls on cuda"; ./$build/tests/test_uvm --gtest_filter='Backends/RuntimeCallsTest.*/cuda'; echo "rc=$?"
  echo "== context and legacy-stream driver faults"
  ./$build/tests/test_cuda_faults --gtest_filter='CudaContext.*:*alloc_gpu_zeroed_on_legacy_stream*'; echo "rc=$?"
} > "$out/c_tests.log" 2>&1
grep -E "^== |rc=|PASSED|FAILED|SKIPPED|every check" "$out/c_tests.log"
grep -q "rc=[1-9]" "$out/c_tests.log" && rc=1

python3 tests/python/test_integrations.py > "$out/python_tests.log" 2>&1 || rc=1
tail -5 "$out/python_tests.log"
echo "c+python tests: $(( $(date +%s) - start )) s"

python3 bench/train_torch.py --all "$out" > "$out/train.log" 2>&1 || rc=1
cat "$out/results.md" 2>/dev/null || tail -30 "$out/train.log"
# Where the OOM check dies, where it does and gdb is there: the native stack.
if grep -q "check oom_device: FAIL" "$out/results.md" 2>/dev/null && command -v gdb >/dev/null; then
  timeout 120 gdb -batch -ex run -ex bt -ex "info sharedlibrary" --args python3 bench/train_torch.py --check oom_device \
    > "$out/oom_backtrace.log" 2>&1
  grep -E "^#[0-9]+ " "$out/oom_backtrace.log" | head -15
fi
nvidia-smi --query-gpu=memory.used --format=csv,noheader | sed 's/^/memory used at the end: /'
echo "total: $(( $(date +%s) - start )) s, rc=$rc"
exit $rc
