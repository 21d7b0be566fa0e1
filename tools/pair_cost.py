"""What one allocation and its free cost through PyTorch, under each
allocator (issue 39): torch.empty on the GPU and the tensor dropped, sizes
cycling from 512 B to 4 MiB with three tensors alive, in a tight loop (the
allocator's code and data stay in the CPU's caches) and with 4 MiB of host
memory walked between pairs (as a training step's work between allocations
evicts them; the walk's own time, measured alone, is taken off). A process
per allocator, alternating. On a GPU machine (PYTHONPATH=python, UVM_LIBRARY
and UVM_TORCH_ALLOC_LIBRARY set as tools/torch_check.sh sets them):
    python3 tools/pair_cost.py [--allocs default,uvm] [--rounds 2]"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))

SIZES = [512, 4096, 65536, 1 << 20, 3 << 19, 4 << 20, 24576, 262144]


def one(alloc, pairs):
    import train_torch as tt
    alloc = tt.apply_alloc(alloc)
    import torch
    if alloc == "uvm":
        import uvm.torch
        uvm.torch.enable()
    dev = torch.device("cuda", 0)
    walk = torch.zeros(4 << 20, dtype=torch.uint8)

    def loop(n, polluted):
        alive = [None, None, None]
        t0 = time.perf_counter_ns()
        for i in range(n):
            alive[i % 3] = torch.empty(SIZES[i % len(SIZES)], dtype=torch.uint8, device=dev)
            if polluted:
                walk[::64] += 1  # every cache line of 4 MiB
        return (time.perf_counter_ns() - t0) / n

    def walk_only(n):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            walk[::64] += 1
        return (time.perf_counter_ns() - t0) / n

    loop(2000, False)  # warm: every size cached or parked
    tight = min(loop(pairs, False) for _ in range(3))
    polluted = min(loop(pairs // 10, True) - walk_only(pairs // 10) for _ in range(3))
    torch.cuda.synchronize()
    return {"alloc": alloc, "tight_ns_per_pair": tight, "polluted_ns_per_pair": polluted}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--allocs", default="default,uvm")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--pairs", type=int, default=20000)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print("RESULT " + json.dumps(one(a.one, a.pairs)))
        return
    print("| allocator | round | tight loop, ns a pair | caches walked between pairs, ns a pair |")
    print("| --- | --- | --- | --- |")
    for r in range(a.rounds):
        for alloc in a.allocs.split(","):
            p = subprocess.run([sys.executable, __file__, "--one", alloc, "--pairs", str(a.pairs)],
                               capture_output=True, text=True, timeout=300)
            line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
            if p.returncode or not line:
                print(f"| {alloc} | {r + 1} | failed: {p.stderr[-400:]!r} | |")
                continue
            res = json.loads(line[0][7:])
            print(f"| {alloc} | {r + 1} | {res['tight_ns_per_pair']:.0f} | {res['polluted_ns_per_pair']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
