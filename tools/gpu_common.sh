# Sourced by the scripts for a GPU machine (gpu_check.sh, share_check.sh,
# torch_check.sh, multi_gpu_check.sh): the device's description, the build
# with the CUDA backend and the environment of the Python side, written once.

# gpu_device_info FILE: the GPUs, their links and the date.
gpu_device_info() {
  { nvidia-smi -L; nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv
    nvidia-smi topo -m; date -u; } > "$1" 2>&1
}

# gpu_build DIR LOG [CMAKE_OPTION...] [-- TARGET...]: configure DIR (Release,
# warnings as errors, the CUDA backend wherever cuda.h is) and build the
# targets (all without any), the output in LOG. Google Benchmark comes from
# .bench-dep where it was carried (see gpu_check.sh). On failure: the end of
# the log, status 1.
gpu_build() {
  local dir=$1 log=$2 options=() targets=()
  shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do options+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  targets=("$@")
  [ -d .bench-dep ] && options+=(-DUVM_BENCHMARK_ROOT="$PWD/.bench-dep")
  local build=(cmake --build "$dir" -j "$(nproc)")
  [ ${#targets[@]} -gt 0 ] && build+=(--target "${targets[@]}")
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DUVM_WERROR=ON "${options[@]}" > "$log" 2>&1 &&
    "${build[@]}" >> "$log" 2>&1 || { tail -40 "$log"; return 1; }
}

# gpu_python_env DIR: the Python package and the libraries of build DIR for
# the Python side (uvm.torch's extension is cached in DIR too).
gpu_python_env() {
  export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
  export UVM_LIBRARY=$PWD/$1/libuvm.so UVM_TORCH_ALLOC_LIBRARY=$PWD/$1/libuvm_torch_alloc.so
  export UVM_TORCH_EXT_DIR=$PWD/$1/torch-ext
}
