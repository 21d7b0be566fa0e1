#!/usr/bin/env python3
"""Two processes taking turns on one GPU, each asleep while the other works.

The pattern of reinforcement-learning setups that put a trainer and an
inference engine on one GPU: here a GPT-2 trainer (AdamW, random tokens) and
a GPT-2 generate() server, each a process of its own on the library
(uvm.torch), its weights, optimizer state and everything else it keeps in a
sleepable client. This program coordinates them over pipes: at each turn it
wakes one, lets it work (a few training steps, or a batch of greedy
generations), puts it back to sleep (uvm.torch.sleep: its GPU memory back to
the driver, its bytes kept in pinned host memory) and hands the GPU to the
other.

It first runs each side alone, never asleep, for the same turns, and then
both taking turns, and checks (issue 44, item 4):
  - each side's results are bit-identical to its run alone (the trainer's
    losses, the server's tokens);
  - the GPU memory used (the driver's count, every process) while a side
    works is at most the larger side's own need plus 5% (its need: what it
    used running alone); also given with the other side's CUDA context taken
    out, which a sleep cannot give back;
  - no growth across turns of the GPU memory used while both sleep, nor of
    either process's resident host memory (within 64 MiB, from the second
    turn on);
  - the time of a turn's sleep and wake, beside vLLM's published wake times.

Figures go to OUT/turns.json and OUT/turns.md (OUT: --out, or $OUT, or
./turns-out). Needs a CUDA GPU, PyTorch and transformers (random weights:
nothing is downloaded).

  python3 examples/turns/turns.py [--turns 20] [--steps 3] [--out DIR]
  python3 examples/turns/turns.py --role trainer|server [--no-sleep]   (a side, driven over stdin)
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
MIB = 1 << 20

# vLLM's published wake times, for the record beside ours: "wake a model in
# ~0.1-0.4 s" (Qwen3-0.6B and Phi-3-vision on an A4000, level 1,
# blog.vllm.ai 2025-10-03 "Zero-Reload Model Switching with vLLM Sleep
# Mode"); level 1 wakes of 0.1-6 s across 0.6B to 235B models (blog.vllm.ai
# 2025-10-26 "sleep-mode").
VLLM_WAKE = "vLLM: 0.1-0.4 s (0.6B-4B models, A4000, level 1; blog 2025-10-03); 0.1-6 s (0.6B-235B, level 1; blog 2025-10-26)"


# ---------------------------------------------------------------------------
# A side: one process, driven by JSON lines on stdin, answering on stdout.
# ---------------------------------------------------------------------------

def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // MIB


def side(role, sleeps, steps):
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS, before its first handle
    out = sys.stdout
    sys.stdout = sys.stderr  # only our JSON lines on the pipe
    import torch
    import transformers
    import uvm.torch

    uvm.torch.enable()
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda", 0)
    torch.cuda.init()
    context_used = (lambda f, t: t - f)(*torch.cuda.mem_get_info())  # the device's use with our context made

    # Eager attention: its matmuls are deterministic, so a run that slept
    # must match the run that never did, bit for bit.
    cfg = transformers.GPT2Config(n_layer=12, n_embd=768, n_head=12, attn_implementation="eager")
    cfg._attn_implementation = "eager"
    torch.manual_seed(0 if role == "trainer" else 1)
    with uvm.torch.client(role, sleepable=True):
        model = transformers.GPT2LMHeadModel(cfg).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4) if role == "trainer" else None
    if role == "server":
        model.eval()
    data = torch.Generator().manual_seed(11 if role == "trainer" else 12)

    def work():
        """One turn's work, every allocation the client's; its results."""
        with uvm.torch.client(role):
            if role == "trainer":
                losses = []
                for _ in range(steps):
                    ids = torch.randint(0, cfg.vocab_size, (4, 512), generator=data).to(dev)
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        loss = model(input_ids=ids, labels=ids).loss
                    loss.backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    losses.append(float.hex(loss.item()))
                return losses
            prompts = torch.randint(0, cfg.vocab_size, (8, 64), generator=data).to(dev)
            with torch.no_grad():
                tokens = model.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=32,
                                        do_sample=False, pad_token_id=0)
            return tokens[:, 64:].tolist()

    def used_mib():
        free, total = torch.cuda.mem_get_info()
        return (total - free) // MIB

    def reply(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    if sleeps:
        uvm.torch.sleep_policy(role, host="keep")  # the backup stays pinned between turns: every sleep at copy speed
        torch.cuda.synchronize()
        uvm.torch.empty_cache()
        uvm.torch.sleep(role)
    reply({"ready": True, "context_mib": context_used // MIB, "used_mib": used_mib(), "rss_mib": rss_mib()})
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("quit"):
            break
        turn = {"turn": cmd["turn"]}
        if sleeps:
            t0 = time.perf_counter()
            uvm.torch.wake(role)
            turn["wake_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        turn["results"] = work()
        torch.cuda.synchronize()
        turn["work_s"] = time.perf_counter() - t0
        turn["used_working_mib"] = used_mib()  # this side awake, after its work: its peak need stands
        uvm.torch.empty_cache()  # what the library holds free goes back
        if sleeps:
            t0 = time.perf_counter()
            turn["asleep_bytes"] = uvm.torch.sleep(role)
            turn["sleep_s"] = time.perf_counter() - t0
            stats = uvm.torch.memory_stats()
            turn["backup_mib"] = stats.get(f"uvm.client.{role}.sleep_host_bytes", 0) // MIB
        turn["used_after_mib"] = used_mib()
        turn["rss_mib"] = rss_mib()
        reply(turn)
    reply({"bye": True})


# ---------------------------------------------------------------------------
# The coordinator.
# ---------------------------------------------------------------------------

class Side:
    def __init__(self, role, sleeps, steps):
        args = [sys.executable, os.path.abspath(__file__), "--role", role, "--steps", str(steps)]
        if not sleeps:
            args.append("--no-sleep")
        self.role = role
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.ready = self.read()

    def read(self):
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.role} died (exit {self.proc.wait()})")
        return json.loads(line)

    def turn(self, n):
        self.proc.stdin.write(json.dumps({"turn": n}) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def quit(self):
        self.proc.stdin.write(json.dumps({"quit": True}) + "\n")
        self.proc.stdin.flush()
        self.read()
        self.proc.wait(timeout=120)


def device_used_mib():
    """The GPU's used memory by nvidia-smi (every process): the coordinator makes no CUDA context."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=30).stdout
        return int(out.strip().splitlines()[0])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


