#!/usr/bin/env python3
"""What a process's manager of the library holds on each GPU it sees
(nvidia-smi's memory.used, MiB): made, and with --alloc-mib N after N MiB of
vidmem on GPU 0 (each GPU is opened at its first use, docs/cuda_backend.md).
One line on stdout. Run on a GPU machine with the library on the path
(tools/gpu_common.sh's gpu_python_env)."""
import argparse
import subprocess
import time

import uvm


def used():
    q = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                       capture_output=True, text=True)
    return [int(x) for x in q.stdout.split()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--alloc-mib", type=int, default=0, help="then allocate this much on GPU 0")
    args = ap.parse_args()
    before = used()
    m = uvm.Manager(backend="cuda")
    time.sleep(0.5)
    made = used()
    line = "a process's manager of the library holds on each GPU it sees (MiB, nvidia-smi): made %s" % (
        [b - a for a, b in zip(before, made)])
    if args.alloc_mib:
        o = m.alloc(args.alloc_mib << 20, backing="vidmem", gpu=0)
        time.sleep(0.5)
        after = used()
        line += ", after %d MiB on GPU 0 %s" % (args.alloc_mib, [b - a for a, b in zip(before, after)])
        o.free()
    m.close()
    print(line)


if __name__ == "__main__":
    main()
