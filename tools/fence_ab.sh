#!/usr/bin/env bash
# On a GPU machine with PyTorch and transformers: GPT-2 training through
# uvm.torch.enable() under the stream pools' fence policy (B: the default,
# 1000 us and at most 256 MiB unfenced; Bwide: 1000 us and at most the GPU's
# memory / 128; A: 0 us, a fence at every mark as before), each run under the
# driver-call profile (UVM_DRIVER_PROFILE), then PyTorch's caching allocator,
# each a process of its own, from one build of this tree. RUNS (default
# "B A default"). Per run: $OUT/run_<label>.json (bench/train_torch.py --run's
# last line) and $OUT/prof_<label>.txt; a summary on stdout.
set -u; export NCCL_NVLS_ENABLE=0
out=${OUT:-gpu-logs}; mkdir -p "$out"; t0=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; date -u
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DUVM_BUILD_TESTS=OFF -DUVM_BUILD_BENCH=OFF >/dev/null &&
  cmake --build build-gpu -j "$(nproc)" --target uvm uvm_torch_alloc >"$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
export PYTHONPATH=$PWD/python UVM_LIBRARY=$PWD/build-gpu/libuvm.so
export UVM_TORCH_ALLOC_LIBRARY=$PWD/build-gpu/libuvm_torch_alloc.so UVM_TORCH_EXT_DIR=$PWD/build-gpu/torch-ext
timeout 200 python3 -c 'import torch, uvm.torch as u; print("mode", u.enable(), u.extension_error())' 2>&1 | tail -1
echo "extension: $(( $(date +%s) - t0 )) s"
for label in ${RUNS:-B A default}; do
  mib=256
  case $label in B*) us=1000 alloc=uvm;; A*) us=0 alloc=uvm;; *) us=1000 alloc=$label;; esac
  case $label in Bwide*) mib=1000000;; esac
  UVM_POOL_FENCE_INTERVAL_US=$us UVM_POOL_FENCE_MAX_MIB=$mib UVM_DRIVER_PROFILE=$out/prof_$label.txt timeout "${RUN_TIMEOUT:-150}" \
    python3 bench/train_torch.py --run gpt2 "$alloc" 2>"$out/err_$label.txt" | tail -1 > "$out/run_$label.json"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[2], 'step %.2f ms' % r['median_step_ms'], 'peak %.0f MiB' % r['peak_driver_used_mib'], 'loss', r['final_loss'], 'steps', r['steps'])" \
    "$out/run_$label.json" "$label" 2>/dev/null || { echo "$label: failed"; tail -5 "$out/err_$label.txt"; }
  [ -f "$out/prof_$label.txt" ] && head -12 "$out/prof_$label.txt"
  echo "at $(( $(date +%s) - t0 )) s"
done