def spread(values):
    return max(values) - min(values) if values else 0


def coordinate(turns, steps, outdir):
    os.makedirs(outdir, exist_ok=True)
    report = {"turns": turns, "steps_per_turn": steps, "device_used_at_start_mib": device_used_mib()}
    # Each side alone, never asleep: its results and its need.
    alone = {}
    for role in ("trainer", "server"):
        s = Side(role, sleeps=False, steps=steps)
        rounds = [s.turn(n) for n in range(turns)]
        s.quit()
        alone[role] = {"results": [r["results"] for r in rounds],
                       "need_mib": max(r["used_working_mib"] for r in rounds),
                       "context_mib": s.ready["context_mib"]}
    report["alone"] = {r: {k: v for k, v in a.items() if k != "results"} for r, a in alone.items()}
    # Both, taking turns.
    sides = {role: Side(role, sleeps=True, steps=steps) for role in ("trainer", "server")}
    shared = {role: [] for role in sides}
    both_asleep = []
    for n in range(turns):
        for role, s in sides.items():
            shared[role].append(s.turn(n))
        both_asleep.append(device_used_mib())
    for s in sides.values():
        s.quit()

    larger = max(a["need_mib"] for a in alone.values())
    checks = {}
    for role in sides:
        other = "server" if role == "trainer" else "trainer"
        rounds = shared[role]
        checks[f"{role}_bit_identical"] = [r["results"] for r in rounds] == alone[role]["results"]
        used = [r["used_working_mib"] for r in rounds]
        checks[f"{role}_used_working_max_mib"] = max(used)
        checks[f"{role}_within_larger_need_plus_5pct"] = max(used) <= larger * 1.05
        # The other process's context is the driver's, asleep or not.
        checks[f"{role}_within_larger_need_plus_5pct_less_other_context"] = (
            max(used) - alone[other]["context_mib"] <= larger * 1.05)
        rss = [r["rss_mib"] for r in rounds[1:]]
        checks[f"{role}_rss_spread_mib"] = spread(rss)
        checks[f"{role}_rss_no_growth"] = spread(rss) <= 64
        after = [r["used_after_mib"] for r in rounds[1:]]
        checks[f"{role}_used_asleep_spread_mib"] = spread(after)
        checks[f"{role}_used_asleep_no_growth"] = spread(after) <= 64
        wake = sorted(r["wake_s"] for r in rounds)
        sleep = sorted(r["sleep_s"] for r in rounds)
        turn = sorted(r["wake_s"] + r["sleep_s"] for r in rounds)
        checks[f"{role}_wake_s_median_max"] = [wake[len(wake) // 2], wake[-1]]
        checks[f"{role}_sleep_s_median_max"] = [sleep[len(sleep) // 2], sleep[-1]]
        checks[f"{role}_turn_sleep_plus_wake_s_median_max"] = [turn[len(turn) // 2], turn[-1]]
        checks[f"{role}_asleep_gib"] = rounds[-1]["asleep_bytes"] / (1 << 30)
        checks[f"{role}_backup_mib"] = rounds[-1].get("backup_mib")
    known = [v for v in both_asleep if v is not None]
    checks["device_used_both_asleep_mib"] = known
    checks["device_used_both_asleep_no_growth"] = spread(known[1:]) <= 64 if len(known) > 1 else None
    checks["ok"] = all(checks[k] for k in checks if k.endswith(("_bit_identical", "_no_growth", "less_other_context"))
                       and checks[k] is not None)
    report["checks"] = checks
    report["vllm_wake"] = VLLM_WAKE
    report["shared"] = {role: [{k: v for k, v in r.items() if k != "results"} for r in rounds]
                        for role, rounds in shared.items()}
    with open(os.path.join(outdir, "turns.json"), "w") as f:
        json.dump(report, f, indent=1)
    with open(os.path.join(outdir, "turns.md"), "w") as f:
        f.write(f"# Two processes taking turns on one GPU: {turns} turns, {steps} training steps a turn\n\n")
        f.write(f"ok: {checks['ok']}\n\n| check | value |\n| --- | --- |\n")
        for k, v in checks.items():
            f.write(f"| {k} | {v} |\n")
        f.write(f"\nAlone: {json.dumps(report['alone'])}\n\n{VLLM_WAKE}\n")
    print(open(os.path.join(outdir, "turns.md")).read())
    return 0 if checks["ok"] else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--role", choices=("trainer", "server"))
    ap.add_argument("--no-sleep", action="store_true")
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", default=os.environ.get("OUT", "turns-out"))
    a = ap.parse_args()
    if a.turns < 2 or a.steps < 1:
        ap.error("--turns is at least 2 and --steps at least 1")
    if a.role:
        side(a.role, not a.no_sleep, a.steps)
        return 0
    return coordinate(a.turns, a.steps, a.out)


if __name__ == "__main__":
    sys.exit(main())
