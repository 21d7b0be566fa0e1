#!/usr/bin/env python3
"""The three rounds of this folder (roundN/train_peers.json, one call each,
back to back on one H200) as one table: per workload and allocator the
median over rounds and each round's figure, then the library's ratios to
the targets of issue 39. Prints Markdown."""
import json
import os
import statistics

here = os.path.dirname(os.path.abspath(__file__))
allocs = ["default", "expandable", "async", "uvm"]
names = {"default": "PyTorch caching", "expandable": "expandable_segments", "async": "cudaMallocAsync",
         "uvm": "library"}
workloads = ["gpt2", "resnet50", "varlen", "generate"]
wnames = {"gpt2": "GPT-2 training", "resnet50": "ResNet-50 training", "varlen": "variable-length GPT-2",
          "generate": "generate() serving"}
figures = [("median_step_ms", "step (ms; generate ms/token)", "%.1f"),
           ("peak_driver_used_mib", "peak driver-used (MiB)", "%.0f"),
           ("after_release_driver_used_mib", "after empty_cache (MiB)", "%.0f")]
runs = {}
for r in (1, 2, 3):
    path = os.path.join(here, f"round{r}", "train_peers.json")
    for run in json.load(open(path))["runs"]:
        if "median_step_ms" in run:
            runs.setdefault((run["model"], run["alloc"]), []).append((r, run))


def med(w, a, key):
    vals = [run[key] for _, run in runs.get((w, a), [])]
    return statistics.median(vals) if vals else None


print("| workload | figure | " + " | ".join(names[a] for a in allocs) + " |")
print("| --- | --- |" + " --- |" * len(allocs))
for w in workloads:
    for key, label, fmt in figures:
        cells = []
        for a in allocs:
            got = runs.get((w, a), [])
            if not got:
                cells.append("-")
                continue
            each = ", ".join(fmt % run[key] for _, run in got)
            cells.append(f"**{fmt % med(w, a, key)}** ({each})")
        print(f"| {wnames[w]} | {label} | " + " | ".join(cells) + " |")
print()
print("| workload | step / PyTorch caching | peak / min(expandable, async) | after / PyTorch caching |")
print("| --- | --- | --- | --- |")
for w in workloads:
    step = med(w, "uvm", "median_step_ms") / med(w, "default", "median_step_ms")
    peak = med(w, "uvm", "peak_driver_used_mib") / min(med(w, "expandable", "peak_driver_used_mib"),
                                                       med(w, "async", "peak_driver_used_mib"))
    after = med(w, "uvm", "after_release_driver_used_mib") / med(w, "default", "after_release_driver_used_mib")
    mark = lambda x: "%.3f %s" % (x, "met" if x <= 1.0 else "missed")
    print(f"| {wnames[w]} | {mark(step)} | {mark(peak)} | {mark(after)} |")
