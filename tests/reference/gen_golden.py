#!/usr/bin/python3
"""Generate tests/reference/golden_tiny.bin, the PyTorch reference for the C model.

Regenerate (needs PyTorch; the C test that reads the file does not):
    /usr/bin/python3 tests/reference/gen_golden.py tests/reference/golden_tiny.bin

The model is GPT-2 / minGPT as in engine/model.c: pre-LayerNorm blocks, learned
position embeddings, tanh-GELU MLP, causal attention, LM head tied to wte,
cross-entropy with ignore_index=-1. It is computed in float64 from float32
weights, so the file holds the exact answer the fp32 C code approximates.

File layout (little-endian):
    char[8]  "GPTGOLD1"
    int32    n_layer, n_head, n_embd, block_size, vocab_size, Vp, B, T, n_steps
    float64  lr, min_lr, warmup_steps, max_steps, weight_decay, beta1, beta2,
             eps, grad_clip
    int64    n_params
    float32  params[n_params]          engine/model.h layer-major layout, wte
                                       padded to Vp rows of zeros
    int32    inputs[B*T], targets[B*T] (targets < 0 are ignored)
    float32  logits[B*T*V]             (unpadded)
    float32  loss
    float32  grads[n_params]           d(mean loss)/d(params), same layout
    float32  losses[n_steps]           loss before each AdamW step
    float32  grad_norms[n_steps]       global grad norm before clipping

Training loop of the 10 steps: zero grads, forward+backward, clip to global
norm grad_clip (torch.nn.utils.clip_grad_norm_: scale min(1, clip/(norm+1e-6))),
lr from the schedule (linear warmup lr*(step+1)/warmup for step < warmup, then
cosine from lr to min_lr reaching min_lr at max_steps), torch.optim.AdamW with
betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on tensors with ndim >= 2 only.
"""
import math
import struct
import sys

import torch
import torch.nn.functional as F

L, NH, C, BLOCK, V = 2, 2, 32, 16, 37
VP = 48  # model.c: vocab <= 64 pads to a multiple of 16
B, T = 4, 16
STEPS = 10
OPT = dict(lr=1e-2, min_lr=1e-3, warmup_steps=3, max_steps=10, weight_decay=0.1,
           beta1=0.9, beta2=0.95, eps=1e-8, grad_clip=1.0)

BLOCK_TENSORS = [("ln1w", (C,)), ("ln1b", (C,)), ("attn.qkvw", (3 * C, C)),
                 ("attn.qkvb", (3 * C,)), ("attn.projw", (C, C)), ("attn.projb", (C,)),
                 ("ln2w", (C,)), ("ln2b", (C,)), ("mlp.fcw", (4 * C, C)),
                 ("mlp.fcb", (4 * C,)), ("mlp.projw", (C, 4 * C)), ("mlp.projb", (C,))]


def layout():
    """(name, shape) in the C flat order; wte is listed with V rows here."""
    out = [("wte", (V, C)), ("wpe", (BLOCK, C))]
    for l in range(L):
        out += [("h.%d.%s" % (l, n), s) for n, s in BLOCK_TENSORS]
    out += [("lnfw", (C,)), ("lnfb", (C,))]
    return out


def init_params(gen):
    p = {}
    for name, shape in layout():
        leaf = name.split(".")[-1]
        if len(shape) == 2:
            sd = 0.02 / math.sqrt(2 * L) if leaf == "projw" else 0.02
            # Larger than GPT-2's 0.02 so gradients are well away from zero.
            p[name] = torch.randn(shape, generator=gen, dtype=torch.float32) * sd * 5
        elif leaf.endswith("w"):
            p[name] = 1.0 + 0.1 * torch.randn(shape, generator=gen, dtype=torch.float32)
        else:
            p[name] = 0.1 * torch.randn(shape, generator=gen, dtype=torch.float32)
    return p


