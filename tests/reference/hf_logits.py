#!/usr/bin/python3
"""Check a Hugging Face export of gptd against a reference GPT-2.

    hf_logits.py HF_DIR GPTD_LOGITS.bin ID,ID,...

Reads HF_DIR/config.json and HF_DIR/model.safetensors by hand, with the
documented layout (u64 little-endian header length, JSON header of
name -> dtype/shape/data_offsets, then the byte buffer; no `safetensors`
package), and runs GPT-2 as transformers' GPT2LMHeadModel computes it:
Conv1D layers (x @ W + b with W stored [in, out]), gelu_new, LayerNorm with
layer_norm_epsilon, causal attention, lm_head tied to wte. In float64 from
the file's float32 weights: with PyTorch when it is installed
(packaging/install-deps.sh --reference), and always in plain Python (the
same equations, so the test needs nothing beyond python3); both must agree.
GPTD_LOGITS.bin holds gptd's logits for the same ids (T x vocab_size
float32, tests/tools/logits.c). Exit 0 when every logit agrees within 1e-4,
1 otherwise (the largest difference is printed).
"""
import array
import json
import math
import struct
import sys

TOL = 1e-4


def read_safetensors(path):
    """name -> (shape, flat list of floats)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", name
        b, e = t["data_offsets"]
        a = array.array("f")
        a.frombytes(data[b:e])
        if sys.byteorder != "little":
            a.byteswap()
        count = 1
        for d in t["shape"]:
            count *= d
        assert len(a) == count, name
        out[name] = (tuple(t["shape"]), list(a))
    return out


def matrix(w, name):
    shape, flat = w[name]
    rows, cols = shape
    return [flat[r * cols:(r + 1) * cols] for r in range(rows)]


def vec(w, name):
    return w[name][1]


def conv1d(x, W, b):
    """x (T, in) @ W (in, out) + b."""
    cols = len(b)
    out = []
    for row in x:
        acc = list(b)
        for i, xi in enumerate(row):
            wi = W[i]
            for j in range(cols):
                acc[j] += xi * wi[j]
        out.append(acc)
    return out


def layer_norm(x, g, b, eps):
    out = []
    for row in x:
        n = len(row)
        mean = sum(row) / n
        var = sum((v - mean) ** 2 for v in row) / n
        rs = 1.0 / math.sqrt(var + eps)
        out.append([(v - mean) * rs * g[i] + b[i] for i, v in enumerate(row)])
    return out


def gelu_new(v):
    return 0.5 * v * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3)))


def forward_python(cfg, w, ids):
    L, NH, C = cfg["n_layer"], cfg["n_head"], cfg["n_embd"]
    eps = cfg["layer_norm_epsilon"]
    g = lambda n: "transformer." + n
    wte, wpe = matrix(w, g("wte.weight")), matrix(w, g("wpe.weight"))
    T, hs = len(ids), C // NH
    x = [[wte[t][c] + wpe[p][c] for c in range(C)] for p, t in enumerate(ids)]
    for l in range(L):
        p = g("h.%d." % l)
        h = layer_norm(x, vec(w, p + "ln_1.weight"), vec(w, p + "ln_1.bias"), eps)
        qkv = conv1d(h, matrix(w, p + "attn.c_attn.weight"), vec(w, p + "attn.c_attn.bias"))
        y = [[0.0] * C for _ in range(T)]
        for hd in range(NH):
            o = hd * hs
            for t in range(T):
                q = qkv[t][o:o + hs]
                sc = [sum(q[i] * qkv[s][C + o + i] for i in range(hs)) / math.sqrt(hs)
                      for s in range(t + 1)]
                mx = max(sc)
                e = [math.exp(v - mx) for v in sc]
                z = sum(e)
                for s in range(t + 1):
                    a = e[s] / z
                    for i in range(hs):
                        y[t][o + i] += a * qkv[s][2 * C + o + i]
        a = conv1d(y, matrix(w, p + "attn.c_proj.weight"), vec(w, p + "attn.c_proj.bias"))
        x = [[x[t][c] + a[t][c] for c in range(C)] for t in range(T)]
        h = layer_norm(x, vec(w, p + "ln_2.weight"), vec(w, p + "ln_2.bias"), eps)
        h = conv1d(h, matrix(w, p + "mlp.c_fc.weight"), vec(w, p + "mlp.c_fc.bias"))
        h = [[gelu_new(v) for v in row] for row in h]
        m = conv1d(h, matrix(w, p + "mlp.c_proj.weight"), vec(w, p + "mlp.c_proj.bias"))
        x = [[x[t][c] + m[t][c] for c in range(C)] for t in range(T)]
    x = layer_norm(x, vec(w, g("ln_f.weight")), vec(w, g("ln_f.bias")), eps)
    return [[sum(row[c] * e[c] for c in range(C)) for e in wte] for row in x]


def forward_torch(cfg, w, ids):
    import torch
    import torch.nn.functional as F
    t64 = lambda n: torch.tensor(w["transformer." + n][1], dtype=torch.float64).view(
        w["transformer." + n][0])
    L, NH, C = cfg["n_layer"], cfg["n_head"], cfg["n_embd"]
    eps = cfg["layer_norm_epsilon"]
    T, hs = len(ids), C // NH
    x = t64("wte.weight")[torch.tensor(ids)] + t64("wpe.weight")[:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    conv = lambda h, p: h @ t64(p + ".weight") + t64(p + ".bias")
    for l in range(L):
        p = "h.%d." % l
        h = F.layer_norm(x, (C,), t64(p + "ln_1.weight"), t64(p + "ln_1.bias"), eps=eps)
        q, k, v = conv(h, p + "attn.c_attn").split(C, dim=1)
        q, k, v = (t.view(T, NH, hs).transpose(0, 1) for t in (q, k, v))
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(hs)).masked_fill(~mask, float("-inf"))
        y = (att.softmax(dim=-1) @ v).transpose(0, 1).reshape(T, C)
        x = x + conv(y, p + "attn.c_proj")
        h = F.layer_norm(x, (C,), t64(p + "ln_2.weight"), t64(p + "ln_2.bias"), eps=eps)
        x = x + conv(F.gelu(conv(h, p + "mlp.c_fc"), approximate="tanh"), p + "mlp.c_proj")
    x = F.layer_norm(x, (C,), t64("ln_f.weight"), t64("ln_f.bias"), eps=eps)
    return (x @ t64("wte.weight").t()).tolist()


def max_diff(a, b):
    return max(abs(u - v) for ra, rb in zip(a, b) for u, v in zip(ra, rb))


def main():
    hf_dir, logits_path = sys.argv[1], sys.argv[2]
    ids = [int(x) for x in sys.argv[3].split(",")]
    cfg = json.load(open(hf_dir + "/config.json"))
    assert cfg["model_type"] == "gpt2" and cfg["architectures"] == ["GPT2LMHeadModel"]
    assert cfg["activation_function"] == "gelu_new" and cfg["tie_word_embeddings"]
    V, C = cfg["vocab_size"], cfg["n_embd"]
    w = read_safetensors(hf_dir + "/model.safetensors")
    assert "lm_head.weight" not in w  # tied, as save_pretrained leaves it
    assert w["transformer.wte.weight"][0] == (V, C)
    ref = forward_python(cfg, w, ids)
    got = array.array("f")
    with open(logits_path, "rb") as f:
        got.frombytes(f.read())
    T = len(ids)
    if len(got) != T * V:
        print("gptd gave %d logits, expected %d x %d" % (len(got), T, V))
        return 1
    got = [list(got[t * V:(t + 1) * V]) for t in range(T)]
    d = max_diff(got, ref)
    print("max |gptd - reference| over %d x %d logits: %.3g" % (T, V, d))
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
    if have_torch:
        dt = max_diff(forward_torch(cfg, w, ids), ref)
        print("max |PyTorch - plain Python reference|: %.3g" % dt)
        if dt > 1e-9:
            return 1
    return 0 if d <= TOL else 1


if __name__ == "__main__":
    sys.exit(main())
