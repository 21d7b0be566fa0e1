#!/usr/bin/env python3
"""PyTorch's graph APIs under uvm.torch.enable() (issue 40, item 2), on a GPU.

Each check runs twice, each run in a process of its own: under PyTorch's
own caching allocator and under the library (uvm.torch.enable()). Their
outputs must be bit-identical, and the run under the library must not have
failed:
  - gpt2_graph: a GPT-2 forward (random weights from a fixed seed, made
    inside uvm.torch.client("weights")) captured with torch.cuda.graph and
    replayed on three inputs, against the eager forward (its inputs, an
    additive causal mask among them, made on the GPU before the capture);
  - compile_mlp: a small MLP under torch.compile(mode="reduce-overhead")
    (CUDA graph trees), six calls (warm-up, recording, replays);
  - compile_train: the same MLP trained under reduce-overhead, two forwards
    before each backward, six steps, the losses and the weights after; the
    library's run reports the checkpoints graph trees took and set (on an
    H200 with PyTorch 2.11: 4 taken, none set; setting one is
    tests/python/test_torch_gpu.py's);
  - graphed_callables: torch.cuda.make_graphed_callables over an MLP, three
    training steps (forward and backward replayed), the weights after.
Each run also reports the graph's memory as PyTorch and the library see it:
torch.cuda.memory_allocated / max_memory_allocated / memory_reserved
before and after the capture, and uvm.torch.memory_stats() (library runs).

    python3 tools/torch_graph_check.py --out "$OUT"          # all checks
    python3 tools/torch_graph_check.py --out "$OUT" --only gpt2_graph --budget 300

in the environment tools/torch_check.sh sets (PYTHONPATH, UVM_LIBRARY,
UVM_TORCH_ALLOC_LIBRARY, UVM_TORCH_EXT_DIR). Needs transformers for
gpt2_graph and Triton (PyTorch's CUDA wheels have it) for compile_mlp.
Writes graph_check.md, graph_check.json and each run's log to --out;
exits 1 where a check failed.
"""
import argparse
import json
import os
import subprocess
import sys
import time
import traceback

CHECKS = ("gpt2_graph", "compile_mlp", "compile_train", "graphed_callables")


# ---------------------------------------------------------------------------
# One run (a child process): --run CHECK --allocator native|uvm --save FILE
# ---------------------------------------------------------------------------

def memory(torch, uvm_on):
    out = {
        "allocated": torch.cuda.memory_allocated(),
        "max_allocated": torch.cuda.max_memory_allocated(),
        "reserved": torch.cuda.memory_reserved(),
        "max_reserved": torch.cuda.max_memory_reserved(),
    }
    if uvm_on:
        import uvm.torch
        s = uvm.torch.memory_stats()
        out["uvm_allocated"] = s["allocated_bytes.all.current"]
        out["uvm_reserved"] = s["reserved_bytes.all.current"]
        out["uvm_held_live"] = s["uvm.held.live_bytes"]
    return out


def weights_scope(uvm_on):
    if uvm_on:
        import uvm.torch
        return uvm.torch.client("weights")
    import contextlib
    return contextlib.nullcontext()


def run_gpt2_graph(torch, uvm_on, report):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    config = GPT2Config(n_positions=256, attn_implementation="eager")
    with weights_scope(uvm_on):
        model = GPT2LMHeadModel(config).cuda().eval()
    gen = torch.Generator(device="cpu").manual_seed(1)
    inputs = [torch.randint(0, config.vocab_size, (4, 128), generator=gen).cuda() for _ in range(3)]
    # Every input of the captured forward is on the GPU before the capture:
    # left to itself, transformers' eager attention builds its causal mask
    # from a CPU scalar (torch.tensor(0.0, device=...): a copy from pageable
    # memory that synchronizes) and checks position ids for packed sequences
    # (.all(): a copy back), either of which a capture refuses, under any
    # allocator. An additive 4D mask is taken as it is; transformers without
    # masking_utils (older than 4.53) builds none without one.
    static = inputs[0].clone()
    kwargs = {"use_cache": False}
    try:
        import transformers.masking_utils  # noqa: F401
        allowed = torch.ones(128, 128, dtype=torch.bool, device="cuda").tril()
        mask = torch.zeros(4, 1, 128, 128, device="cuda")
        mask.masked_fill_(~allowed, torch.finfo(mask.dtype).min)
        kwargs["attention_mask"] = mask
    except ImportError:
        pass
    import transformers
    report["transformers"] = transformers.__version__
    report["attention_mask"] = "4d" if "attention_mask" in kwargs else "none"
    outputs = {}
    with torch.no_grad():
        for i, x in enumerate(inputs):
            outputs[f"eager{i}"] = model(x, **kwargs).logits.float().cpu()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm-up on a side stream, as PyTorch's docs do
            for _ in range(3):
                model(static, **kwargs)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        report["memory_before_capture"] = memory(torch, uvm_on)
        torch.cuda.reset_peak_memory_stats()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_out = model(static, **kwargs).logits
        torch.cuda.synchronize()
        report["memory_after_capture"] = memory(torch, uvm_on)
        for i, x in enumerate(inputs):
            static.copy_(x)
            g.replay()
            torch.cuda.synchronize()
            outputs[f"replay{i}"] = static_out.float().cpu()
    report["replay_equals_eager"] = all(torch.equal(outputs[f"eager{i}"], outputs[f"replay{i}"]) for i in range(3))
    return outputs


