"""The Python package's type hints, checked with mypy (python/pyproject.toml's
[tool.mypy]: the public modules typed throughout). Skips (77) where mypy is
not installed (Debian: python3-mypy).

    python3 tests/python/check_types.py [cache-dir]
"""
import os
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def main():
    try:
        import mypy  # noqa: F401  (only whether it is there)
    except ImportError:
        print("skipped: mypy is not installed (Debian: python3-mypy)")
        return 77
    python = os.path.join(ROOT, "python")
    cache = sys.argv[1] if len(sys.argv) > 1 else os.path.join(python, ".mypy_cache")
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", os.path.join(python, "pyproject.toml"),
                           "--cache-dir", cache, "uvm"], cwd=python).returncode


if __name__ == "__main__":
    sys.exit(main())
