"""Where a training step's time goes, under each allocator (issue 39): a
training run's steps (bench/train_torch.py's workloads; GPT-2 unless --model
says another) timed, then two of them
under torch.profiler, in a process per allocator, alternating:
  - the median step, and how much of it the GPU was busy (the kernels' and
    copies' time over the step's wall time): a step the allocator slows on
    the CPU side shows as idle GPU time;
  - the CPU operators with the most self time per step (the allocator's cost
    lands in the operators that allocate: aten::empty_strided, ...);
  - the CUDA runtime calls per step (syncs, event records, launches);
  - under the library, what it did per step: allocations, root chunks
    grown and moved, copy-engine operations.
Usage, on a GPU machine (PYTHONPATH=python, UVM_LIBRARY and
UVM_TORCH_ALLOC_LIBRARY set as tools/torch_check.sh sets them):
    python3 tools/step_profile.py --out DIR [--model gpt2] [--allocs default,uvm] [--rounds 2]
        [--driver-profile]
Writes DIR/step_profile.md and DIR/step_profile.json; with --driver-profile,
the library's runs under UVM_DRIVER_PROFILE, one file per run in DIR
(driver_uvm_<round>.txt: every driver call of the process, warm-up included)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))


def one(model_name, alloc, steps, profiled):
    import train_torch as tt
    alloc = tt.apply_alloc(alloc)
    import torch
    uvm_torch = None
    if alloc == "uvm":
        import uvm.torch as uvm_torch
        uvm_torch.enable()
    torch.manual_seed(0)
    device = tt.Device(torch, False)
    gen = torch.Generator().manual_seed(1234)
    mid = []
    model, opt, _, batch, step, _ = tt.training(model_name, torch, device, gen, mid)

    def run_step():
        data = batch()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = step(data)
        opt.step()
        torch.cuda.synchronize()
        mid.clear()
        return (time.perf_counter() - t0) * 1e3, loss.item()

    for _ in range(8):
        run_step()

    def lib_stats():
        out = {"allocations (torch.cuda.memory_stats)": torch.cuda.memory_stats(0).get("allocation.all.allocated", 0)}
        if uvm_torch is not None:
            g = uvm_torch.manager().gpu_stats(0)
            out.update(root_chunks_grown=g.root_chunks_grown, root_chunks_moved=g.root_chunks_moved,
                       ce_operations=g.ce_operations)
        return out

    before = lib_stats()
    times = [run_step()[0] for _ in range(steps)]
    after = lib_stats()
    per_step = {k: (after[k] - before[k]) / steps for k in before}

    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        walls = [run_step()[0] for _ in range(profiled)]
    events = prof.key_averages()
    gpu_us = 0.0
    cpu_ops, runtime = [], {}
    for e in events:
        dev_self = getattr(e, "self_device_time_total", None)
        if dev_self is None:
            dev_self = getattr(e, "self_cuda_time_total", 0)
        gpu_us += dev_self
        name = e.key
        if name.startswith("cuda") or name.startswith("cu"):
            runtime[name] = e.count / profiled
        else:
            cpu_ops.append((e.self_cpu_time_total / profiled, e.count / profiled, name))
    cpu_ops.sort(reverse=True)
    wall_ms = sum(walls) / profiled
    return {"alloc": alloc if alloc != "uvm" else "uvm", "median_step_ms": statistics.median(times),
            "steps": times, "profiled_wall_ms": wall_ms, "gpu_busy_ms": gpu_us / 1e3 / profiled,
            "gpu_busy_fraction": gpu_us / 1e3 / profiled / wall_ms,
            "top_cpu_ops": [{"self_cpu_us": round(t, 1), "calls": c, "name": n} for t, c, n in cpu_ops[:15]],
            "runtime_calls_per_step": dict(sorted(runtime.items(), key=lambda kv: -kv[1])[:20]),
            "library_per_step": per_step}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="gpt2", choices=("gpt2", "resnet50", "varlen"))
    ap.add_argument("--allocs", default="default,uvm")
    ap.add_argument("--driver-profile", action="store_true")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--profiled", type=int, default=2)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print("RESULT " + json.dumps(one(a.model, a.one, a.steps, a.profiled)))
        return
    os.makedirs(a.out, exist_ok=True)
    results = []
    for r in range(a.rounds):
        for alloc in a.allocs.split(","):
            env = dict(os.environ)
            if a.driver_profile and alloc == "uvm":
                env["UVM_DRIVER_PROFILE"] = os.path.join(a.out, f"driver_uvm_{r + 1}.txt")
            p = subprocess.run([sys.executable, __file__, "--out", a.out, "--model", a.model, "--one", alloc,
                                "--steps", str(a.steps), "--profiled", str(a.profiled)],
                               capture_output=True, text=True, timeout=600, env=env)
            line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
            if p.returncode != 0 or not line:
                print(f"{alloc} round {r + 1} failed (rc {p.returncode}):\n{p.stderr[-3000:]}", file=sys.stderr)
                continue
            res = json.loads(line[0][7:])
            res["round"] = r + 1
            results.append(res)
            print(f"{alloc} round {r + 1}: median step {res['median_step_ms']:.2f} ms, GPU busy "
                  f"{res['gpu_busy_fraction'] * 100:.1f}% of the profiled steps", flush=True)
    with open(os.path.join(a.out, "step_profile.json"), "w") as f:
        json.dump(results, f, indent=1)
    lines = [f"# {a.model} training steps under each allocator, profiled", "",
             "| allocator | round | median step | profiled step wall | GPU busy | busy share |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in results:
        lines.append(f"| {r['alloc']} | {r['round']} | {r['median_step_ms']:.2f} ms | {r['profiled_wall_ms']:.2f} ms | "
                     f"{r['gpu_busy_ms']:.2f} ms | {r['gpu_busy_fraction'] * 100:.1f}% |")
    for r in results[-len(a.allocs.split(",")):]:
        lines += ["", f"## {r['alloc']}: CPU operators by self time per step", "", "| self CPU us | calls | operator |",
                  "| --- | --- | --- |"]
        lines += [f"| {o['self_cpu_us']} | {o['calls']:.0f} | {o['name']} |" for o in r["top_cpu_ops"]]
        lines += ["", "runtime calls per step: " + ", ".join(f"{k} {v:.0f}" for k, v in r["runtime_calls_per_step"].items())]
        if r["library_per_step"]:
            lines += ["", "per step: " + ", ".join(f"{k} {v:.1f}" for k, v in r["library_per_step"].items())]
    with open(os.path.join(a.out, "step_profile.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
