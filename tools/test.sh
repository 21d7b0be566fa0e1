#!/usr/bin/env bash
# The test suite: a Release build with warnings as errors, a build with
# AddressSanitizer and UndefinedBehaviorSanitizer, the concurrency tests under
# ThreadSanitizer, and a build without the optional hwloc and libnuma. GPU
# tests skip where there is no GPU. Then a minute of the libFuzzer API fuzzer.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh test
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
jobs=$(nproc)
# Each stage's start, in seconds since this script's: CI's limit is on the whole.
stage() { echo "== [$SECONDS s] $*"; }

stage "Release build"
cmake -S . -B build "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DUVM_WERROR=ON >/dev/null
cmake --build build -j "$jobs"
(cd build && ctest -j "$jobs" --output-on-failure)

stage "AddressSanitizer + UndefinedBehaviorSanitizer build"
# -g1: line tables, all that the sanitizers' reports print, and an eighth
# less compile time than -g on this 2-core machine.
cmake -S . -B build-asan "${gen[@]}" -DCMAKE_BUILD_TYPE=Debug -DUVM_SANITIZE=ON -DUVM_WERROR=ON \
      -DCMAKE_C_FLAGS_DEBUG=-g1 -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DUVM_BUILD_BENCH=OFF >/dev/null
cmake --build build-asan -j "$jobs"
# lab_browser drives a browser over the lab's page: no C++ of ours runs in
# it that the Release run did not cover, and it is the slowest test here.
# fuzz_corpus_replay: the fuzzing stage below replays the same corpus under
# both sanitizers first.
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
   ctest -j "$jobs" --output-on-failure -E '^(lab_browser|fuzz_corpus_replay)$')

stage "ThreadSanitizer: the concurrency tests"
cmake -S . -B build-tsan "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUVM_BUILD_BENCH=OFF \
      "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
      -DCMAKE_C_FLAGS=-fsanitize=thread -DCMAKE_CXX_FLAGS=-fsanitize=thread \
      -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread >/dev/null
# test_uvm_concurrency: the files of test_uvm that hold these tests (tests/CMakeLists.txt).
cmake --build build-tsan -j "$jobs" --target test_uvm_concurrency test_share uvm-soak
# In $jobs processes at once (GoogleTest's shards: each test whole in one of
# them), each one's output after: the tests are single processes of a few
# threads, and one of them takes 40 s under TSan.
sharded() {  # sharded BINARY GTEST_FILTER
  local i rc=0 pids=()
  for ((i = 0; i < jobs; i++)); do
    GTEST_TOTAL_SHARDS=$jobs GTEST_SHARD_INDEX=$i TSAN_OPTIONS=halt_on_error=1 "$1" --gtest_filter="$2" \
      > "build-tsan/shard$i.log" 2>&1 &
    pids+=($!)
  done
  for ((i = 0; i < jobs; i++)); do
    wait "${pids[$i]}" || rc=1
    cat "build-tsan/shard$i.log"
  done
  return $rc
}
sharded build-tsan/tests/test_uvm_concurrency 'Stress*:ChunkCache*:*StressThreadsOnTheirOwnStreams*:*LongParkedObjectsFromManyThreads/sim:*StressEightThreadsUnderEviction*:Clients.Stress*:TraceStress*:BudgetInvariants.*:Clients.OwnEvictionsRacingFrees*:Pressure.NoticesPerWatermark*:OomFits.*:ConcurrentFaults.*:*ReleaseThresholdChangedWhileThreadsAllocate/sim:SimOffload.FourThreads*:SleepThreads.*:Compact*.EightThreads*:*SleepHost.PoliciesSet*/sim:*HeldMemoryTest.ReadWhileAnotherThreadSleeps*/sim:*Sleep.AllocationsRacingTheSleep*/sim:PrivatePool.Threads'
TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/test_share --gtest_filter='*ThreadsExportAndImportAtOnce/sim*'
TSAN_OPTIONS=halt_on_error=1 build-tsan/uvm-soak --backend sim --seconds 3 --threads 16 --max-object-mib 8 --budget-mib 48

stage "without hwloc, libnuma and cpp-httplib (their fallbacks)"
cmake -S . -B build-nodeps "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DUVM_WERROR=ON -DUVM_BUILD_BENCH=OFF \
      -DUVM_ENABLE_HWLOC=OFF -DUVM_ENABLE_LIBNUMA=OFF -DUVM_ENABLE_HTTP=OFF >/dev/null
# First what tools/run.sh builds (the target installable), and the install
# after it: it must need nothing else.
cmake --build build-nodeps -j "$jobs" --target installable
rm -rf build-nodeps/install-check && cmake --install build-nodeps --prefix build-nodeps/install-check >/dev/null
# Then what the tests below run, and nothing else (tests/CMakeLists.txt).
cmake --build build-nodeps -j "$jobs" --target fallback_test_programs
# The tests that go through the fallbacks (topology, placement, host memory,
# the metrics server and the lab's --serve, reports, the C and Python APIs);
# the rest of the code is the same as in the Release run.
(cd build-nodeps && ctest -j "$jobs" --output-on-failure \
   -R 'Topology|Placement|HostMemory|MetricsServer|Reports|Sim\.|^lab_|python_uvm|c_api|example_tour|Fork')

stage "the API fuzzer under libFuzzer (clang), from the committed corpus"
FUZZ_SECONDS=${FUZZ_SECONDS:-60} tools/fuzz.sh

stage "install: find_package(uvm) and pkg-config"
rm -rf build/install-check && cmake --install build --prefix build/install-check/prefix >/dev/null
tools/check_install.sh build/install-check
stage "done"
