#!/usr/bin/env bash
# Device call 23 (2026-12-02, session 8): stitched long objects. The CUDA tests of the change on the
# H200, then training peaks and steps: GPT-2 (library, PyTorch, expandable, library), varlen and
# ResNet-50 (library, expandable).
set -u
cd "$(dirname "$0")/.."
. tools/gpu_common.sh
t0=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/device.txt 2>&1
gpu_build build-gpu $OUT/build.log -- uvm uvm_torch_alloc test_uvm test_cuda_faults test_chunk || exit 1
gpu_python_env build-gpu
python3 -c 'import uvm.torch as t; t.enable(); print(t.extension_build())' > $OUT/ext_build.log 2>&1
echo "ready $(( $(date +%s) - t0 )) s"
( timeout 150 build-gpu/tests/test_uvm --gtest_filter='*Stitched*:*TraceReplay*:Backends/StreamTest.*cuda:Backends/CompactTest.*cuda:Backends/RuntimeCallsTest.*cuda' 2>&1 | tail -40
  timeout 90 build-gpu/tests/test_cuda_faults --gtest_filter='CudaStitched.*:CudaCompact.*' 2>&1 | tail -12
  build-gpu/tests/test_chunk 2>&1 | tail -2 ) > $OUT/tests.txt 2>&1
grep -E 'PASSED|FAILED|tests ran|stitched objects' $OUT/tests.txt
echo "tests done $(( $(date +%s) - t0 )) s"
for ma in gpt2:uvm gpt2:default varlen:uvm varlen:default resnet50:uvm resnet50:default generate:uvm generate:expandable gpt2:uvm; do
  m=${ma%:*}; a=${ma#*:}
  left=$(( 560 - ($(date +%s) - t0) )); [ $left -lt 50 ] && break
  timeout $left python3 bench/train_torch.py --run $m $a > /tmp/r.json 2>/tmp/r.err
  cat /tmp/r.json >> $OUT/train.jsonl
  python3 - "$m" "$a" <<'PY'
import json,sys
try: r=json.loads(open('/tmp/r.json').read().strip().splitlines()[-1])
except Exception as e: print(sys.argv[1:], 'failed', e, open('/tmp/r.err').read()[-600:]); sys.exit()
o=r['own']
print(r['model'], r['alloc'], 'step %.1f ms peak %.0f MiB after %.0f' % (r['median_step_ms'], r['peak_driver_used_mib'], r['after_release_driver_used_mib']),
      'reserved %.0f loss %.5f grown %s moved %s' % (o['peak_reserved_mib'], r['final_loss'], o.get('root_chunks_grown'), o.get('root_chunks_moved')))
PY
done
echo "total $(( $(date +%s) - t0 )) s"
