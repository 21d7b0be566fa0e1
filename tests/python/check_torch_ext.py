#!/usr/bin/env python3
"""uvm.torch's C++ side (python/uvm/_torch_ext.cpp) compiles, for every
feature set uvm.torch tries (_FEATURE_SETS in python/uvm/torch.py) at
C++17 and the first, fullest one at C++20 too (PyTorch 2.11's standard,
tried first), against stand-in declarations of the PyTorch interface it
uses (tests/python/torch_stubs): its syntax and its own names. PyTorch is
not installed in CI, and a file that does not compile makes uvm.torch fall
back to a smaller feature set, or to the Python-only allocator, silently on
a user's machine. The real interface is checked where PyTorch is (the GPU
machine). Needs a C++ compiler, Python's headers and pybind11's (exit 77,
skipped, without them)."""
import ast
import os
import shutil
import subprocess
import sys
import sysconfig

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
SOURCE = os.path.join(ROOT, "python", "uvm", "_torch_ext.cpp")
STUBS = os.path.join(HERE, "torch_stubs")


def feature_sets():
    """_FEATURE_SETS of python/uvm/torch.py, read without importing it."""
    tree = ast.parse(open(os.path.join(ROOT, "python", "uvm", "torch.py")).read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "_FEATURE_SETS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise SystemExit("check_torch_ext: no _FEATURE_SETS in python/uvm/torch.py")


def main():
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    python_include = sysconfig.get_paths()["include"]
    pybind = next((d for d in ("/usr/include", "/usr/local/include") if os.path.exists(os.path.join(d, "pybind11", "pybind11.h"))), None)
    if not cxx or not os.path.exists(os.path.join(python_include, "Python.h")) or not pybind:
        print("check_torch_ext: skipped: needs a C++ compiler, Python.h and pybind11 (python3-dev, pybind11-dev)")
        return 77
    sets = feature_sets()
    failures = 0
    builds = 0
    for i, features in enumerate(sets):
        for std in ("c++17", "c++20") if i == 0 else ("c++17",):
            builds += 1
            cmd = [cxx, f"-std={std}", "-fsyntax-only", "-I" + STUBS, "-I" + pybind, "-I" + python_include,
                   "-DTORCH_EXTENSION_NAME=uvm_torch_ext_check", "-DTORCH_API_INCLUDE_EXTENSION_H", SOURCE]
            cmd += ["-DUVM_WITH_" + f.upper() for f in features]
            run = subprocess.run(cmd, capture_output=True, text=True)
            name = ",".join(features) or "(none)"
            if run.returncode != 0:
                failures += 1
                print(f"FAIL {std} [{name}]:\n{run.stderr[-3000:]}")
            else:
                print(f"ok   {std} [{name}]")
    print(f"check_torch_ext: {builds - failures} of {builds} builds compile")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