def mlp(torch):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 512)).cuda()


def run_compile_mlp(torch, uvm_on, report):
    with weights_scope(uvm_on):
        model = mlp(torch)
    compiled = torch.compile(model, mode="reduce-overhead")
    gen = torch.Generator(device="cpu").manual_seed(2)
    outputs = {}
    report["memory_before_capture"] = memory(torch, uvm_on)
    with torch.no_grad():
        for i in range(6):
            x = torch.randn(64, 512, generator=gen).cuda()
            outputs[f"call{i}"] = compiled(x).float().cpu()
            outputs[f"eager{i}"] = model(x).float().cpu()
    torch.cuda.synchronize()
    report["memory_after_capture"] = memory(torch, uvm_on)
    return outputs


def train(torch, model, lr, steps, loss_of):
    """`steps` SGD steps of `model` on loss_of(step): the losses and the
    weights after."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    outputs = {}
    for i in range(steps):
        loss = loss_of(i)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        outputs[f"loss{i}"] = loss.detach().float().cpu()
    torch.cuda.synchronize()
    for name, p in model.named_parameters():
        outputs[f"param.{name}"] = p.detach().float().cpu()
    return outputs


def run_compile_train(torch, uvm_on, report):
    # Training under reduce-overhead with two forwards before each backward
    # (forward and backward graphs, parents and children in graph trees,
    # each recording checkpointed: getCheckpointState).
    with weights_scope(uvm_on):
        model = mlp(torch)
    compiled = torch.compile(model, mode="reduce-overhead")
    gen = torch.Generator(device="cpu").manual_seed(4)
    report["memory_before_capture"] = memory(torch, uvm_on)

    def loss_of(_):
        a = torch.randn(64, 512, generator=gen).cuda()
        b = torch.randn(64, 512, generator=gen).cuda()
        return compiled(a).square().mean() + compiled(b).abs().mean()

    outputs = train(torch, model, 0.01, 6, loss_of)
    report["memory_after_capture"] = memory(torch, uvm_on)
    if uvm_on:
        import uvm.torch
        report["checkpoints"] = uvm.torch.checkpoint_counts()
    return outputs


def run_graphed_callables(torch, uvm_on, report):
    with weights_scope(uvm_on):
        model = mlp(torch)
    gen = torch.Generator(device="cpu").manual_seed(3)
    sample = torch.randn(64, 512, generator=gen).cuda().requires_grad_(True)
    report["memory_before_capture"] = memory(torch, uvm_on)
    graphed = torch.cuda.make_graphed_callables(model, (sample,))
    report["memory_after_capture"] = memory(torch, uvm_on)

    def loss_of(_):
        x = torch.randn(64, 512, generator=gen).cuda().requires_grad_(True)
        return graphed(x).square().mean()

    return train(torch, model, 0.1, 3, loss_of)


def child(check, allocator, save):
    report = {"check": check, "allocator": allocator}
    uvm_on = allocator == "uvm"
    try:
        if uvm_on:
            import uvm.torch
            report["enabled"] = uvm.torch.enable()
            report["extension_build"] = {k: v for k, v in uvm.torch.extension_build().items() if k != "failed_tries"}
            report["extension_failed_tries"] = uvm.torch.extension_build().get("failed_tries", [])
        import torch
        report["torch"] = torch.__version__
        start = time.time()
        outputs = globals()["run_" + check](torch, uvm_on, report)
        report["seconds"] = round(time.time() - start, 2)
        torch.save(outputs, save)
        report["status"] = "ran"
    except Exception as e:  # noqa: BLE001  (the failure is the result)
        report["status"] = "failed"
        report["error"] = f"{type(e).__name__}: {e}"[:4000]
        report["traceback"] = traceback.format_exc()[-6000:]
    print("REPORT " + json.dumps(report, default=str))
    return 0


# ---------------------------------------------------------------------------
# The comparison (the parent)
# ---------------------------------------------------------------------------

def run_one(check, allocator, out, deadline):
    save = os.path.join(out, f"graph_{check}_{allocator}.pt")
    log = os.path.join(out, f"graph_{check}_{allocator}.log")
    left = deadline - time.time()
    if left < 10:
        return {"check": check, "allocator": allocator, "status": "not run: out of time (--budget)"}
    cmd = [sys.executable, os.path.abspath(__file__), "--run", check, "--allocator", allocator, "--save", save]
    with open(log, "w") as f:
        try:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=f, text=True, timeout=left)
        except subprocess.TimeoutExpired as e:
            stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            f.write(stdout)
            return {"check": check, "allocator": allocator,
                    "status": f"timed out after {left:.0f} s (--budget; see {log})"}
        f.write(proc.stdout)
    report = {"check": check, "allocator": allocator, "status": f"died (rc {proc.returncode}, see {log})"}
    for line in proc.stdout.splitlines():
        if line.startswith("REPORT "):
            report = json.loads(line[len("REPORT "):])
    report["save"] = save
    return report


def compare(native, uvm_run):
    if native.get("status") != "ran":
        return "baseline failed: " + str(native.get("error", native.get("status")))
    if uvm_run.get("status") != "ran":
        return "failed under uvm: " + str(uvm_run.get("error", uvm_run.get("status")))
    import torch
    a = torch.load(native["save"])
    b = torch.load(uvm_run["save"])
    if sorted(a) != sorted(b):
        return "different outputs were saved"
    differ = [k for k in a if not torch.equal(a[k], b[k])]
    if differ:
        worst = max(float((a[k] - b[k]).abs().max()) for k in differ)
        return f"not bit-identical: {len(differ)}/{len(a)} outputs differ (max abs diff {worst:g}): {differ[:4]}"
    if "replay_equals_eager" in uvm_run and not uvm_run["replay_equals_eager"]:
        return "replays differ from the eager forward under uvm"
    return "pass"


def mib(n):
    return "-" if n is None else f"{n / 2**20:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "torch-logs"))
    ap.add_argument("--only", choices=CHECKS, action="append")
    ap.add_argument("--budget", type=float, default=3600,
                    help="seconds for all runs together; a run past it is killed and reported (default 3600)")
    ap.add_argument("--run", choices=CHECKS, help=argparse.SUPPRESS)
    ap.add_argument("--allocator", choices=("native", "uvm"), help=argparse.SUPPRESS)
    ap.add_argument("--save", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        return child(args.run, args.allocator, args.save)
    os.makedirs(args.out, exist_ok=True)
    results = []
    deadline = time.time() + args.budget
    for check in args.only or CHECKS:
        native = run_one(check, "native", args.out, deadline)
        under = run_one(check, "uvm", args.out, deadline)
        verdict = compare(native, under)
        results.append({"check": check, "verdict": verdict, "native": native, "uvm": under})
        print(f"{check}: {verdict}", flush=True)
    lines = ["| check | result | torch.cuda max_memory_allocated during capture (native / uvm) | "
             "memory_reserved after (native / uvm) | uvm.torch allocated / reserved after | seconds (native / uvm) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in results:
        n_after = r["native"].get("memory_after_capture", {})
        u_after = r["uvm"].get("memory_after_capture", {})
        lines.append(
            f"| {r['check']} | {r['verdict']} | {mib(n_after.get('max_allocated'))} / {mib(u_after.get('max_allocated'))} MiB "
            f"| {mib(n_after.get('reserved'))} / {mib(u_after.get('reserved'))} MiB "
            f"| {mib(u_after.get('uvm_allocated'))} / {mib(u_after.get('uvm_reserved'))} MiB "
            f"| {r['native'].get('seconds', '-')} / {r['uvm'].get('seconds', '-')} |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "graph_check.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "graph_check.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)
    print(text)
    return 0 if all(r["verdict"] == "pass" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
