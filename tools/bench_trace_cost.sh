#!/usr/bin/env bash
# What the event trace and clients cost on the held vidmem alloc+free pair:
#   - trace off, against a build without the trace's hooks (UVM_ENABLE_TRACE=OFF),
#   - trace on, and a client with a budget, against the plain pair,
# the two builds run in turns (ROUNDS of each) so that both see the same
# machine, and the medians over all runs compared.
#
# Usage: tools/bench_trace_cost.sh [OUT.md]    (ROUNDS=6, BUILD=build, NOTRACE_BUILD=build-notrace;
#        CMAKE_ARGS are passed to the second build's configuration)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-6}
BUILD=${BUILD:-build}
NOTRACE=${NOTRACE_BUILD:-build-notrace}
OUT=${1:-/dev/stdout}

cmake -S . -B "$NOTRACE" -G Ninja -DCMAKE_BUILD_TYPE=Release -DUVM_ENABLE_TRACE=OFF -DUVM_BUILD_TESTS=OFF \
  ${CMAKE_ARGS:-} >/dev/null
cmake --build "$NOTRACE" --target bench_alloc >/dev/null
test -x "$BUILD/bench/bench_alloc" || { echo "no $BUILD/bench/bench_alloc: build it first" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
filter='alloc_free/backing:1/|alloc_free_client|alloc_free_traced'
for r in $(seq "$ROUNDS"); do
  "$NOTRACE/bench/bench_alloc" --benchmark_filter='alloc_free/backing:1/' --benchmark_repetitions=3 \
    --benchmark_format=json >"$tmp/notrace-$r.json" 2>/dev/null
  "$BUILD/bench/bench_alloc" --benchmark_filter="$filter" --benchmark_repetitions=3 \
    --benchmark_format=json >"$tmp/trace-$r.json" 2>/dev/null
done

python3 - "$tmp" "$ROUNDS" >"$OUT" <<'EOF'
import json, statistics, sys, glob, collections
d, rounds = sys.argv[1], sys.argv[2]
runs = collections.defaultdict(list)
context = None
for kind in ("notrace", "trace"):
    for path in glob.glob(f"{d}/{kind}-*.json"):
        doc = json.load(open(path))
        context = doc["context"]
        for b in doc["benchmarks"]:
            if b.get("run_type") != "iteration":
                continue
            name = b["run_name"]
            size = name.rsplit("/", 1)[-1].replace("size:", "")
            what = {"notrace": "no hooks"}.get(kind) if kind == "notrace" else \
                "trace off" if name.startswith("alloc_free/") else \
                "client" if name.startswith("alloc_free_client") else "trace on"
            runs[(what, int(size))].append(b["real_time"])
med = {k: statistics.median(v) for k, v in runs.items()}
print(f"Held vidmem alloc+free pair, ns (medians of {rounds} rounds x 3 repetitions, the two builds in turns)")
print(f"host: {context.get('host_name','?')}, {context.get('num_cpus','?')} CPUs, {context.get('date','')}\n")
print("| size | no hooks | trace off | off / no hooks | trace on | on / off | client | client / off |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|")
for size in sorted({s for _, s in med}):
    g = lambda w: med.get((w, size), float("nan"))
    print(f"| {size} | {g('no hooks'):.0f} | {g('trace off'):.0f} | {g('trace off')/g('no hooks'):.3f} | "
          f"{g('trace on'):.0f} | {g('trace on')/g('trace off'):.2f} | {g('client'):.0f} | {g('client')/g('trace off'):.3f} |")
EOF
