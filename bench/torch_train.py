#!/usr/bin/python3
"""PyTorch reference for bench_train: the same GPT model, trained with the
same batch shapes with AdamW, one JSON line per configuration.

    /usr/bin/python3 bench/torch_train.py tiny|small [steps] [threads]

Needs Debian's python3-torch (packaging/install-deps.sh --reference).
"""
import json
import math
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = {
    "tiny": dict(L=4, NH=4, C=128, T=128, B=32, V=65),
    "small": dict(L=6, NH=6, C=384, T=256, B=8, V=65),
    "gpt2": dict(L=12, NH=12, C=768, T=64, B=4, V=50257),
}


class Block(nn.Module):
    def __init__(self, C, NH, T):
        super().__init__()
        self.ln1 = nn.LayerNorm(C)
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)
        self.NH = NH
        self.register_buffer("mask", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q = q.view(B, T, self.NH, C // self.NH).transpose(1, 2)
        k = k.view(B, T, self.NH, C // self.NH).transpose(1, 2)
        v = v.view(B, T, self.NH, C // self.NH).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, NH, C, T, V):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.blocks = nn.ModuleList([Block(C, NH, T) for _ in range(L)])
        self.lnf = nn.LayerNorm(C)

    def forward(self, idx, targets):
        T = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    name = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    torch.set_num_threads(threads)
    c = CONFIGS[name]
    torch.manual_seed(0)
    model = GPT(c["L"], c["NH"], c["C"], c["T"], c["V"])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    x = torch.randint(0, c["V"], (c["B"], c["T"]))
    y = torch.randint(0, c["V"], (c["B"], c["T"]))
    total = 0.0
    for s in range(-1, steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        dt = time.perf_counter() - t0
        if s >= 0:
            total += dt
    tokens = c["B"] * c["T"]
    print(json.dumps({
        "bench": "train", "impl": "pytorch", "torch": torch.__version__, "config": name,
        "threads": threads, "steps": steps, "ms_per_step": round(total / steps * 1e3, 1),
        "tokens_per_s": round(tokens / (total / steps), 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "loss": round(loss.item(), 4)}))


if __name__ == "__main__":
    main()