def forward(p, idx, targets):
    x = p["wte"][idx] + p["wpe"][: idx.shape[1]]
    hs = C // NH
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        g = lambda n: p["h.%d.%s" % (l, n)]
        h = F.layer_norm(x, (C,), g("ln1w"), g("ln1b"), eps=1e-5)
        qkv = F.linear(h, g("attn.qkvw"), g("attn.qkvb"))
        q, k, v = qkv.split(C, dim=2)
        q = q.view(B, T, NH, hs).transpose(1, 2)
        k = k.view(B, T, NH, hs).transpose(1, 2)
        v = v.view(B, T, NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + F.linear(y, g("attn.projw"), g("attn.projb"))
        h = F.layer_norm(x, (C,), g("ln2w"), g("ln2b"), eps=1e-5)
        h = F.gelu(F.linear(h, g("mlp.fcw"), g("mlp.fcb")), approximate="tanh")
        x = x + F.linear(h, g("mlp.projw"), g("mlp.projb"))
    x = F.layer_norm(x, (C,), p["lnfw"], p["lnfb"], eps=1e-5)
    logits = x @ p["wte"].t()
    loss = F.cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=-1)
    return logits, loss


def flat(tensors):
    """Concatenate in C layout, padding wte to VP rows."""
    parts = []
    for name, _ in layout():
        t = tensors[name].detach().to(torch.float32)
        if name == "wte":
            t = torch.cat([t, torch.zeros(VP - V, C)], 0)
        parts.append(t.reshape(-1))
    return torch.cat(parts)


def lr_at(step):
    o = OPT
    if step < o["warmup_steps"]:
        return o["lr"] * (step + 1) / o["warmup_steps"]
    if step >= o["max_steps"]:
        return o["min_lr"]
    r = (step - o["warmup_steps"]) / (o["max_steps"] - o["warmup_steps"])
    return o["min_lr"] + 0.5 * (1.0 + math.cos(math.pi * r)) * (o["lr"] - o["min_lr"])


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else "tests/reference/golden_tiny.bin"
    gen = torch.Generator().manual_seed(20240601)
    p32 = init_params(gen)
    idx = torch.randint(0, V, (B, T), generator=gen)
    tgt = torch.randint(0, V, (B, T), generator=gen)
    tgt[0, 3] = -1
    tgt[2, 0] = -1
    tgt[3, 15] = -1

    p = {n: t.to(torch.float64).requires_grad_(True) for n, t in p32.items()}
    logits, loss = forward(p, idx, tgt)
    loss.backward()
    grads = {n: t.grad.clone() for n, t in p.items()}

    names = [n for n, _ in layout()]
    decay = [p[n] for n in names if p[n].dim() >= 2]
    no_decay = [p[n] for n in names if p[n].dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": OPT["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=OPT["lr"], betas=(OPT["beta1"], OPT["beta2"]), eps=OPT["eps"])
    losses, norms = [], []
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        _, l = forward(p, idx, tgt)
        l.backward()
        norm = torch.nn.utils.clip_grad_norm_(list(p.values()), OPT["grad_clip"])
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        opt.step()
        losses.append(l.item())
        norms.append(norm.item())

    with open(out_path, "wb") as f:
        f.write(b"GPTGOLD1")
        f.write(struct.pack("<9i", L, NH, C, BLOCK, V, VP, B, T, STEPS))
        f.write(struct.pack("<9d", OPT["lr"], OPT["min_lr"], OPT["warmup_steps"],
                            OPT["max_steps"], OPT["weight_decay"], OPT["beta1"], OPT["beta2"],
                            OPT["eps"], OPT["grad_clip"]))
        fp = flat(p32)
        f.write(struct.pack("<q", fp.numel()))
        f.write(fp.numpy().astype("<f4").tobytes())
        f.write(idx.to(torch.int32).numpy().astype("<i4").tobytes())
        f.write(tgt.to(torch.int32).numpy().astype("<i4").tobytes())
        f.write(logits.detach().to(torch.float32).numpy().astype("<f4").tobytes())
        f.write(struct.pack("<f", loss.item()))
        f.write(flat(grads).numpy().astype("<f4").tobytes())
        f.write(struct.pack("<%df" % STEPS, *losses))
        f.write(struct.pack("<%df" % STEPS, *norms))
    print("wrote %s: %d params, loss %.6f, losses %s" % (out_path, fp.numel(), loss.item(),
                                                         " ".join("%.4f" % x for x in losses)))


if __name__ == "__main__":
    main()
