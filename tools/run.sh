#!/usr/bin/env bash
# The main job: build, then tour the API on the default backend (the GPU
# where there is one, the simulator otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S . -B build "${gen[@]}" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target uvm_tour uvm-tool
exec ./build/uvm_tour
