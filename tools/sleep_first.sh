#!/usr/bin/env bash
# On a GPU machine: the first sleep against later ones and against the
# pinned device-to-host copy rate of the same run (issue 44, item 1), and
# the host memory a sleep holds by policy (item 2). Builds bench_sleep and
# host_pin, then runs, on the CUDA backend:
#   - 10 GiB kept, 3 rounds: no reserve (the backup made ready during the
#     first sleep, in pieces by several threads, the copy overlapping them),
#     with 1 and 16 pinning threads beside the default, and with a reserve
#     made ready ahead (--reserve-gib 10: the first sleep should run at the
#     copy rate, the reserve's own time on its line);
#   - a 4 GiB client slept 5 times: keep, release (resident memory back at
#     each wake), release with a 4 GiB reserve;
#   - host_pin: the ways of pinning 10 GiB (cuMemHostRegister after
#     populating, cold, cuMemHostAlloc, host-located cuMemCreate) with 1 to
#     16 threads, and the copy rate into each.
# Every figure goes to $OUT (or ./gpu-logs): device.txt, bench_sleep_*.txt,
# host_pin.txt/.csv, and summary.txt (the first and the later sleeps'
# rates against the copy rate, one line per run).
# Google Benchmark is not needed (bench_sleep does not use it); cmake still
# wants it for bench/: carry .bench-dep as tools/gpu_check.sh says.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-logs}
mkdir -p "$out"
{ nvidia-smi -L; nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv; \
  nproc; grep MemTotal /proc/meminfo; cat /sys/kernel/mm/transparent_hugepage/enabled; date -u; git rev-parse HEAD; } \
  > "$out/device.txt" 2>&1
bench_root=()
[ -d .bench-dep ] && bench_root=(-DUVM_BENCHMARK_ROOT="$PWD/.bench-dep")
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release "${bench_root[@]}" > "$out/build.log" 2>&1
cmake --build build-gpu -j "$(nproc)" --target bench_sleep >> "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
cc -O2 -I/usr/local/cuda/include bench/host_pin.c -o build-gpu/host_pin -ldl -lpthread >> "$out/build.log" 2>&1
export UVM_BACKEND=cuda
run() {  # name, then bench_sleep's arguments
    local name=$1; shift
    echo "== bench_sleep $*" | tee "$out/bench_sleep_$name.txt"
    ./build-gpu/bench/bench_sleep "$@" >> "$out/bench_sleep_$name.txt" 2>&1
    echo "rc=$?" >> "$out/bench_sleep_$name.txt"
    # One line: the copy rate, then each round's sleep GB/s (and against the copy).
    awk -v name="$name" '
        /copy engine, 64 MiB to pinned host/ { d2h = $8 }
        /reserve .* made ready in/ { reserve = $0 }
        /^\| [0-9]+ \|/ { rounds = rounds sprintf(" r%s %s GB/s (%s), wake %s s, backup %s MiB, rss %s;", $2, $6, $8, $12, $20, $22 " -> " $24) }
        END { printf "%-22s D2H %s GB/s:%s\n", name, d2h, rounds; if (reserve != "") printf "%-22s %s\n", "", reserve }
    ' "$out/bench_sleep_$name.txt" | tee -a "$out/summary.txt"
}
: > "$out/summary.txt"
run 10g_keep --gib 10 --rounds 3
run 10g_keep_1thread --gib 10 --rounds 3 --pin-threads 1
run 10g_keep_16threads --gib 10 --rounds 3 --pin-threads 16
run 10g_reserve --gib 10 --rounds 3 --reserve-gib 10
run 4g_keep --gib 4 --rounds 5
run 4g_release --gib 4 --rounds 5 --host release
run 4g_release_reserve --gib 4 --rounds 5 --host release --reserve-gib 4
./build-gpu/host_pin --gib 10 --piece-mib 64 --threads 1,2,4,8,16 --csv "$out/host_pin.csv" > "$out/host_pin.txt" 2>&1
cat "$out/host_pin.txt"
