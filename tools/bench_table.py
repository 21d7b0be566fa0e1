#!/usr/bin/env python3
"""Turn one run of tools/bench_all.sh (Google Benchmark JSON files in a folder)
into a Markdown table: medians, ratios to the baselines measured in the same
run, and each of the project's targets with whether this run met it.

    tools/bench_table.py <results-folder>  > results.md
"""
import json
import os
import sys

UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
CUT = []  # JSON files that were cut short


def load(folder):
    """run name -> median entry, over every JSON file of the run."""
    medians = {}
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".json"):
            continue
        with open(os.path.join(folder, name)) as f:
            text = f.read()
        try:
            data = json.loads(text)
        except ValueError:
            # A program stopped by its time limit leaves its JSON cut short:
            # keep the entries that were written whole.
            end = text.rfind("\n    }")
            try:
                data = json.loads(text[:end + 6] + "\n  ]\n}") if end > 0 else {}
            except ValueError:
                data = {}
            CUT.append(name)
        for b in data.get("benchmarks", []):
            if b.get("aggregate_name") == "median" and not b.get("error_occurred"):
                medians[b["run_name"]] = b
    return medians


class Table:
    def __init__(self, medians):
        self.m = medians

    def ns(self, name):
        b = self.m.get(name)
        return b["real_time"] * UNIT_NS[b.get("time_unit", "ns")] if b else None

    def bw(self, name):
        """GB/s (10^9 bytes per second)."""
        b = self.m.get(name)
        return b["bytes_per_second"] / 1e9 if b and "bytes_per_second" in b else None

    def counter(self, name, key):
        b = self.m.get(name)
        return b.get(key) if b else None


def fmt_time(ns):
    if ns is None:
        return "—"
    if ns < 1e3:
        return f"{ns:.0f} ns"
    if ns < 1e6:
        return f"{ns / 1e3:.1f} µs"
    return f"{ns / 1e6:.1f} ms"


def fmt(x, digits=2, suffix=""):
    return "—" if x is None else f"{x:.{digits}f}{suffix}"


def ratio(a, b):
    return a / b if a is not None and b else None


def worst_of(values):
    """The largest of the measured values (None: not measured), or None."""
    measured = [v for v in values if v is not None]
    return max(measured) if measured else None


def verdict(ok):
    return "—" if ok is None else ("met" if ok else "**missed**")


