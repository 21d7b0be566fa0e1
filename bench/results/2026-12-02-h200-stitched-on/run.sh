#!/usr/bin/env bash
# Device calls 24-26 (2026-12-02, session 9): stitched long objects in their committed form on the
# H200. The CUDA tests of the change (whole output kept for failures), then the runs of RUNS
# (model:allocator; uvm = the library with UVM_STITCH=1, uvm0 = without, uvmh = with and the held
# split sampled every 5 ms, a diagnostic) in turn: driver peak against the library's reserved peak,
# step time.
set -u
cd "$(dirname "$0")/../../.."
. tools/gpu_common.sh
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/device.txt 2>&1
gpu_build build-gpu $OUT/build.log -- uvm uvm_torch_alloc test_uvm test_cuda_faults || exit 1
gpu_python_env build-gpu
python3 -c 'import uvm.torch as t; t.enable(); print(t.extension_build())' > $OUT/ext_build.log 2>&1
echo "ready $(( $(date +%s) - t0 )) s"
( timeout 120 build-gpu/tests/test_uvm --gtest_filter='*Stitched*cuda:*LongParked*cuda:Backends/StreamTest.*cuda:*TraceReplay*cuda' 2>&1
  UVM_STITCH=1 timeout 60 build-gpu/tests/test_uvm --gtest_filter='Backends/StreamTest.*cuda:Backends/RuntimeCallsTest.*cuda' 2>&1
  timeout 60 build-gpu/tests/test_cuda_faults --gtest_filter='CudaStitched.*' 2>&1 ) > $OUT/tests.txt 2>&1
grep -E '^\[  (PASSED|FAILED) |tests ran|stitched objects' $OUT/tests.txt
echo "tests done $(( $(date +%s) - t0 )) s"
for ma in ${RUNS:-gpt2:uvm gpt2:expandable varlen:uvm varlen:expandable resnet50:uvm resnet50:expandable generate:uvm generate:expandable gpt2:default gpt2:uvm varlen:uvm}; do
  m=${ma%:*}; a=${ma#*:}
  left=$(( 570 - ($(date +%s) - t0) )); [ $left -lt 45 ] && break
  s=$(date +%s)
  case $a in
    uvm0) env UVM_STITCH=0 timeout $left python3 bench/train_torch.py --run $m uvm ;;
    uvmh) env UVM_STITCH=1 TRAIN_HELD_SAMPLE_MS=5 timeout $left python3 bench/train_torch.py --run $m uvm ;;
    *) env UVM_STITCH=1 timeout $left python3 bench/train_torch.py --run $m $a ;;
  esac > /tmp/r.json 2>/tmp/r.err
  python3 - "$m" "$a" "$(( $(date +%s) - s ))" <<'PY'
import json,os,sys
try: r=json.loads(open('/tmp/r.json').read().strip().splitlines()[-1])
except Exception as e: print(sys.argv[1:], 'failed', e, open('/tmp/r.err').read()[-600:]); sys.exit()
r['run_label'] = sys.argv[2]
open(os.environ['OUT'] + '/train.jsonl', 'a').write(json.dumps(r) + '\n')
o=r['own']
print(r['model'], sys.argv[2], sys.argv[3]+'s', 'step %.1f %s peak %.0f MiB after %.0f' % (r['median_step_ms'], r['step_unit'].split()[0], r['peak_driver_used_mib'], r['after_release_driver_used_mib']),
      'reserved %.0f loss %.5f grown %s moved %s' % (o.get('peak_reserved_mib', -1), r.get('final_loss', -1), o.get('root_chunks_grown'), o.get('root_chunks_moved')),
      ' '.join('%s=%.0f' % kv for kv in o.get('held_mib_at_sampled_peak', {}).items()))
PY
done
echo "total $(( $(date +%s) - t0 )) s"
