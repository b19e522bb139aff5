#!/usr/bin/env python3
"""Checks a GGUF export's tensor data against the snapshot it came from.

usage: gguf_data.py SNAPSHOT.gpts FILE.gguf TABLE.json [WANT.raw]

TABLE.json is gguf_check.js's output (the tensor table as npm's parser
read it). Every tensor's bytes must be the snapshot's values (gptd's
layer-major layout, read here independently of gptd) in the tensor's
dtype: float32 as is, float16 rounded to nearest even (Python's struct
'e'; 65520 and above become infinity), bfloat16 rounded to nearest even.
With WANT.raw, writes the float32 parameters gptd must read back from
the file (each value widened from the file's dtype, gptd's padding zero).
Pure Python: no numpy.
"""
import json
import struct
import sys
from array import array

snap, path, table = sys.argv[1:4]
s = open(snap, "rb").read()
L, NH, C, T, V = struct.unpack("<5i", s[16:36])
n = struct.unpack("<Q", s[380:388])[0]  # gptd-snapshot(5): n_params at 380
params = array("f", s[512:512 + 4 * n])
Vp = (V + 63) // 64 * 64 if V > 64 else (V + 15) // 16 * 16
kinds = ["attn_norm.weight", "attn_norm.bias", "attn_qkv.weight", "attn_qkv.bias",
         "attn_output.weight", "attn_output.bias", "ffn_norm.weight", "ffn_norm.bias",
         "ffn_up.weight", "ffn_up.bias", "ffn_down.weight", "ffn_down.bias"]
sizes = [C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C]
per_layer = sum(sizes)
assert n == Vp * C + T * C + L * per_layer + 2 * C, "snapshot size"
where = {"token_embd.weight": 0, "output.weight": 0, "position_embd.weight": Vp * C}
base = Vp * C + T * C
for l in range(L):
    for k, name in enumerate(kinds):
        where[f"blk.{l}.{name}"] = base + l * per_layer + sum(sizes[:k])
where["output_norm.weight"] = base + L * per_layer
where["output_norm.bias"] = base + L * per_layer + C


def f16(x):
    try:
        return struct.pack("<e", x)
    except OverflowError:
        return struct.pack("<H", 0x7C00 | (0x8000 if x < 0 else 0))


def bf16(u):
    return (u + 0x7FFF + ((u >> 16) & 1)) >> 16


d = open(path, "rb").read()
tab = json.load(open(table))
want = array("f", bytes(4 * n))
for t in tab["tensors"]:
    off, cnt = where[t["name"]], t["count"]
    src = params[off:off + cnt]
    at = tab["data"] + t["offset"]
    if t["dtype"] == 0:
        exp = src.tobytes()
        got = d[at:at + 4 * cnt]
        back = array("f", got)
    elif t["dtype"] == 1:
        exp = b"".join(f16(x) for x in src)
        got = d[at:at + 2 * cnt]
        back = array("f", [struct.unpack("<e", got[2 * i:2 * i + 2])[0] for i in range(cnt)])
    elif t["dtype"] == 30:
        u = array("I", src.tobytes())
        exp = struct.pack(f"<{cnt}H", *(bf16(x) for x in u))
        got = d[at:at + 2 * cnt]
        back = array("f", array("I", (h << 16 for h in struct.unpack(f"<{cnt}H", got))).tobytes())
    else:
        sys.exit(f"{t['name']}: unexpected dtype {t['dtype']}")
    if got != exp:
        i = next(i for i in range(len(exp)) if got[i] != exp[i])
        sys.exit(f"{path}: {t['name']} differs at byte {i} (dtype {t['dtype']})")
    if t["name"] != "output.weight":
        want[off:off + cnt] = back
print(f"{path}: data of {len(tab['tensors'])} tensors ok")
if len(sys.argv) > 4:
    open(sys.argv[4], "wb").write(want.tobytes())
