"""The wheel the project builds (tools/wheel.py, the CMake target `wheel`)
installs offline into a virtual environment and works there with nothing set:
pip install --no-index of the wheel alone, then a fresh interpreter of the
environment, in another folder, with no UVM_LIBRARY and nothing of the source
tree on its path, imports uvm, loads the library the wheel carries and
allocates; the runtimes' allocator (where the build made it) is the wheel's
too and allocates on sim. A UVM_LIBRARY pointing elsewhere does not take the
bundled library's place.

    test_wheel.py VERSION LIBRARY [LIBRARY...]    (libuvm.so first)

Exit code 77 (CTest: skipped) where venv cannot make an environment with pip
(Debian package python3-venv; tools/deps.sh installs it).
"""
import os
import subprocess
import sys
import tempfile

SKIP = 77
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

CHECK = r"""
import os, sys
import uvm, uvm.lab
from uvm import _capi, _runtime
site, carries_runtime = sys.argv[1], sys.argv[2] == "1"
here = os.path.dirname(uvm.__file__)
assert here.startswith(site), uvm.__file__
assert _capi.lib()._name == os.path.join(here, "libuvm.so"), _capi.lib()._name
with uvm.Manager(backend="sim", gpus=1, vidmem="8MiB") as mgr:
    with mgr.alloc("4MiB", backing="vidmem") as m:
        assert m.info().chunk_size == 2 << 20
with uvm.lab.Lab() as lab:
    lab.allocate(1 << 40, 1 << 20)
if carries_runtime:
    assert _runtime.library_path() == os.path.join(here, "libuvm_torch_alloc.so"), _runtime.library_path()
    lib = _runtime.lib()
    p = lib.uvm_torch_malloc(3 << 20, 0, None)     # on sim: UVM_BACKEND=sim
    assert p, _runtime.last_status()
    lib.uvm_torch_free(p, 3 << 20, 0, None)
print("the wheel's uvm", uvm.__version__, "works from", here, "runtime allocator" if carries_runtime else "")
"""


def run(cmd, **kw):
    done = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if done.returncode != 0:
        print("$", " ".join(cmd), "\n", done.stdout[-3000:], done.stderr[-3000:])
    return done


def main():
    version, libraries = sys.argv[1], sys.argv[2:]
    if run([sys.executable, "-c", "import ensurepip, venv"]).returncode != 0:
        print(f"venv or ensurepip is missing for {sys.executable} (Debian package python3-venv): "
              "the wheel's install is not tried")
        return SKIP
    with tempfile.TemporaryDirectory(prefix="uvm-wheel-") as work:
        built = run([sys.executable, os.path.join(ROOT, "tools", "wheel.py"), "--version", version,
                     "--out", os.path.join(work, "dist")] + sum((["--library", p] for p in libraries), []))
        if built.returncode != 0:
            return 1
        wheel = built.stdout.strip().splitlines()[-1]
        env_dir = os.path.join(work, "env")
        if run([sys.executable, "-m", "venv", env_dir]).returncode != 0:
            return 1
        python = os.path.join(env_dir, "bin", "python")
        clean = {k: v for k, v in os.environ.items()
                 if k not in ("PYTHONPATH", "UVM_LIBRARY", "UVM_TORCH_ALLOC_LIBRARY", "PYTHONHOME")}
        installed = run([python, "-m", "pip", "install", "--no-index", "--disable-pip-version-check", wheel],
                        env=dict(clean, PIP_NO_INDEX="1"))
        if installed.returncode != 0:
            print("pip install of the wheel failed")
            return 1
        site = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"], env=clean)
        carries_runtime = "1" if any(os.path.basename(p) == "libuvm_torch_alloc.so" for p in libraries) else "0"
        outcome = 0
        # Nothing set; then a UVM_LIBRARY that names no library: the bundled one wins.
        for extra in ({}, {"UVM_LIBRARY": os.path.join(work, "no-such-libuvm.so")}):
            check = run([python, "-c", CHECK, site.stdout.strip(), carries_runtime], cwd=work,
                        env=dict(clean, UVM_BACKEND="sim", **extra))
            print(check.stdout.strip(), extra or "")
            outcome |= check.returncode != 0 or "works from" not in check.stdout
        return 1 if outcome else 0


if __name__ == "__main__":
    sys.exit(main())
