#!/usr/bin/env python3
"""Side-by-side times of several `gdn bench` JSON files (A/B runs on one machine), one row per case.

usage: bench/compare.py NAME=FILE[,FILE...] [NAME=FILE[,FILE...] ...] [--ops fused] [--ratio]
The first run is the reference: each other column also shows its change against it in percent.
Several files for one name (repeats of the same setting, e.g. interleaved A B A B in one run):
each case is their median.
--ratio adds, per file, fused µs ÷ recurrent µs of the same file (the fused-step target).
--summary ends with, per other run and op, the geometric mean of its time over the reference's and
its slowest case.
Cases missing from a file print as "-".
"""
import argparse
import json
import math
import statistics


def load(path):
    rows = json.load(open(path))["results"]
    return {(r["op"], r["model"], r["N"], r["T"], r["state"]): r["us"] for r in rows if r.get("us")}


def load_runs(paths):
    """The per-case median over one setting's files (a case missing from a file is left out there)."""
    runs = [load(p) for p in paths]
    keys = []
    for r in runs:
        keys += [k for k in r if k not in keys]
    return {k: statistics.median([r[k] for r in runs if k in r]) for k in keys}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+", help="NAME=FILE[,FILE...]")
    ap.add_argument("--ops", default="", help="comma-separated ops to show (default: all)")
    ap.add_argument("--ratio", action="store_true")
    ap.add_argument("--summary", action="store_true")
    a = ap.parse_args()
    names, data = [], []
    for run in a.runs:
        name, _, path = run.partition("=")
        if not path:
            ap.error(f"expected NAME=FILE, got {run!r}")
        names.append(name)
        data.append(load_runs(path.split(",")))
    ops = set(a.ops.split(",")) if a.ops else None
    keys = [k for k in data[0] if ops is None or k[0] in ops]
    for d in data[1:]:
        keys += [k for k in d if k not in keys and (ops is None or k[0] in ops)]
    head = ["op", "model", "N", "T", "state"] + names
    if a.ratio:
        head += [f"{n} fused/rec" for n in names]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for k in keys:
        ref = data[0].get(k)
        cells = []
        for i, d in enumerate(data):
            v = d.get(k)
            if v is None:
                cells.append("-")
            elif i == 0 or ref is None:
                cells.append(f"{v:.1f}")
            else:
                cells.append(f"{v:.1f} ({100.0 * (v - ref) / ref:+.1f}%)")
        if a.ratio:
            for d in data:
                rec = d.get(("recurrent",) + k[1:])
                cells.append(f"{d[k] / rec:.2f}" if k[0] == "fused" and k in d and rec else "")
        print("| " + " | ".join([k[0], k[1], str(k[2]), str(k[3]), k[4]] + cells) + " |")
    if a.summary:
        print()
        print("| run | op | cases | geomean vs " + names[0] + " | slowest case |")
        print("|---|---|---|---|---|")
        for i, d in enumerate(data[1:], 1):
            for op in sorted({k[0] for k in keys}):
                rs = [(d[k] / data[0][k], k) for k in keys if k[0] == op and k in d and k in data[0]]
                if not rs:
                    continue
                gm = math.exp(sum(math.log(r) for r, _ in rs) / len(rs))
                worst, wk = max(rs)
                print(f"| {names[i]} | {op} | {len(rs)} | {gm:.3f} | {worst:.3f} ({wk[1]} N={wk[2]} T={wk[3]} {wk[4]}) |")


if __name__ == "__main__":
    main()
