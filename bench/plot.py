#!/usr/bin/env python3
"""Plots effective GB/s against batch size N from `gdn bench` JSON and bench/peers.py JSON.

usage: bench/plot.py --ours bench/results/recurrent.json [--fused bench/results/fused.json]
                     --peers bench/results/peers.json --out bench/gbps_vs_n.png
One panel per (T, state) for the Qwen3-Next TP1 shape; dashed lines are the copy ceilings
measured in the same runs (ours: `gdn bench`'s SM copy kernel; peers: the best SM copy there).
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", required=True)
    ap.add_argument("--fused")
    ap.add_argument("--peers", required=True)
    ap.add_argument("--model", default="qwen3-next-tp1")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    ours = json.load(open(a.ours))
    fused = json.load(open(a.fused)) if a.fused else None
    peers = json.load(open(a.peers))
    peer_copy = max((r["copy_gbps"] for r in peers if "copy_gbps" in r), default=None)
    panels = [(1, "f32"), (4, "f32"), (1, "bf16"), (4, "bf16")]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4.2), sharey=True)
    for ax, (T, state) in zip(axes, panels):
        def series(rows, label, **kw):
            pts = sorted((r["N"], r["gbps"]) for r in rows
                         if r.get("model") == a.model and r.get("T") == T and r.get("state") == state
                         and "gbps" in r)  # (a peer's error rows have none)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label, **kw)
        series([r for r in ours["results"] if r["op"] == "recurrent"], "gdn recurrent", lw=2.5)
        if fused:
            series([r for r in fused["results"] if r["op"] == "fused"], "gdn fused step", lw=2)
        for peer in sorted({r["peer"] for r in peers if r.get("kind") == "case" and r["peer"] != "gdn(bench)"}):
            series([r for r in peers if r.get("kind") == "case" and r["peer"] == peer], peer, ls=":")
        ax.axhline(ours["copy_gbps"], color="k", ls="--", lw=1, label="SM copy (gdn bench run)")
        if peer_copy:
            ax.axhline(peer_copy, color="gray", ls="--", lw=1, label="SM copy (peers run)")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{a.model}, {'decode' if T == 1 else f'verify T={T}'}, {state} state")
        ax.set_xlabel("N (sequences)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("effective GB/s (fewest bytes / time)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
