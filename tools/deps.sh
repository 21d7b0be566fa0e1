#!/usr/bin/env bash
# Install what the build needs where it is missing (Debian/Ubuntu, apt-get).
set -euo pipefail
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v g++ >/dev/null || need+=(g++)
command -v ninja >/dev/null || need+=(ninja-build)
[ -f /usr/include/gtest/gtest.h ] || need+=(libgtest-dev)
[ -f /usr/include/benchmark/benchmark.h ] || need+=(libbenchmark-dev)
[ -f /usr/include/hwloc.h ] || need+=(libhwloc-dev)
[ -f /usr/include/numaif.h ] || need+=(libnuma-dev)
# For the tests only: a JSON parser that reads the reports, and Prometheus
# (Debian package prometheus): promtool checks the metrics and the alert rules
# of ops/, and a real server scrapes the library and runs the Grafana
# dashboard's queries (tests/ops). They skip without them.
[ -f /usr/include/nlohmann/json.hpp ] || need+=(nlohmann-json3-dev)
{ command -v prometheus >/dev/null && command -v promtool >/dev/null; } || need+=(prometheus)
# The replay tests and benchmark read the gzip traces of bench/traces with zlib.
[ -f /usr/include/zlib.h ] || need+=(zlib1g-dev)
# Optional for the library: the HTTP /metrics endpoint (uvm_metrics_serve).
[ -f /usr/include/httplib.h ] || need+=(libcpp-httplib-dev)
command -v pkg-config >/dev/null || need+=(pkg-config)  # how the build finds cpp-httplib
# For the page-size lab's Python bindings and plots (their tests skip without them).
[ -x /usr/bin/python3 ] || need+=(python3)
/usr/bin/python3 -c "import matplotlib" 2>/dev/null || need+=(python3-matplotlib)
# For the Python package's type check (ctest python_types).
/usr/bin/python3 -c "import mypy" 2>/dev/null || need+=(python3-mypy)
# For the Python package's offline install test (pip install --no-build-isolation ./python).
/usr/bin/python3 -c "import pip" 2>/dev/null || need+=(python3-pip)
/usr/bin/python3 -c "import setuptools" 2>/dev/null || need+=(python3-setuptools)
# For the lab's browser test (uvm-lab --serve in headless Chromium; it skips without it).
command -v chromium >/dev/null || need+=(chromium)
# For the API fuzzer (tools/fuzz.sh): clang and its libFuzzer runtime.
command -v clang++ >/dev/null || need+=(clang)
compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a" >/dev/null || need+=(libclang-rt-dev)
if [ ${#need[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null; then
    echo "missing: ${need[*]} (install them, then run again)" >&2
    exit 1
  fi
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
