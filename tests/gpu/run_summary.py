#!/usr/bin/env python3
"""run_summary.py: the record of one GPU acceptance run (tests/gpu/runs/).

    run_summary.py OUT_DIR      writes OUT_DIR/summary.json
    run_summary.py --curve OUT_DIR   the loss curves' comparison, one line
    run_summary.py --selftest   checks the writer on a fake run folder

acceptance.sh calls it last, on its output folder, which holds:
  commit.txt    the commit measured (git rev-parse HEAD, "-dirty" with changes)
  gpu.csv       nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  bench.jsonl   bench_gpu_train's lines at the default variants (B=16, B=32)
  torch.jsonl   bench/torch_gpt2.py's lines at the same shapes
  table.txt     one line per phase: name, PASS/FAIL/SKIP, seconds, note
  world2_nccl.txt  the world-2 NCCL phase (tests/gpu/world2.sh): "pass" or
                its first failure, one line
  levers.jsonl  bench_gpu_train's B=16 lines with a step-time lever on
                (GPTD_GEMM_AUTOTUNE=1: "gemm_autotune":1; GPTD_GEMM_GELU=
                unfused: "gelu":"unfused")
  curve_gptd.jsonl, curve_torch.jsonl  the loss curves: gptd run --json's
                lines and torch_gpt2.py's line, the same steps on the same
                data from the same weights

summary.json has exactly these keys: commit, gpu, driver, default_variants
(the attention forward and backward that ran as defaults), passed (every
variant that passed its ops and training rows: "bwd_twopass", "fwd_m16",
...; "fwd_cudnn" and "bwd_cudnn" from their _ops rows and cudnn_b16),
ms per step and MFU (llm.c's count) of gptd and of PyTorch at
B=16 and B=32 (null where not measured), world2_nccl (the world-2
phase's line, null where it did not run) and curve_max_window_rel_diff:
the curves cut into windows of CURVE_WINDOW steps, the largest relative
difference of a window's mean loss, gptd's against PyTorch's (the goal:
at most 0.02; null unless both curves hold the same whole number of
windows); levers: per step-time lever that ran (gemm_tune,
gelu_unfused) its ms_per_step, the default's, passed (its _ops and _b16
rows) and wins (passed and faster than the default), null where none
ran.
"""
import json
import os
import re
import sys
import tempfile

KEYS = [
    "commit", "gpu", "driver", "default_variants", "passed",
    "gptd_ms_per_step_b16", "gptd_mfu_b16", "torch_ms_per_step_b16", "torch_mfu_b16",
    "gptd_ms_per_step_b32", "gptd_mfu_b32", "torch_ms_per_step_b32", "torch_mfu_b32",
    "world2_nccl", "curve_max_window_rel_diff", "levers",
]
CURVE_WINDOW = 10


def _read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""


def _jsonl(path, bench):
    """The lines of bench `bench` by batch (the last line of each batch)."""
    return {row["batch"]: row for row in _jsonl_rows(path, bench)}


def _jsonl_rows(path, bench):
    """The lines of bench `bench` that name an integer batch, in order."""
    rows = []
    for line in _read(path).splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and row.get("bench") == bench and \
                isinstance(row.get("batch"), int):
            rows.append(row)
    return rows


def _num(row, key):
    v = row.get(key) if row else None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _table(path):
    """Phase name -> status, from table.txt."""
    status = {}
    for line in _read(path).splitlines():
        parts = line.split()
        if len(parts) >= 2:
            status[parts[0]] = parts[1]
    return status


def curve_windows(out):
    """(windows, largest relative difference, gptd's and PyTorch's last
    window means) of the loss curves in OUT, or None."""
    gptd = {}
    for line in _read(os.path.join(out, "curve_gptd.jsonl")).splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and row.get("type") == "metric" and "loss" in row:
            gptd[row["step"]] = float(row["loss"])
    torch = _jsonl(os.path.join(out, "curve_torch.jsonl"), "torch_gpt2")
    losses = next(iter(torch.values()), {}).get("losses") or []
    n = len(losses)
    if n == 0 or n % CURVE_WINDOW or sorted(gptd) != list(range(1, n + 1)):
        return None
    worst, last = 0.0, None
    for w in range(0, n, CURVE_WINDOW):
        g = sum(gptd[s + 1] for s in range(w, w + CURVE_WINDOW)) / CURVE_WINDOW
        t = sum(losses[w:w + CURVE_WINDOW]) / CURVE_WINDOW
        worst = max(worst, abs(g - t) / abs(t))
        last = (g, t)
    return n // CURVE_WINDOW, worst, last[0], last[1]


def _lever_name(row):
    if row.get("gemm_autotune") == 1:
        return "gemm_tune"
    return "gelu_unfused" if row.get("gelu") == "unfused" else None


