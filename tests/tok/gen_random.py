#!/usr/bin/env python3
"""Writes random valid UTF-8 text (fixed seed) for the tokenizer's reference
test: a mix of ASCII, whitespace, Latin, Greek/Cyrillic, CJK, Hangul,
Arabic/Hebrew, emoji, combining marks and any assigned BMP/SMP character.

Only characters assigned in Python's Unicode version are drawn: the
references run on Node's (newer) Unicode tables and gptd on PCRE2's, and a
character assigned since the older of the two may be a letter for one and
unassigned for the other. usage: gen_random.py OUT [SEED] [CHARS]"""
import random
import sys
import unicodedata

out = sys.argv[1]
seed = int(sys.argv[2]) if len(sys.argv) > 2 else 17
count = int(sys.argv[3]) if len(sys.argv) > 3 else 40000
rng = random.Random(seed)
ranges = [  # (weight, first, last)
    (30, 0x20, 0x7E), (6, 0x09, 0x0D), (4, 0x20, 0x20), (6, 0xA0, 0x24F), (5, 0x370, 0x4FF),
    (8, 0x4E00, 0x9FFF), (4, 0xAC00, 0xD7A3), (4, 0x590, 0x6FF), (5, 0x1F300, 0x1F64F),
    (4, 0x300, 0x36F), (3, 0x2000, 0x206F), (1, 0x3000, 0x303F), (10, 0x80, 0xFFFF),
    (4, 0x10000, 0x1FFFF)]
total = sum(w for w, _, _ in ranges)


def pick():
    r = rng.randrange(total)
    for w, lo, hi in ranges:
        if r < w:
            return lo, hi
        r -= w


chars = []
while len(chars) < count:
    lo, hi = pick()
    cp = rng.randint(lo, hi)
    if 0xD800 <= cp <= 0xDFFF or unicodedata.category(chr(cp)) in ("Cn", "Cs"):
        continue
    chars.append(chr(cp))
    if rng.random() < 0.02:  # an occasional run of one character
        chars.extend(chr(cp) * rng.randint(2, 40))
with open(out, "w", encoding="utf-8", newline="") as f:
    f.write("".join(chars))
print(f"gen_random: {len(chars)} characters, Unicode {unicodedata.unidata_version}, seed {seed}")
