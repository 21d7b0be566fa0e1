#!/usr/bin/env bash
# On a GPU machine with PyTorch (CuPy and numba-cuda where installed), no
# network needed: build the library with the CUDA backend and the runtimes'
# allocator, make the wheel (the CMake target wheel), install it with pip
# --no-index into a virtual environment that sees the machine's PyTorch
# (--system-site-packages), and run there, with no UVM_LIBRARY and nothing of
# the source tree on the path:
#   - the README's PyTorch example, as the README has it (the block under
#     "From PyTorch"), then checks that its memory came from the library and
#     that an allocation past the client's budget raises
#     torch.cuda.OutOfMemoryError naming the client;
#   - uvm.cupy.enable() and uvm.numba.enable() with an array each, where
#     those runtimes are installed (each in its own process).
# Everything goes to $OUT (or ./wheel-logs). About two minutes after the build.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-wheel-logs}
mkdir -p "$out"
build=build-wheel
{
  cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DUVM_BUILD_TESTS=OFF -DUVM_BUILD_BENCH=OFF &&
    cmake --build $build -j "$(nproc)" --target wheel
} > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
wheel=$(ls $build/dist/uvm-*.whl)
unzip -l "$wheel" | tee "$out/wheel.txt" | grep '\.so$'
grep -q libuvm_torch_alloc.so "$out/wheel.txt" || { echo "the wheel has no runtimes' allocator: was cuda.h found?"; exit 1; }

env_dir=$(mktemp -d)/env
python3 -m venv --system-site-packages "$env_dir" &&
  "$env_dir/bin/pip" install --no-index --disable-pip-version-check "$wheel" > "$out/pip.log" 2>&1 ||
  { cat "$out/pip.log"; exit 1; }
py="$env_dir/bin/python"
# The README's block, as written.
awk '/^From PyTorch/ {on=1} on && /^```python/ {code=1; next} code && /^```/ {exit} code' README.md > "$out/readme_torch.py"
cat >> "$out/readme_torch.py" <<'PY'

# The checks, after the README's block.
import os
assert uvm.torch.enabled(), "uvm.torch is not enabled"
assert uvm.__file__.startswith(os.environ["UVM_SITE"]), uvm.__file__
from uvm import _capi, _runtime
print("library:", _capi.lib()._name, "allocator:", _runtime.library_path())
assert _capi.lib()._name.startswith(os.environ["UVM_SITE"])
held = uvm.torch.memory_stats()["uvm.held.live_bytes"]
assert held >= 4 << 30, held                       # the 4 GiB tensor, from the library
try:
    with uvm.torch.client("kv-cache", budget="20GiB"):
        too_much = torch.empty(20 << 30, dtype=torch.uint8, device="cuda")   # past the budget with `cache`
except torch.cuda.OutOfMemoryError as e:
    assert "kv-cache" in str(e), str(e)[:2000]
    print("past the budget: torch.cuda.OutOfMemoryError naming kv-cache")
else:
    raise AssertionError("an allocation past the client's budget was not refused")
print("ok: the README's PyTorch example, from the wheel")
PY
site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
rc=0
clean() { env -u UVM_LIBRARY -u UVM_TORCH_ALLOC_LIBRARY -u PYTHONPATH UVM_SITE="$site" "$@"; }
(cd "$(dirname "$env_dir")" && clean "$py" "$out/readme_torch.py") > "$out/torch.log" 2>&1 || rc=1
tail -5 "$out/torch.log"
if "$py" -c "import cupy" 2>/dev/null; then
  (cd "$(dirname "$env_dir")" && clean "$py" -c '
import cupy, uvm.cupy
uvm.cupy.enable()
a = cupy.arange(1 << 20, dtype=cupy.float32)
assert float(a.sum()) == float((1 << 20) * ((1 << 20) - 1) / 2)
assert uvm.cupy.manager().gpu_stats(0).held_live_bytes >= 4 << 20
print("ok: uvm.cupy from the wheel")') > "$out/cupy.log" 2>&1 || rc=1
  tail -2 "$out/cupy.log"
else
  echo "cupy: not installed, not tried"
fi
if "$py" -c "import numba.cuda" 2>/dev/null; then
  (cd "$(dirname "$env_dir")" && clean "$py" -c '
import numpy as np
np.row_stack = getattr(np, "row_stack", np.vstack)   # numba-cuda 0.30 with NumPy 2.4 (docs/integrations.md)
import uvm.numba
uvm.numba.enable()
from numba import cuda
d = cuda.to_device(np.arange(1 << 20, dtype=np.float32))
assert d.copy_to_host()[-1] == (1 << 20) - 1
print("ok: uvm.numba from the wheel")') > "$out/numba.log" 2>&1 || rc=1
  tail -2 "$out/numba.log"
else
  echo "numba-cuda: not installed, not tried"
fi
echo "rc=$rc"
exit $rc