def main(folder):
    t = Table(load(folder))
    out = []
    header = open(os.path.join(folder, "device.txt")).read().strip() if os.path.exists(
        os.path.join(folder, "device.txt")) else ""
    out.append(f"# Benchmark results: {os.path.basename(os.path.normpath(folder))}\n")
    out.append("```\n" + header + "\n```\n")
    out.append("Medians of the repetitions in `*.json` beside this file. Ratios compare figures "
               "of this one run. `—`: not measured here (no GPU, one GPU, or the program was not built).\n")
    if CUT:
        out.append("Cut short by the program's time limit (only the benchmarks that finished are used): "
                   + ", ".join(f"`{c}`" for c in CUT) + ".\n")

    targets = []

    # Allocation from held chunks.
    out.append("## Alloc + free pair, vidmem, served from held memory\n")
    out.append("| size | ours | cudaMallocAsync pair | ratio | PyTorch raw_alloc pair | ratio | cudaMalloc+cudaFree | ratio |")
    out.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for size, label in ((4096, "4 KiB"), (65536, "64 KiB"), (2097152, "2 MiB")):
        ours = t.ns(f"alloc_free/backing:1/size:{size}")
        asyn = t.ns(f"rt_malloc_async_free/{size}/real_time")
        torch = t.ns(f"torch_raw_alloc_delete/{size}")
        rt = t.ns(f"rt_malloc_free/{size}/real_time")
        out.append(f"| {label} | {fmt_time(ours)} | {fmt_time(asyn)} | {fmt(ratio(asyn, ours), 1, 'x')} "
                   f"| {fmt_time(torch)} | {fmt(ratio(torch, ours), 1, 'x')} | {fmt_time(rt)} | {fmt(ratio(rt, ours), 0, 'x')} |")
    ours2m = t.ns("alloc_free/backing:1/size:2097152")
    async2m = t.ns("rt_malloc_async_free/2097152/real_time")
    targets.append(("held alloc+free pair, 2 MiB, under 0.25 µs", fmt_time(ours2m),
                    None if ours2m is None else ours2m < 250))
    r = ratio(async2m, ours2m)
    targets.append(("held pair at least 4x faster than cudaMallocAsync pair", fmt(r, 1, "x"),
                    None if r is None else r >= 4))
    out.append("\nRatios are the baseline's time over ours (above 1: ours is faster).\n")

    # Growth.
    out.append("## Growing vidmem (pool empty), per 2 MiB\n")
    out.append("| object | time | per 2 MiB | raw create+reserve+map+set-access of 2 MiB | ratio |")
    out.append("| --- | --- | --- | --- | --- |")
    raw = t.ns("driver_vmm_2m/real_time")
    grow32 = None
    for mib in (2, 32, 256):
        name = f"alloc_cold/MiB:{mib}/manual_time"
        total, chunks = t.ns(name), t.counter(name, "chunks")
        per = total / chunks if total is not None and chunks else None
        if mib == 32:
            grow32 = per
        out.append(f"| {mib} MiB | {fmt_time(total)} | {fmt_time(per)} | {fmt_time(raw)} | {fmt(ratio(per, raw), 2, 'x')} |")
    targets.append(("growing by 32 MiB: under 15 µs per 2 MiB", fmt_time(grow32),
                    None if grow32 is None else grow32 < 15e3))
    out.append("\nRatio: ours per 2 MiB over the raw driver sequence (below 1: ours is cheaper).\n")

    # Growth in large handles (CUDA).
    out.append("## Growing vidmem in large handles (CUDA), per 2 MiB\n")
    out.append("One object of the size, 2M chunks, from an empty pool (`cuda_growth`); the same memory as 2 MiB "
               "objects one after another (`cuda_growth_objects`); and the driver's floor in the same run "
               "(`driver_growth`: reserve, `cuMemCreate` + `cuMemMap` of handles of the size, one `cuMemSetAccess`).\n")
    out.append("| size | ours, one object | ours, 2 MiB objects | driver, one handle | driver, 2 MiB handles | ours / driver |")
    out.append("| --- | --- | --- | --- | --- | --- |")
    per = {}
    for mib in (2, 32, 256, 1024):
        ours = t.counter(f"cuda_growth/MiB:{mib}/min_time:0.100/manual_time", "per_2MiB_us")
        objs = t.counter(f"cuda_growth_objects/MiB:{mib}/min_time:0.100/manual_time", "per_2MiB_us")
        one = t.counter(f"driver_growth/MiB:{mib}/handle:{mib}/min_time:0.100/manual_time", "per_2MiB_us")
        small = t.counter(f"driver_growth/MiB:{mib}/handle:2/min_time:0.100/manual_time", "per_2MiB_us")
        per[mib] = (ours, one)
        us = lambda x: fmt(x, 2, " µs")
        out.append(f"| {mib} MiB | {us(ours)} | {us(objs)} | {us(one)} | {us(small)} | {fmt(ratio(ours, one), 2)} |")
    o32, o1g = per[32][0], per[1024][0]
    targets.append(("growing by 32 MiB: under 5 µs per 2 MiB", fmt(o32, 2, " µs"), None if o32 is None else o32 < 5))
    targets.append(("growing by 1 GiB: under 1 µs per 2 MiB (driver floor of the run beside it)",
                    f"{fmt(o1g, 2, ' µs')} (floor {fmt(per[1024][1], 2, ' µs')})", None if o1g is None else o1g < 1))
    out.append("")

    # Every object kernel-mappable at once (CUDA).
    out.append("## Alloc + GPU kernel map of held objects (CUDA)\n")
    out.append("| size | alloc + map + unmap + free | alloc with UVM_MEM_GPU_MAPPED + free | cuMemAllocAsync + cuMemFreeAsync |")
    out.append("| --- | --- | --- | --- |")
    pairs = []
    for size in (4096, 12288, 65536, 1024000, 2048000, 2097152, 6291456):
        pair = t.ns(f"cuda_alloc_kernel_map/size:{size}/real_time")
        mapped = t.ns(f"cuda_alloc_mapped/size:{size}/real_time")
        asyn = t.ns(f"driver_alloc_async/size:{size}/real_time")
        if size <= 2097152:
            pairs.append(pair)
        out.append(f"| {size} B | {fmt_time(pair)} | {fmt_time(mapped)} | {fmt_time(asyn)} |")
    worst = worst_of(pairs)
    targets.append(("alloc + kernel map + unmap + free of a held object: under 1 µs for every size up to 2 MiB",
                    f"worst {fmt_time(worst)}", None if worst is None else worst < 1e3))
    out.append("")

    # Trace replays.
    out.append("## Replaying PyTorch training traces (`bench/traces/`), time per alloc or free\n")
    out.append("| trace | ops | alloc/free | + GPU_MAPPED flag | ratio | + map call | ratio | cuMemAllocAsync | ours / async |")
    out.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    ratios = []
    for i, label in ((0, "transformer"), (1, "cnn")):
        base = t.counter(f"replay/trace:{i}/mode:0/manual_time", "ns_per_op")
        flag = t.counter(f"replay/trace:{i}/mode:1/manual_time", "ns_per_op")
        call = t.counter(f"replay/trace:{i}/mode:2/manual_time", "ns_per_op")
        asyn = t.counter(f"driver_async_replay/trace:{i}/manual_time", "ns_per_op")
        ops = t.counter(f"replay/trace:{i}/mode:0/manual_time", "ops")
        ratios += [ratio(flag, base), ratio(call, base)]
        out.append(f"| {label} | {fmt(ops, 0)} | {fmt_time(base)} | {fmt_time(flag)} | {fmt(ratio(flag, base), 2, 'x')} "
                   f"| {fmt_time(call)} | {fmt(ratio(call, base), 2, 'x')} | {fmt_time(asyn)} | {fmt(ratio(flag, asyn), 2)} |")
    worst = worst_of(ratios)
    targets.append(("trace replay with a kernel mapping per object: at most 2x the replay without", fmt(worst, 2, "x"),
                    None if worst is None else worst <= 2))
    out.append("")

    # Streams (bench_stream).
    out.append("## Stream-ordered allocation, trackers, async copies (`bench_stream`)\n")
    out.append("| size | alloc_async + free_async, one stream | cuMemAllocAsync pair | ratio | plain alloc + free | alloc + record_use + free |")
    out.append("| --- | --- | --- | --- | --- | --- |")
    stream_ratios = []
    for size, label in ((4096, "4 KiB"), (65536, "64 KiB"), (2097152, "2 MiB")):
        ours = t.ns(f"stream_alloc_free/{size}")
        drv = t.ns(f"driver_alloc_async/{size}")
        plain = t.ns(f"plain_alloc_free/{size}")
        tracked = t.ns(f"tracked_alloc_free/{size}")
        stream_ratios.append(ratio(drv, ours))
        out.append(f"| {label} | {fmt_time(ours)} | {fmt_time(drv)} | {fmt(ratio(drv, ours), 1, 'x')} "
                   f"| {fmt_time(plain)} | {fmt_time(tracked)} |")
    measured = [r for r in stream_ratios if r is not None]
    least = min(measured) if measured else None
    targets.append(("stream-ordered alloc+free pair at least 4x faster than the cuMemAllocAsync pair (least of the sizes)",
                    fmt(least, 1, "x"), None if least is None else least >= 4))
    copy_ours, copy_drv = t.bw("async_copy/256/real_time"), t.bw("driver_memcpy_async/256/real_time")
    out.append(f"\nRecording use of an object on a stream: {fmt_time(t.ns('record_use'))} per call. "
               f"Async copy of 256 MiB vidmem -> vidmem: {fmt(copy_ours, 0)} GB/s against cuMemcpyAsync "
               f"{fmt(copy_drv, 0)} GB/s ({fmt(ratio(copy_ours, copy_drv), 3)}).\n")

    # Eviction (bench_evict).
    out.append("## Eviction and restore (`bench_evict`)\n")
    ev, rs = t.bw("evict_1g/0/real_time"), t.bw("evict_1g/1/real_time")
    d2h, h2d = t.bw("driver_pinned_copy_1g/0/real_time"), t.bw("driver_pinned_copy_1g/1/real_time")
    out.append("| 1 GiB of 2M-chunk objects | GB/s | pinned driver copy, GB/s | of it |")
    out.append("| --- | --- | --- | --- |")
    out.append(f"| evict (vidmem -> host) | {fmt(ev, 1)} | {fmt(d2h, 1)} (D2H) | {fmt(ratio(ev, d2h), 2)} |")
    out.append(f"| restore (host -> vidmem) | {fmt(rs, 1)} | {fmt(h2d, 1)} (H2D) | {fmt(ratio(rs, h2d), 2)} |")
    for label, a, b in (("evicting 1 GiB: at least 90% of pinned D2H", ev, d2h),
                        ("restoring 1 GiB: at least 90% of pinned H2D", rs, h2d)):
        r = ratio(a, b)
        targets.append((label, fmt(r, 2), None if r is None else r >= 0.9))
    out.append(f"\nA 2 MiB evictable allocation from free memory: {fmt_time(t.ns('alloc_2m/0/real_time'))}; "
               f"one that must evict the coldest 2 MiB object first: {fmt_time(t.ns('alloc_2m/1/real_time'))}.\n")
    out.append("| working set (x the job's 1,280 MiB of GPU memory) | GB/s of working set, write + read pass |")
    out.append("| --- | --- |")
    for times in (1, 2, 3):
        out.append(f"| {times}x | {fmt(t.bw(f'out_of_core/{times}/iterations:2/real_time'), 1)} |")
    out.append("")

    # Streaming kernel.
    out.append("## Streaming kernel reading 1 GiB (the HBM ceiling)\n")
    base, ours = t.bw("stream_read/ours:0/manual_time"), t.bw("stream_read/ours:1/manual_time")
    out.append("| buffer | GB/s | of cudaMalloc |")
    out.append("| --- | --- | --- |")
    out.append(f"| cudaMalloc | {fmt(base, 0)} | 1.00 |")
    out.append(f"| our vidmem object (2M chunks, kernel mapping) | {fmt(ours, 0)} | {fmt(ratio(ours, base), 3)} |\n")
    r = ratio(ours, base)
    targets.append(("streaming kernel over our vidmem: at least 98% of cudaMalloc", fmt(r, 3),
                    None if r is None else r >= 0.98))

    # Copies.
    out.append("## Copies (GB/s)\n")
    out.append("Host copies measured alternately with pinned cudaMemcpy in every iteration "
               "(`host_copy_ab`: 1 GiB, 2M chunks, kernel mappings):\n")
    out.append("| direction | ours | pinned cudaMemcpy | ours / cudaMemcpy |")
    out.append("| --- | --- | --- | --- |")
    ab = {}
    for h2d, label in ((1, "sysmem → vidmem (H2D)"), (0, "vidmem → sysmem (D2H)")):
        name = f"host_copy_ab/h2d:{h2d}/manual_time"
        o, b = t.counter(name, "ours_GBps"), t.counter(name, "rt_GBps")
        ab[h2d] = ratio(o, b)
        out.append(f"| {label} | {fmt(o, 1)} | {fmt(b, 1)} | {fmt(ab[h2d], 2)} |")
    out.append("\nEvery path, from separate benchmarks of this run:\n")
    out.append("| path | ours | baseline | baseline GB/s | ours / baseline |")
    out.append("| --- | --- | --- | --- | --- |")
    rows = [
        ("sysmem → vidmem, 1 GiB, 2M chunks", "sysmem_copy_1g/h2d:1/chunk:2097152/real_time", "pinned cudaMemcpy H2D", "rt_memcpy/kind:0/real_time"),
        ("sysmem → vidmem, 1 GiB, 4K chunks", "sysmem_copy_1g/h2d:1/chunk:4096/real_time", "pinned cudaMemcpy H2D", "rt_memcpy/kind:0/real_time"),
        ("vidmem → sysmem, 1 GiB, 2M chunks", "sysmem_copy_1g/h2d:0/chunk:2097152/real_time", "pinned cudaMemcpy D2H", "rt_memcpy/kind:1/real_time"),
        ("vidmem → sysmem, 1 GiB, 4K chunks", "sysmem_copy_1g/h2d:0/chunk:4096/real_time", "pinned cudaMemcpy D2H", "rt_memcpy/kind:1/real_time"),
        ("vidmem → vidmem, 256 MiB, kernel mappings", "copy/path:0/real_time", "cudaMemcpy D2D (1 GiB)", "rt_memcpy/kind:2/real_time"),
        ("sysmem → vidmem, 256 MiB, kernel mappings", "copy/path:1/real_time", "pinned cudaMemcpy H2D", "rt_memcpy/kind:0/real_time"),
        ("vidmem → sysmem, 256 MiB, kernel mappings", "copy/path:2/real_time", "pinned cudaMemcpy D2H", "rt_memcpy/kind:1/real_time"),
        ("GPU 0 → GPU 1 (peer), 256 MiB", "copy/path:3/real_time", "cudaMemcpyPeer (1 GiB)", "rt_memcpy/kind:3/real_time"),
    ]
    for label, ours_name, base_label, base_name in rows:
        o, b = t.bw(ours_name), t.bw(base_name)
        out.append(f"| {label} | {fmt(o, 1)} | {base_label} | {fmt(b, 1)} | {fmt(ratio(o, b), 2)} |")
    r = ab.get(1)
    targets.append(("sysmem → vidmem copy: at least 90% of pinned cudaMemcpy (alternating A/B)", fmt(r, 2),
                    None if r is None else r >= 0.90))
    out.append("\nvidmem → vidmem counts bytes copied once (cudaMemcpy D2D likewise).\n")

    # Pinning.
    out.append("## Pinning (DMA map) 1 GiB of sysmem on GPU 0\n")
    out.append("Ours and cuMemHostRegister of the same pages, alternately in every iteration "
               "(`sysmem_dma_map_1g`); and raw cuMemHostRegister of a fresh anonymous buffer.\n")
    out.append("| pages | ours | per page | raw, same pages | ours / raw | raw, anonymous buffer |")
    out.append("| --- | --- | --- | --- | --- | --- |")
    pin_ratios = []
    for chunk, label, thp in ((4096, "4 KiB", 0), (2097152, "2 MiB", 1)):
        name = f"sysmem_dma_map_1g/chunk:{chunk}/manual_time"
        o, same = t.counter(name, "ours_ms"), t.counter(name, "raw_ms")
        o = None if o is None else o * 1e6
        same = None if same is None else same * 1e6
        anon = t.ns(f"driver_host_register_1g/thp:{thp}/real_time")
        huge = t.counter(name, "huge_MiB")
        per = o / ((1 << 30) / chunk) if o is not None else None
        r = ratio(o, same)
        pin_ratios.append(r)
        note = "" if huge is None else f" ({huge:.0f} MiB on huge pages)"
        out.append(f"| {label}{note} | {fmt_time(o)} | {fmt_time(per)} | {fmt_time(same)} | {fmt(r, 2)} "
                   f"| {fmt_time(anon)} ({'THP' if thp else 'base pages'}) |")
    worst = worst_of(pin_ratios)
    targets.append(("DMA map: at most 1.05x raw cuMemHostRegister of the same pages", fmt(worst, 2),
                    None if worst is None else worst <= 1.05))
    out.append("")

    # Mapping kinds and page tree.
    out.append("## Map + unmap pairs\n")
    out.append("| mapping | median |")
    out.append("| --- | --- |")
    for name in sorted(n for n in t.m if n.startswith(("map_", "page_tree_map", "cuda_alloc_map", "cuda_peer_map"))):
        extra = t.counter(name, "table_KiB")
        out.append(f"| `{name}` | {fmt_time(t.ns(name))}{'' if extra is None else f' ({extra:.0f} KiB of tables)'} |")
    out.append("")

    # Scaling.
    out.append("## Scaling: live objects and threads (4 KiB / 64 KiB vidmem pairs)\n")
    out.append("| case | median per pair (with threads: wall time / all pairs) | pairs/s, all threads |")
    out.append("| --- | --- | --- |")
    flat = []
    for n in (1000, 10000, 100000, 1000000):
        v = t.ns(f"alloc_free_live/live:{n}")
        if v is not None:
            flat.append(v)
        out.append(f"| {n} live objects | {fmt_time(v)} | {fmt(1e9 / v if v else None, 0)} |")
    for th in (1, 2, 4, 8, 16):
        v = t.ns(f"alloc_free_threads/real_time/threads:{th}")
        # With threads, Google Benchmark reports wall time over every thread's
        # iterations: the inverse of the throughput of all threads together.
        out.append(f"| {th} thread(s) | {fmt_time(v)} | {fmt(1e9 / v if v else None, 0)} |")
    if len(flat) == 4:
        growth = flat[-1] / flat[0]
        targets.append(("alloc cost flat from 1 thousand to 1 million live objects (1M / 1K within 1.5x)",
                        fmt(growth, 2, "x"), growth <= 1.5))
    out.append("")

    # Other driver figures.
    out.append("## Driver and runtime figures of the same run\n")
    out.append("| call | median |")
    out.append("| --- | --- |")
    for name in sorted(n for n in t.m if n.startswith(("driver_", "rt_managed", "rt_malloc_free"))):
        out.append(f"| `{name}` | {fmt_time(t.ns(name))} |")
    out.append("")

    out.insert(3, "## Targets\n\n| target | this run | |\n| --- | --- | --- |\n" + "\n".join(
        f"| {what} | {value} | {verdict(ok)} |" for what, value, ok in targets) + "\n")
    print("\n".join(out))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
