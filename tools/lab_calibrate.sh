#!/usr/bin/env bash
# Re-measure the page-size lab's calibration on this machine's GPU 0, with one
# command (docs/page-size-lab.md, "Calibration"):
#
#   tools/lab_calibrate.sh [OUTDIR]
#   LAB_CALIBRATION_REPS=15 tools/lab_calibrate.sh [OUTDIR]   # more samples a size (default 7)
#
# 1. lab_calibrate (bench/lab_calibrate.cpp) times the driver calls the lab's
#    cost model uses; its rows replace this GPU's rows in lab/calibration.csv
#    (the rows of other GPUs stay), and a copy goes to OUTDIR/calibration.csv.
# 2. lab_pointer_chase (bench/lab_pointer_chase.cu, needs nvcc) chases
#    pointers through vidmem and zero-copy host memory, with L2-only loads and
#    with ordinary ones, five fresh cycles per point: OUTDIR/pointer_chase_*.csv.
#
# OUTDIR defaults to bench/results/<date>-<gpu>-lab. Needs the CUDA toolkit
# (cuda.h, nvcc) and a GPU; nothing here oversubscribes or changes the GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null | head -1 || true)
[ -n "$gpu" ] || { echo "lab_calibrate.sh: no GPU here" >&2; exit 2; }
short=$(echo "$gpu" | grep -oE 'H100|H200|A100|L40S|[A-Z][0-9]{2,4}' | head -1 | tr 'A-Z' 'a-z')
out=${1:-bench/results/$(date -u +%F)-${short:-gpu}-lab}
mkdir -p "$out"
{ nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,clocks.max.sm --format=csv; date -u;
  cat /sys/kernel/mm/transparent_hugepage/enabled; } > "$out/device.txt" 2>&1

build=${BUILD:-build-lab}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DUVM_BUILD_TESTS=OFF -DUVM_BUILD_BENCH=OFF > "$out/build.log" 2>&1
cmake --build "$build" --target lab_calibrate >> "$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
"$nvcc" -O2 -arch=sm_90 -o "$build/lab_pointer_chase" bench/lab_pointer_chase.cu >> "$out/build.log" 2>&1

# 1. Driver-call costs.
header="device,date,quantity,bytes,page_bytes,samples,median_us,min_us,max_us"
"$build/lab_calibrate" "${LAB_CALIBRATION_REPS:-7}" > "$out/calibration.rows"
{ echo "$header"; cat "$out/calibration.rows"; } > "$out/calibration.csv"
rm "$out/calibration.rows"
device=$(tail -1 "$out/calibration.csv" | cut -d, -f1)
file=lab/calibration.csv
[ -f "$file" ] || echo "$header" > "$file"
tmp=$(mktemp)
{ grep -v -F "$device," "$file" 2>/dev/null || true; tail -n +2 "$out/calibration.csv"; } > "$tmp"
mv "$tmp" "$file"
echo "lab_calibrate.sh: $(($(wc -l < "$out/calibration.csv") - 1)) rows for $device in $file"

# 2. Pointer chase: counts around the TLB and data-cache knees, up to 64 GiB of
# vidmem (half an H100) and 1 GiB of host memory.
counts=4,8,12,16,20,24,28,32,40,48,64,96,128,192,256,384,512,640,768,896,1024,1280,1536,2048,3072,4096,6144,8192,12288,16384,24576,32768
LAB_LOAD=cg LAB_REPS=5 LAB_COUNTS=$counts "$build/lab_pointer_chase" 65536 1024 32768 2048 64 > "$out/pointer_chase_cg.csv"
LAB_LOAD=ca LAB_REPS=5 LAB_COUNTS=$counts "$build/lab_pointer_chase" 65536 0 32768 2048 64 > "$out/pointer_chase_ca.csv"
echo "lab_calibrate.sh: pointer chase in $out"
