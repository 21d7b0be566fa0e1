#!/usr/bin/env bash
# On a GPU machine with PyTorch, transformers and torchvision: what the
# misses left in issue 39's results table (bench/results/README.md) are made
# of, in one call of about nine minutes. Google Benchmark carried in
# .bench-dep/ (tools/gpu_check.sh).
#  1. The runtimes' pair at 2, 8, 32 and 256 MiB on the CUDA backend
#     (bench_stream runtime_pair): O(1) per object on a GPU; and a
#     generate() request's allocations there (kv_cache_growth).
#  2. ResNet-50 training, its step 5% slower under the library in every
#     round: the library and PyTorch's caching allocator alternating, then
#     the library under the driver-call profile (UVM_DRIVER_PROFILE: which
#     driver calls a step makes, and their time; its clock reads are in that
#     run's step), ROUNDS times (default 2).
#  3. GPT-2, variable-length GPT-2 and generate() under the library with
#     its held memory split sampled every 5 ms (TRAIN_HELD_SAMPLE_MS): where
#     the held memory is at the peak of each run (live, on the stream,
#     cached free chunks, unused), the runs whose peaks differ by a GB.
#  4. tools/step_profile.py on ResNet-50 (STEP_ROUNDS rounds, default 3):
#     the library and PyTorch's caching allocator alternating, each step's
#     GPU busy time beside its wall time, the CPU operators and runtime
#     calls per step, and the library's runs under the driver-call profile.
#  5. The held pair of a budgeted client against the plain pair on the CUDA
#     backend, alternating rep by rep in one process (bench/pair_ab.c,
#     PAIR_CLIENT=ab), twice.
#  6. (PARTS=tests only) test_uvm, test_cuda and test_chunk on the CUDA
#     backend, each binary's tests in one process, the sim parameters left
#     out: the tree's suite on the GPU before its figures.
# PARTS (default "pair resnet held steps client") picks the parts;
# RESNET_PROFILE=0 leaves part 2's profiled run out. Each run a
# process of its own. Per run a JSON line in runs.jsonl; profiles in
# prof_resnet50_<round>.txt; a line per run on stdout. The device brings
# back eight files at most, so everything is written to a work folder and
# packed into $OUT/miss_causes.tgz after every part (and at exit), beside
# runs.jsonl and the step profile's table.
set -u
cd "$(dirname "$0")/.."
. tools/gpu_common.sh
export NCCL_NVLS_ENABLE=0
final=${OUT:-gpu-logs}; mkdir -p "$final"
out=$(mktemp -d); parts=" ${PARTS:-pair resnet held steps client} "
part() { [[ $parts == *" $1 "* ]]; }  # part NAME: whether PARTS picks it
pack() {
  tar czf "$final/miss_causes.tgz" -C "$out" . 2>/dev/null
  cp "$out/runs.jsonl" "$out/steps/step_profile.md" "$final/" 2>/dev/null
  return 0
}
trap pack EXIT
t0=$(date +%s)
end=$(( t0 + ${BUDGET_S:-560} ))
gpu_device_info "$out/device.txt"
targets=(uvm uvm_torch_alloc); [ -d .bench-dep ] && targets+=(bench_stream)
tests=(test_uvm test_cuda test_chunk); part tests && targets+=("${tests[@]}")
gpu_build build-gpu "$out/build.log" -- "${targets[@]}" || exit 1
gpu_python_env build-gpu
python3 -c 'import uvm.torch as t; t.enable(); print(t.extension_build())' > "$out/extension.log" 2>&1
echo "ready: $(( $(date +%s) - t0 )) s"
if part tests; then
  for bin in "${tests[@]}"; do
    timeout 200 build-gpu/tests/$bin --gtest_filter='-*/sim:*/sim_coherent' > "$out/suite_$bin.txt" 2>&1
    echo "$bin rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]|^\[  SKIPPED \] [0-9]' "$out/suite_$bin.txt" | tr '\n' ' ')"
  done
  echo "tested: $(( $(date +%s) - t0 )) s"
  pack
fi
part pair && [ -x build-gpu/bench/bench_stream ] &&
  UVM_BACKEND=cuda build-gpu/bench/bench_stream --benchmark_filter='^runtime_pair/' --benchmark_repetitions=5 \
    --benchmark_report_aggregates_only=true 2>&1 | grep -E 'median|ERROR' | tee "$out/runtime_pair.txt" &&
  UVM_BACKEND=cuda build-gpu/bench/bench_stream --benchmark_filter='^kv_cache_growth' 2>&1 |
    grep -E '^kv|ERROR' | tee "$out/kv_cache_growth.txt"
# run LABEL MODEL ALLOC [VAR=VALUE...]: one run, its JSON line kept.
run() {
  local label=$1 model=$2 alloc=$3 left; shift 3
  left=$(( end - $(date +%s) ))
  [ "$left" -lt 40 ] && { echo "$label: no time left"; return 1; }
  env "$@" timeout "$left" python3 bench/train_torch.py --run "$model" "$alloc" 2>"$out/err_$label.txt" |
    tail -1 > "$out/run.tmp"
  python3 - "$label" "$out" <<'PY'
import json, os, sys
label, out = sys.argv[1], sys.argv[2]
try:
    r = json.loads(open(os.path.join(out, "run.tmp")).read())
except Exception as e:  # noqa: BLE001  (said, the next run goes on)
    print(label, "failed:", e, open(os.path.join(out, f"err_{label}.txt")).read()[-400:])
    sys.exit()
r["run_label"] = label
open(os.path.join(out, "runs.jsonl"), "a").write(json.dumps(r) + "\n")
o = r.get("own", {})
split = " ".join("%s=%.0f" % kv for kv in o.get("held_mib_at_sampled_peak", {}).items())
print(label, "step %.1f peak %.0f MiB reserved %.0f grown %s moved %s" % (
    r["median_step_ms"], r["peak_driver_used_mib"], o.get("peak_reserved_mib", -1), o.get("root_chunks_grown"),
    o.get("root_chunks_moved")), split)
PY
}
if part client; then
  gcc -O2 -std=c11 -Iinclude bench/pair_ab.c -o "$out/pair_ab" -Lbuild-gpu -luvm -lpthread &&
    for i in 1 2; do
      PAIR_CLIENT=ab UVM_BACKEND=cuda LD_LIBRARY_PATH=build-gpu "$out/pair_ab" 200000 15
    done 2>&1 | tee "$out/client_pair.txt"
  rm -f "$out/pair_ab"
fi
pack
for round in $(seq 1 "${ROUNDS:-2}"); do
  if part resnet; then
    run "resnet50_uvm_$round" resnet50 uvm
    run "resnet50_default_$round" resnet50 default
    [ "${RESNET_PROFILE:-1}" = 1 ] &&
      run "resnet50_profiled_$round" resnet50 uvm UVM_DRIVER_PROFILE="$out/prof_resnet50_$round.txt"
  fi
  if part held; then
    for model in gpt2 varlen generate; do
      run "${model}_held_$round" "$model" uvm TRAIN_HELD_SAMPLE_MS=5
    done
  fi
  pack
done
if part steps; then
  left=$(( end - $(date +%s) ))
  [ "$left" -gt 60 ] && timeout "$left" python3 tools/step_profile.py --out "$out/steps" --model resnet50 \
    --rounds "${STEP_ROUNDS:-3}" --steps 30 --driver-profile > "$out/step_profile.txt" 2>&1
  head -12 "$out/steps/step_profile.md" 2>/dev/null
fi
rm -f "$out/run.tmp"
echo "total: $(( $(date +%s) - t0 )) s"
