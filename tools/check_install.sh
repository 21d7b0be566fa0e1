#!/usr/bin/env bash
# Build a small consumer against an installed copy, through find_package(uvm)
# and through pkg-config, with the shared library and with the static one, and
# run it.
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
# The static library from C: its C++ runtime and libraries come with the target.
add_executable(consumer_static main.c)
target_link_libraries(consumer_static PRIVATE uvm::uvm_static)
C
cmake -S "$dir/consumer" -B "$dir/consumer/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$dir/consumer/build" >/dev/null
LD_LIBRARY_PATH="$prefix/lib:${LD_LIBRARY_PATH:-}" "$dir/consumer/build/consumer"
# A static link: no libuvm.so needed at run time.
static_only() {
  if readelf -d "$1" | grep -q 'NEEDED.*libuvm\.so'; then
    echo "$1 needs libuvm.so: it was not linked with the static library" >&2
    exit 1
  fi
}
static_only "$dir/consumer/build/consumer_static"
"$dir/consumer/build/consumer_static" | sed 's/^/static, cmake: /'
if command -v pkg-config >/dev/null; then
  flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs uvm)
  cc "$dir/consumer/main.c" $flags -o "$dir/consumer/pc" -Wl,-rpath,"$prefix/lib"
  "$dir/consumer/pc"
  # pkg-config --static names what libuvm.a needs; -l:libuvm.a takes the
  # archive where the linker would take libuvm.so beside it.
  flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --static --cflags --libs uvm)
  cc "$dir/consumer/main.c" ${flags/-luvm/-l:libuvm.a} -o "$dir/consumer/pc_static"
  static_only "$dir/consumer/pc_static"
  "$dir/consumer/pc_static" | sed 's/^/static, pkg-config: /'
fi
# The Python package installed beside the library: found without UVM_LIBRARY.
if command -v python3 >/dev/null; then
  libdir=$(dirname "$(find "$prefix" -name 'libuvm.so' -print -quit)")
  (cd "$dir" && env -u UVM_LIBRARY PYTHONPATH="$libdir/uvm/python" python3 - "$prefix" <<'PY'
import sys
import uvm, uvm.lab
from uvm import _capi
assert _capi.lib()._name.startswith(sys.argv[1]), _capi.lib()._name
import os  # uvm.torch.enable() compiles its C++ side from the package's folder
assert os.path.exists(os.path.join(os.path.dirname(uvm.__file__), "_torch_ext.cpp")), "no _torch_ext.cpp"
with uvm.Manager(backend="sim", gpus=1, vidmem="8MiB") as mgr, mgr.alloc("2MiB", backing="vidmem") as m:
    print("python: uvm", uvm.__version__, "from", uvm.__file__, "on", _capi.lib()._name, m.info().chunk_size)
PY
  )
fi