def levers(out, default, ok):
    """Each lever's B=16 line against the default's (a bench line)."""
    res = {}
    base = _num(default, "ms_per_step")
    for row in _jsonl_rows(os.path.join(out, "levers.jsonl"), "gpu_train"):
        name = _lever_name(row)
        if name is None or row.get("batch") != 16:
            continue
        ms = _num(row, "ms_per_step")
        passed = ok(name + "_ops") and ok(name + "_b16")
        res[name] = {"ms_per_step": ms, "default_ms_per_step": base, "passed": passed,
                     "wins": passed and ms is not None and base is not None and ms < base}
    return res or None


def summarize(out):
    commit = _read(os.path.join(out, "commit.txt")).strip() or None
    gpu = driver = None
    first = _read(os.path.join(out, "gpu.csv")).strip().splitlines()
    if first:
        fields = [f.strip() for f in first[0].split(",")]
        gpu = fields[0] or None
        driver = fields[1] if len(fields) > 1 and fields[1] else None
    gptd = _jsonl(os.path.join(out, "bench.jsonl"), "gpu_train")
    torch = _jsonl(os.path.join(out, "torch.jsonl"), "torch_gpt2")
    status = _table(os.path.join(out, "table.txt"))
    ok = lambda name: status.get(name) == "PASS"  # noqa: E731

    ref = gptd.get(16) or gptd.get(32) or {}
    fwd, bwd = ref.get("flash_fwd"), ref.get("flash_bwd")
    passed = set()
    # the defaults: every op against the CPU, 20 steps against the CPU,
    # and the B=16 benchmark
    if fwd and bwd and ok("ops") and ok("train") and ok("bench_b16"):
        passed.update(("fwd_" + fwd, "bwd_" + bwd))
    # the variant rows: NAME_ops (their attention ops) and NAME_b16
    # (step 2's loss against the default's)
    for name in status:
        m = re.fullmatch(r"((?:bwd|fwd)_\w+?|gemm_tune|gelu_unfused)_ops", name)
        if m and ok(name) and ok(m.group(1) + "_b16"):
            passed.add(m.group(1))
    # cuDNN's attention: both ways in one benchmark row (cudnn_b16)
    for v in ("fwd_cudnn", "bwd_cudnn"):
        if ok(v + "_ops") and ok("cudnn_b16"):
            passed.add(v)
    summary = {
        "commit": commit,
        "gpu": gpu,
        "driver": driver,
        "default_variants": {"attention_forward": fwd, "attention_backward": bwd},
        "passed": sorted(passed),
    }
    for b in (16, 32):
        summary["gptd_ms_per_step_b%d" % b] = _num(gptd.get(b), "ms_per_step")
        summary["gptd_mfu_b%d" % b] = _num(gptd.get(b), "mfu")
        summary["torch_ms_per_step_b%d" % b] = _num(torch.get(b), "ms_per_step")
        summary["torch_mfu_b%d" % b] = _num(torch.get(b), "mfu")
    w2 = _read(os.path.join(out, "world2_nccl.txt")).strip().splitlines()
    summary["world2_nccl"] = w2[0] if w2 and w2[0] else None
    curve = curve_windows(out)
    summary["curve_max_window_rel_diff"] = round(curve[1], 6) if curve else None
    summary["levers"] = levers(out, gptd.get(16), ok)
    return {k: summary[k] for k in KEYS}


