#!/usr/bin/env bash
# On a GPU machine with PyTorch, transformers and torchvision: real training
# through the library, A/B against a base tree in .ab-base/ (as
# tools/pair_ab.sh: `git archive <base> | tar -x -C .ab-base`, its commit in
# .ab-base/COMMIT), each run its own process, A and B interleaved per model,
# then PyTorch's caching allocator and cudaMallocAsync once per model in the
# same session. MODELS (default "gpt2 resnet50"), ROUNDS (default 1), REFS
# (the reference allocators, default "default async"), PROFILE=1 (a run of
# each side under the driver-call profile, into $OUT/driver_profile.txt). One
# JSON line per run (bench/train_torch.py --run) in $OUT/train_ab.jsonl, a
# line per run in $OUT/train_ab.txt.
#
# MODE=peers: the library against its peers on real work (issue 39's
# targets), from this tree alone: bench/train_torch.py --peers runs the
# workloads gpt2, resnet50, varlen (shapes that change every step) and
# generate (a generate() serving loop, its KV cache grown a token a step)
# under PyTorch's caching allocator, expandable_segments, cudaMallocAsync and
# uvm.torch.enable(), each run a process of its own, ROUNDS rounds (default
# 2), the allocators' order reversed every other round. A run starts only
# where it can end before END_AT (epoch seconds; default BUDGET_S = 500
# seconds after this script starts, the build included). $OUT gets
# train_peers.md (medians over rounds, the range between rounds, outputs
# against PyTorch's, the library's ratios to its peers), train_peers.json
# (every run) and train_peers_logs.tar.gz (each run's log and JSON, the
# build's and the extension's logs, device.txt), rewritten after every run.
# The library comes from BUILD_DIR (default build-gpu): configured and built
# there (targets uvm and uvm_torch_alloc) unless it holds a build.ninja
# already, then only brought up to date; SKIP_BUILD=1 takes it as it is.
# Python finds it as tools/torch_check.sh has it: PYTHONPATH=python,
# UVM_LIBRARY and UVM_TORCH_ALLOC_LIBRARY in BUILD_DIR, the C++ side of
# uvm.torch compiled once, before the runs, into BUILD_DIR/torch-ext
# (UVM_TORCH_EXT_DIR). Also: TRAIN_WORKLOADS, TRAIN_ALLOCS, SPAWN=fresh
# (a new interpreter per run instead of a fork of a process per allocator
# that did the imports), RUN_TIMEOUT, TRAIN_SAMPLE_MS, WORK (the logs'
# folder, default /tmp/train_peers), DRY_RUN=1 (no build, tiny runs on the
# CPU where there is no GPU: a check of the harness).
set -u; export NCCL_NVLS_ENABLE=0
out=${OUT:-gpu-logs}; mkdir -p "$out"
build() {  # tree build-dir
  (cd "$1" && cmake -S . -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DUVM_BUILD_TESTS=OFF -DUVM_BUILD_BENCH=OFF >/dev/null &&
     cmake --build "$2" -j "$(nproc)" --target uvm uvm_torch_alloc >/dev/null)
}
peers() {
  local start bdir work rc dry=()
  start=$(date +%s)
  export END_AT=${END_AT:-$(( start + ${BUDGET_S:-500} ))}
  bdir=${BUILD_DIR:-build-gpu}
  work=${WORK:-${TMPDIR:-/tmp}/train_peers}
  rm -rf "$work" && mkdir -p "$work/logs" || return 1
  [ "${DRY_RUN:-0}" = 1 ] && dry=(--dry-run)
  # (The Python packages' versions: in train_peers.md, from the runs.)
  { date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
    echo "host: $(nproc) CPUs"; } > "$work/device.txt"
  cat "$work/device.txt"
  if [ ${#dry[@]} = 0 ]; then
    if [ "${SKIP_BUILD:-0}" != 1 ]; then
      if [ -f "$bdir/build.ninja" ]; then
        cmake --build "$bdir" -j "$(nproc)" --target uvm uvm_torch_alloc > "$work/build.log" 2>&1
      else
        build . "$bdir" > "$work/build.log" 2>&1
      fi || { cp "$work/build.log" "$out/"; tail -30 "$work/build.log"; echo "build failed"; return 1; }
    fi
    echo "build: $(( $(date +%s) - start )) s"
    export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH} UVM_LIBRARY=$PWD/$bdir/libuvm.so
    export UVM_TORCH_ALLOC_LIBRARY=$PWD/$bdir/libuvm_torch_alloc.so UVM_TORCH_EXT_DIR=$PWD/$bdir/torch-ext
    # The C++ side of uvm.torch, compiled here once rather than in the first timed run.
    timeout 300 python3 -c 'import torch, uvm.torch as u; m = u.enable(); print("mode", m, u.extension_build(), u.extension_error())' \
      > "$work/extension.log" 2>&1
    tail -1 "$work/extension.log"
    echo "extension: $(( $(date +%s) - start )) s"
  fi
  UVM_COMMIT=${UVM_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || cat COMMIT 2>/dev/null)} \
    python3 bench/train_torch.py --peers "$work" "$out" "${dry[@]}"
  rc=$?
  echo "total: $(( $(date +%s) - start )) s, rc=$rc"
  return $rc
}
if [ "${MODE:-ab}" = peers ]; then
  peers
  exit $?
fi
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
  for _ in $(seq 1 "${ROUNDS:-1}"); do side B "$model" uvm; side A "$model" uvm; done
  for ref in ${REFS-default async}; do side B "$model" "$ref"; done
  # PROFILE=1: one more run of each side under the driver-call profile
  # (UVM_DRIVER_PROFILE, where the side's library has it), its step times
  # apart from the timed rounds' (the profile's clock reads are in them).
  if [ "${PROFILE:-0}" = 1 ]; then
    for s in B A; do
      UVM_DRIVER_PROFILE=$out/driver_profile.tmp side "$s" "$model" uvm
      { echo "## side $s, $model (the run: $(tail -1 "$out/train_ab.txt" | cut -c1-60))"
        cat "$out/driver_profile.tmp" 2>/dev/null || echo "(no profile: the side's library has none)"; } >> "$out/driver_profile.txt"
      rm -f "$out/driver_profile.tmp"
    done
  fi
done
cat "$out/train_ab.txt"
[ -f "$out/driver_profile.txt" ] && head -c 6000 "$out/driver_profile.txt"
