#!/usr/bin/env bash
# llm.c checkpoints out and in (engine/fmt/llmc.c through tests/tools/
# fmt_convert). A snapshot with non-trivial values in every parameter is
# exported as llmc; an independent Python reader checks the header (magic
# 20240326, version 3, maxT, V, L, NH, C, Vp, words 8..255 zero), the file
# size (1024 + 4 * parameters) and that every tensor sits where llm.c's
# layout (all layers of one kind together) puts it, against the snapshot's
# own layer-major payload. Importing gives the snapshot's parameters back
# bit for bit. A bfloat16 (version 5) file written here with a different
# padded vocabulary is read to exactly its float32 values. Hostile files
# (truncated, bad magic, unknown version, bad dimensions, Vp < V, a size
# that does not match) fail with a message naming the file and the problem.
# usage: fmt_llmc.sh FMT_CONVERT
set -euo pipefail
source "$(dirname "$0")/lib.sh"
CONV=$1
T=$(mktemp -d -t gptd-llmc.XXXXXX)
trap 'rm -rf "$T"' EXIT

# L=3 NH=2 C=24 T=20 V=100: gptd pads V to 128
snap=$("$CONV" mksnap 3 2 24 20 100 11 "$T/s")
"$CONV" export "$snap" llmc "$T/m.bin"
[[ -z "$(ls -A "$T" | grep '^\.')" ]] || fail "temporary file left: $(ls -A "$T")"
"$CONV" import llmc "$T/m.bin" "$T/m.raw" > "$T/cfg.json"
grep -q '"n_layer": 3, "n_head": 2, "n_embd": 24, "block_size": 20, "vocab_size": 100' \
    "$T/cfg.json" || fail "imported config: $(cat "$T/cfg.json")"

python3 - "$snap" "$T/m.bin" "$T/m.raw" "$T/v5.bin" <<'PY' || fail "llm.c layout"
import struct, sys
snap, path, raw, v5 = sys.argv[1:]
s = open(snap, "rb").read()
L, NH, C, maxT, V = struct.unpack("<5i", s[16:36])
n = struct.unpack("<Q", s[380:388])[0]  # header: n_params at 380
gp = s[512:512 + 4 * n]          # gptd's layout, layer-major
Vp = (V + 63) // 64 * 64         # gptd's padding for V > 64
# gptd's per-layer tensors, in order, with their sizes (model.h)
kinds = [C, C, 3*C*C, 3*C, C*C, C, C, C, 4*C*C, 4*C, 4*C*C, C]
per_layer = sum(kinds)
assert n == Vp*C + maxT*C + L*per_layer + 2*C, (n, Vp)
d = open(path, "rb").read()
h = struct.unpack("<256i", d[:1024])
assert h[:8] == (20240326, 3, maxT, V, L, NH, C, Vp), h[:8]
assert all(x == 0 for x in h[8:]), "header words 8..255 are not zero"
want = 1024 + 4 * (Vp*C + maxT*C + L*(12*C*C + 13*C) + 2*C)
assert len(d) == want, (len(d), want)
# llm.c's order: wte, wpe, then each kind for all layers, then lnf
expect = [gp[:4*(Vp*C + maxT*C)]]
base = Vp*C + maxT*C
for k in range(12):
    off = base + sum(kinds[:k])
    for l in range(L):
        o = off + l * per_layer
        expect.append(gp[4*o:4*(o + kinds[k])])
expect.append(gp[4*(base + L*per_layer):])
assert d[1024:] == b"".join(expect), "parameters are not in llm.c's order"
assert open(raw, "rb").read() == gp, "import is not the snapshot's parameters bit for bit"
# a bfloat16 (version 5) file with llm.c's own padding (Vp 192 != gptd's 128):
# round each float32 to bfloat16 (nearest even), pad rows filled with junk
f32 = struct.unpack(f"<{len(d[1024:]) // 4}I", d[1024:])
def bf16(u):
    return (u + 0x7fff + ((u >> 16) & 1)) >> 16
