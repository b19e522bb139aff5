#!/usr/bin/env python3
"""ncu_summary: one line per kernel from an Nsight Compute CSV, the mean
over its profiled launches. Used by acceptance.sh's profile rows; prints
nothing when the file holds no metrics.

Two layouts, told apart by their header:
  --page details: one row per (launch, metric) with "Metric Name" and
      "Metric Value"; gives time (us), achieved occupancy (%) and
      registers per thread.
  --page raw: one row per launch, a column per metric (the row after the
      header holds the units); gives the same three, and where the
      sections were collected the issue slots busy (%), the tensor pipe's
      busy share (%), the shared-memory bank conflicts per launch and the
      three largest warp stall reasons (cycles per issued instruction):
      where the next change to a kernel should look.

`ncu_summary.py --selftest` checks both layouts on small samples."""
import csv
import re
import sys
from collections import defaultdict

DETAILS = {"Duration": "us", "Achieved Occupancy": "occ%", "Registers Per Thread": "regs"}
TO_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
# Raw metric names: the exact ones, then patterns (tensor pipe names vary
# with the architecture and the ncu version).
RAW = [("us", re.compile(r"^gpu__time_duration\.sum$")),
       ("occ%", re.compile(r"^sm__warps_active\.avg\.pct_of_peak_sustained_active$")),
       ("regs", re.compile(r"^launch__registers_per_thread$")),
       ("issue%", re.compile(r"^smsp__issue_active\.avg\.pct_of_peak_sustained_active$")),
       ("tensor%", re.compile(r"^sm__pipe_tensor_op_hmma_cycles_active\.avg\.pct_of_peak_sustained_active$")),
       ("bankconf", re.compile(r"^l1tex__data_bank_conflicts_pipe_lsu_mem_shared\.sum$"))]
STALL = re.compile(r"^smsp__average_warps?_(?:latency_)?issue_stalled_(\w+?)_per_issue_active\.ratio$")


def number(text):
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def name_of(kernel):
    return kernel.split("(")[0].replace("void ", "").strip()


def details(rows):
    acc = defaultdict(lambda: defaultdict(list))
    for r in rows:
        key = DETAILS.get(r.get("Metric Name"))
        x = number(r.get("Metric Value", ""))
        if key is None or x is None:
            continue
        if key == "us":
            x *= TO_US.get(r.get("Metric Unit", "us"), 1.0)
        acc[name_of(r.get("Kernel Name", "?"))][key].append(x)
    return acc


def raw(rows):
    units = rows[0] if rows and not rows[0].get("Kernel Name") else {}
    acc = defaultdict(lambda: defaultdict(list))
    for r in rows[1 if units else 0:]:
        kernel = r.get("Kernel Name")
        if not kernel:
            continue
        d = acc[name_of(kernel)]
        for col, text in r.items():
            x = number(text)
            if x is None or col is None:
                continue
            for key, pat in RAW:
                if pat.match(col):
                    if key == "us":
                        x *= TO_US.get(units.get(col, "ns"), 1.0)
                    d[key].append(x)
            m = STALL.match(col)
            if m and m.group(1) not in ("selected", "not_selected"):
                d["stall " + m.group(1)].append(x)
    return acc


def line(acc):
    out = []
    for n, d in acc.items():
        mean = {k: sum(v) / len(v) for k, v in d.items() if v}
        parts = ["%s %.0f" % (k, mean[k]) for k, _ in RAW if k in mean]
        stalls = sorted(((v, k[6:]) for k, v in mean.items() if k.startswith("stall ")), reverse=True)
        if stalls:
            parts.append("stalls " + ",".join("%s %.1f" % (k, v) for v, k in stalls[:3]))
        out.append("%s %s" % (n, " ".join(parts)))
    return "; ".join(out)


def summary(lines):
    rows = list(csv.DictReader(l for l in lines if l.startswith('"')))
    if not rows:
        return ""
    return line(details(rows) if "Metric Name" in rows[0] else raw(rows))


def selftest():
    det = ['==PROF== noise\n',
           '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n',
           '"0","void k<1>(float *)","Duration","ns","2,000"\n',
           '"1","void k<1>(float *)","Duration","us","4"\n',
           '"0","void k<1>(float *)","Registers Per Thread","register/thread","64"\n']
    assert summary(det) == "k<1> us 3 regs 64", summary(det)
    stall = "smsp__average_warps_issue_stalled_%s_per_issue_active.ratio"
    head = ["ID", "Kernel Name", "gpu__time_duration.sum", "launch__registers_per_thread",
            "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
            stall % "barrier", stall % "mio_throttle", stall % "short_scoreboard",
            stall % "selected", stall % "wait"]
    units = ["", "", "usecond", "register/thread", "%", "inst", "inst", "inst", "inst", "inst"]
    k = ["0", "flash(int)", "87.5", "124", "31", "0.5", "2.25", "1", "9", "0.75"]
    rawl = [",".join('"%s"' % c for c in r) + "\n" for r in (head, units, k)]
    want = "flash us 88 regs 124 tensor% 31 stalls mio_throttle 2.2,short_scoreboard 1.0,wait 0.8"
    assert summary(rawl) == want, summary(rawl)
    assert summary(["==PROF== nothing\n"]) == ""
    print("ncu_summary selftest: ok")


def main(argv):
    if argv[1:] == ["--selftest"]:
        selftest()
        return
    with open(argv[1], errors="replace") as f:
        s = summary(f)
    if s:
        print(s)


if __name__ == "__main__":
    main(sys.argv)
