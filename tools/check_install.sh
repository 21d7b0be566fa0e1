#!/usr/bin/env bash
# Build a small consumer against an installed copy, through find_package(uvm)
# and through pkg-config, and run it.
set -euo pipefail
dir=$(cd "$1" && pwd)
prefix="$dir/prefix"
mkdir -p "$dir/consumer"
cat > "$dir/consumer/main.c" <<'C'
#include <uvm/uvm.h>
#include <stdio.h>
int main(void) {
    uvm_manager_params_t p = {0};
    uvm_manager_t *m;
    p.backend = UVM_BACKEND_SIM;
    if (uvm_manager_create(&p, &m) != UVM_OK) return 1;
    printf("consumer: %s\n", uvm_status_string(uvm_manager_destroy(m)));
    return 0;
}
C
cat > "$dir/consumer/CMakeLists.txt" <<'C'
cmake_minimum_required(VERSION 3.16)
project(consumer C)
find_package(uvm REQUIRED)
add_executable(consumer main.c)
target_link_libraries(consumer PRIVATE uvm::uvm)
C
cmake -S "$dir/consumer" -B "$dir/consumer/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$dir/consumer/build" >/dev/null
LD_LIBRARY_PATH="$prefix/lib:${LD_LIBRARY_PATH:-}" "$dir/consumer/build/consumer"
if command -v pkg-config >/dev/null; then
  flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs uvm)
  cc "$dir/consumer/main.c" $flags -o "$dir/consumer/pc" -Wl,-rpath,"$prefix/lib"
  "$dir/consumer/pc"
fi
# The Python package installed beside the library: found without UVM_LIBRARY.
if command -v python3 >/dev/null; then
  libdir=$(dirname "$(find "$prefix" -name 'libuvm.so' -print -quit)")
  (cd "$dir" && env -u UVM_LIBRARY PYTHONPATH="$libdir/uvm/python" python3 - "$prefix" <<'PY'
import os, sys
import uvm, uvm.lab
from uvm import _capi
assert _capi.lib()._name.startswith(sys.argv[1]), _capi.lib()._name
assert os.path.exists(os.path.join(os.path.dirname(uvm.__file__), "py.typed")), "py.typed not installed"
with uvm.Manager(backend="sim", gpus=1, vidmem="8MiB") as mgr, mgr.alloc("2MiB", backing="vidmem") as m:
    print("python: uvm", uvm.__version__, "from", uvm.__file__, "on", _capi.lib()._name, m.info().chunk_size)
PY
  )
fi
