#!/usr/bin/env python3
"""Markdown tables of `gdn bench` results beside bench/peers.py results, one table per model.

usage: bench/tables.py --ours bench/results/recurrent.json [--two-launch bench/results/fused_two_launch.json]
                       --peers bench/results/peers.json > tables.md
"% of copy" is against the best SM copy measured in either run (the higher ceiling).
"""
import argparse
import json

PEERS = [("vllm_sigmoid", "vLLM production µs"), ("vllm_recurrent", "vLLM older µs"), ("fla_recurrent", "FLA µs (†)")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", required=True)
    ap.add_argument("--two-launch")
    ap.add_argument("--peers", required=True)
    a = ap.parse_args()
    ours = json.load(open(a.ours))
    two = json.load(open(a.two_launch))["results"] if a.two_launch else []
    peers = [r for r in json.load(open(a.peers)) if r.get("kind") == "case"]
    peer_copy = max((r["copy_gbps"] for r in json.load(open(a.peers)) if "copy_gbps" in r), default=0.0)
    copy = max(ours["copy_gbps"], peer_copy)
    print(f"% of copy against {copy:.0f} GB/s (gdn bench's copy kernel: {ours['copy_gbps']:.0f}, peers' run: "
          f"{peer_copy:.0f}).\n")

    def find(rows, **kw):
        for r in rows:
            if all(r.get(k) == v for k, v in kw.items()):
                return r
        return None

    def us(r):  # a peer's error record (it did not compile or run): "error"
        return "" if not r else f"{r['us']:.1f}" if "us" in r else "error"

    rec = [r for r in ours["results"] if r["op"] == "recurrent"]
    fused = [r for r in ours["results"] if r["op"] == "fused"]
    for model in dict.fromkeys(r["model"] for r in rec):
        print(f"### {model}\n")
        head = ["state", "T", "N", "gdn recurrent µs", "% of copy"] + [h for _, h in PEERS] + \
               ["gdn ÷ vLLM prod.", "gdn fused step µs", "fused ÷ recurrent", "fused, 2 launches µs"]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in sorted((r for r in rec if r["model"] == model), key=lambda r: (r["state"] != "f32", r["T"], r["N"])):
            key = dict(model=model, N=r["N"], T=r["T"], state=r["state"])
            pr = [find(peers, peer=p, **key) for p, _ in PEERS]
            f = find(fused, **key)
            t2 = find(two, op="fused", **key)
            cells = [r["state"], str(r["T"]), str(r["N"]), f"{r['us']:.1f}", f"{100 * r['gbps'] / copy:.0f}%"]
            cells += [us(x) for x in pr]
            cells.append(f"{r['us'] / pr[0]['us']:.2f}" if pr[0] and "us" in pr[0] else "")
            cells += [us(f), f"{f['us'] / r['us']:.2f}" if f else "", us(t2)]
            print("| " + " | ".join(cells) + " |")
        print()


if __name__ == "__main__":
    main()
