#!/usr/bin/env python3
"""Where a kernel's warps stall, from ncu's per-instruction source counters.

usage: bench/ncu_stalls.py SRC.csv [--top 30]
SRC.csv: `ncu --import REPORT --page source --csv --print-source sass` of a report taken with
`--section SourceCounters` (scripts/device_check.sh, stage ncu). Prints the warp-stall samples of
each code region — the SASS split after every EXIT/RET, so that out-of-line functions (e.g. the
fused step's conv warp, `__noinline__`) get their own line — with their main stall reasons, then the
instructions with the most samples: offset, times executed, samples, reasons, SASS.
"""
import argparse
import csv
import collections


def read(path):
    rows = list(csv.reader(open(path, newline="")))
    for i, r in enumerate(rows):
        if r and r[0] == "Address":
            head = r
            return head, [x for x in rows[i + 1:] if len(x) == len(head)]
    raise SystemExit(f"{path}: no 'Address' header (not a --page source csv?)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    head, rows = read(a.csv)
    col = {h: i for i, h in enumerate(head)}
    reasons = [h for h in head if h.startswith("stall_") and "Not Issued" not in h]
    samples = col["Warp Stall Sampling (All Samples)"]
    execd = col["Instructions Executed"]
    num = lambda r, i: float(r[i] or 0)
    base = int(rows[0][0], 16)

    def why(r, n=2):
        rs = sorted(((num(r, col[h]), h[6:]) for h in reasons), reverse=True)[:n]
        return " ".join(f"{k}:{int(v)}" for v, k in rs if v > 0)

    total = sum(num(r, samples) for r in rows)
    print(f"{len(rows)} SASS lines, {int(total)} warp samples\n")
    print("region (offsets)            samples  share  main reasons")
    start, acc = 0, collections.Counter()
    for i, r in enumerate(rows):
        for h in reasons:
            acc[h[6:]] += num(r, col[h])
        sass = r[col["Source"]]
        if "EXIT" in sass.split() or "RET" in sass or i == len(rows) - 1:
            s = sum(acc.values())
            if s > 0:
                end = int(r[0], 16) - base
                top = " ".join(f"{k}:{int(v)}" for k, v in acc.most_common(4))
                print(f"{start:#8x}-{end:#8x}     {int(s):7d}  {100 * s / total:4.1f}%  {top}")
            start, acc = int(r[0], 16) - base + 16, collections.Counter()
    print(f"\ntop {a.top} instructions: offset, executed, samples, reasons, SASS")
    for r in sorted(rows, key=lambda r: -num(r, samples))[: a.top]:
        print(f"{int(r[0], 16) - base:#8x} {r[execd]:>9} {int(num(r, samples)):6d}  {why(r):28s} {r[col['Source']][:70]}")


if __name__ == "__main__":
    main()
