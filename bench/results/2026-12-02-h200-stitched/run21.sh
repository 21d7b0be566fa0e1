#!/usr/bin/env bash
# Device call 21 (2026-12-02, session 8): the library's policy knobs against its peak on GPT-2 and
# varlen: growth slack 0, a fence at every mark (UVM_POOL_FENCE_INTERVAL_US=0), both; held split at peak.
set -u
cd "$(dirname "$0")/.."
. tools/gpu_common.sh
t0=$(date +%s)
gpu_build build-gpu $OUT/build.log -- uvm uvm_torch_alloc || exit 1
gpu_python_env build-gpu
python3 -c 'import uvm.torch as t; t.enable(); print(t.extension_build())' > $OUT/ext_build.log 2>&1
echo "ready $(( $(date +%s) - t0 )) s"
for m in gpt2 varlen; do for v in default slack0 fence0 both; do
  left=$(( 500 - ($(date +%s) - t0) )); [ $left -lt 50 ] && break 2
  env=(); case $v in slack0) env=(UVM_GROWTH_SLACK=0);; fence0) env=(UVM_POOL_FENCE_INTERVAL_US=0);; both) env=(UVM_GROWTH_SLACK=0 UVM_POOL_FENCE_INTERVAL_US=0);; esac
  env "${env[@]}" TRAIN_HELD_SAMPLE_MS=5 timeout $left python3 bench/train_torch.py --run $m uvm > /tmp/r.json 2>/tmp/r.err
  cat /tmp/r.json >> $OUT/knobs.jsonl
  python3 - "$m" "$v" <<'PY'
import json,sys
try: r=json.loads(open('/tmp/r.json').read().strip().splitlines()[-1])
except Exception as e: print(sys.argv[1:], 'failed', e, open('/tmp/r.err').read()[-800:]); sys.exit()
o=r['own']; at=o.get('held_mib_at_sampled_peak',{})
print(r['model'], sys.argv[2], 'step %.1f ms peak %.0f MiB' % (r['median_step_ms'], r['peak_driver_used_mib']),
      'reserved peak %.0f grown %s moved %s' % (o['peak_reserved_mib'], o.get('root_chunks_grown'), o.get('root_chunks_moved')),
      ' '.join('%s=%.0f' % (k.replace('_bytes',''), v) for k, v in at.items()))
PY
done; done
echo "total $(( $(date +%s) - t0 )) s"
