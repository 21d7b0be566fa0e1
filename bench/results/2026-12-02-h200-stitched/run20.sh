#!/usr/bin/env bash
# Device call 20 (2026-12-02, session 8): where the library's held memory goes at its peak inside a
# step (TRAIN_HELD_SAMPLE_MS=5), GPT-2, varlen, ResNet-50; expandable_segments' reserved peak beside.
set -u
cd "$(dirname "$0")/.."
. tools/gpu_common.sh
t0=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/device.txt 2>&1
gpu_build build-gpu $OUT/build.log -- uvm uvm_torch_alloc || exit 1
gpu_python_env build-gpu
python3 -c 'import uvm.torch as t; t.enable(); print(t.extension_build())' > $OUT/ext_build.log 2>&1
echo "ready $(( $(date +%s) - t0 )) s"
for ma in gpt2:uvm varlen:uvm resnet50:uvm gpt2:expandable; do m=${ma%:*}; a=${ma#*:}
  left=$(( 440 - ($(date +%s) - t0) )); [ $left -lt 60 ] && break
  TRAIN_HELD_SAMPLE_MS=5 timeout $left python3 bench/train_torch.py --run $m $a > /tmp/r.json 2>/tmp/r.err
  cat /tmp/r.json >> $OUT/held_at_peak.jsonl
  python3 - "$m" "$a" <<'PY'
import json,sys
try: r=json.loads(open('/tmp/r.json').read().strip().splitlines()[-1])
except Exception as e: print(sys.argv[1:], 'failed', e, open('/tmp/r.err').read()[-800:]); sys.exit()
o=r['own']; at=o.get('held_mib_at_sampled_peak',{})
print(r['model'], r['alloc'], 'step %.1f ms peak %.0f MiB base %.0f' % (r['median_step_ms'], r['peak_driver_used_mib'], r['base_driver_used_mib']),
      'reserved peak %.0f alloc peak %.0f' % (o['peak_reserved_mib'], o['peak_allocated_mib']), 'samples', o.get('held_samples'),
      ' '.join('%s=%.0f' % (k, v) for k, v in at.items()))
PY
done
echo "total $(( $(date +%s) - t0 )) s"
