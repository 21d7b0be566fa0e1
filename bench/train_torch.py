#!/usr/bin/env python3
"""Real clients on the library (tools/torch_check.sh runs it on a GPU machine).

Training, each model and allocator in a process of its own (same seed):
  GPT-2   transformers.GPT2Config(n_layer=12, n_embd=768, n_head=12), random init,
          batch 8 x 1024 random tokens, bf16 autocast, AdamW, 60 steps
  ResNet  torchvision.models.resnet50(), random init, batch 64 random images,
          bf16 autocast, SGD (momentum 0.9), 40 steps
for PyTorch's caching allocator ("default"), backend:cudaMallocAsync ("async")
and uvm.torch.enable() ("uvm"). Per run: median step time, final loss, peak
driver-used memory (torch.cuda.mem_get_info total - free after every step),
driver-used after freeing everything and empty_cache, and the allocator's own
accounting (PyTorch's memory_stats, or uvm.torch.memory_stats).

Checks, each in a process of its own: an OOM raised as
torch.cuda.OutOfMemoryError carrying the library's report; two MemPool
clients under budgets in one training run; CuPy FFT and matmul bit-identical
to CuPy's own pool, and a Numba kernel over EMM memory (one process: one
manager for both); sleep and wake of a GPT-2's weights and optimizer state
between training steps, the memory used by another process meanwhile, the
final loss against a run that never slept.

  bench/train_torch.py --all OUTDIR         everything; OUTDIR/results.md and results.json
  bench/train_torch.py --checks OUTDIR      the checks alone (no training), the same files
  bench/train_torch.py --run MODEL ALLOC    one run, its JSON on stdout
  bench/train_torch.py --check NAME         oom | oom_device | pools | cupy_numba | sleep_wake
  bench/train_torch.py --ddp OUTDIR [STEPS [ROUNDS [ALLOCS]]]
                                            GPT-2 under DistributedDataParallel on every GPU
                                            (torchrun, NCCL), each allocator of ALLOCS (default,
                                            expandable, async, uvm; uvm_own_gpu) in its own
                                            torchrun, alternating; OUTDIR/results.md and .json
  bench/train_torch.py --build-extension    uvm.torch's C++ side into its cache (no GPU)

DDP runs: per rank, the median step time, every step's loss (compared bit
for bit with the caching allocator's, rank by rank), the peak driver-used
of its GPU (torch.cuda.mem_get_info after every step, in mid-step, and from
a thread every 5 ms), the allocator's own split at its step of most
reserved memory (the library's held memory: live, cached, pooled on
streams, retiring; its streams), what the library holds on the other GPUs;
from outside, nvidia-smi's peak per GPU and per process and GPU (a rank's
context on another rank's GPU shows there).

A check says where it is on stderr ("stage: ..." lines, flushed), runs with
faulthandler on, the C++ side's trace of each refused allocation
(UVM_TORCH_TRACE) and its native stack on a fatal signal
(UVM_TORCH_NATIVE_BACKTRACE); where a check's process dies, its result keeps
the last stage, those lines, Python's traceback and the native stack.
"""
import faulthandler
import json
import os
import statistics
import subprocess
import sys
import time

faulthandler.enable()  # a crash shows its Python frames (the harness also sets PYTHONFAULTHANDLER)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(HERE, "..", "python"))  # after PYTHONPATH: an A/B run's base tree brings its own
MIB = 1 << 20


def stage(name):
    """Where the check is, on stderr at once: the last one printed is where a
    process that died was."""
    sys.stderr.write(f"stage: {name}\n")
    sys.stderr.flush()


def caught(e):
    """An exception as the checks record it: its type and its message's first line."""
    text = str(e)
    return {"type": f"{type(e).__module__}.{type(e).__qualname__}", "first_line": text.splitlines()[0] if text else ""}


def used_mib(torch):
    free, total = torch.cuda.mem_get_info()
    return (total - free) / MIB


# The library's runs under a release threshold (uvm.torch.set_release_threshold).
THRESHOLDS = {"uvm0": 0, "uvm1g": 1 << 30}
# The library's runs under a growth slack (uvm.torch.set_growth_slack): "inf"
# keeps free memory beside a growth, as before the moves of chunk/pmm.h.
SLACKS = {"uvm_keep": "inf", "uvm_s0": "0", "uvm_s256m": str(256 << 20)}


