#!/usr/bin/python3
"""torch_gpt2: the PyTorch side of gptd's GPU benchmark, the same GPT-2.

    bench/torch_gpt2.py [--init LLMC] [--shard SHARD] [--batch B] [--seq T]
                        [--steps N] [--device cpu|cuda] [--dtype bf16|fp32]
                        [--compile] [--peak-tflops P] [--lr LR] [--warmup N]
                        [--seed S] [--gptd-order SEED]

The model is gptd's (engine/model.c): pre-LN blocks, GELU (tanh), learned
positions, the head tied to wte, wte padded to Vp rows (the loss over the
first V columns), LayerNorm eps 1e-5; AdamW as gptd's defaults (betas 0.9
and 0.95, eps 1e-8, weight decay 0.1 on tensors of two or more dimensions,
gradient clipping at 1.0); the learning rate constant (--lr) after a
linear warm-up of --warmup steps (gptd's optimizer.schedule "constant":
step s, from 0, at lr (s + 1) / N while s < N).

--init LLMC loads gptd's weights from an llm.c checkpoint (gptd export
SNAPSHOT --format llmc), so both sides start from the same point; without
it the weights are GPT-2's initialisation as gptd draws it (normal 0.02,
projections into the residual 0.02 / sqrt(2 L), biases 0, LayerNorm
weights 1) from torch's generator, for timing only (--model gpt2-124m
shapes then: L 12, NH 12, C 768, V 50257, Vp 50304, maxT 1024).

--shard SHARD reads an llm.c token shard (256 int32 header words, uint16
tokens): step s takes its B rows of T + 1 tokens at s B T, row b at b T
(llm.c's loader; wrapping at the end). Without it the tokens are random.
--gptd-order SEED reads the shard in the order gptd's trainer does for
trainer.seed SEED at world 1 (engine/data.c): sample k is the window at
k T, global sample g of the run is sample perm(hash(SEED, g / N), g mod N)
of the N windows, the same stateless shuffle, so a loss curve can be
compared step by step with gptd's on the same shard (data.path, with the
validation data in data.val_path).

On a GPU: --compile (torch.compile), F.scaled_dot_product_attention
(whatever backend torch picks: cuDNN or flash), fused AdamW, bf16 autocast
with --dtype bf16. On a CPU none of that is needed (Debian's torch).

Prints one JSON line: {"bench": "torch_gpt2", "batch", "T", "device",
"dtype", "compile", "steps", "losses" (every step's, before its update),
"ms_per_step" and "tokens_per_s" (the steps after the first two, or all
where there are fewer than four), "mfu" (llm.c's count, 6 N + 6 L C T per
token with N every parameter, over --peak-tflops; null without it),
"peak_mem_gib" (CUDA) and "n_params"}.
"""
import argparse
import json
import math
import struct
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

LLMC_MAGIC = 20240326
SHARD_MAGIC = 20240520


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1 = nn.LayerNorm(C, eps=1e-5)
        self.qkv = nn.Linear(C, 3 * C)
        self.attproj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C, eps=1e-5)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):  # torch 2
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # Debian's torch 1.13, on a CPU
            att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            y = att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
        x = x + self.attproj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, NH, C, V, Vp, maxT):
        super().__init__()
        self.V = V
        self.wte = nn.Parameter(torch.zeros(Vp, C))
        self.wpe = nn.Parameter(torch.zeros(maxT, C))
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C, eps=1e-5)

    def forward(self, idx, targets):
        T = idx.size(1)
        x = self.wte[idx] + self.wpe[:T]
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte[: self.V].t()  # the tied head, over V only
        return F.cross_entropy(logits.float().view(-1, self.V), targets.reshape(-1))

    def init_gpt2(self, L):
        """GPT-2's initialisation, as gptd draws it (engine/model.c)."""
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith(".bias"):
                    p.zero_()
                elif "ln" in name:
                    p.fill_(1.0)
                else:
                    std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
                    p.normal_(0.0, std)


# llm.c's tensor order (engine/fmt/include/llmc.h) and where each goes:
# (name, per-layer attribute or None for a whole-model tensor).
LLMC_ORDER = [
    ("wte", None), ("wpe", None),
    ("ln1.weight", "ln1"), ("ln1.bias", "ln1"), ("qkv.weight", "qkv"), ("qkv.bias", "qkv"),
    ("attproj.weight", "attproj"), ("attproj.bias", "attproj"),
    ("ln2.weight", "ln2"), ("ln2.bias", "ln2"), ("fc.weight", "fc"), ("fc.bias", "fc"),
    ("fcproj.weight", "fcproj"), ("fcproj.bias", "fcproj"),
    ("lnf.weight", None), ("lnf.bias", None),
]


def load_llmc(path):
    """An llm.c checkpoint (version 3: float32) -> (config, the model)."""
    with open(path, "rb") as f:
        head = struct.unpack("<256i", f.read(1024))
        if head[0] != LLMC_MAGIC or head[1] != 3:
            raise SystemExit("%s: not an llm.c float32 checkpoint (magic %d, version %d)"
                             % (path, head[0], head[1]))
        maxT, V, L, NH, C, Vp = head[2:8]
        model = GPT(L, NH, C, V, Vp, maxT)
        with torch.no_grad():
            for name, attr in LLMC_ORDER:
                if attr is None:
                    dst = [model.get_parameter(name)]
                else:
                    leaf = name.split(".")[1]
                    dst = [getattr(getattr(b, attr), leaf) for b in model.blocks]
                for p in dst:
                    n = p.numel()
                    buf = f.read(4 * n)
                    if len(buf) != 4 * n:
                        raise SystemExit("%s: short file at %s" % (path, name))
                    p.copy_(torch.frombuffer(bytearray(buf), dtype=torch.float32).view_as(p))
        if f.read(1):
            raise SystemExit("%s: bytes past the parameters" % path)
    return dict(L=L, NH=NH, C=C, V=V, Vp=Vp, maxT=maxT), model


