#!/usr/bin/env bash
# The API fuzzer (tests/fuzz/api_fuzz.cpp) under libFuzzer with AddressSanitizer
# and UndefinedBehaviorSanitizer, for FUZZ_SECONDS (default 60), starting from
# the committed corpus. New inputs go to a scratch copy, not the repository;
# a mismatch or crash stops it and leaves the input as build-fuzz/crash-*:
# replay it with build/tests/fuzz_replay FILE, fix, and add it to
# tests/fuzz/corpus as a regression input.
#   tools/fuzz.sh                 # 60 s
#   FUZZ_SECONDS=600 JOBS=8 tools/fuzz.sh
#   tools/fuzz.sh --merge         # fold the scratch corpus's new coverage into the committed one
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang++ >/dev/null || { echo "tools/fuzz.sh: clang++ is needed (apt-get install clang libclang-rt-dev)"; exit 1; }
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
CC=clang CXX=clang++ cmake -S . -B build-fuzz "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUVM_SANITIZE=ON \
    -DUVM_FUZZ=ON -DUVM_BUILD_TESTS=OFF -DUVM_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target uvm_api_fuzzer
scratch=build-fuzz/corpus
mkdir -p "$scratch"
if [ "${1:-}" = "--merge" ]; then
  build-fuzz/uvm_api_fuzzer -merge=1 tests/fuzz/corpus "$scratch"
  exit 0
fi
jobs=${JOBS:-1}
cd build-fuzz
UBSAN_OPTIONS=halt_on_error=1 ./uvm_api_fuzzer -max_total_time="${FUZZ_SECONDS:-60}" -max_len=512 -timeout=30 \
    -jobs="$jobs" -workers="$jobs" -print_final_stats=1 corpus ../tests/fuzz/corpus 2>&1 | tail -25
ls crash-* timeout-* leak-* 2>/dev/null && { echo "tools/fuzz.sh: the fuzzer found an input that fails (above)"; exit 1; }
echo "tools/fuzz.sh: no mismatch or crash"
