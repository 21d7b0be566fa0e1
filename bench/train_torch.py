#!/usr/bin/env python3
"""Real clients on the library (tools/torch_check.sh and tools/train_ab.sh run
it on a GPU machine).

Workloads, each model and allocator in a process of its own (same seeds):
  gpt2      training: transformers.GPT2Config(n_layer=12, n_embd=768, n_head=12),
            random init, batch 8 x 1024 random tokens, bf16 autocast, AdamW, 60 steps
  resnet50  training: torchvision.models.resnet50(), random init, batch 64
            random images, bf16 autocast, SGD (momentum 0.9), 40 steps
  varlen    training whose shapes change every step: the same GPT-2, 40 steps,
            each a batch of 4096-8192 tokens in rows of random length padded
            to the batch's longest (a multiple of 8, 128-1024; attention mask,
            labels -100 on the padding), from a seeded schedule
  generate  serving: the same GPT-2 in bf16, model.generate() with greedy
            decoding and its KV cache (grown a token a step), a warm-up
            request then 8 requests of 1-32 prompts of 16-512 tokens and
            32-128 new tokens each; time per generated token
under PyTorch's caching allocator ("default"), expandable_segments:True
("expandable"), backend:cudaMallocAsync ("async") and uvm.torch.enable()
("uvm"; "uvm0", "uvm1g", ...: the library under other policies). Per run:
median step time (warm-up steps left out; generate: the median over
requests of ms per generated token), the losses (generate: a hash of the
generated token ids), peak driver-used memory (torch.cuda.mem_get_info
total - free: read every 5 ms by a thread, TRAIN_SAMPLE_MS, and after each
forward pass and step), driver-used before the model and after freeing
everything and empty_cache, the allocator's own accounting (PyTorch's
memory_stats, or uvm.torch.memory_stats) and where the run's seconds went.

Checks, each in a process of its own: an OOM raised as
torch.cuda.OutOfMemoryError carrying the library's report; two MemPool
clients under budgets in one training run; CuPy FFT and matmul bit-identical
to CuPy's own pool, and a Numba kernel over EMM memory (one process: one
manager for both); sleep and wake of a GPT-2's weights and optimizer state
between training steps, the memory used by another process meanwhile, the
final loss against a run that never slept.

  bench/train_torch.py --all OUTDIR         everything; OUTDIR/results.md and results.json
  bench/train_torch.py --checks OUTDIR      the checks alone (no training), the same files
  bench/train_torch.py --peers WORKDIR OUTDIR
                                            every workload under every allocator, in rounds
                                            (issue 39's targets; see peers(), tools/train_ab.sh)
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

--dry-run (with --run or --peers): tiny sizes, on the CPU where there is no
GPU (memory figures: the process's resident host memory; the library not
enabled), with stand-ins for transformers' GPT-2 where it is not installed:
a check of the harness, whose figures measure nothing.

A check says where it is on stderr ("stage: ..." lines, flushed), runs with
faulthandler on, the C++ side's trace of each refused allocation
(UVM_TORCH_TRACE) and its native stack on a fatal signal
(UVM_TORCH_NATIVE_BACKTRACE); where a check's process dies, its result keeps
the last stage, those lines, Python's traceback and the native stack.
"""
import faulthandler
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import threading
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


# The library's runs under a release threshold (uvm.torch.set_release_threshold).
THRESHOLDS = {"uvm0": 0, "uvm1g": 1 << 30}
# The library's runs under a growth slack (uvm.torch.set_growth_slack): "inf"
# keeps free memory beside a growth, as before the moves of chunk/pmm.h.
SLACKS = {"uvm_keep": "inf", "uvm_s0": "0", "uvm_s256m": str(256 << 20)}


def apply_alloc(label):
    """Set the environment that the allocator `label` runs under (before
    PyTorch is imported); the allocator's kind: default, expandable, async
    or uvm."""
    alloc = label
    if alloc in THRESHOLDS:  # the library under a release threshold
        alloc = "uvm"
        os.environ["UVM_RELEASE_THRESHOLD"] = str(THRESHOLDS[label])
    if alloc in SLACKS:
        alloc = "uvm"
        os.environ["UVM_GROWTH_SLACK"] = SLACKS[label]
    if alloc == "uvm_compact":  # uvm.torch.compact() every COMPACT_EVERY steps (default 10)
        alloc = "uvm"
    # PyTorch takes its allocator's settings from the environment (the
    # backend as its library loads); one left there would make "default"
    # something else.
    conf = {"async": "backend:cudaMallocAsync", "expandable": "expandable_segments:True"}.get(alloc)
    if conf:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = conf
    else:
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    return alloc


class Device:
    """What the runs ask of the GPU, and where the memory figures come from:
    the driver's count of the GPU's memory in use (cuMemGetInfo's total -
    free: all the process holds, its CUDA context included, whichever
    allocator took it). A dry run on a machine without a GPU runs on the CPU
    and reads the process's resident host memory instead."""

    def __init__(self, torch, dry):
        self.torch = torch
        self.cuda = torch.cuda.is_available()
        if not self.cuda and not dry:
            raise SystemExit("no CUDA device (a dry run, --dry-run, runs on the CPU)")
        self.dev = torch.device("cuda", 0) if self.cuda else torch.device("cpu")
        self.memory = "cuMemGetInfo total - free" if self.cuda else "host RSS (dry run on the CPU)"

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def used_mib(self):
        if self.cuda:
            free, total = self.torch.cuda.mem_get_info(0)
            return (total - free) / MIB
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MIB

    def empty_cache(self):
        if self.cuda:
            self.torch.cuda.empty_cache()


class Sampler:
    """The peak of a reading (Device.used_mib) taken every `interval_s` by a
    thread of its own: a backward pass or a growing KV cache peaks between
    the points where the loop itself can look. The thread waits with the GIL
    released; a reading costs the main thread a GIL handover (microseconds),
    the same for every allocator. interval_s 0: no thread."""

    def __init__(self, read, interval_s):
        self.read, self.interval_s = read, interval_s
        self.peak, self.samples, self.error = 0.0, 0, None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="used-sampler", daemon=True) if interval_s > 0 else None

    def start(self):
        if self._thread:
            self._thread.start()
        return self

    def _loop(self):
        while not self._stop.wait(self.interval_s):
            try:
                value = self.read()
            except Exception as e:  # noqa: BLE001  (said in the result, not fatal to the run)
                self.error = f"{type(e).__name__}: {e}"
                return
            self.peak = max(self.peak, value)
            self.samples += 1

    def stop(self):
        self._stop.set()
        if self._thread:
            self._thread.join()
        return self.peak