def run(model_name, alloc):
    label = alloc
    if alloc in THRESHOLDS:  # the library under a release threshold
        alloc = "uvm"
        os.environ["UVM_RELEASE_THRESHOLD"] = str(THRESHOLDS[label])
    if alloc in SLACKS:
        alloc = "uvm"
        os.environ["UVM_GROWTH_SLACK"] = SLACKS[label]
    if alloc == "async":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
    import torch
    mode = None
    if alloc == "uvm":
        import uvm.torch
        mode = uvm.torch.enable()
        if os.environ.get("UVM_RELEASE_THRESHOLD"):  # the release policy to run under (default: keep)
            uvm.torch.set_release_threshold(int(os.environ["UVM_RELEASE_THRESHOLD"]))
        if os.environ.get("UVM_GROWTH_SLACK"):  # the growth policy to run under (default: 256 MiB)
            s = os.environ["UVM_GROWTH_SLACK"]
            uvm.torch.set_growth_slack("inf" if s == "inf" else int(s))
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda", 0)
    gen = torch.Generator().manual_seed(1234)
    if model_name == "gpt2":
        import transformers
        cfg = transformers.GPT2Config(n_layer=12, n_embd=768, n_head=12)
        model = transformers.GPT2LMHeadModel(cfg).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        steps = 60

        def batch():
            ids = torch.randint(0, cfg.vocab_size, (8, 1024), generator=gen).to(dev)
            return ids

        def step(ids):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
            mid_step.append(used_mib(torch))  # activations peak here; no sync
            loss.backward()
            return loss
    else:
        import torchvision
        model = torchvision.models.resnet50().to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        steps = 40
        lossf = torch.nn.CrossEntropyLoss()

        def batch():
            x = torch.randn(64, 3, 224, 224, generator=gen).to(dev)
            y = torch.randint(0, 1000, (64,), generator=gen).to(dev)
            return (x, y)

        def step(xy):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = lossf(model(xy[0]), xy[1])
            mid_step.append(used_mib(torch))  # activations peak here; no sync
            loss.backward()
            return loss
    times, peak_used, peak_reserved, peak_alloc = [], 0.0, 0, 0
    mid_step, held_at_peak, grown = [], {}, []
    loss_value = None
    for _ in range(steps):
        data = batch()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = step(data)
        opt.step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
        loss_value = loss.item()
        peak_used = max(peak_used, used_mib(torch), max(mid_step))
        mid_step.clear()
        if alloc == "uvm":
            s = uvm.torch.memory_stats()
            if s["reserved_bytes.all.current"] > peak_reserved:
                held_at_peak = {k[len("uvm.held."):]: v / MIB for k, v in s.items() if k.startswith("uvm.held.")}
            peak_reserved = max(peak_reserved, s["reserved_bytes.all.current"])
            peak_alloc = max(peak_alloc, s["allocated_bytes.all.current"])
            grown.append(getattr(uvm.torch.manager().gpu_stats(0), "root_chunks_grown", 0))
        del data, loss
    if alloc == "uvm":
        # The library keeps no peaks: its figures are sampled after each step.
        own = {"peak_reserved_mib": peak_reserved / MIB, "peak_allocated_mib": peak_alloc / MIB,
               "held_mib_at_peak": held_at_peak,
               # Root chunks grown per step over the second half of the run (the steady state).
               "grown_mib_per_step_late": (grown[-1] - grown[len(grown) // 2]) * 2 / (len(grown) - 1 - len(grown) // 2)
               if len(grown) > 2 else None}
    else:
        st = torch.cuda.memory_stats()
        own = {"peak_reserved_mib": st.get("reserved_bytes.all.peak", 0) / MIB,
               "peak_allocated_mib": st.get("allocated_bytes.all.peak", 0) / MIB}
    del model, opt
    import gc
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    after = used_mib(torch)
    if alloc == "uvm":
        s = uvm.torch.memory_stats()
        own["after_release_reserved_mib"] = s["reserved_bytes.all.current"] / MIB
        own["after_release_allocated_mib"] = s["allocated_bytes.all.current"] / MIB
        own["held_mib_after_release"] = {k[len("uvm.held."):]: v / MIB for k, v in s.items() if k.startswith("uvm.held.")}
        g = uvm.torch.manager().gpu_stats(0)
        own["root_chunks_after_release"] = g.root_chunks
        # Growth over the run (the moves of chunk/pmm.h: memory held to the need, paid in driver calls).
        own["root_chunks_grown"] = getattr(g, "root_chunks_grown", None)
        own["root_chunks_moved"] = getattr(g, "root_chunks_moved", None)
        own["free_mib_by_chunk_size_after_release"] = [b / MIB for b in g.bytes_free]
        own["mode"] = mode
        own["extension_build"] = {k: v for k, v in uvm.torch.extension_build().items() if k != "failed_tries"}
    else:
        own["after_release_reserved_mib"] = torch.cuda.memory_reserved() / MIB
        own["after_release_allocated_mib"] = torch.cuda.memory_allocated() / MIB
    return {"model": model_name, "alloc": label, "steps": steps, "median_step_ms": statistics.median(times[5:]),
            "final_loss": loss_value, "final_loss_hex": float.hex(loss_value), "peak_driver_used_mib": peak_used,
            "after_release_driver_used_mib": after, "own": own}


def probe_c_oom(torch, uvm_torch):
    """The library's own device OOM in this process, with PyTorch's context
    current and on PyTorch's stream, through the C symbol PyTorch calls and
    without the C++ side: NULL, the status and the report, or a crash here
    (then the fault is the library's, not the exception's way to Python)."""
    from uvm import _runtime
    lib = _runtime.lib()
    stream = torch.cuda.current_stream().cuda_stream
    held, out = [], {}
    stage("c_probe: uvm_torch_malloc 8 GiB blocks until NULL")
    while len(held) < 32:
        p = lib.uvm_torch_malloc(8 << 30, 0, stream)
        if not p:
            break
        held.append(p)
    out["c_probe_blocks"] = len(held)
    out["c_probe_status"] = _runtime.last_status()
    out["c_probe_report_has_fit"] = "largest request that would fit" in uvm_torch.oom_report()
    stage("c_probe: freeing")
    for p in held:
        lib.uvm_torch_free(p, 8 << 30, 0, stream)
    torch.cuda.synchronize()
    uvm_torch.empty_cache()
    return out


def enable_for_check():
    """uvm.torch enabled for a check: torch, uvm.torch, and the check's first
    fields (the allocator's mode, MemPools or not, how the extension built)."""
    stage("import")
    import torch
    import uvm.torch
    stage("enable")
    out = {"mode": uvm.torch.enable(), "mempool": os.environ.get("UVM_TORCH_MEMPOOL", "1") != "0"}
    if uvm.torch.extension_error():
        out["extension_error"] = uvm.torch.extension_error()[-400:]
    out["extension_build"] = uvm.torch.extension_build()
    return torch, uvm.torch, out


def check_oom(with_budget=True):
    torch, uvm_torch, out = enable_for_check()
    dev = torch.device("cuda", 0)
    stage("first tensor")
    keep = [torch.empty(MIB, device=dev)]
    out.update(probe_c_oom(torch, uvm_torch))
    out["stage"] = "device"
    # The GPU itself first, then a client's budget.
    try:
        while True:
            stage(f"device: torch.empty 8 GiB #{len(keep)}")
            keep.append(torch.empty(8 << 30, dtype=torch.uint8, device=dev))
    except torch.cuda.OutOfMemoryError as e:
        out["device_oom"] = "torch.cuda.OutOfMemoryError"
        out["device_oom_after_gib"] = 8 * (len(keep) - 1) + 0.5
        out["device_message_has_report"] = "largest request that would fit" in str(e)
        out["device_message_head"] = str(e)[:800]
        out["device_exception"] = caught(e)
    except Exception as e:  # noqa: BLE001  (the wrong type is a finding: record it)
        out["device_oom"] = "wrong type"
        out["device_exception"] = caught(e)
    stage("device: caught")
    keep.clear()
    torch.cuda.empty_cache()
    out["stage"] = "budget"
    if with_budget:
        try:
            with uvm_torch.client("tiny", budget="1GiB"):
                stage("budget: 512 MiB in client tiny")
                keep.append(torch.empty(512 * MIB, dtype=torch.uint8, device=dev))
                stage("budget: 1 GiB more in client tiny")
                torch.empty(1024 * MIB, dtype=torch.uint8, device=dev)
            out["budget_oom"] = "not raised"
        except torch.cuda.OutOfMemoryError as e:
            out["budget_oom"] = "torch.cuda.OutOfMemoryError"
            out["budget_message_has_report"] = "tiny" in str(e) and "largest request that would fit" in str(e)
            out["budget_message_head"] = str(e)[:600]
            out["budget_exception"] = caught(e)
        except Exception as e:  # noqa: BLE001
            out["budget_oom"] = "wrong type"
            out["budget_exception"] = caught(e)
        stage("budget: caught")
    keep.clear()
    out["stage"] = "after"
    x = torch.ones(1 << 20, device=dev)
    out["works_after"] = float(x.sum()) == float(1 << 20)
    out["memory_stats_num_ooms"] = uvm_torch.memory_stats()["num_ooms"]
    out["ok"] = bool((not with_budget or (out.get("budget_oom") == "torch.cuda.OutOfMemoryError"
                                           and out.get("budget_message_has_report")))
                     and out.get("device_oom") == "torch.cuda.OutOfMemoryError" and out.get("device_message_has_report")
                     and out["works_after"])
    stage("done")
    return out


def check_pools():
    torch, uvm_torch, out = enable_for_check()
    import transformers
    torch.manual_seed(0)
    dev = torch.device("cuda", 0)
    cfg = transformers.GPT2Config(n_layer=4, n_embd=512, n_head=8)
    stage("model in client weights")
    with uvm_torch.client("weights", budget="2GiB"):
        model = transformers.GPT2LMHeadModel(cfg).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    stats, losses = [], []
    gen = torch.Generator().manual_seed(7)
    for i in range(10):
        ids = torch.randint(0, cfg.vocab_size, (4, 512), generator=gen).to(dev)
        stage(f"step {i}: forward and backward in client activations")
        with uvm_torch.client("activations", budget="12GiB"):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
        stage(f"step {i}: optimizer in client weights")
        with uvm_torch.client("weights"):
            opt.step()  # the optimizer's state is the weights' client's
            opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        stage(f"step {i}: memory_stats")
        s = uvm_torch.memory_stats()
        stats.append((s["uvm.client.weights.used_bytes"], s["uvm.client.activations.used_bytes"]))
    out["pools_used"] = bool(uvm_torch.extension_build().get("pools")) and out["mempool"]
    out["weights_peak_mib"] = max(a for a, _ in stats) / MIB
    out["activations_peak_mib"] = max(b for _, b in stats) / MIB
    out["losses"] = losses
    # Over the weights' budget: refused, with the client named.
    stage("over the weights' budget")
    try:
        with uvm_torch.client("weights"):
            torch.empty(3 << 30, dtype=torch.uint8, device=dev)
        out["over_budget"] = "not raised"
    except torch.cuda.OutOfMemoryError as e:
        out["over_budget"] = "torch.cuda.OutOfMemoryError"
        out["over_budget_names_client"] = "weights" in str(e)
        out["over_budget_exception"] = caught(e)
    except Exception as e:  # noqa: BLE001
        out["over_budget"] = "wrong type"
        out["over_budget_exception"] = caught(e)
    stage("over budget: caught")
    out["ok"] = (0 < out["weights_peak_mib"] <= 2048 and 0 < out["activations_peak_mib"] <= 12 * 1024
                 and all(l == l for l in losses) and out["over_budget"] == "torch.cuda.OutOfMemoryError"
                 and out.get("over_budget_names_client", False))
    stage("done")
    return out


# What a second process allocates while the weights sleep: plain PyTorch, its
# own context, the bytes written and a matmul run; one JSON line.
CHILD = """
import json, sys, torch
n = int(sys.argv[1])
free, total = torch.cuda.mem_get_info()
x = torch.empty(n, dtype=torch.uint8, device="cuda")
x.fill_(7)
a = torch.randn(2048, 2048, device="cuda")
b = a @ a
torch.cuda.synchronize()
print(json.dumps({"free_at_start": free, "allocated": n, "ok": int(x[-1]) == 7 and bool(torch.isfinite(b).all())}))
"""

# Free memory left to the check's process and the child when the weights
# sleep (the rest is held by ballast): the child's context fits in it, its
# allocation only with the memory the sleep gave back.
SLEEP_HEADROOM = 1 << 30


def check_sleep_wake():
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before cuBLAS's first handle
    torch, uvm_torch, out = enable_for_check()
    import transformers
    torch.use_deterministic_algorithms(True, warn_only=True)
    dev = torch.device("cuda", 0)
    # Eager attention: SDPA's memory-efficient backward is not deterministic
    # (the loss of two runs that never slept differs by up to 1e-4), while
    # eager attention's matmuls are, so the sleep's run must match the
    # reference bit for bit: nothing of the weights or the optimizer state
    # may change across the sleep.
    cfg = transformers.GPT2Config(n_layer=12, n_embd=768, n_head=12, attn_implementation="eager")
    cfg._attn_implementation = "eager"
    steps, slept_after = 12, 6

    def train(sleep_at=None):
        torch.manual_seed(0)
        gen = torch.Generator().manual_seed(11)
        with uvm_torch.client("weights", sleepable=True) if sleep_at is not None else _nothing():
            model = transformers.GPT2LMHeadModel(cfg).to(dev)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        loss = None
        for i in range(steps):
            if i == sleep_at:
                sleep_and_wake(model, opt)
            stage(f"{'sleep run' if sleep_at is not None else 'reference'}: step {i}")
            ids = torch.randint(0, cfg.vocab_size, (4, 512), generator=gen).to(dev)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            with uvm_torch.client("weights") if sleep_at is not None else _nothing():
                opt.step()  # the optimizer's state is the weights' client's
                opt.zero_grad(set_to_none=True)
        value = loss.item()
        del model, opt, loss
        import gc
        gc.collect()
        torch.cuda.synchronize()
        uvm_torch.empty_cache()
        return value

    def tensors(model, opt):
        state = [t for st in opt.state.values() for t in st.values() if torch.is_tensor(t) and t.is_cuda]
        return list(model.parameters()) + state

    def sleep_and_wake(model, opt):
        held = tensors(model, opt)
        pointers = [t.data_ptr() for t in held]
        sums = [float(t.detach().double().sum()) for t in held]
        torch.cuda.synchronize()
        uvm_torch.empty_cache()  # what the library holds free goes back: the driver's figures are the clients'
        stage("ballast")
        ballast = []
        while torch.cuda.mem_get_info()[0] > SLEEP_HEADROOM + (256 << 20):
            step = min(1 << 30, torch.cuda.mem_get_info()[0] - SLEEP_HEADROOM)
            ballast.append(torch.empty(step, dtype=torch.uint8, device=dev))
        weights = _runtime_client("weights")
        client_bytes = weights.info().vidmem_used[0]
        free_before = torch.cuda.mem_get_info()[0]
        stage("sleep")
        t0 = time.perf_counter()
        given = uvm_torch.sleep()
        out["sleep_s"] = round(time.perf_counter() - t0, 4)
        free_asleep = torch.cuda.mem_get_info()[0]
        info = weights.info()
        out["client_gib"] = round(client_bytes / (1 << 30), 3)
        out["host_gib"] = round(info.sleep_host_bytes / (1 << 30), 3)
        out["sleep_returned_bytes_match"] = given == client_bytes == info.vidmem_asleep[0]
        out["asleep_bytes_in_memory_stats"] = uvm_torch.memory_stats()["uvm.asleep_bytes"] == client_bytes
        out["driver_free_rise_gib"] = round((free_asleep - free_before) / (1 << 30), 3)
        out["free_rose_99pct"] = free_asleep - free_before >= 0.99 * client_bytes
        out["sleep_gib_per_s"] = round(client_bytes / (1 << 30) / max(out["sleep_s"], 1e-9), 2)
        stage("second process")
        n = int(0.9 * (free_asleep - free_before))
        child = subprocess.run([sys.executable, "-c", CHILD, str(n)], capture_output=True, text=True, timeout=90)
        try:
            out["second_process"] = json.loads(child.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            out["second_process"] = {"ok": False, "exit": child.returncode, "stderr": child.stderr[-800:]}
        out["second_process"]["needed_the_sleep"] = n > free_before
        del ballast
        torch.cuda.synchronize()
        uvm_torch.empty_cache()
        stage("wake")
        t0 = time.perf_counter()
        uvm_torch.wake()
        out["wake_s"] = round(time.perf_counter() - t0, 4)
        out["wake_gib_per_s"] = round(client_bytes / (1 << 30) / max(out["wake_s"], 1e-9), 2)
        out["asleep_after_wake"] = weights.info().asleep
        out["pointers_kept"] = [t.data_ptr() for t in held] == pointers
        out["bytes_kept"] = [float(t.detach().double().sum()) for t in held] == sums

    stage("reference run (never sleeps)")
    reference = train()
    stage("sleep run")
    slept = train(sleep_at=slept_after)
    out["reference_loss"], out["sleep_loss"] = reference, slept
    out["loss_bit_identical"] = float.hex(reference) == float.hex(slept)
    # GPT-2's loss under bf16 autocast varies run to run within 5e-5 (bench/results/2026-11-24-h100-memory).
    out["loss_within_5e-5"] = abs(reference - slept) <= 5e-5
    out["attn_implementation"] = getattr(cfg, "_attn_implementation", "?")
    out["ok"] = bool(out["free_rose_99pct"] and out["sleep_returned_bytes_match"]
                     and out["asleep_bytes_in_memory_stats"] and out["second_process"].get("ok")
                     and not out["asleep_after_wake"] and out["pointers_kept"] and out["bytes_kept"]
                     and out["loss_bit_identical"])
    stage("done")
    # The figures to record first: results.md keeps a check's first 900 characters.
    first = ("ok", "sleep_s", "wake_s", "client_gib", "host_gib", "sleep_gib_per_s", "wake_gib_per_s",
             "driver_free_rise_gib", "reference_loss", "sleep_loss", "loss_bit_identical")
    return dict({k: out[k] for k in first}, **{k: v for k, v in out.items() if k not in first})


def _nothing():
    import contextlib
    return contextlib.nullcontext()


def _runtime_client(name):
    from uvm import _runtime
    return _runtime.named_client(name)


def check_cupy_numba():
    out = {}
    import numpy as np
    if not hasattr(np, "row_stack"):
        # numba-cuda 0.30 registers np.row_stack, which NumPy 2.4 removed: an
        # incompatibility of the two installed packages, not of the plugin.
        np.row_stack = np.vstack
        out["numpy_row_stack_shim"] = True
    import uvm.numba
    uvm.numba.enable()  # before Numba's context
    import cupy
    rng = np.random.default_rng(3)
    a = rng.standard_normal((1024, 1024)).astype(np.float32)
    b = rng.standard_normal((1024, 1024)).astype(np.float32)
    sig = (rng.standard_normal(1 << 20) + 1j * rng.standard_normal(1 << 20)).astype(np.complex64)

    def compute():
        ga, gb, gs = cupy.asarray(a), cupy.asarray(b), cupy.asarray(sig)
        return cupy.asnumpy(ga @ gb), cupy.asnumpy(cupy.fft.fft(gs)), int(ga.data.ptr)

    mm0, fft0, _ = compute()
    import uvm.cupy
    uvm.cupy.enable()
    mm1, fft1, ptr = compute()
    mgr = uvm.cupy.manager()
    out["cupy_matmul_identical"] = mm0.tobytes() == mm1.tobytes()
    out["cupy_fft_identical"] = fft0.tobytes() == fft1.tobytes()
    x = cupy.arange(1 << 20, dtype=cupy.float32)
    found = mgr.lookup_gpu_kernel(int(x.data.ptr), gpu=0)
    out["cupy_memory_is_uvm"] = found is not None and found[1] == 0
    from numba import cuda

    @cuda.jit
    def axpy(out_, x_, y_, alpha):
        i = cuda.grid(1)
        if i < out_.size:
            out_[i] = alpha * x_[i] + y_[i]

    n = 1 << 20
    hx = np.arange(n, dtype=np.float32)
    hy = np.ones(n, dtype=np.float32)
    dx, dy = cuda.to_device(hx), cuda.to_device(hy)
    dout = cuda.device_array(n, dtype=np.float32)
    axpy[(n + 255) // 256, 256](dout, dx, dy, np.float32(2.0))
    res = dout.copy_to_host()
    out["numba_kernel_correct"] = bool(np.array_equal(res, 2.0 * hx + hy))
    ptr = int(dout.__cuda_array_interface__["data"][0])
    found = mgr.lookup_gpu_kernel(ptr, gpu=0)
    out["numba_memory_is_uvm"] = found is not None
    out["numba_memory_manager"] = type(getattr(cuda.current_context(), "memory_manager", None)).__name__
    out["ok"] = all(out[k] for k in ("cupy_matmul_identical", "cupy_fft_identical", "cupy_memory_is_uvm",
                                     "numba_kernel_correct", "numba_memory_is_uvm"))
    return out


def crash_evidence(stderr):
    """What a check's stderr says about where it was and how it ended: the
    last stage, the C++ side's lines, Python's traceback (faulthandler) and
    the native stack (UVM_TORCH_NATIVE_BACKTRACE). A blind tail of stderr
    is mostly faulthandler's list of extension modules."""
    lines = stderr.splitlines()
    out = {}
    stages = [l[len("stage: "):] for l in lines if l.startswith("stage: ")]
    if stages:
        out["last_stage"] = stages[-1]
    said = [l for l in lines if l.startswith("uvm.torch:") and "native stack" not in l]
    if said:
        out["uvm_torch_lines"] = said[-6:]
    if "uvm.torch: native stack at signal" in stderr:
        start = stderr.index("uvm.torch: native stack at signal")
        end = stderr.find("uvm.torch: end of native stack", start)
        out["native_stack"] = stderr[start:end if end >= 0 else start + 6000].splitlines()[:40]
    if "Fatal Python error" in stderr:
        start = stderr.index("Fatal Python error")
        end = stderr.find("Extension modules:", start)
        out["python_traceback"] = stderr[start:end if end >= 0 else start + 3000].strip().splitlines()[:30]
    return out


def sub(args, timeout, env=None):
    t0 = time.time()
    # A crash says where it was: faulthandler's traceback, the stages and the
    # native stack land in stderr (crash_evidence picks them out).
    full_env = dict(os.environ, PYTHONFAULTHANDLER="1", **(env or {}))
    if args[0] == "--check":
        full_env.setdefault("UVM_TORCH_TRACE", "1")
        full_env.setdefault("UVM_TORCH_NATIVE_BACKTRACE", "1")
    try:
        p = subprocess.run([sys.executable, os.path.abspath(__file__)] + args, capture_output=True, text=True,
                           timeout=timeout, env=full_env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s", "wall_s": round(time.time() - t0, 1)}
    try:
        result = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        result = {"error": f"exit {p.returncode}", "stdout": p.stdout[-1000:]}
    result["wall_s"] = round(time.time() - t0, 1)
    if p.returncode != 0:  # its figures came (printed and flushed), but the process did not end well
        result["exit_code"] = p.returncode
        result["ok"] = False
        result.update(crash_evidence(p.stderr))
        tail = p.stderr.split("Extension modules:")[0] if "Extension modules:" in p.stderr else p.stderr
        result.setdefault("stderr", tail[-3000:])
    elif args[0] == "--check":
        said = crash_evidence(p.stderr).get("uvm_torch_lines")
        if said:
            result["uvm_torch_lines"] = said
    sys.stderr.write(f"{' '.join(args)}: {json.dumps(result)[:400]}\n")
    return result


def run_all(outdir, training=True):
    os.makedirs(outdir, exist_ok=True)
    results = {"runs": [], "checks": {}}
    for model in ("gpt2", "resnet50") if training else ():
        for alloc in ("default", "async", "uvm", "uvm1g", "uvm0"):
            results["runs"].append(sub(["--run", model, alloc], 150))
    # The OOM and client checks with a torch.cuda.MemPool per client, and with
    # the thread's client only (UVM_TORCH_MEMPOOL=0).
    no_pool = {"UVM_TORCH_MEMPOOL": "0"}
    for label, name, env in (("oom_device", "oom_device", None), ("oom_budget_mempool", "oom", None),
                             ("oom_budget_thread", "oom", no_pool), ("pools_mempool", "pools", None),
                             ("clients_thread", "pools", no_pool), ("cupy_numba", "cupy_numba", None),
                             ("sleep_wake", "sleep_wake", None)):
        results["checks"][label] = sub(["--check", name], 150, env)
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    names = {"default": "PyTorch caching allocator", "async": "`backend:cudaMallocAsync`", "uvm": "library (uvm.torch)",
             "uvm0": "library, release threshold 0", "uvm1g": "library, release threshold 1 GiB"}
    lines = ["| model | allocator | median step | final loss | peak driver-used | after release + empty_cache | "
             "allocator's own: peak reserved / peak allocated / reserved after |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in results["runs"]:
        if "error" in r:
            lines.append(f"| {r.get('model', '?')} | ? | error: {r['error']} | | | | |")
            continue
        o = r["own"]
        lines.append(f"| {r['model']} | {names[r['alloc']]} | {r['median_step_ms']:.1f} ms | {r['final_loss']!r} | "
                     f"{r['peak_driver_used_mib']:.0f} MiB | {r['after_release_driver_used_mib']:.0f} MiB | "
                     f"{o['peak_reserved_mib']:.0f} / {o['peak_allocated_mib']:.0f} / {o['after_release_reserved_mib']:.0f} MiB |")
    lines.append("")
    evidence = ("last_stage", "uvm_torch_lines", "python_traceback", "native_stack", "stderr")
    for name, c in results["checks"].items():
        lines.append(f"- check {name}: {'PASS' if c.get('ok') else 'FAIL'} "
                     f"{json.dumps({k: v for k, v in c.items() if k not in ('losses',) + evidence})[:900]}")
        for key in evidence[:-1]:
            if c.get(key):
                value = c[key] if isinstance(c[key], str) else " | ".join(c[key])
                lines.append(f"  {key}: {value[:2500]}")
        if not c.get("ok") and c.get("stderr") and not c.get("python_traceback"):
            lines.append("  stderr (end): " + c["stderr"][-1500:].replace("\n", " | "))
    with open(os.path.join(outdir, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    ok = all("error" not in r and "exit_code" not in r for r in results["runs"]) and \
        all(c.get("ok") for c in results["checks"].values())
    return 0 if ok else 1


# ---------------------------------------------------------------------------
# Data-parallel training on every GPU of the machine (issue 42): GPT-2 under
# DistributedDataParallel, torchrun and NCCL, one rank a GPU, each allocator
# in its own torchrun, alternating, ROUNDS rounds.
# ---------------------------------------------------------------------------

# The allocators of the DDP runs and what each rank sets before importing torch.
DDP_ALLOCS = {
    "default": {},
    "expandable": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
    "async": {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"},
    "uvm": {},
    # The library with only the rank's own GPU visible (CUDA_VISIBLE_DEVICES):
    # its manager then makes no context on the other GPU. A diagnosis, not a
    # configuration to compare step times with (NCCL may take another path).
    "uvm_own_gpu": {},
}
DDP_NAMES = {"default": "PyTorch caching allocator", "expandable": "`expandable_segments:True`",
             "async": "`backend:cudaMallocAsync`", "uvm": "library (uvm.torch), every rank",
             "uvm_own_gpu": "library, each rank seeing its own GPU only"}


class UsedSampler:
    """The driver-used memory of one GPU (cuMemGetInfo: every process's),
    sampled every `period` seconds from a thread of its own: the peak
    between two synchronisations, which the steps' own samples miss."""

    def __init__(self, torch, device, period=0.005):
        import threading
        self.torch, self.device, self.period = torch, device, period
        self.peak = 0.0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        self.torch.cuda.set_device(self.device)
        while not self.stop.is_set():
            free, total = self.torch.cuda.mem_get_info(self.device)
            self.peak = max(self.peak, (total - free) / MIB)
            self.stop.wait(self.period)

    def close(self):
        self.stop.set()
        self.thread.join()
        return self.peak


def ddp_rank(alloc, steps, out_prefix):
    """One rank of a DDP run under torchrun: its figures to
    OUT_PREFIX.rankN.json (the driver, ddp_all, reads them)."""
    rank, local, world = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)  # each allocator as DDP_ALLOCS says, whatever the caller's
    os.environ.update(DDP_ALLOCS[alloc])
    if alloc == "uvm_own_gpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = str(local)
    import torch
    import torch.distributed as dist
    import transformers
    uvm_torch = None
    if alloc.startswith("uvm"):
        import uvm.torch as uvm_torch
        uvm_torch.enable()
    index = 0 if alloc == "uvm_own_gpu" else local
    dev = torch.device("cuda", index)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    sampler = UsedSampler(torch, dev)
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = False
    cfg = transformers.GPT2Config(n_layer=12, n_embd=768, n_head=12)
    model = torch.nn.parallel.DistributedDataParallel(transformers.GPT2LMHeadModel(cfg).to(dev), device_ids=[index])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(1234 + rank)
    seq = int(os.environ.get("DDP_SEQ", "512"))  # 8 x 512 a rank: the run
    times, losses, mid_step = [], [], []
    peak_used, peak_reserved, at_peak = 0.0, 0, {}
    for i in range(steps):
        ids = torch.randint(0, cfg.vocab_size, (8, seq), generator=gen).to(dev)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        mid_step.append(used_mib(torch))  # activations peak here; no sync
        loss.backward()  # the gradient buckets' all-reduces overlap it on NCCL's stream
        opt.step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
        losses.append(float.hex(loss.item()))
        peak_used = max(peak_used, used_mib(torch), max(mid_step))
        mid_step.clear()
        # Where the memory is at the step that held the most (the allocator's own view).
        if uvm_torch is not None:
            st = uvm_torch.memory_stats(index)
            if st["reserved_bytes.all.current"] > peak_reserved:
                peak_reserved = st["reserved_bytes.all.current"]
                ms = uvm_torch.manager().stats()
                at_peak = {"step": i, "reserved_mib": peak_reserved / MIB,
                           "held_mib": {k[len("uvm.held."):-len("_bytes")]: v / MIB for k, v in st.items()
                                        if k.startswith("uvm.held.")},
                           "streams": ms.streams, "retiring_objects": ms.retiring_objects,
                           "retiring_mib": ms.retiring_bytes / MIB, "stream_pool_mib": ms.stream_pool_bytes / MIB}
        else:
            reserved = torch.cuda.memory_reserved(dev)
            if reserved > peak_reserved:
                peak_reserved = reserved
                at_peak = {"step": i, "reserved_mib": reserved / MIB, "allocated_mib": torch.cuda.memory_allocated(dev) / MIB}
        del ids, loss
    torch.cuda.synchronize()
    out = {"alloc": alloc, "rank": rank, "world": world, "local_rank": local, "pid": os.getpid(), "seq": seq,
           "gpu": local,  # the machine's GPU index (torchrun's local rank is the GPU here)
           "steps": steps, "median_step_ms": statistics.median(times[5:] if len(times) > 8 else times),
           "step_ms": [round(t, 2) for t in times], "losses_hex": losses, "final_loss": float.fromhex(losses[-1]),
           "peak_driver_used_mib": max(peak_used, sampler.close()), "at_peak": at_peak,
           "torch": torch.__version__, "nccl": str(torch.cuda.nccl.version())}
    if uvm_torch is not None:
        mgr = uvm_torch.manager()
        # What the library holds on every GPU the process sees (the other
        # ranks' GPUs should hold nothing of this one's but its context).
        out["held_mib_by_gpu"] = [mgr.gpu_stats(g).held_bytes / MIB for g in range(mgr.gpu_count)]
        out["gpus_seen"] = mgr.gpu_count
    else:
        st = torch.cuda.memory_stats(dev)
        out["own"] = {"peak_reserved_mib": st.get("reserved_bytes.all.peak", 0) / MIB,
                      "peak_allocated_mib": st.get("allocated_bytes.all.peak", 0) / MIB}
    dist.destroy_process_group()
    with open(f"{out_prefix}.rank{rank}.json", "w") as f:
        json.dump(out, f)
    print(json.dumps({k: out[k] for k in ("alloc", "rank", "median_step_ms", "final_loss", "peak_driver_used_mib")}),
          flush=True)


def gpu_sampler(path, per_process_path):
    """nvidia-smi sampling every GPU's used memory (and each process's on
    each GPU) into two CSV files while a run lasts: the peaks per GPU from
    outside the processes. Returns the two Popen objects."""
    gpus = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,index,memory.used", "--format=csv,noheader,nounits",
                             "-lms", "50"], stdout=open(path, "w"), stderr=subprocess.DEVNULL)
    apps = subprocess.Popen(["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory",
                             "--format=csv,noheader,nounits", "-lms", "200"],
                            stdout=open(per_process_path, "w"), stderr=subprocess.DEVNULL)
    return gpus, apps


def smi_peaks(path, per_process_path):
    """The peaks of gpu_sampler's files: {gpu index: MiB}, {(pid, gpu index): MiB}."""
    uuid_index = {}
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=20)
        for line in q.stdout.splitlines():
            i, u = [x.strip() for x in line.split(",")]
            uuid_index[u] = int(i)
    except (OSError, ValueError, subprocess.SubprocessError):
        pass
    gpu, proc = {}, {}
    for line in open(path, errors="replace"):
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            gpu[int(parts[1])] = max(gpu.get(int(parts[1]), 0), int(parts[2]))
    for line in open(per_process_path, errors="replace"):
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == 3 and parts[0].isdigit() and parts[2].isdigit():
            key = (int(parts[0]), uuid_index.get(parts[1], parts[1]))
            proc[key] = max(proc.get(key, 0), int(parts[2]))
    return gpu, proc


def ddp_all(outdir, steps, rounds, allocs, timeout):
    """Every allocator of `allocs` in its own torchrun on every GPU,
    alternating, `rounds` rounds; results.md and results.json in outdir."""
    import torch  # the GPU count only (no CUDA context: nvml)
    ngpu = torch.cuda.device_count()
    os.makedirs(outdir, exist_ok=True)
    runs = []
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", PYTHONFAULTHANDLER="1", UVM_TORCH_NATIVE_BACKTRACE="1")
    # The compared allocators round after round; a diagnosis (uvm_own_gpu)
    # once, after the first round. DDP_DEADLINE (seconds since the epoch):
    # no run starts that would end after it (by the longest run so far).
    compared = [a for a in allocs if a != "uvm_own_gpu"]
    order = [(a, r) for r in range(1, rounds + 1) for a in compared]
    if "uvm_own_gpu" in allocs:
        order.insert(len(compared), ("uvm_own_gpu", 1))
    deadline = float(os.environ.get("DDP_DEADLINE", "0")) or None
    longest = 30.0
    for alloc, r in order:
        if deadline and time.time() + longest > deadline:
            runs.append({"alloc": alloc, "round": r, "exit": "not run (time)", "ranks": []})
            continue
        prefix = os.path.join(outdir, f"ddp_{alloc}_r{r}")
        smi = gpu_sampler(prefix + ".smi.csv", prefix + ".apps.csv")
        t0 = time.time()
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ngpu}",
               os.path.abspath(__file__), "--ddp-rank", alloc, str(steps), prefix]
        # A session of its own: a run past its time goes with every rank (a
        # rank left behind would hold its GPU's memory through the next run).
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                             start_new_session=True)
        try:
            _, err = p.communicate(timeout=timeout)
            code = p.returncode
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            _, err = p.communicate()
            code = "timeout"
        for s in smi:
            s.terminate()
            s.wait()
        with open(prefix + ".log", "w") as f:
            f.write(err)
        ranks = []
        for k in range(ngpu):
            try:
                with open(f"{prefix}.rank{k}.json") as f:
                    ranks.append(json.load(f))
            except (OSError, ValueError):
                ranks.append(None)
        gpu_peak, proc_peak = smi_peaks(prefix + ".smi.csv", prefix + ".apps.csv")
        run = {"alloc": alloc, "round": r, "exit": code, "wall_s": round(time.time() - t0, 1), "ranks": ranks,
               "smi_peak_mib_by_gpu": gpu_peak,
               "smi_peak_mib_by_process": {f"{pid}@{g}": v for (pid, g), v in proc_peak.items()}}
        if code != 0:
            run["stderr_end"] = err[-3000:]
        runs.append(run)
        longest = max(longest if len(runs) > 1 else 0.0, run["wall_s"])
        sys.stderr.write(f"ddp {alloc} round {r}: exit {code}, {run['wall_s']} s\n")
        sys.stderr.flush()
    results = {"steps": steps, "rounds": rounds, "gpus": ngpu, "runs": runs}
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    lines = ddp_table(results)
    with open(os.path.join(outdir, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(r["exit"] == 0 and r["ranks"] and all(r["ranks"]) for r in runs) else 1


def ddp_table(results):
    """The DDP runs as a table: per run and rank, then per allocator the
    medians over rounds against PyTorch's caching allocator."""
    runs = results["runs"]
    reference = {}  # rank -> the losses of the caching allocator's first round
    for run in runs:
        if run["alloc"] == "default" and run["exit"] == 0:
            for rk in run["ranks"]:
                if rk:
                    reference.setdefault(rk["rank"], rk["losses_hex"])
    seq = next((rk["seq"] for run in runs for rk in run["ranks"] if rk), "?")
    lines = [f"GPT-2 (124M) under DistributedDataParallel on {results['gpus']} GPUs, batch 8 x {seq} a rank, bf16 autocast, "
             f"AdamW, {results['steps']} steps (median over steps 6+), NCCL_NVLS_ENABLE=0",
             "", "| allocator | round | rank | median step | final loss | losses = caching allocator's | "
             "peak driver-used (rank's GPU, sampled) | nvidia-smi peak of the GPU | this rank's process on other GPUs | "
             "at the step of most reserved |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    summary = {}
    for run in runs:
        if run["exit"] != 0 or not run["ranks"] or not all(run["ranks"]):
            lines.append(f"| {DDP_NAMES.get(run['alloc'], run['alloc'])} | {run['round']} | - | exit {run['exit']} | | | | | | |")
            continue
        for rk in run["ranks"]:
            ref = reference.get(rk["rank"])
            if ref is None:
                same = "?"
            elif rk["losses_hex"] == ref:
                same = "identical"
            else:
                diff = max(abs(float.fromhex(a) - float.fromhex(b)) for a, b in zip(rk["losses_hex"], ref))
                same = f"max diff {diff:.2e}"
            others = [f"GPU {key.split('@')[1]}: {v} MiB" for key, v in run["smi_peak_mib_by_process"].items()
                      if key.split("@")[0] == str(rk["pid"]) and key.split("@")[1] != str(rk["gpu"])]
            ap = rk.get("at_peak", {})
            where = ", ".join(f"{k} {v:.0f}" for k, v in ap.get("held_mib", {}).items() if v) if "held_mib" in ap else \
                f"allocated {ap.get('allocated_mib', 0):.0f}"
            lines.append(f"| {DDP_NAMES.get(run['alloc'], run['alloc'])} | {run['round']} | {rk['rank']} | "
                         f"{rk['median_step_ms']:.1f} ms | {rk['final_loss']:.6f} | {same} | "
                         f"{rk['peak_driver_used_mib']:.0f} MiB | "
                         f"{run['smi_peak_mib_by_gpu'].get(rk['gpu'], run['smi_peak_mib_by_gpu'].get(str(rk['gpu']), '?'))} MiB | "
                         f"{'; '.join(others) or 'none seen'} | reserved {ap.get('reserved_mib', 0):.0f} MiB"
                         f"{' (' + where + ')' if where else ''} |")
            s = summary.setdefault(run["alloc"], {"step": [], "peak": []})
            s["step"].append(rk["median_step_ms"])
            s["peak"].append(rk["peak_driver_used_mib"])
    lines += ["", "| allocator | step time, median over ranks and rounds | vs caching allocator | "
              "peak driver-used per GPU, max over ranks and rounds | vs caching allocator |", "| --- | --- | --- | --- | --- |"]
    base = summary.get("default")
    for alloc, s in summary.items():
        step, peak = statistics.median(s["step"]), max(s["peak"])
        rel = (f"{step / statistics.median(base['step']):.3f}x", f"{peak - max(base['peak']):+.0f} MiB") if base else ("?", "?")
        lines.append(f"| {DDP_NAMES.get(alloc, alloc)} | {step:.1f} ms | {rel[0]} | {peak:.0f} MiB | {rel[1]} |")
    return lines


def main():
    if sys.argv[1] == "--build-extension":  # uvm.torch's C++ side into its cache, no GPU touched
        import uvm.torch
        print(json.dumps({k: v for k, v in uvm.torch.build_extension().items() if k != "failed_tries"}))
        return
    if sys.argv[1] == "--ddp-rank":
        ddp_rank(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return
    if sys.argv[1] == "--ddp":
        # --ddp OUTDIR [STEPS [ROUNDS [ALLOCS]]]
        steps = int(sys.argv[3]) if len(sys.argv) > 3 else 30
        rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 2
        allocs = sys.argv[5].split(",") if len(sys.argv) > 5 else ["default", "expandable", "async", "uvm"]
        unknown = [a for a in allocs if a not in DDP_ALLOCS]
        if unknown:
            sys.exit(f"unknown allocators {unknown}: {', '.join(DDP_ALLOCS)}")
        sys.exit(ddp_all(sys.argv[2], steps, rounds, allocs, int(os.environ.get("DDP_RUN_TIMEOUT", "150"))))
    if sys.argv[1] == "--all":
        sys.exit(run_all(sys.argv[2]))
    if sys.argv[1] == "--checks":
        sys.exit(run_all(sys.argv[2], training=False))
    if sys.argv[1] == "--run":
        print(json.dumps(run(sys.argv[2], sys.argv[3])), flush=True)
    elif sys.argv[1] == "--check":
        checks = {"oom": check_oom, "oom_device": lambda: check_oom(with_budget=False), "pools": check_pools,
                  "cupy_numba": check_cupy_numba, "sleep_wake": check_sleep_wake}
        print(json.dumps(checks[sys.argv[2]]()), flush=True)


if __name__ == "__main__":
    main()
