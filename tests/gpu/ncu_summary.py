#!/usr/bin/env python3
"""ncu_summary: one line per kernel from an Nsight Compute CSV (--csv
--page details): mean duration (us), achieved occupancy (%) and registers
per thread over its profiled launches. Used by acceptance.sh's profile
rows; prints nothing when the file holds no metrics."""
import csv
import sys
from collections import defaultdict

KEEP = {"Duration": "us", "Achieved Occupancy": "occ%", "Registers Per Thread": "regs"}
TO_US = {"ns": 1e-3, "usecond": 1.0, "us": 1.0, "ms": 1e3, "msecond": 1e3, "nsecond": 1e-3}


def name_of(kernel):
    n = kernel.split("(")[0].replace("void ", "")
    return n.strip()


def main(path):
    acc = defaultdict(lambda: defaultdict(list))
    with open(path, errors="replace") as f:
        rows = csv.DictReader(line for line in f if line.startswith('"'))
        for r in rows:
            m = r.get("Metric Name")
            if m not in KEEP:
                continue
            try:
                x = float(r.get("Metric Value", "").replace(",", ""))
            except ValueError:
                continue
            if m == "Duration":
                x *= TO_US.get(r.get("Metric Unit", "us"), 1.0)
            acc[name_of(r.get("Kernel Name", "?"))][KEEP[m]].append(x)
    if acc:
        print("; ".join(
            "%s %s" % (n, " ".join("%s %.0f" % (k, sum(v) / len(v)) for k, v in d.items()))
            for n, d in acc.items()))


if __name__ == "__main__":
    main(sys.argv[1])
