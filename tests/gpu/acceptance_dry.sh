#!/bin/sh
# acceptance_dry.sh BUILD SOURCE: tests/gpu/acceptance.sh --dry on a host
# without a GPU (ctest gpu_acceptance_dry): every phase's plumbing at tiny
# shapes, then the output folder as a GPU run would commit it: exit 0,
# a row for every phase, summary.json with every key of the record
# (world2_nccl "pass" over shm, the curves compared), and the folder
# committable as is: small, text only, no snapshots, nothing git ignores.
set -u
BUILD=$1 SRC=$2
T=$(mktemp -d /tmp/gptd-accdry.XXXXXX) || exit 2
trap 'rm -rf "$T"' EXIT
OUT=$T/run
sh "$SRC/tests/gpu/acceptance.sh" --dry --build-dir "$BUILD" --out "$OUT" --data "$SRC/README.md" \
    >"$T/log" 2>&1
rc=$?
cat "$T/log"
[ "$rc" = 0 ] || { echo "FAIL: acceptance.sh --dry exit $rc"; exit 1; }
fail=0
for p in preflight ops bwd_ds_ops fwd_k32_ops train wg_ops bwd_wg_ops fwd_wg_ops bench_b16 \
    bench_b32 bwd_ds_b16 bwd_wg_b16 fwd_k32_b16 fwd_wg_b16 torch_b16 torch_b32 curves \
    memcheck_ds memcheck_wg world2; do
    grep -q "^$p " "$OUT/table.txt" || { echo "FAIL: no $p row"; fail=1; }
done
grep -q 'total 480s' "$OUT/caps.txt" || { echo "FAIL: the caps do not add up to 480 s"; fail=1; }
python3 - "$OUT" "$SRC/tests/gpu" <<'PY' || fail=1
import json, os, sys
sys.path.insert(0, sys.argv[2])
import run_summary
s = json.load(open(os.path.join(sys.argv[1], "summary.json")))
bad = []
if list(s) != run_summary.KEYS:
    bad.append("keys %s" % list(s))
if s["world2_nccl"] != "pass":
    bad.append("world2_nccl %r" % s["world2_nccl"])
if not isinstance(s["curve_max_window_rel_diff"], float) or s["curve_max_window_rel_diff"] > 0.02:
    bad.append("curve_max_window_rel_diff %r" % s["curve_max_window_rel_diff"])
if not s["commit"] or s["torch_ms_per_step_b16"] is None:
    bad.append("commit %r, torch_ms_per_step_b16 %r" % (s["commit"], s["torch_ms_per_step_b16"]))
for b in bad:
    print("FAIL: summary.json:", b)
sys.exit(1 if bad else 0)
PY
# committable: under 2 MiB, text files only, two levels at most, names a
# GPU machine gives back, nothing .gitignore drops at tests/gpu/runs/
size=$(du -sk "$OUT" | cut -f1)
[ "$size" -le 2048 ] || { echo "FAIL: the folder is ${size} KiB"; fail=1; }
find "$OUT" -mindepth 3 | grep -q . && { echo "FAIL: folders deeper than one level"; fail=1; }
find "$OUT" -name '*.gpts' -o -name '*.bin' | grep -q . && { echo "FAIL: snapshots or shards left"; fail=1; }
for f in $(cd "$OUT" && find . -type f | sed 's#^\./##'); do
    case "$f" in *[!A-Za-z0-9._/-]*) echo "FAIL: file name $f"; fail=1 ;; esac
    if [ -s "$OUT/$f" ] && ! grep -Iq . "$OUT/$f"; then echo "FAIL: $f is not text"; fail=1; fi
    git -C "$SRC" check-ignore -q --no-index "tests/gpu/runs/dry/$f" && { echo "FAIL: git ignores $f"; fail=1; }
done
[ "$fail" = 0 ] && echo "acceptance --dry: every phase ran; summary.json complete; the folder is committable"
exit "$fail"
