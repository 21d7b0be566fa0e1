#!/usr/bin/env bash
# PyTorch's own allocator-facing tests (test/test_cuda.py at the tag of the
# installed PyTorch) under uvm.torch.enable(), on a GPU machine, then the
# graph checks. Usage:
#   tools/torch_tests.sh PATH/test_cuda.py        # e.g. .torch-tests/test_cuda.py
# PyTorch's file is not part of this repository: keep it in the ignored
# folder .torch-tests/ (carried to the GPU machine with the working tree's
# ignored paths). Builds the library as tools/torch_check.sh does, then runs
#  - tools/torch_tests.py: the tests picked by topic, under uvm and (as a
#    baseline) under PyTorch's own allocator: $OUT/torch_tests.md and .json;
#  - tests/python/test_torch_gpu.py: uvm.torch's own GPU tests;
#  - tools/torch_graph_check.py: torch.cuda.graph over a GPT-2 forward,
#    torch.compile(mode="reduce-overhead"), make_graphed_callables, each
#    bit-identical with PyTorch's allocator: $OUT/graph_check.md and .json.
# TESTS_ONLY=1 runs the first alone; K=REGEX picks the tests by name.
set -uo pipefail
cd "$(dirname "$0")/.."
file=${1:?usage: tools/torch_tests.sh PATH/test_cuda.py}
out=${OUT:-torch-logs}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
start=$(date +%s)
build=build-gpu
cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DUVM_WERROR=ON > "$out/build.log" 2>&1 &&
  cmake --build $build -j "$(nproc)" --target uvm uvm_torch_alloc >> "$out/build.log" 2>&1 ||
  { tail -40 "$out/build.log"; exit 1; }
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
export UVM_LIBRARY=$PWD/$build/libuvm.so UVM_TORCH_ALLOC_LIBRARY=$PWD/$build/libuvm_torch_alloc.so
export UVM_TORCH_EXT_DIR=$PWD/$build/torch-ext
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee "$out/torch_version.txt"
rc=0
python3 tools/torch_tests.py "$file" --out "$out" --baseline ${K:+-k "$K"} || rc=1
if [ "${TESTS_ONLY:-0}" != 1 ]; then
  python3 tests/python/test_torch_gpu.py -v > "$out/test_torch_gpu.log" 2>&1 || rc=1
  tail -5 "$out/test_torch_gpu.log"
  python3 tools/torch_graph_check.py --out "$out" || rc=1
fi
echo "total: $(( $(date +%s) - start )) s, rc=$rc"
exit $rc
