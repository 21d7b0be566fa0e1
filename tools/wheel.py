#!/usr/bin/env python3
"""A wheel of the Python package (python/uvm, python/uvm_lab.py) that carries
the built library in the package folder, uvm/libuvm.so, and the runtimes'
allocator beside it where it was built (uvm/libuvm_torch_alloc.so): the
package loads its bundled library first (uvm/_capi.py), so that

    pip install --no-index build/dist/uvm-<version>-py3-none-<platform>.whl

works offline, in a virtual environment, with no UVM_LIBRARY. The CMake
target `wheel` runs it (cmake --build build --target wheel).

Written with the standard library alone (a wheel is a zip file with three
files of metadata, PEP 427): the build needs no setuptools, wheel package or
network. The tag is py3-none-<platform>: any Python 3 (the bindings are
ctypes), this platform's library. The libraries link the distribution's
(libstdc++, hwloc, libnuma, cpp-httplib where built with them): the wheel is
for machines of the distribution it was built on, not a manylinux wheel.

    tools/wheel.py --version 0.7.0 --out build/dist --library build/libuvm.so \
        [--library build/libuvm_torch_alloc.so]
"""
import argparse
import base64
import hashlib
import os
import sys
import sysconfig
import zipfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
PACKAGE = os.path.join(ROOT, "python")
SUMMARY = "Python bindings of uvm, a user-space unified GPU memory manager, with its library"


def package_files():
    """(path in the wheel, path here) of the package's own files, sorted."""
    files = [("uvm_lab.py", os.path.join(PACKAGE, "uvm_lab.py"))]
    for name in sorted(os.listdir(os.path.join(PACKAGE, "uvm"))):
        # The sources and their type information, and the C++ side uvm.torch
        # compiles at enable().
        if name.endswith((".py", ".pyi")) or name in ("py.typed", "_torch_ext.cpp"):
            files.append(("uvm/" + name, os.path.join(PACKAGE, "uvm", name)))
    return files


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build(version, out, libraries):
    tag = "py3-none-" + sysconfig.get_platform().replace("-", "_").replace(".", "_")
    info = f"uvm-{version}.dist-info"
    readme = open(os.path.join(PACKAGE, "README.md"), encoding="utf-8").read()
    metadata = (f"Metadata-Version: 2.1\nName: uvm\nVersion: {version}\nSummary: {SUMMARY}\n"
                "Requires-Python: >=3.8\nLicense: MIT\n"
                f"Description-Content-Type: text/markdown\n\n{readme}")
    wheel = f"Wheel-Version: 1.0\nGenerator: uvm tools/wheel.py\nRoot-Is-Purelib: false\nTag: {tag}\n"
    entries = [(name, open(path, "rb").read()) for name, path in package_files()]
    for library in libraries:
        # The file itself (a symlink's target), under the name the package looks for.
        with open(os.path.realpath(library), "rb") as f:
            entries.append(("uvm/" + os.path.basename(library), f.read()))
    entries += [(f"{info}/METADATA", metadata.encode()), (f"{info}/WHEEL", wheel.encode()),
                (f"{info}/top_level.txt", b"uvm\nuvm_lab\n")]
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, f"uvm-{version}-{tag}.whl")
    with zipfile.ZipFile(path + ".part", "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries:
            # The libraries executable, the rest readable: what pip installs them as.
            zi = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            zi.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
        record = "\n".join([record_line(n, d) for n, d in entries] + [f"{info}/RECORD,,"]) + "\n"
        z.writestr(zipfile.ZipInfo(f"{info}/RECORD", date_time=(2026, 1, 1, 0, 0, 0)), record)
    os.replace(path + ".part", path)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", required=True, help="the project's version (CMake's PROJECT_VERSION)")
    parser.add_argument("--out", required=True, help="the folder the wheel is written to")
    parser.add_argument("--library", action="append", required=True,
                        help="a library to bundle in the package folder: libuvm.so, and libuvm_torch_alloc.so")
    args = parser.parse_args()
    names = [os.path.basename(p) for p in args.library]
    if "libuvm.so" not in names:
        parser.error("--library must name libuvm.so: the package's own library")
    print(build(args.version, args.out, args.library))
    return 0


if __name__ == "__main__":
    sys.exit(main())
