#!/usr/bin/env bash
# On a GPU machine with PyTorch and transformers (no network needed): build
# the library and its PyTorch allocator, then examples/turns/turns.py: a
# GPT-2 trainer and a GPT-2 generate() server in two processes on one GPU,
# each asleep while the other works, 20 turns, against each side run alone
# (issue 44, item 4). Everything goes to $OUT (or ./turns-logs):
# device.txt, build.log, turns.log, turns.md and turns.json. A few minutes
# on one H100.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-turns-logs}
mkdir -p "$out"
{
  echo "date: $(date -u '+%F %H:%M UTC')"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader | sed 's/^/gpu: /'
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)' 2>&1
} > "$out/device.txt" 2>&1
cat "$out/device.txt"
build=build-gpu
cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release > "$out/build.log" 2>&1 &&
  cmake --build $build -j "$(nproc)" --target uvm uvm_torch_alloc >> "$out/build.log" 2>&1 ||
  { tail -40 "$out/build.log"; exit 1; }
export UVM_LIBRARY=$PWD/$build/libuvm.so UVM_TORCH_ALLOC_LIBRARY=$PWD/$build/libuvm_torch_alloc.so
export UVM_TORCH_EXT_DIR=$PWD/$build/torch-ext
python3 examples/turns/turns.py --turns "${TURNS:-20}" --out "$out" 2>&1 | tee "$out/turns.log"
exit "${PIPESTATUS[0]}"
