#!/usr/bin/env python3
"""The three rounds of this folder (roundN/train_peers.json, one call each,
back to back on one H200) as one --peers run: bench/train_torch.py's own
table over them, each run numbered by its call. Prints Markdown."""
import json
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", ".."))
import train_torch  # noqa: E402  (bench/, found above)

metas, runs = [], []
for r in (1, 2, 3):
    with open(os.path.join(here, f"round{r}", "train_peers.json")) as f:
        got = json.load(f)
    metas.append(got["meta"])
    runs += [dict(run, round=r) for run in got["runs"]]
meta = dict(metas[0], rounds=len(metas), allocators=["default", "expandable", "async", "uvm"],
            total_s=round(sum(m.get("total_s", 0) for m in metas), 1))
print(train_torch.peers_table(meta, runs))
