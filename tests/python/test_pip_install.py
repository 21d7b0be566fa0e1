"""`pip install --no-build-isolation ./python` works offline: pip builds the
package from a copy of python/ with the distribution's setuptools and no
index, into a folder of its own; a fresh interpreter imports it from there
(not from the source tree), and it drives a manager and the lab through the
library named by UVM_LIBRARY.

Exit code 77 (CTest: skipped) where pip or setuptools is not installed
(Debian packages python3-pip, python3-setuptools; tools/deps.sh installs them).
"""
import os
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

CHECK = r"""
import os, sys
import uvm, uvm.lab, uvm_lab
site = sys.argv[1]
assert uvm.__file__.startswith(site), uvm.__file__
assert uvm_lab.__file__.startswith(site), uvm_lab.__file__
with uvm.Manager(backend="sim", gpus=1, vidmem="8MiB") as mgr:
    with mgr.alloc("4MiB", backing="vidmem") as m:
        assert m.info().chunk_size == 2 << 20
    try:
        mgr.alloc(1 << 62)
    except uvm.UvmError as e:
        assert e.name == "INVALID_ARGUMENT", e
    else:
        raise AssertionError("an absurd size was accepted")
with uvm.lab.Lab() as lab:
    lab.allocate(1 << 40, 1 << 20)
print("installed uvm", uvm.__version__, "works")
"""


def main():
    for module in ("pip", "setuptools"):
        if subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True).returncode != 0:
            print(f"{module} is not installed for {sys.executable} (Debian package python3-{module}): "
                  "the offline pip install is not tried")
            return SKIP
    work = tempfile.mkdtemp(prefix="uvm-pip-")
    try:
        src, site = os.path.join(work, "src"), os.path.join(work, "site")
        shutil.copytree(os.path.join(ROOT, "python"), src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
        done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                               "--no-deps", "--target", site, src], env=env, capture_output=True, text=True)
        print(done.stdout[-2000:], done.stderr[-2000:])
        if done.returncode != 0:
            print("pip install failed")
            return 1
        for name in ("uvm/__init__.py", "uvm/_capi.py", "uvm/manager.py", "uvm/errors.py", "uvm/enums.py",
                     "uvm/info.py", "uvm/py.typed", "uvm/lab.py", "uvm_lab.py"):
            if not os.path.exists(os.path.join(site, name)):
                print(f"not installed: {name}")
                return 1
        # From another folder, with nothing of the source tree on the path.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["PYTHONPATH"] = site
        if env.get("UVM_LIBRARY"):  # the check runs from another folder
            env["UVM_LIBRARY"] = os.path.abspath(env["UVM_LIBRARY"])
        run = subprocess.run([sys.executable, "-c", CHECK, site], cwd=work, env=env, capture_output=True, text=True)
        print(run.stdout, run.stderr)
        return 0 if run.returncode == 0 and "works" in run.stdout else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