def write(out):
    summary = summarize(out)
    tmp = os.path.join(out, "summary.json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    os.replace(tmp, os.path.join(out, "summary.json"))
    return summary


def _selftest():
    with tempfile.TemporaryDirectory() as out:
        files = {
            "commit.txt": "0123456789abcdef0123456789abcdef01234567\n",
            "gpu.csv": "NVIDIA H200, 580.95.05\n",
            "bench.jsonl": "\n".join([
                '{"bench":"gpu_train","mode":"bf16","flash_bwd":"twopass","flash_fwd":"m16",'
                '"batch":16,"ms_per_step":35.2,"mfu":0.3782,"peak_tflops":989.0}',
                '{"bench":"gpu_train","mode":"bf16","flash_bwd":"twopass","flash_fwd":"m16",'
                '"batch":32,"ms_per_step":66.6,"mfu":null,"peak_tflops":null}',
            ]) + "\n",
            "torch.jsonl": "some warning\n"
                           '{"bench":"torch_gpt2","batch":16,"ms_per_step":41.0,"mfu":0.3247}\n',
            "table.txt": "\n".join([
                "preflight        PASS      1s  cuda probe: 1 device",
                "ops              PASS     40s  test_gpu_ops",
                "train            PASS     10s  20 steps vs CPU",
                "bench_b16        PASS     20s  35.2 ms/step",
                "bench_b32        FAIL     20s  rc 1",
                "bwd_fused_ops    PASS     20s  x",
                "bwd_fused_b16    PASS     20s  x",
                "bwd_ds_ops       PASS     20s  x",
                "bwd_ds_b16       FAIL     20s  step 2 loss differs",
                "fwd_k32_ops      FAIL     20s  x",
                "fwd_k32_b16      PASS     20s  x",
                "fwd_wg_ops       PASS     20s  x",
                "fwd_wg_b16       PASS     20s  x",
                "bwd_cudnn_ops    PASS      0s  x",
                "fwd_cudnn_ops    FAIL      0s  x",
                "cudnn_b16        PASS     15s  x",
                "gemm_tune_ops    PASS      0s  x",
                "gemm_tune_b16    PASS     14s  x",
                "gelu_unfused_ops PASS      0s  x",
                "gelu_unfused_b16 FAIL     14s  step 2 loss differs",
            ]) + "\n",
            "levers.jsonl": "\n".join([
                '{"bench":"gpu_train","batch":16,"ms_per_step":34.1,"gemm_autotune":1,'
                '"gelu":"epilogue"}',
                '{"bench":"gpu_train","batch":16,"ms_per_step":33.0,"gemm_autotune":0,'
                '"gelu":"unfused"}',
            ]) + "\n",
            "world2_nccl.txt": "pass\n",
            # 20 steps: gptd 3.0 then 2.0; PyTorch 3.03 (1%) then 1.9 (5%)
            "curve_gptd.jsonl": '{"type":"event","kind":"start"}\n' + "".join(
                '{"type":"metric","step":%d,"loss":%s}\n' % (s, "3.0" if s <= 10 else "2.0")
                for s in range(1, 21)),
            "curve_torch.jsonl": '{"bench":"torch_gpt2","batch":32,"losses":[%s]}\n'
                                 % ",".join(["3.03"] * 10 + ["1.9"] * 10),
        }
        for name, text in files.items():
            with open(os.path.join(out, name), "w", encoding="utf-8") as f:
                f.write(text)
        write(out)
        with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
            got = json.load(f)
        want = {
            "commit": "0123456789abcdef0123456789abcdef01234567",
            "gpu": "NVIDIA H200",
            "driver": "580.95.05",
            "default_variants": {"attention_forward": "m16", "attention_backward": "twopass"},
            "passed": ["bwd_cudnn", "bwd_fused", "bwd_twopass", "fwd_m16", "fwd_wg", "gemm_tune"],
            "gptd_ms_per_step_b16": 35.2, "gptd_mfu_b16": 0.3782,
            "torch_ms_per_step_b16": 41.0, "torch_mfu_b16": 0.3247,
            "gptd_ms_per_step_b32": 66.6, "gptd_mfu_b32": None,
            "torch_ms_per_step_b32": None, "torch_mfu_b32": None,
            "world2_nccl": "pass",
            "curve_max_window_rel_diff": round(0.1 / 1.9, 6),
            # faster and passed wins; faster with a failed row does not
            "levers": {
                "gemm_tune": {"ms_per_step": 34.1, "default_ms_per_step": 35.2,
                              "passed": True, "wins": True},
                "gelu_unfused": {"ms_per_step": 33.0, "default_ms_per_step": 35.2,
                                 "passed": False, "wins": False},
            },
        }
        assert list(got) == KEYS, list(got)
        assert got == want, got
        # a run whose default rows failed passes no default; nothing
        # measured is null, never 0
        with open(os.path.join(out, "table.txt"), "w", encoding="utf-8") as f:
            f.write("ops              FAIL     40s  x\n")
        windows, worst, g_last, t_last = curve_windows(out)
        assert (windows, g_last, t_last) == (2, 2.0, 1.9) and abs(worst - 0.1 / 1.9) < 1e-12
        # a curve one step short of PyTorch's: no comparison
        with open(os.path.join(out, "curve_gptd.jsonl"), "a", encoding="utf-8") as f:
            f.write('{"type":"metric","step":21,"loss":2.0}\n')
        assert curve_windows(out) is None
        for name in ("bench.jsonl", "torch.jsonl", "gpu.csv", "commit.txt", "world2_nccl.txt",
                     "levers.jsonl"):
            os.remove(os.path.join(out, name))
        got = write(out)
        assert list(got) == KEYS
        assert got["passed"] == [] and got["commit"] is None and got["gpu"] is None
        assert all(got[k] is None for k in KEYS[5:]), got
        # a failed world-2 phase: its line as written
        with open(os.path.join(out, "world2_nccl.txt"), "w", encoding="utf-8") as f:
            f.write("w2_tiny_none_bf16: job 3 did not complete: NCCL error\n")
        got = write(out)
        assert got["world2_nccl"] == "w2_tiny_none_bf16: job 3 did not complete: NCCL error", got
    print("run_summary selftest: ok")
    return 0


def main(argv):
    if argv[1:] == ["--selftest"]:
        return _selftest()
    if len(argv) == 3 and argv[1] == "--curve":
        curve = curve_windows(argv[2])
        if curve is None:
            print("no comparable curves in %s" % argv[2])
            return 1
        print("%d %.6f %.4f %.4f" % curve)
        return 0
    if len(argv) != 2 or not os.path.isdir(argv[1]):
        print("usage: run_summary.py OUT_DIR | --curve OUT_DIR | --selftest", file=sys.stderr)
        return 2
    json.dump(write(argv[1]), sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
