#!/usr/bin/env python3
"""Record the allocation trace of a few PyTorch training steps on GPU 0.

PyTorch's caching allocator records every block it hands out and takes back
(torch.cuda.memory._record_memory_history); this script runs training steps
of a small model and writes the blocks' allocs and frees, in order, as a
trace the replay benchmark (bench/bench_replay.cpp) and test read:

    # uvm allocation trace v1
    # model: <name>; <details: model, batch, dtype>; <N> training steps
    # recorded: <date> on <GPU>, PyTorch <version>
    # <A> allocs, <F> frees, peak live <bytes> bytes
    # pytorch peaks: allocated <bytes> reserved <bytes>
    a <id> <bytes>
    f <id>

The last header line is PyTorch's own view of the run
(torch.cuda.max_memory_allocated / max_memory_reserved): what its caching
allocator kept from the GPU, the figure a replay's held memory is held
against. An OUT ending in .gz is written gzip-compressed.

Usage: record_torch_trace.py {transformer,cnn,varlen,gpt2,resnet50} OUT.trace[.gz] [--steps N]
"""
import argparse
import datetime
import gzip
import random
import sys

import torch
import torch.nn as nn


def transformer(seqs=None, layers=6, batch=16, bf16=False):
    """A decoder-only language model; `seqs`: a sequence length per step
    (variable shapes), else 256 every step."""
    vocab, d, heads = 8192, 512, 8

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, d)
            layer = nn.TransformerEncoderLayer(d, heads, 4 * d, batch_first=True, norm_first=True)
            self.body = nn.TransformerEncoder(layer, layers)
            self.head = nn.Linear(d, vocab)

        def forward(self, x):
            mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=x.device)
            return self.head(self.body(self.embed(x), mask=mask, is_causal=True))

    model = LM().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    steps = iter(seqs or [])

    def step():
        seq = next(steps, 256)
        x = torch.randint(0, vocab, (batch, seq), device="cuda")
        y = torch.randint(0, vocab, (batch, seq), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = nn.functional.cross_entropy(model(x).reshape(-1, vocab).float(), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    shape = f"seq per step {seqs}" if seqs else "seq=256"
    dtype = "bf16 autocast, fp32 weights" if bf16 else "fp32"
    return step, f"decoder-only transformer, {layers} layers, d={d}, {shape}, batch={batch}, {dtype}, AdamW"


def cnn():
    batch, size = 64, 128

    def block(cin, cout, stride):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                             nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    model = nn.Sequential(block(3, 64, 2), block(64, 128, 2), block(128, 256, 2), block(256, 512, 2),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step():
        x = torch.randn(batch, 3, size, size, device="cuda")
        y = torch.randint(0, 1000, (batch,), device="cuda")
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step, f"convolutional image model, 8 conv layers, {size}x{size} images, batch={batch}, fp32, SGD"


def gpt2():
    """bench/train_torch.py's GPT-2: Hugging Face GPT-2 from a config (12
    layers, 768 wide), batch 8 x 1024 tokens, bf16 autocast, AdamW."""
    import transformers
    cfg = transformers.GPT2Config(n_layer=12, n_embd=768, n_head=12)
    model = transformers.GPT2LMHeadModel(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        ids = torch.randint(0, cfg.vocab_size, (8, 1024), device="cuda")
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()

    return step, "Hugging Face GPT-2 (12 layers, 768 wide), batch 8 x 1024 tokens, bf16 autocast, AdamW"


def resnet50():
    """bench/train_torch.py's ResNet-50: torchvision, batch 64 of 224x224,
    bf16 autocast, SGD with momentum."""
    import torchvision
    model = torchvision.models.resnet50().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step():
        x = torch.randn(64, 3, 224, 224, device="cuda")
        y = torch.randint(0, 1000, (64,), device="cuda")
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    return step, "torchvision ResNet-50, batch 64 of 224x224, bf16 autocast, SGD with momentum"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=["transformer", "cnn", "varlen", "gpt2", "resnet50"])
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.cuda.set_device(0)
    try:
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=10_000_000)
    except TypeError:  # older signature
        torch.cuda.memory._record_memory_history(True, record_context=False, trace_alloc_max_entries=10_000_000)
    if args.model == "transformer":
        step, details = transformer()
    elif args.model == "cnn":
        step, details = cnn()
    elif args.model in ("gpt2", "resnet50"):
        step, details = globals()[args.model]()
    else:  # variable sequence lengths: every step a new set of shapes
        rng = random.Random(0)
        step, details = transformer(seqs=[rng.choice([64, 128, 192, 320, 448, 512]) for _ in range(args.steps)],
                                    layers=4, bf16=True)
    torch.cuda.reset_peak_memory_stats()
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    peak_allocated = torch.cuda.max_memory_allocated()
    peak_reserved = torch.cuda.max_memory_reserved()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    events = [e for trace in snap["device_traces"] for e in trace]
    live = {}  # address -> id
    next_id = 0
    lines = []
    allocs = frees = 0
    peak = cur = 0
    for e in events:
        if e["action"] == "alloc":
            live[e["addr"]] = (next_id, e["size"])
            lines.append(f"a {next_id} {e['size']}")
            next_id += 1
            allocs += 1
            cur += e["size"]
            peak = max(peak, cur)
        elif e["action"] == "free_completed" and e["addr"] in live:
            i, size = live.pop(e["addr"])
            lines.append(f"f {i}")
            frees += 1
            cur -= size
    opener = gzip.open if args.out.endswith(".gz") else open
    with opener(args.out, "wt") as f:
        f.write("# uvm allocation trace v1\n")
        f.write(f"# model: {args.model}; {details}; {args.steps} training steps\n")
        f.write(f"# recorded: {datetime.date.today()} on {torch.cuda.get_device_name(0)}, PyTorch {torch.__version__}\n")
        f.write(f"# {allocs} allocs, {frees} frees, peak live {peak} bytes\n")
        f.write(f"# pytorch peaks: allocated {peak_allocated} reserved {peak_reserved}\n")
        f.write("\n".join(lines) + "\n")
    print(f"{args.out}: {allocs} allocs, {frees} frees, peak live {peak / 2**20:.1f} MiB, "
          f"PyTorch peaks {peak_allocated / 2**20:.1f} MiB allocated, {peak_reserved / 2**20:.1f} MiB reserved",
          file=sys.stderr)


if __name__ == "__main__":
    main()