def load_shard(path):
    with open(path, "rb") as f:
        head = struct.unpack("<256i", f.read(1024))
        if head[0] != SHARD_MAGIC:
            raise SystemExit("%s: not an llm.c token shard" % path)
        n = head[2]
        toks = torch.frombuffer(bytearray(f.read(2 * n)), dtype=torch.int16)
    return toks.to(torch.int64) & 0xFFFF


M64 = (1 << 64) - 1
SHUFFLE_SALT = 0x73687566666c6531  # engine/data.c's DATA_SHUFFLE_SALT
FEISTEL_ROUNDS = 6


def _rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & M64


def _splitmix64(x):
    """engine/include/rng.h's gpt_splitmix64: (the new state, the output)."""
    x = (x + 0x9E3779B97F4A7C15) & M64
    z = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return x, z ^ (z >> 31)


def gptd_hash3(a, b, c):
    """rng.h's gpt_hash3."""
    x = ((a * 0x9E3779B97F4A7C15) & M64) ^ _rotl(b, 21) ^ _rotl(c, 42)
    x, _ = _splitmix64(x)
    return _splitmix64(x)[1]


def gptd_perm(key, n, x):
    """data.c's data_perm: a keyed Feistel bijection on [0, n), cycle walking."""
    if n <= 1:
        return 0
    h = ((n - 1).bit_length() + 1) // 2
    mask = 0xFFFFFFFF if h >= 32 else (1 << h) - 1
    while True:
        l, r = x >> h, x & mask
        for i in range(FEISTEL_ROUNDS):
            l, r = r, l ^ (gptd_hash3(key, i, r) & mask)
        x = (l << h) | r
        if x < n:
            return x


def gptd_batch_at(toks, seed, step, B, T):
    """Step `step`'s rows as gptd's trainer reads them (world 1, global
    batch B): global sample g = step B + b is window k T of the shard, k the
    epoch's shuffle of g mod N."""
    n = (toks.numel() - T - 1) // T + 1  # windows of T + 1 tokens every T
    if n < 1:
        raise SystemExit("the shard holds fewer than T + 1 = %d tokens" % (T + 1))
    rows = []
    for b in range(B):
        g = step * B + b
        k = gptd_perm(gptd_hash3(seed, g // n, SHUFFLE_SALT), n, g % n)
        rows.append(toks[k * T:k * T + T + 1])
    rows = torch.stack(rows)
    return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()


def batch_at(toks, step, B, T):
    """Step `step`'s rows: row b is tokens [s B T + b T, ... + T + 1), wrapping."""
    n = toks.numel()
    rows = []
    for b in range(B):
        start = (step * B * T + b * T) % max(1, n - T)  # n - T starts hold T + 1 tokens
        rows.append(toks[start:start + T + 1])
    rows = torch.stack(rows)
    return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--init")
    ap.add_argument("--shard")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--peak-tflops", type=float)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--gptd-order", type=int, metavar="SEED")
    a = ap.parse_args(argv[1:])
    if a.gptd_order is not None and not a.shard:
        raise SystemExit("--gptd-order needs --shard")
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    if a.init:
        cfg, model = load_llmc(a.init)
    else:
        cfg = dict(L=12, NH=12, C=768, V=50257, Vp=50304, maxT=1024)
        model = GPT(**cfg)
        model.init_gpt2(cfg["L"])
    B, T = a.batch, a.seq
    if T > cfg["maxT"]:
        raise SystemExit("--seq %d is past the model's block size %d" % (T, cfg["maxT"]))
    model.to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8,
                            **({"fused": True} if cuda else {}))
    step_fn = torch.compile(model) if a.compile else model
    toks = load_shard(a.shard) if a.shard else None
    gen = torch.Generator().manual_seed(a.seed)

    losses, times = [], []
    for s in range(a.steps):
        if toks is not None and a.gptd_order is not None:
            x, y = gptd_batch_at(toks, a.gptd_order, s, B, T)
        elif toks is not None:
            x, y = batch_at(toks, s, B, T)
        else:
            x = torch.randint(cfg["V"], (B, T), generator=gen)
            y = torch.randint(cfg["V"], (B, T), generator=gen)
        x, y = x.to(dev), y.to(dev)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for group in opt.param_groups:
            group["lr"] = a.lr * (s + 1) / a.warmup if s < a.warmup else a.lr
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.dtype == "bf16" and cuda):
            loss = step_fn(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())  # synchronises
        times.append(time.perf_counter() - t0)

    timed = times[2:] if len(times) >= 4 else times
    step_s = sum(timed) / len(timed)
    n_params = sum(p.numel() for p in model.parameters())
    flops = (6.0 * n_params + 6.0 * cfg["L"] * cfg["C"] * T) * B * T
    mfu = flops / step_s / (a.peak_tflops * 1e12) if a.peak_tflops else None
    print(json.dumps({
        "bench": "torch_gpt2", "batch": B, "T": T, "device": dev.type, "dtype": a.dtype,
        "compile": a.compile, "steps": a.steps, "losses": losses,
        "ms_per_step": round(step_s * 1e3, 3), "tokens_per_s": round(B * T / step_s),
        "mfu": round(mfu, 4) if mfu is not None else None,
        "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
        "n_params": n_params,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
