#!/usr/bin/env bash
# The main job: build, then tour the API on the default backend (the GPU
# where there is one, the simulator otherwise).
#   tools/run.sh                 the tour
#   tools/run.sh out_of_core     the second job: a working set 3x the GPU's memory
#                                through eviction (arguments after it go to it)
#   tools/run.sh lab ...         the page-size lab (uvm-lab; docs/page-size-lab.md)
#   tools/run.sh share_peer ...  the sharing experiments (two processes; docs/sharing.md)
# It installs only what the build needs (tools/deps.sh build; the tests'
# dependencies come with tools/test.sh) and builds what `cmake --install build`
# installs (the target `installable`), not the tests or the benchmarks.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh build
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
echo "tools/run.sh: building the library and its programs in build/"
cmake -S . -B build "${gen[@]}" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target installable
job=${1:-}
case "$job" in
  lab) shift; exec ./build/uvm-lab "$@" ;;
  share_peer) shift; exec ./build/share_peer "$@" ;;
  out_of_core) shift; exec ./build/out_of_core "$@" ;;
  "") exec ./build/uvm_tour ;;
  *) echo "usage: tools/run.sh [out_of_core|lab|share_peer] [arguments of that program]" >&2; exit 2 ;;
esac
