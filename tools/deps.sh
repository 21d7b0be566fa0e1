#!/usr/bin/env bash
# Install what is missing (Debian/Ubuntu, apt-get), and say what first.
#   tools/deps.sh build   what tools/run.sh needs: the compiler, CMake and the
#                         libraries the library and its programs build with
#   tools/deps.sh test    that, and what tools/test.sh needs on top of it
set -euo pipefail
what=${1:-test}
case "$what" in build|test) ;; *) echo "usage: tools/deps.sh build|test" >&2; exit 2 ;; esac
need=()
why=()
want() {  # want PACKAGE WHY: PACKAGE is missing, needed for WHY
  need+=("$1")
  why+=("  $1: $2")
}

# The build (tools/run.sh). hwloc, libnuma and cpp-httplib are optional for the
# library (CMakeLists.txt says what each adds); CLI11 is needed by its programs.
command -v cmake >/dev/null || want cmake "the build"
command -v g++ >/dev/null || want g++ "the compiler"
command -v ninja >/dev/null || want ninja-build "the build"
command -v pkg-config >/dev/null || want pkg-config "how the build finds cpp-httplib"
[ -f /usr/include/hwloc.h ] || want libhwloc-dev "the host's topology (uvm-tool topo)"
[ -f /usr/include/numaif.h ] || want libnuma-dev "NUMA placement of host memory"
[ -f /usr/include/httplib.h ] || want libcpp-httplib-dev "the /metrics endpoint and uvm-lab --serve"
[ -f /usr/include/CLI/CLI.hpp ] || want libcli11-dev "the command lines of uvm-tool, uvm-lab and out_of_core"
[ -f /usr/include/nlohmann/json.hpp ] || want nlohmann-json3-dev "uvm-tool top, which reads snapshots (and the tests' JSON parser)"

if [ "$what" = test ]; then
  [ -f /usr/include/gtest/gtest.h ] || want libgtest-dev "the test suites"
  [ -f /usr/include/benchmark/benchmark.h ] || want libbenchmark-dev "the benchmarks"
  # Prometheus: promtool checks the metrics and the alert rules of ops/, and a
  # real server runs the Grafana dashboard's queries (tests/ops).
  { command -v prometheus >/dev/null && command -v promtool >/dev/null; } || want prometheus "the operator's kit's tests"
  [ -f /usr/include/zlib.h ] || want zlib1g-dev "the replay tests, which read the gzip traces of bench/traces"
  [ -x /usr/bin/python3 ] || want python3 "the Python package's and the lab's tests"
  /usr/bin/python3 -c "import matplotlib" 2>/dev/null || want python3-matplotlib "the lab's plots"
  # The Python package's offline installs: pip install --no-build-isolation
  # ./python, and the wheel into a virtual environment.
  /usr/bin/python3 -c "import pip" 2>/dev/null || want python3-pip "the offline pip install test"
  /usr/bin/python3 -c "import setuptools" 2>/dev/null || want python3-setuptools "the offline pip install test"
  /usr/bin/python3 -c "import mypy" 2>/dev/null || want python3-mypy "the Python package's type check"
  [ -f /usr/include/pybind11/pybind11.h ] || want pybind11-dev "uvm.torch's C++ side compiled in the tests"
  /usr/bin/python3 -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null ||
    want python3-dev "uvm.torch's C++ side compiled in the tests (Python.h)"
  /usr/bin/python3 -c "import ensurepip, venv" 2>/dev/null || want python3-venv "the wheel's install test"
  command -v chromium >/dev/null || want chromium "the lab's browser test"
  # The API fuzzer (tools/fuzz.sh): clang and its libFuzzer runtime.
  command -v clang++ >/dev/null || want clang "the API fuzzer"
  compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a" >/dev/null ||
    want libclang-rt-dev "the API fuzzer's libFuzzer runtime"
fi

if [ ${#need[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null; then
    echo "missing, for the $what:" >&2
    printf '%s\n' "${why[@]}" >&2
    echo "(install them, then run again)" >&2
    exit 1
  fi
  echo "tools/deps.sh: installing with apt-get, for the $what:"
  printf '%s\n' "${why[@]}"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
