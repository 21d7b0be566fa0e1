#!/usr/bin/env bash
# On a GPU machine: build with the CUDA backend, run the sharing tests (and
# the CUDA backend's own) and the sharing experiments (examples/share_peer.c),
# logging to $OUT (or ./gpu-logs). docs/sharing.md quotes what it prints.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-logs}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
. tools/gpu_common.sh
gpu_device_info "$out/device.txt"
gpu_build build-gpu "$out/build.log" -DUVM_BUILD_BENCH=OFF -- test_share test_share_message test_cuda test_uvm share_peer ||
  exit 1
rc=0
for t in test_share_message test_share test_cuda; do
  ./build-gpu/tests/$t > "$out/$t.log" 2>&1 || rc=1
  grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$out/$t.log" | head -12
done
./build-gpu/tests/test_uvm --gtest_filter='*cuda*' > "$out/test_uvm_cuda.log" 2>&1 || rc=1
grep -E "^\[  (PASSED|FAILED) " "$out/test_uvm_cuda.log" | head -12
./build-gpu/share_peer --reps ${REPS:-10} > "$out/share_peer.txt" 2>&1 || rc=1
cat "$out/share_peer.txt"
if [ -n "${BIG:-}" ]; then
  ./build-gpu/share_peer --reps 5 --mib 1024 --messages 4000 > "$out/share_peer_1g.txt" 2>&1 || rc=1
  cat "$out/share_peer_1g.txt"
fi
nvidia-smi --query-gpu=memory.used --format=csv >> "$out/device.txt"
exit $rc