Vp5 = 192
wte = [bf16(u) for u in f32[:V*C]] + [0x3f80] * ((Vp5 - V) * C)
rest = [bf16(u) for u in f32[Vp*C:]]
hdr = struct.pack("<8i", 20240326, 5, maxT, V, L, NH, C, Vp5) + bytes(1024 - 32)
open(v5, "wb").write(hdr + struct.pack(f"<{len(wte) + len(rest)}H", *(wte + rest)))
# what gptd must read: the bfloat16 values widened, gptd's padding zero
widen = [b << 16 for b in wte[:V*C]] + [0] * ((Vp - V) * C) + [b << 16 for b in rest]
# llm.c order -> gptd order for the widened values
lo = widen[Vp*C + maxT*C:]
g = widen[:Vp*C + maxT*C]
layer_parts = [[None]*12 for _ in range(L)]
pos = 0
for k in range(12):
    for l in range(L):
        layer_parts[l][k] = lo[pos:pos + kinds[k]]
        pos += kinds[k]
for l in range(L):
    for k in range(12):
        g += layer_parts[l][k]
g += lo[pos:]
open(v5 + ".want", "wb").write(struct.pack(f"<{len(g)}I", *g))
# hostile variants of the export, checked below
T = path.rsplit("/", 1)[0]
def put(name, b):
    open(f"{T}/{name}", "wb").write(b)
def word(i, v):
    return d[:4*i] + struct.pack("<i", v) + d[4*i + 4:]
put("trunc.bin", d[:-4]); put("short.bin", d[:100]); put("empty.bin", b"")
put("long.bin", d + bytes(8)); put("magic.bin", word(0, 20240520)); put("ver.bin", word(1, 4))
put("nh.bin", word(5, 5)); put("vp.bin", word(7, 99)); put("neg.bin", word(2, -1))
put("huge.bin", word(6, 2**31 - 1)); put("layers.bin", word(4, 48))
print(f"llm.c layout ok: L={L} NH={NH} C={C} maxT={maxT} V={V} Vp={Vp}, {n} parameters")
PY
"$CONV" import llmc "$T/v5.bin" "$T/v5.raw" > /dev/null
cmp "$T/v5.raw" "$T/v5.bin.want" || fail "bfloat16 file not read to its exact float32 values"

# hostile files (written by the Python above): a clear message naming the
# file and the problem, nothing read out of bounds
while IFS='|' read -r name want; do
    if "$CONV" import llmc "$T/$name" "$T/x.raw" > "$T/err" 2>&1; then fail "$name accepted"; fi
    grep -q -- "$T/$name: .*$want" "$T/err" || fail "$name: message lacks '$want': $(cat "$T/err")"
done <<'BAD'
trunc.bin|makes .* parameters.*(truncated?)
short.bin|shorter than llm.c's 1024-byte header
empty.bin|shorter than llm.c's 1024-byte header
long.bin|bytes, but its header
magic.bin|magic 20240520 is not an llm.c checkpoint's
ver.bin|checkpoint version 4
nh.bin|not a multiple of NH
vp.bin|Vp 99 is smaller than the vocabulary V 100
neg.bin|maxT (block_size), is -1
huge.bin|C (n_embd), is 2147483647
layers.bin|L (n_layer), is 48 (gptd takes 1..42)
BAD
if "$CONV" import llmc "$T/none.bin" "$T/x.raw" > "$T/err" 2>&1; then fail "missing file"; fi
grep -q "none.bin: No such file" "$T/err" || fail "missing file: $(cat "$T/err")"
# the output: a regular file is replaced; a link or a folder there is refused
ln -s "$T/m.bin" "$T/link.bin"
mkdir "$T/dir.bin"
for out in link.bin dir.bin; do
    if "$CONV" export "$snap" llmc "$T/$out" > "$T/err" 2>&1; then fail "wrote over $out"; fi
    grep -qE "$T/$out (is a symbolic link|exists and is not a regular file)" "$T/err" ||
        fail "$out: $(cat "$T/err")"
done
[[ -L $T/link.bin && -d $T/dir.bin ]] || fail "a refused output was changed"
"$CONV" export "$snap" llmc "$T/m.bin" # over the earlier export
"$CONV" import llmc "$T/m.bin" "$T/m2.raw" > /dev/null
cmp "$T/m.raw" "$T/m2.raw" || fail "an export over an earlier one reads back differently"
echo "fmt_llmc: ok"