class HeldSampler(Sampler):
    """The library's own split of what it holds (uvm.torch.memory_stats'
    uvm.held.*), kept from the reading where it held the most: the step-end
    readings of OwnStats miss the peak inside a step. A diagnostic
    (TRAIN_HELD_SAMPLE_MS): a reading builds the whole stats dict."""

    def __init__(self, uvm_torch, interval_s):
        self.at_peak = {}
        self._uvm = uvm_torch
        super().__init__(self._read, interval_s)

    def _read(self):
        s = self._uvm.memory_stats()
        held = s["reserved_bytes.all.current"]
        if held > self.peak * MIB:
            self.at_peak = {"reserved": held / MIB, "allocated": s["allocated_bytes.all.current"] / MIB}
            self.at_peak.update({k[len("uvm.held."):]: v / MIB for k, v in s.items() if k.startswith("uvm.held.")})
        return held / MIB


class OwnStats:
    """The allocator's own figures: the library's read after each step or
    request (it keeps no peaks), PyTorch's peaks at the end."""

    def __init__(self, torch, device, uvm_torch):
        self.torch, self.device, self.uvm = torch, device, uvm_torch
        self.peak_reserved, self.peak_alloc, self.held_at_peak, self.grown = 0, 0, {}, []

    def sample(self):
        if self.uvm is None:
            return
        s = self.uvm.memory_stats()
        if s["reserved_bytes.all.current"] > self.peak_reserved:
            self.held_at_peak = {k[len("uvm.held."):]: v / MIB for k, v in s.items() if k.startswith("uvm.held.")}
        self.peak_reserved = max(self.peak_reserved, s["reserved_bytes.all.current"])
        self.peak_alloc = max(self.peak_alloc, s["allocated_bytes.all.current"])
        self.grown.append(getattr(self.uvm.manager().gpu_stats(0), "root_chunks_grown", 0))

    def summary(self):
        if self.uvm is not None:
            grown = self.grown
            # The library keeps no peaks: its figures are sampled after each step.
            return {"peak_reserved_mib": self.peak_reserved / MIB, "peak_allocated_mib": self.peak_alloc / MIB,
                    "held_mib_at_peak": self.held_at_peak,
                    # Root chunks grown per step over the second half of the run (the steady state).
                    "grown_mib_per_step_late": (grown[-1] - grown[len(grown) // 2]) * 2 / (len(grown) - 1 - len(grown) // 2)
                    if len(grown) > 2 else None}
        st = self.torch.cuda.memory_stats() if self.device.cuda else {}
        return {"peak_reserved_mib": st.get("reserved_bytes.all.peak", 0) / MIB,
                "peak_allocated_mib": st.get("allocated_bytes.all.peak", 0) / MIB}

    def after_release(self, own, mode):
        torch = self.torch
        if self.uvm is not None:
            s = self.uvm.memory_stats()
            own["after_release_reserved_mib"] = s["reserved_bytes.all.current"] / MIB
            own["after_release_allocated_mib"] = s["allocated_bytes.all.current"] / MIB
            own["held_mib_after_release"] = {k[len("uvm.held."):]: v / MIB for k, v in s.items() if k.startswith("uvm.held.")}
            g = self.uvm.manager().gpu_stats(0)
            own["root_chunks_after_release"] = g.root_chunks
            # Growth over the run (the moves of chunk/pmm.h: memory held to the need, paid in driver calls).
            own["root_chunks_grown"] = getattr(g, "root_chunks_grown", None)
            own["root_chunks_moved"] = getattr(g, "root_chunks_moved", None)
            own["free_mib_by_chunk_size_after_release"] = [b / MIB for b in g.bytes_free]
            own["extension_build"] = {k: v for k, v in self.uvm.extension_build().items() if k != "failed_tries"}
        elif self.device.cuda:
            own["after_release_reserved_mib"] = torch.cuda.memory_reserved() / MIB
            own["after_release_allocated_mib"] = torch.cuda.memory_allocated() / MIB
        own["mode"] = mode


class _TinyConfig:
    """Only for a dry run where transformers is not installed: the fields of
    GPT2Config that the runs read."""

    def __init__(self, n_layer=2, n_embd=32, n_head=2, vocab_size=256, n_positions=256, **_):
        self.n_layer, self.n_embd, self.n_head = n_layer, n_embd, n_head
        self.vocab_size, self.n_positions, self.eos_token_id = vocab_size, n_positions, vocab_size - 1


def _tiny_lm(torch):
    """Only for a dry run where transformers is not installed: a small causal
    LM with the calls the runs make (forward with attention_mask and labels,
    greedy generate whose KV cache grows by torch.cat), so that the harness
    around the model runs. Its figures measure nothing."""
    nn, F = torch.nn, torch.nn.functional

    class Output:
        pass

    class TinyLM(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.cfg = cfg
            e = cfg.n_embd
            self.wte, self.wpe = nn.Embedding(cfg.vocab_size, e), nn.Embedding(cfg.n_positions, e)
            self.qkv = nn.ModuleList(nn.Linear(e, 3 * e) for _ in range(cfg.n_layer))
            self.proj = nn.ModuleList(nn.Linear(e, e) for _ in range(cfg.n_layer))
            self.head = nn.Linear(e, cfg.vocab_size, bias=False)

        def _forward(self, ids, past=None, start=0, mask=None):
            t = ids.shape[1]
            x = self.wte(ids) + self.wpe(torch.arange(start, start + t, device=ids.device))
            cache = []
            for i, (qkv, proj) in enumerate(zip(self.qkv, self.proj)):
                q, k, v = qkv(x).chunk(3, -1)
                if past is not None:
                    k, v = torch.cat([past[i][0], k], 1), torch.cat([past[i][1], v], 1)
                cache.append((k, v))
                att = q @ k.transpose(1, 2) / self.cfg.n_embd ** 0.5
                keys = torch.arange(k.shape[1], device=ids.device)
                allowed = keys[None, :] <= (start + torch.arange(t, device=ids.device))[:, None]
                allowed = allowed[None] if mask is None else allowed[None] & (mask[:, None, :] != 0)
                att = att.masked_fill(~allowed, float("-inf"))
                x = x + proj(att.softmax(-1) @ v)
            return self.head(x), cache

        def forward(self, input_ids, attention_mask=None, labels=None):
            out = Output()
            out.logits, _ = self._forward(input_ids, mask=attention_mask)
            if labels is not None:
                out.loss = F.cross_entropy(out.logits[:, :-1].reshape(-1, self.cfg.vocab_size).float(),
                                           labels[:, 1:].reshape(-1), ignore_index=-100)
            return out

        @torch.no_grad()
        def generate(self, input_ids, max_new_tokens=1, **_):
            logits, past = self._forward(input_ids)
            ids = input_ids
            for i in range(max_new_tokens):
                ids = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], 1)
                if i + 1 < max_new_tokens:
                    logits, past = self._forward(ids[:, -1:], past, start=ids.shape[1] - 1)
            return ids

    return TinyLM


def gpt2_classes(torch, dry):
    """transformers' GPT2Config and GPT2LMHeadModel; in a dry run without
    transformers, the stand-ins above (the result says so)."""
    try:
        import transformers
        return transformers.GPT2Config, transformers.GPT2LMHeadModel, "transformers " + transformers.__version__
    except ImportError:
        if not dry:
            raise
        return _TinyConfig, _tiny_lm(torch), "stand-in (dry run, transformers not installed)"


def gpt2_config(config_class, dry):
    """GPT-2 small (124M) for the runs; a tiny one for a dry run."""
    if dry:
        return config_class(n_layer=2, n_embd=32, n_head=2, vocab_size=256, n_positions=256)
    return config_class(n_layer=12, n_embd=768, n_head=12)


# Warm-up steps left out of a run's median step time.
WARMUP = 5


def training(model_name, torch, device, gen, mid_step, dry=False):
    """A training run's model, optimizer, step count, batch() and step(batch),
    and what it records besides (info)."""
    dev = device.dev
    info = {}

    def autocast():
        # bf16 on the GPU; a dry run on the CPU computes in fp32 (bf16
        # convolutions on a CPU take seconds a step).
        return torch.autocast(dev.type, dtype=torch.bfloat16, enabled=device.cuda)

    if model_name in ("gpt2", "varlen"):
        config_class, model_class, info["model_code"] = gpt2_classes(torch, dry)
        cfg = gpt2_config(config_class, dry)
        model = model_class(cfg).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    if model_name == "gpt2":
        steps = 4 if dry else 60
        rows, length = (2, 64) if dry else (8, 1024)

        def batch():
            ids = torch.randint(0, cfg.vocab_size, (rows, length), generator=gen).to(dev)
            return ids

        def step(ids):
            with autocast():
                loss = model(input_ids=ids, labels=ids).loss
            mid_step.append(device.used_mib())  # activations peak here; no sync
            loss.backward()
            return loss
    elif model_name == "varlen":
        # Fine-tuning on variable-length text: each step a batch of up to
        # `tokens` tokens, rows of random length padded (right, masked out
        # of attention and loss) to the batch's longest, a multiple of 8
        # between 128 and 1024; the row count drawn so that the batch holds
        # between half and all of `tokens`. Seeded: every allocator sees the
        # same shapes (info["shapes"]).
        steps = 4 if dry else 40
        tokens, lo, hi = (256, 2, 8) if dry else (8192, 16, 128)
        rng = random.Random(2024)
        pad = cfg.eos_token_id
        info["shapes"] = shapes = []

        def batch():
            length = 8 * rng.randint(lo, hi)
            rows = rng.randint(max(1, tokens // (2 * length)), max(1, tokens // length))
            lengths = [rng.randint(max(1, length // 2), length) for _ in range(rows)]
            lengths[rng.randrange(rows)] = length
            shapes.append([rows, length])
            ids = torch.randint(0, cfg.vocab_size, (rows, length), generator=gen)
            mask = (torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]).long()
            ids = ids.masked_fill(mask == 0, pad)
            labels = ids.masked_fill(mask == 0, -100)
            return ids.to(dev), mask.to(dev), labels.to(dev)

        def step(data):
            ids, mask, labels = data
            with autocast():
                loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            mid_step.append(device.used_mib())  # activations peak here; no sync
            loss.backward()
            return loss
    elif model_name == "resnet50":
        import torchvision
        model = torchvision.models.resnet50().to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        steps = 4 if dry else 40
        rows, side = (2, 32) if dry else (64, 224)
        lossf = torch.nn.CrossEntropyLoss()

        def batch():
            x = torch.randn(rows, 3, side, side, generator=gen).to(dev)
            y = torch.randint(0, 1000, (rows,), generator=gen).to(dev)
            return (x, y)

        def step(xy):
            with autocast():
                loss = lossf(model(xy[0]), xy[1])
            mid_step.append(device.used_mib())  # activations peak here; no sync
            loss.backward()
            return loss
    else:
        raise SystemExit(f"no workload {model_name!r} (gpt2, resnet50, varlen, generate)")
    return model, opt, steps, batch, step, info


def serve(torch, device, gen, dry, after_request):
    """A generate() serving loop: GPT-2 small (random init, bf16, eval),
    requests one after another, each a batch of prompts of one length
    (random tokens) answered by greedy decoding with transformers' KV cache,
    which grows by a token a step (DynamicCache: a torch.cat per layer and
    token). min_new_tokens = max_new_tokens, so that every request makes
    its count whatever the end-of-text token. A first request, not timed,
    warms the kernels. Seeded: every allocator gets the same requests, and
    greedy decoding the same tokens (output_sha256)."""
    dev = device.dev
    t0 = time.perf_counter()
    config_class, model_class, model_code = gpt2_classes(torch, dry)
    cfg = gpt2_config(config_class, dry)
    model = model_class(cfg).to(dev, dtype=torch.bfloat16).eval()
    phases = {"model_s": time.perf_counter() - t0}
    rng = random.Random(4321)
    if dry:
        requests = [(1, 4, 2)] + [(rng.choice([1, 2]), rng.randint(4, 16), rng.randint(3, 6)) for _ in range(3)]
    else:
        # rows, prompt length, new tokens: 8 requests, about 650 tokens made in all.
        requests = [(4, 64, 16)] + [(rng.choice([1, 4, 8, 16, 32]), rng.randint(16, 512), rng.randint(32, 128))
                                    for _ in range(8)]
    timed, hashes, whole = [], [], hashlib.sha256()
    for i, (rows, prompt, new) in enumerate(requests):
        stage(f"request {i}: {rows} x {prompt} tokens, {new} new")
        ids = torch.randint(0, cfg.vocab_size, (rows, prompt), generator=gen).to(dev)
        mask = torch.ones_like(ids)
        device.sync()
        t0 = time.perf_counter()
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new,
                             do_sample=False, use_cache=True, pad_token_id=cfg.eos_token_id)
        device.sync()
        ms = (time.perf_counter() - t0) * 1e3
        made = out[:, prompt:].tolist()
        h = hashlib.sha256(json.dumps(made).encode()).hexdigest()[:16]
        hashes.append(h)
        whole.update(h.encode())
        if i > 0:
            timed.append({"rows": rows, "prompt": prompt, "new": len(made[0]), "ms": round(ms, 3),
                          "ms_per_token": ms / max(1, len(made[0]))})
        del out, ids, mask
        after_request()
        if i == 0:
            phases["first_step_s"] = ms / 1e3
    tokens = sum(r["new"] for r in timed)
    info = {"phases": phases, "model_code": model_code, "requests": timed, "warmup_request": list(requests[0]),
            "request_hashes": hashes, "output_sha256": whole.hexdigest(), "tokens": tokens,
            "tokens_short": sum(r[2] for r in requests[1:]) - tokens,
            "ms_per_token_all": sum(r["ms"] for r in timed) / max(1, tokens)}
    return model, info


def run(model_name, alloc, dry=False):
    """One run: a workload under one allocator, in this process; its figures
    as a dict (printed as one JSON line by --run)."""
    start = time.perf_counter()
    phases = {}
    label = alloc
    alloc = apply_alloc(label)
    import torch
    phases["import_s"] = time.perf_counter() - start
    device = Device(torch, dry)
    mode, uvm_torch = None, None
    stage(f"{model_name} {label}: allocator")
    if alloc == "uvm" and not device.cuda:
        mode = "not enabled (dry run on the CPU)"
    elif alloc == "uvm":
        import uvm.torch as uvm_torch
        mode = uvm_torch.enable()
        if os.environ.get("UVM_RELEASE_THRESHOLD"):  # the release policy to run under (default: keep)
            uvm_torch.set_release_threshold(int(os.environ["UVM_RELEASE_THRESHOLD"]))
        if os.environ.get("UVM_GROWTH_SLACK"):  # the growth policy to run under (default: 256 MiB)
            s = os.environ["UVM_GROWTH_SLACK"]
            uvm_torch.set_growth_slack("inf" if s == "inf" else int(s))
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = False
    base = device.used_mib()  # the context made (and the library's manager), nothing allocated yet
    phases["cuda_init_s"] = time.perf_counter() - start - phases["import_s"]
    gen = torch.Generator().manual_seed(1234)
    own = OwnStats(torch, device, uvm_torch)
    stage("model")
    sampler = Sampler(device.used_mib, float(os.environ.get("TRAIN_SAMPLE_MS", "5")) / 1e3).start()
    held_sampler = HeldSampler(uvm_torch, float(os.environ.get("TRAIN_HELD_SAMPLE_MS", "0")) / 1e3).start() \
        if uvm_torch is not None else None
    peak_points = base
    result = {"model": model_name, "alloc": label, "dry_run": dry, "memory_source": device.memory,
              "torch": torch.__version__, "device": torch.cuda.get_device_name(0) if device.cuda else "cpu"}
    if model_name == "generate":
        def after_request():
            nonlocal peak_points
            peak_points = max(peak_points, device.used_mib())
            own.sample()

        t0 = time.perf_counter()
        model, info = serve(torch, device, gen, dry, after_request)
        phases.update(info.pop("phases"))
        phases["work_s"] = time.perf_counter() - t0 - phases["model_s"]
        opt = None
        per_token = [r["ms_per_token"] for r in info["requests"]]
        result.update(steps=len(per_token), median_step_ms=statistics.median(per_token), step_unit="ms per token",
                      output_sha256=info["output_sha256"])
    else:
        mid_step = []
        model, opt, steps, batch, step, info = training(model_name, torch, device, gen, mid_step, dry)
        phases["model_s"] = time.perf_counter() - start - phases["import_s"] - phases["cuda_init_s"]
        times, losses, compactions = [], [], []
        compact_every = int(os.environ.get("COMPACT_EVERY", "10")) if label == "uvm_compact" else 0
        t_loop = time.perf_counter()
        for i in range(steps):
            stage(f"step {i}")
            data = batch()
            device.sync()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = step(data)
            opt.step()
            device.sync()
            times.append((time.perf_counter() - t0) * 1e3)
            losses.append(loss.item())
            peak_points = max(peak_points, device.used_mib(), max(mid_step))
            mid_step.clear()
            own.sample()
            del data, loss
            if compact_every and (i + 1) % compact_every == 0 and uvm_torch is not None:
                # Between steps, outside the step's time: its own cost, and
                # what it gave back (the next step grows again).
                used_before = device.used_mib()
                t0 = time.perf_counter()
                r = uvm_torch.compact()
                compactions.append({"after_step": i, "s": time.perf_counter() - t0,
                                    "driver_used_before_mib": used_before, "driver_used_after_mib": device.used_mib(),
                                    "moved_mib": r.bytes_moved / MIB, "rebacked_mib": r.bytes_rebacked / MIB,
                                    "driver_held_before_mib": r.driver_held_before / MIB,
                                    "driver_held_after_mib": r.driver_held_after / MIB})
            if i == 0:
                phases["first_step_s"] = time.perf_counter() - t_loop
        phases["work_s"] = time.perf_counter() - t_loop
        warm = min(WARMUP, steps // 2)
        result.update(steps=steps, warmup_steps=warm, median_step_ms=statistics.median(times[warm:]),
                      mean_step_ms=statistics.fmean(times[warm:]), step_unit="ms per step",
                      final_loss=losses[-1], final_loss_hex=float.hex(losses[-1]), losses=losses)
        if compactions:
            result["compactions"] = compactions
        del batch, step  # the closures of training() hold the model too
    sampler.stop()
    stage("release")
    own_figures = own.summary()
    if held_sampler is not None and held_sampler.samples:
        held_sampler.stop()
        own_figures["held_mib_at_sampled_peak"] = held_sampler.at_peak
        own_figures["held_samples"] = held_sampler.samples
    t0 = time.perf_counter()
    del model, opt
    import gc
    gc.collect()
    device.sync()
    device.empty_cache()  # with uvm.torch's C++ side, the library's trim
    device.sync()
    if uvm_torch is not None:
        # The library's own trim as well (what torch.cuda.empty_cache() does
        # with the C++ side; the pluggable allocator's empty_cache does nothing).
        own_figures["released_by_uvm_empty_cache_mib"] = uvm_torch.empty_cache() / MIB
        device.sync()
    after = device.used_mib()
    own.after_release(own_figures, mode)
    phases["release_s"] = time.perf_counter() - t0
    phases["total_s"] = time.perf_counter() - start
    result.update(info)
    result.update({
        "base_driver_used_mib": base,
        # The most of: the sampler thread's readings, and the readings after
        # each forward pass and each step (request), as before the thread.
        "peak_driver_used_mib": max(peak_points, sampler.peak),
        "peak_driver_used_points_mib": peak_points, "sampler": {"interval_ms": sampler.interval_s * 1e3,
                                                                "samples": sampler.samples, "peak_mib": sampler.peak,
                                                                "error": sampler.error},
        "after_release_driver_used_mib": after, "own": own_figures, "phases_s": {k: round(v, 3) for k, v in phases.items()},
    })
    return result


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
    names = ALLOC_NAMES
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


# The library against its peers (issue 39's targets): each workload under
# each allocator, in a process of its own, rounds alternating the order.
PEER_WORKLOADS = ("gpt2", "resnet50", "varlen", "generate")
PEER_ALLOCS = ("default", "expandable", "async", "uvm")
ALLOC_NAMES = {"default": "PyTorch caching", "expandable": "expandable_segments", "async": "cudaMallocAsync",
               "uvm": "library (uvm.torch)", "uvm0": "library, release threshold 0",
               "uvm1g": "library, release threshold 1 GiB", "uvm_keep": "library, growth slack inf",
               "uvm_s0": "library, growth slack 0", "uvm_s256m": "library, growth slack 256 MiB",
               "uvm_compact": "library, uvm.torch.compact() every COMPACT_EVERY steps"}
WORKLOAD_NAMES = {"gpt2": "GPT-2 training", "resnet50": "ResNet-50 training",
                  "varlen": "variable-length GPT-2 training", "generate": "GPT-2 generate() serving"}


def spawned_as(meta, runs):
    """How the runs started, as said in the table's header: a zygote that did
    not start (some import had mapped the CUDA driver) leaves its runs to
    fresh processes, whatever SPAWN asked."""
    forked = sum(1 for r in runs if r.get("spawn") == "zygote")
    if meta["spawn"] != "zygote" or forked == 0:
        return "a new interpreter" + (" (no zygote started)" if meta["spawn"] == "zygote" else "")
    if forked == len(runs):
        return "forked from a process per allocator that did the imports"
    return f"{forked} of {len(runs)} forked from a process per allocator that did the imports, the rest a new interpreter"


def run_env():
    """The environment of a run's process: no network (nothing to reach on
    the GPU machine: a try would wait), PyTorch's CUDA check through NVML so
    that a zygote's imports make no CUDA context, the allocator's settings
    left to apply_alloc."""
    env = dict(os.environ, PYTHONFAULTHANDLER="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               HF_HUB_DISABLE_TELEMETRY="1", TOKENIZERS_PARALLELISM="false", PYTORCH_NVML_BASED_CUDA_CHECK="1")
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    return env


def zygote(label, dry):
    """--zygote LABEL: import PyTorch (under LABEL's allocator settings,
    which PyTorch reads at import), transformers and torchvision once, then
    fork a process for each run asked for on stdin (one JSON line: workload,
    result and log paths). A run's process is its own as much as a fresh
    one's (its CUDA context, its allocator, nothing of the GPU before it:
    CUDA is never initialised here); it only skips the imports, some seconds
    a run on the GPU machine. Says on stdout: {"ready": ...} once, then per
    run {"pid": N} at the fork and {"done": N, "status": exit code}."""
    alloc = apply_alloc(label)
    t0 = time.perf_counter()
    import torch
    versions = {"python": sys.version.split()[0], "torch": torch.__version__}
    for name in ("transformers", "torchvision"):
        try:
            versions[name] = __import__(name).__version__
        except ImportError:
            versions[name] = None
    try:
        from transformers import GPT2Config, GPT2LMHeadModel  # noqa: F401  (the model's own modules, once)
    except ImportError:
        pass
    if alloc == "uvm":
        import uvm.torch  # noqa: F401  (pure Python until enable(): no library loaded here)
        from torch.utils import cpp_extension  # noqa: F401  (enable() reads it)
    # CUDA must not have started here: a child cannot use a context, or even
    # a driver, initialised before its fork. PyTorch's own start shows in
    # is_initialized(); a driver call from elsewhere (a CUDA check at some
    # import) shows as libcuda mapped into the process.
    with open("/proc/self/maps") as f:
        libcuda = "libcuda.so" in f.read()
    cuda_up = bool(torch.cuda.is_initialized()) or libcuda
    with open("/proc/self/status") as f:  # threads other than this one would be copied without their state
        threads = int(next((l.split()[1] for l in f if l.startswith("Threads:")), "0"))
    print(json.dumps({"ready": not cuda_up, "import_s": round(time.perf_counter() - t0, 3),
                      "cuda_initialized": bool(torch.cuda.is_initialized()), "libcuda_mapped": libcuda,
                      "native_threads": threads, "versions": versions}), flush=True)
    if cuda_up:  # a fork would inherit it: no run here
        return 1
    for line in sys.stdin:
        req = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                os.close(fd)
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.close(null)
                if getattr(torch.cuda, "_is_in_bad_fork", lambda: False)():
                    raise RuntimeError("CUDA was initialised in the zygote before the fork")
                result = run(req["workload"], label, dry=dry)
                result["process"] = "forked from a zygote (imports done before the fork)"
                with open(req["result"] + ".tmp", "w") as f:
                    json.dump(result, f)
                os.replace(req["result"] + ".tmp", req["result"])
                code = 0
            except BaseException:  # noqa: BLE001  (anything: said in the run's log, the run fails)
                import traceback
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"done": pid, "status": os.waitstatus_to_exitcode(status)}), flush=True)
    return 0


class Zygote:
    """The harness's side of a --zygote process."""

    def __init__(self, label, dry, log_path):
        self.label, self.buf, self.ready = label, b"", None
        self.log = open(log_path, "w")
        self.p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--zygote", label]
                                  + (["--dry-run"] if dry else []), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.log, env=run_env())

    def _line(self, timeout):
        import select
        end = time.time() + timeout
        while b"\n" not in self.buf:
            left = end - time.time()
            if left <= 0 or not select.select([self.p.stdout], [], [], left)[0]:
                return None
            chunk = os.read(self.p.stdout.fileno(), 65536)
            if not chunk:  # the zygote is gone
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def wait_ready(self, timeout):
        self.ready = self._line(timeout)
        return bool(self.ready and self.ready.get("ready"))

    def run(self, workload, result_path, log_path, timeout):
        """The exit code of the run's process, "timeout", or None where the zygote failed."""
        try:
            self.p.stdin.write((json.dumps({"workload": workload, "result": result_path, "log": log_path}) + "\n").encode())
            self.p.stdin.flush()
        except OSError:
            return None
        started = self._line(60)
        if not started or "pid" not in started:
            return None
        done = self._line(timeout)
        if done is None:
            try:
                os.kill(started["pid"], 9)
            except ProcessLookupError:
                pass
            self._line(30)
            return "timeout"
        return done["status"]

    def close(self):
        try:
            self.p.stdin.close()
            self.p.wait(timeout=10)
        except Exception:  # noqa: BLE001
            self.p.kill()
        self.log.close()


def fresh_run(workload, label, dry, result_path, log_path, timeout):
    """A run in a process started for it (python3 train_torch.py --run):
    its exit code or "timeout"; its JSON line goes to result_path."""
    cmd = [sys.executable, os.path.abspath(__file__), "--run", workload, label] + (["--dry-run"] if dry else [])
    with open(log_path, "w") as log:
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=log, text=True, timeout=timeout, env=run_env())
        except subprocess.TimeoutExpired:
            return "timeout"
    lines = p.stdout.strip().splitlines()
    if lines:
        try:
            result = json.loads(lines[-1])
            result["process"] = "its own, started for the run"
            with open(result_path, "w") as f:
                json.dump(result, f)
        except ValueError:
            with open(log_path, "a") as log:
                log.write("\nstdout (end): " + p.stdout[-2000:])
    return p.returncode


def peers(workdir, outdir, dry=False):
    """--peers WORKDIR OUTDIR: every workload under every allocator, ROUNDS
    rounds, the allocators' order reversed every other round, each run in a
    process of its own; a run starts only where it can end before END_AT
    (epoch seconds; else BUDGET_S seconds from now), judged by the longest
    run of its workload so far. After every run OUTDIR gets
    train_peers.md (the tables), train_peers.json (every run's figures)
    and train_peers_logs.tar.gz (WORKDIR: each run's log and JSON), so a
    call cut short keeps what it measured. Settings from the environment:
    TRAIN_WORKLOADS, TRAIN_ALLOCS, ROUNDS (2), END_AT / BUDGET_S (480),
    RUN_TIMEOUT (120 s), SPAWN (zygote: runs forked from a process per
    allocator that did the imports; fresh: each run a new interpreter),
    TRAIN_SAMPLE_MS (the sampler thread's period, 5)."""
    workloads = os.environ.get("TRAIN_WORKLOADS", " ".join(PEER_WORKLOADS)).split()
    labels = os.environ.get("TRAIN_ALLOCS", " ".join(PEER_ALLOCS)).split()
    rounds = int(os.environ.get("ROUNDS", "2"))
    start = time.time()
    end_at = float(os.environ["END_AT"]) if os.environ.get("END_AT") else start + float(os.environ.get("BUDGET_S", "480"))
    run_timeout = float(os.environ.get("RUN_TIMEOUT", "120"))
    spawn = os.environ.get("SPAWN", "zygote")
    unknown = [w for w in workloads if w not in PEER_WORKLOADS] + [a for a in labels if a not in ALLOC_NAMES]
    if unknown:
        sys.exit(f"unknown workloads or allocators: {' '.join(unknown)} (workloads: {' '.join(PEER_WORKLOADS)}; "
                 f"allocators: {' '.join(ALLOC_NAMES)})")
    logs = os.path.join(workdir, "logs")
    os.makedirs(logs, exist_ok=True)
    os.makedirs(outdir, exist_ok=True)
    meta = {"started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(start)), "workloads": workloads,
            "allocators": labels, "rounds": rounds, "spawn": spawn, "dry_run": dry,
            "budget_s": round(end_at - start), "commit": os.environ.get("UVM_COMMIT", ""), "notes": []}
    runs = []
    zygotes = {}
    if spawn == "zygote":
        for label in labels:
            zygotes[label] = Zygote(label, dry, os.path.join(logs, f"zygote-{label}.log"))
        for label in list(zygotes):
            ok = zygotes[label].wait_ready(180)
            meta.setdefault("zygotes", {})[label] = zygotes[label].ready or "no answer"
            if not ok:
                z = zygotes.pop(label)
                z.close()
                with open(os.path.join(logs, f"zygote-{label}.log")) as f:
                    said = f.read().strip().splitlines()[-1:] or [""]
                meta["notes"].append(f"{label}: no zygote ({z.ready or said[0][-300:]}); its runs start fresh processes")
        meta["zygotes_ready_s"] = round(time.time() - start, 1)
    tried_fresh = set()
    longest = {}
    for rnd in range(1, rounds + 1):
        order = labels if rnd % 2 else labels[::-1]
        for workload in workloads:
            for label in order:
                name = f"r{rnd}-{workload}-{label}"
                need = longest.get(workload, 60.0 if not dry else 20.0)
                left = end_at - time.time()
                entry = {"round": rnd, "model": workload, "alloc": label}
                if left < need:
                    entry["skipped"] = f"{left:.0f} s left before END_AT; a {workload} run took up to {need:.0f} s"
                    runs.append(entry)
                    write_peers(workdir, outdir, meta, runs)
                    continue
                result_path, log_path = os.path.join(logs, name + ".json"), os.path.join(logs, name + ".log")
                # A run that hangs costs at most three times its workload's longest so far.
                timeout = max(5.0, min(run_timeout, left, 3 * longest[workload] + 30 if workload in longest else run_timeout))
                t0 = time.time()
                how = "zygote" if label in zygotes else "fresh"
                if how == "zygote":
                    status = zygotes[label].run(workload, result_path, log_path, timeout)
                    if status != 0 and label not in tried_fresh:
                        # Failed (or hung) forked: once per allocator, the same run in a
                        # fresh process; where that works, the zygote is the fault.
                        tried_fresh.add(label)
                        os.replace(log_path, log_path[:-4] + "-forked.log")
                        left = end_at - time.time()
                        status2 = fresh_run(workload, label, dry, result_path, log_path, max(5.0, min(run_timeout, left)))
                        if status2 == 0:
                            meta["notes"].append(f"{label}: {name} failed forked ({status}) and ran fresh: "
                                                 "its later runs start fresh processes")
                            zygotes.pop(label).close()
                            how, status = "fresh (after a forked run failed)", 0
                        else:
                            how = f"zygote, then fresh: both failed ({status}, {status2})"
                            status = status2
                else:
                    status = fresh_run(workload, label, dry, result_path, log_path, timeout)
                wall = time.time() - t0
                result = None
                if status == 0 and os.path.exists(result_path):
                    with open(result_path) as f:
                        result = json.load(f)
                if result is None:
                    with open(log_path) as f:
                        text = f.read()
                    result = {"error": "timed out" if status == "timeout" else f"exit {status}", **crash_evidence(text)}
                    result.setdefault("stderr", text[-1500:])
                result.update(entry, spawn=how, wall_s=round(wall, 1))
                longest[workload] = max(longest.get(workload, 0.0), wall + 2.0)
                runs.append(result)
                sys.stderr.write(f"{name}: {how} {wall:.1f} s "
                                 f"{'error ' + result['error'] if 'error' in result else 'step %.2f peak %.0f after %.0f' % (result['median_step_ms'], result['peak_driver_used_mib'], result['after_release_driver_used_mib'])}\n")
                sys.stderr.flush()
                write_peers(workdir, outdir, meta, runs)
    for z in zygotes.values():
        z.close()
    meta["total_s"] = round(time.time() - start, 1)
    text = write_peers(workdir, outdir, meta, runs)
    print(text)
    measured = [r for r in runs if "skipped" not in r]
    return 0 if measured and all("error" not in r for r in measured) else 1


def _median_cell(values, fmt):
    """A median over rounds, with the rounds' range where there are several."""
    if not values:
        return "-"
    med = statistics.median(values)
    if len(values) == 1:
        return fmt.format(med)
    return f"{fmt.format(med)} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def peers_table(meta, runs):
    """The Markdown of a --peers run: per workload and allocator the medians
    over rounds (the range between rounds in brackets), whether the outputs
    match PyTorch's caching allocator's, then the library against its peers."""
    labels, workloads = meta["allocators"], meta["workloads"]
    ok = [r for r in runs if "error" not in r and "skipped" not in r]
    first = ok[0] if ok else {}
    versions = next((z["versions"] for z in meta.get("zygotes", {}).values() if isinstance(z, dict) and "versions" in z),
                    {"torch": first.get("torch", "?")})
    out = [f"# Allocators on real work: {meta['started_utc']} UTC",
           "",
           f"Device: {first.get('device', '?')}; " + ", ".join(f"{k} {v}" for k, v in versions.items()) + "; GPT-2 from "
           f"{', '.join(sorted({r.get('model_code') for r in ok if r.get('model_code')})) or '-'}; "
           f"commit {meta.get('commit') or '?'}; {meta['rounds']} rounds asked, allocators' order reversed every other "
           f"round; each run a process of its own, "
           f"{spawned_as(meta, ok)}"
           f"{' (DRY RUN: figures measure nothing)' if meta['dry_run'] else ''}; "
           f"{meta.get('total_s', 'not yet')} s in all.",
           "Each cell: the median over rounds (the rounds' range). Step: the median step time of a run, warm-up steps "
           "left out; for generate(), the median over its requests of ms per generated token. Peak: the most "
           "driver-used memory (cuMemGetInfo total - free, the CUDA context included) read by a sampler thread and "
           "after each forward pass and step. After: driver-used once the model, optimizer and data are freed and "
           "empty_cache has run (the library: torch.cuda.empty_cache, then uvm.torch.empty_cache).", ""]
    by = {}
    for r in ok:
        by.setdefault((r["model"], r["alloc"]), []).append(r)
    head = "| workload | figure | " + " | ".join(ALLOC_NAMES.get(a, a) for a in labels) + " |"
    out += [head, "| --- | --- |" + " --- |" * len(labels)]
    for w in workloads:
        cells = {a: by.get((w, a), []) for a in labels}
        unit = "ms/token" if w == "generate" else "ms"
        rows = [("step, " + unit, "median_step_ms", "{:.2f}" if w == "generate" else "{:.1f}"),
                ("peak, MiB", "peak_driver_used_mib", "{:.0f}"),
                ("after empty_cache, MiB", "after_release_driver_used_mib", "{:.0f}")]
        for title, key, fmt in rows:
            out.append(f"| {WORKLOAD_NAMES.get(w, w)} | {title} | "
                       + " | ".join(_median_cell([r[key] for r in cells[a]], fmt) for a in labels) + " |")
        out.append(f"| {WORKLOAD_NAMES.get(w, w)} | outputs | " + " | ".join(_equality(w, cells, a, labels)
                                                                            for a in labels) + " |")
        missing = [f"{a}: {len([r for r in runs if r['model'] == w and r['alloc'] == a and 'skipped' not in r]) - len(cells[a])}"
                   f" failed, {len([r for r in runs if r['model'] == w and r['alloc'] == a and 'skipped' in r])} skipped"
                   for a in labels if len(cells[a]) < meta["rounds"]]
        if missing:
            out.append(f"| {WORKLOAD_NAMES.get(w, w)} | rounds missing | " + "; ".join(missing) + " |" + " |" * (len(labels) - 1))
    out += ["", *_against_peers(workloads, labels, by), "", *_run_times(workloads, runs)]
    errors = [r for r in runs if "error" in r]
    if errors:
        out += ["", "Failed runs:"]
        for r in errors:
            said = r.get("last_stage") or (r.get("python_traceback") or [""])[-1] or r.get("stderr", "")[-300:]
            out.append(f"- round {r['round']} {r['model']} {r['alloc']} ({r.get('spawn')}): {r['error']}: "
                       f"{str(said).strip()[-400:]}".replace("\n", " | "))
    if meta.get("notes"):
        out += ["", "Notes:"] + [f"- {n}" for n in meta["notes"]]
    return "\n".join(out) + "\n"


def _equality(workload, cells, label, labels):
    """Whether a cell's runs gave the reference's outputs: the first run of
    PyTorch's caching allocator (else of the first allocator that ran).
    Training: the final loss, bit for bit or the largest difference (GPT-2
    under SDPA differs run to run by up to 5e-5: compare with the
    reference allocator's own rounds). generate(): the generated token ids."""
    ref_label = "default" if cells.get("default") else next((a for a in labels if cells.get(a)), None)
    if ref_label is None or not cells[label]:
        return "-"
    ref = cells[ref_label][0]
    runs = cells[label]
    if workload == "generate":
        same = sum(r.get("output_sha256") == ref.get("output_sha256") for r in runs)
        tag = " (reference)" if label == ref_label else ""
        return f"ids same{tag}" if same == len(runs) else f"ids differ in {len(runs) - same} of {len(runs)}"
    diffs = [abs(r["final_loss"] - ref["final_loss"]) for r in runs]
    if label == ref_label and len(runs) == 1:
        return f"loss {ref['final_loss']:.6g} (reference)"
    if all(r["final_loss_hex"] == ref["final_loss_hex"] for r in runs):
        return "loss bit-equal" + (" (reference)" if label == ref_label else "")
    return f"loss |Δ| ≤ {max(diffs):.1e}" + (" (reference's own rounds)" if label == ref_label else "")


def _against_peers(workloads, labels, by):
    """The library's medians over its peers': step against PyTorch's caching
    allocator and the fastest peer, peak against the lower of
    expandable_segments and cudaMallocAsync, after against PyTorch's."""
    lib = "uvm" if "uvm" in labels else next((a for a in labels if a.startswith("uvm")), None)
    peers_ = [a for a in labels if not a.startswith("uvm")]
    if lib is None or not peers_:
        return []
    out = [f"The library ({lib}) against its peers (medians over rounds; ≤ 1.00 meets the target):", "",
           "| workload | step / PyTorch caching | step / fastest peer | peak / min(expandable, async) | "
           "peak / leanest peer | after / PyTorch caching |", "| --- | --- | --- | --- | --- | --- |"]

    def med(a, w, key):
        rs = by.get((w, a), [])
        return statistics.median([r[key] for r in rs]) if rs else None

    def ratio(x, y, name=None):
        if x is None or y is None or y == 0:
            return "-"
        return f"{x / y:.3f}" + (f" ({ALLOC_NAMES.get(name, name)})" if name else "") + (" met" if x <= y else " missed")

    for w in workloads:
        mine = {k: med(lib, w, k) for k in ("median_step_ms", "peak_driver_used_mib", "after_release_driver_used_mib")}
        fig = {a: {k: med(a, w, k) for k in mine} for a in peers_}
        have = [a for a in peers_ if fig[a]["median_step_ms"] is not None]
        fastest = min(have, key=lambda a: fig[a]["median_step_ms"]) if have else None
        leanest = min(have, key=lambda a: fig[a]["peak_driver_used_mib"]) if have else None
        lean2 = [a for a in ("expandable", "async") if a in have]
        low2 = min(lean2, key=lambda a: fig[a]["peak_driver_used_mib"]) if lean2 else None
        out.append(f"| {WORKLOAD_NAMES.get(w, w)} | "
                   f"{ratio(mine['median_step_ms'], fig.get('default', {}).get('median_step_ms'))} | "
                   f"{ratio(mine['median_step_ms'], fig[fastest]['median_step_ms'] if fastest else None, fastest)} | "
                   f"{ratio(mine['peak_driver_used_mib'], fig[low2]['peak_driver_used_mib'] if low2 else None, low2)} | "
                   f"{ratio(mine['peak_driver_used_mib'], fig[leanest]['peak_driver_used_mib'] if leanest else None, leanest)} | "
                   f"{ratio(mine['after_release_driver_used_mib'], fig.get('default', {}).get('after_release_driver_used_mib'))} |")
    return out


def _run_times(workloads, runs):
    """Where a run's seconds go (medians over its runs): to size the rounds."""
    out = ["Seconds per run (medians): wall (the harness's), imports, CUDA context (and the library's manager), "
           "model, first step, the measured work, release; driver-used before the model (MiB) per allocator.", "",
           "| workload | runs | wall | imports | context | model | first step | work | release | base MiB by allocator |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for w in workloads:
        rs = [r for r in runs if r["model"] == w and "phases_s" in r]
        if not rs:
            continue

        def m(key):
            v = [r["phases_s"][key] for r in rs if key in r["phases_s"]]
            return f"{statistics.median(v):.1f}" if v else "-"

        base = {}
        for r in rs:
            base.setdefault(r["alloc"], []).append(r["base_driver_used_mib"])
        out.append(f"| {WORKLOAD_NAMES.get(w, w)} | {len(rs)} | {statistics.median([r['wall_s'] for r in rs]):.1f} | "
                   f"{m('import_s')} | {m('cuda_init_s')} | {m('model_s')} | {m('first_step_s')} | {m('work_s')} | "
                   f"{m('release_s')} | " + ", ".join(f"{a} {statistics.median(v):.0f}" for a, v in base.items()) + " |")
    return out


def write_peers(workdir, outdir, meta, runs):
    """OUTDIR's three files, rewritten after every run."""
    import tarfile
    text = peers_table(meta, runs)
    with open(os.path.join(outdir, "train_peers.md"), "w") as f:
        f.write(text)
    with open(os.path.join(outdir, "train_peers.json.tmp"), "w") as f:
        json.dump({"meta": meta, "runs": runs}, f, indent=1)
    os.replace(os.path.join(outdir, "train_peers.json.tmp"), os.path.join(outdir, "train_peers.json"))
    with open(os.path.join(workdir, "train_peers.md"), "w") as f:
        f.write(text)
    tmp = os.path.join(outdir, "train_peers_logs.tar.gz.tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        tar.add(workdir, arcname="train_peers")
    os.replace(tmp, os.path.join(outdir, "train_peers_logs.tar.gz"))
    return text


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


def used_mib(torch):
    """Driver-used memory of the current GPU, MiB (cuMemGetInfo: total - free)."""
    free, total = torch.cuda.mem_get_info()
    return (total - free) / MIB


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
    args = [a for a in sys.argv[1:] if a != "--dry-run"]
    dry = "--dry-run" in sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    if args[0] == "--build-extension":  # uvm.torch's C++ side into its cache, no GPU touched
        import uvm.torch
        print(json.dumps({k: v for k, v in uvm.torch.build_extension().items() if k != "failed_tries"}))
        return
    if args[0] == "--ddp-rank":
        ddp_rank(args[1], int(args[2]), args[3])
        return
    if args[0] == "--ddp":
        # --ddp OUTDIR [STEPS [ROUNDS [ALLOCS]]]
        steps = int(args[2]) if len(args) > 2 else 30
        rounds = int(args[3]) if len(args) > 3 else 2
        allocs = args[4].split(",") if len(args) > 4 else ["default", "expandable", "async", "uvm"]
        unknown = [a for a in allocs if a not in DDP_ALLOCS]
        if unknown:
            sys.exit(f"unknown allocators {unknown}: {', '.join(DDP_ALLOCS)}")
        sys.exit(ddp_all(args[1], steps, rounds, allocs, int(os.environ.get("DDP_RUN_TIMEOUT", "150"))))
    if args[0] == "--all":
        sys.exit(run_all(args[1]))
    if args[0] == "--checks":
        sys.exit(run_all(args[1], training=False))
    if args[0] == "--peers":
        sys.exit(peers(args[1], args[2], dry=dry))
    if args[0] == "--zygote":
        sys.exit(zygote(args[1], dry))
    if args[0] == "--run":
        print(json.dumps(run(args[1], args[2], dry=dry)), flush=True)
    elif args[0] == "--check":
        checks = {"oom": check_oom, "oom_device": lambda: check_oom(with_budget=False), "pools": check_pools,
                  "cupy_numba": check_cupy_numba, "sleep_wake": check_sleep_wake}
        print(json.dumps(checks[args[1]]()), flush=True)


if __name__ == "__main__":
    main()
