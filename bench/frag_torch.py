#!/usr/bin/env python3
"""A fragmenting workload through PyTorch's allocators (issue 45, item 4).

Each step allocates tensors of changing sizes (1-24 MiB, the range growing
from step to step, as a pool's requests grow with its batches), keeps a few
of them for the rest of the run (one in 25, scattered among the others), and
frees the rest; then the allocator is asked to give back what it can
(torch.cuda.empty_cache(); the library's "uvm-compact" also runs
uvm.torch.compact() every COMPACT_EVERY steps). What it measures, per step:
live bytes (the kept tensors), driver-used memory (torch.cuda.mem_get_info,
total - free, less what was used before the first step: the context, the
kernels the steps use, loaded by a warm-up, and what the allocator kept of
it) after the give-back, and the peak in mid-step; at the end held over
live, and the seconds each compaction took.

  bench/frag_torch.py --all OUTDIR [ROUNDS]   every allocator in its own process,
                                              alternating; OUTDIR/frag.json, frag.md
  bench/frag_torch.py --run ALLOC             one run, its JSON on stdout

Allocators: default (PyTorch's caching allocator), expandable
(expandable_segments:True), async (backend:cudaMallocAsync), uvm
(uvm.torch.enable()), uvm-compact (the same, compacting). Sizes by
FRAG_STEPS (40), FRAG_PER_STEP (400 tensors), FRAG_KEEP (25: one kept in
that many), COMPACT_EVERY (5)."""
import json
import os
import random
import statistics
import subprocess
import sys
import time

ALLOCS = ["default", "expandable", "async", "uvm", "uvm-compact"]
M = 1 << 20


def run(alloc):
    if alloc == "expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    elif alloc == "async":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
    import torch
    uvm_torch = None
    if alloc.startswith("uvm"):
        from uvm import torch as uvm_torch
        uvm_torch.enable()
    steps = int(os.environ.get("FRAG_STEPS", "40"))
    per_step = int(os.environ.get("FRAG_PER_STEP", "400"))
    keep_one_in = int(os.environ.get("FRAG_KEEP", "25"))
    every = int(os.environ.get("COMPACT_EVERY", "5"))
    torch.cuda.init()
    # The kernels the steps use loaded first (CUDA loads them lazily, into
    # device memory): the base is then what every allocator pays alike.
    w = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    w.fill_(1)
    int((w != w[0]).sum().item())
    del w
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    if uvm_torch is not None:
        uvm_torch.empty_cache()
    free0, total = torch.cuda.mem_get_info()
    base = total - free0

    def used():
        free, _ = torch.cuda.mem_get_info()
        return total - free - base

    rng = random.Random(1234)
    kept, live = [], 0
    rows, compactions = [], []
    peak = 0
    start = time.time()
    for step in range(steps):
        top = 4 + (20 * step) // max(1, steps - 1)  # MiB: 4 at the first step, 24 at the last
        batch = []
        for i in range(per_step):
            size = rng.randint(1 * M // 4096, top * M // 4096) * 4096
            t = torch.empty(size, dtype=torch.uint8, device="cuda")
            t.fill_(step & 0xFF)
            if rng.randrange(keep_one_in) == 0:
                kept.append(t)
                live += size
            else:
                batch.append(t)
        torch.cuda.synchronize()
        peak = max(peak, used())
        del batch
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        compact_s = None
        if alloc == "uvm-compact" and (step + 1) % every == 0:
            t0 = time.time()
            r = uvm_torch.compact()
            compact_s = time.time() - t0
            compactions.append({"step": step, "s": compact_s, "moved": r.bytes_moved,
                                "rebacked": r.bytes_rebacked, "driver_held_before": r.driver_held_before,
                                "driver_held_after": r.driver_held_after})
        held = used()
        rows.append({"step": step, "live": live, "held": held, "compact_s": compact_s})
    torch.cuda.synchronize()
    # Every kept tensor still holds its step's value.
    wrong = sum(int((t != t[0]).sum().item()) for t in kept)
    out = {"alloc": alloc, "steps": steps, "per_step": per_step, "keep_one_in": keep_one_in,
           "live": live, "held_end": rows[-1]["held"], "held_over_live_end": rows[-1]["held"] / live,
           "held_over_live_max": max(r["held"] / r["live"] for r in rows if r["live"]),
           "peak": peak, "wall_s": time.time() - start, "wrong_bytes": wrong, "rows": rows,
           "compactions": compactions}
    if uvm_torch is not None:
        out["extension"] = uvm_torch.enabled()
    return out


def main():
    if sys.argv[1:2] == ["--run"]:
        print(json.dumps(run(sys.argv[2])))
        return
    if sys.argv[1:2] != ["--all"] or len(sys.argv) < 3:
        sys.exit(__doc__)
    outdir = sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    os.makedirs(outdir, exist_ok=True)
    results = []
    for rnd in range(rounds):
        for alloc in ALLOCS:
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--run", alloc],
                               capture_output=True, text=True, timeout=600)
            if p.returncode != 0:
                results.append({"alloc": alloc, "round": rnd, "error": p.stderr[-2000:]})
            else:
                r = json.loads(p.stdout.strip().splitlines()[-1])
                r["round"] = rnd
                results.append(r)
            with open(os.path.join(outdir, "frag.json"), "w") as f:
                json.dump(results, f, indent=1)
    lines = ["| allocator | round | live at end (MiB) | held at end (MiB) | held/live at end | "
             "held/live, worst step | peak in mid-step (MiB) | compaction s (median) | wrong bytes |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['alloc']} | {r['round']} | error: {r['error'].splitlines()[-1] if r['error'] else '?'} "
                         "| | | | | | |")
            continue
        cs = [c["s"] for c in r["compactions"]]
        compact_s = f"{statistics.median(cs):.3f}" if cs else "-"
        lines.append(f"| {r['alloc']} | {r['round']} | {r['live'] / M:.0f} | {r['held_end'] / M:.0f} | "
                     f"{r['held_over_live_end']:.3f} | {r['held_over_live_max']:.3f} | {r['peak'] / M:.0f} | "
                     f"{compact_s} | {r['wrong_bytes']} |")
    with open(os.path.join(outdir, "frag.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
