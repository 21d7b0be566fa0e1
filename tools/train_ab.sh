#!/usr/bin/env bash
# On a GPU machine with PyTorch, transformers and torchvision: real training
# through the library, A/B against a base tree in .ab-base/ (as
# tools/pair_ab.sh: `git archive <base> | tar -x -C .ab-base`, its commit in
# .ab-base/COMMIT), each run its own process, A and B interleaved per model,
# then PyTorch's caching allocator and cudaMallocAsync once per model in the
# same session. MODELS (default "gpt2 resnet50"), ROUNDS (default 1), REFS
# (the reference allocators, default "default async"). One
# JSON line per run (bench/train_torch.py --run) in $OUT/train_ab.jsonl, a
# line per run in $OUT/train_ab.txt.
set -u; export NCCL_NVLS_ENABLE=0
out=${OUT:-gpu-logs}; mkdir -p "$out"
build() {  # tree build-dir
  (cd "$1" && cmake -S . -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DUVM_BUILD_TESTS=OFF -DUVM_BUILD_BENCH=OFF >/dev/null &&
     cmake --build "$2" -j "$(nproc)" --target uvm uvm_torch_alloc >/dev/null)
}
build . build-gpu || { echo "build failed"; exit 1; }
[ "${ROUNDS:-1}" = 0 ] || build .ab-base build || { echo "base build failed"; exit 1; }  # ROUNDS=0: the references only
side() {  # A|B model alloc
  local tree; tree=$([ "$1" = A ] && echo "$PWD/.ab-base" || echo "$PWD")
  local b; b=$([ "$1" = A ] && echo build || echo build-gpu)
  PYTHONPATH=$tree/python UVM_LIBRARY=$tree/$b/libuvm.so UVM_TORCH_ALLOC_LIBRARY=$tree/$b/libuvm_torch_alloc.so \
    UVM_TORCH_EXT_DIR=$tree/$b/torch-ext timeout 300 python3 bench/train_torch.py --run "$2" "$3" 2>>"$out/train_ab.err" |
    tail -1 | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); r['side']='$1'; print(json.dumps(r))" >> "$out/train_ab.jsonl"
  tail -1 "$out/train_ab.jsonl" | python3 -c "import json,sys; r=json.load(sys.stdin); o=r['own']; print(r['side'], r['model'], r['alloc'], 'step %.1f ms' % r['median_step_ms'], 'peak %.0f MiB' % r['peak_driver_used_mib'], 'after %.0f MiB' % r['after_release_driver_used_mib'], 'loss', r['final_loss'], 'held_at_peak', {k: round(v) for k, v in o.get('held_mib_at_peak', {}).items()}, 'grown MiB/step late', o.get('grown_mib_per_step_late'))" >> "$out/train_ab.txt"
}
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo "A = $(cat .ab-base/COMMIT 2>/dev/null || echo base), B = this tree"; } > "$out/train_ab.txt"
for model in ${MODELS:-gpt2 resnet50}; do
  for round in $(seq 1 "${ROUNDS:-1}"); do side B "$model" uvm; side A "$model" uvm; done
  for ref in ${REFS-default async}; do side B "$model" "$ref"; done
done
cat "$out/train_ab.txt"
