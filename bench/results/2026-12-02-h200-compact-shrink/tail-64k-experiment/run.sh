#!/usr/bin/env bash
# Device call 19 (2026-12-02, session 7): EXPERIMENT: objects over 2 MiB (and under 64 MiB) that are
# not whole 2 MiB in 64K chunks on uvm.torch's path (UVM_TORCH_TAIL_64K_MIB=64), against the
# adaptive pick: the fragmenting workload, GPT-2 and varlen peaks and steps.
set -u
cd "$(dirname "$0")/.."
. tools/gpu_common.sh
t0=$(date +%s)
gpu_build build-gpu $OUT/build.log -- uvm uvm_torch_alloc || exit 1
gpu_python_env build-gpu
python3 -c 'import uvm.torch as t; t.enable(); print(t.extension_build())' > $OUT/ext_build.log 2>&1
echo "ready $(( $(date +%s) - t0 )) s"
for a in uvm uvm-compact; do for t in 0 64; do
  UVM_TORCH_TAIL_64K_MIB=$t FRAG_STEPS=30 FRAG_KEEP=25 timeout 60 python3 bench/frag_torch.py --run $a > $OUT/frag_${a}_$t.json 2>/dev/null
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[2], sys.argv[3], 'held/live end %.3f peak %d MiB wall %.1f s wrong %d' % (r['held_over_live_end'], r['peak']>>20, r['wall_s'], r['wrong_bytes']))" $OUT/frag_${a}_$t.json $a $t
done; done
for t in 64 0; do
  mkdir -p /tmp/p$t; rm -rf /tmp/p$t/*
  left=$(( 440 - ($(date +%s) - t0) )); [ $left -lt 70 ] && break
  UVM_TORCH_TAIL_64K_MIB=$t END_AT=$(( $(date +%s) + left - 10 )) TRAIN_WORKLOADS="gpt2 varlen" TRAIN_ALLOCS="uvm" ROUNDS=1 \
    python3 bench/train_torch.py --peers /tmp/p$t $OUT/peers$t > /dev/null 2> $OUT/peers$t.err
  echo "tail bound $t MiB:"; grep -E "^gpt2|^varlen|r0-" $OUT/peers$t.err | tail -3
done
echo "total $(( $(date +%s) - t0 )) s"
