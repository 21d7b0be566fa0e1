#!/usr/bin/env bash
# The main job: build, then tour the API on the default backend (the GPU
# where there is one, the simulator otherwise).
#   tools/run.sh                 the tour
#   tools/run.sh out_of_core     the second job: a working set 3x the GPU's memory
#                                through eviction (arguments after it go to it)
#   tools/run.sh lab ...         the page-size lab (uvm-lab; docs/page-size-lab.md)
#   tools/run.sh share_peer ...  the sharing experiments (two processes; docs/sharing.md)
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S . -B build "${gen[@]}" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target uvm_tour out_of_core share_peer uvm-tool uvm-lab
if [ "${1:-}" = lab ]; then
  shift
  exec ./build/uvm-lab "$@"
fi
if [ "${1:-}" = share_peer ]; then
  shift
  exec ./build/share_peer "$@"
fi
if [ "${1:-}" = out_of_core ]; then
  shift
  exec ./build/out_of_core "$@"
fi
exec ./build/uvm_tour
