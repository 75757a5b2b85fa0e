#!/usr/bin/env python3
"""FLA's chunk prefill kernel on the GPU, timed by the prefill method of docs/performance.md.

Times `fla.ops.gated_delta_rule.chunk_gated_delta_rule` (Triton) for N sequences of T tokens (varlen,
`cu_seqlens`) at a model shape: bf16 q, k, v; float32 log-space decays g and float32 beta computed
outside the timing (as engines do); q and k l2-normalised in the kernel; float32 initial states
[N, HV, K, V] and final states returned. q and k are given with H heads where FLA takes grouped
heads (HV > H) and expanded to HV heads outside the timing otherwise. The GPU time of one call is
the median replay of a CUDA graph of the call (after warm-up, which also runs Triton's autotuning);
where capture fails, the sum of the call's kernel times from the profiler (the "method" column
says which). `--ours FILE` adds the rows of a `gdn bench --ops chunked` JSON of the same run.

FLA is read from `--fla-dir` (a directory holding the `fla` package, e.g. `.peers/fla_full` made by
`git archive HEAD fla` of its repository); it is never part of this project.
"""
import argparse
import json
import math
import statistics
import sys
from pathlib import Path

MODELS = {"qwen3-next-tp1": (16, 32, 128, 128), "qwen3-next-tp4": (4, 8, 128, 128), "qwen3.6-27b": (16, 48, 128, 128)}
PEAK_BF16 = {"H200": 989.4, "H100": 989.4, "A100": 312.0}


def flops_per_token(K, V, C=64):
    return 4 * C * K + 2 * C * (K + V) + 4 * K * V + 2 * C * V + 2 * K * V


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="1x4096,1x8192,1x16384,4x8192,32x8192,8x2048,64x256")
    p.add_argument("--model", default="qwen3-next-tp1", choices=sorted(MODELS))
    p.add_argument("--fla-dir", default=".peers/fla_full")
    p.add_argument("--replays", type=int, default=20)
    p.add_argument("--ours", default=None, help="gdn bench JSON (op chunked) of the same run")
    p.add_argument("--out", default="prefill_peers.json")
    return p.parse_args(argv)


def time_graph(torch, fn, replays):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(replays):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1))
    return statistics.median(ts)


def time_profiler(torch, fn, replays):
    from torch.profiler import ProfilerActivity, profile
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    per_call = []
    for _ in range(max(5, replays // 4)):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        us = sum(e.device_time_total for e in prof.key_averages() if e.device_type.name == "CUDA")
        per_call.append(us / 1e3)
    return statistics.median(per_call)


def main(argv=None):
    a = parse_args(argv)
    import torch
    sys.path.insert(0, str(Path(a.fla_dir).resolve()))
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    H, HV, K, V = MODELS[a.model]
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(0)
    peak = next((v for k, v in PEAK_BF16.items() if k in name), 0.0)
    rows = []
    print(f"device: {name}; dense bf16 peak {peak:.0f} TFLOP/s; FLA from {a.fla_dir}")
    for sh in a.shapes.split(","):
        N, T = (int(x) for x in sh.split("x"))
        torch.manual_seed(0)
        tot = N * T
        q = torch.randn(1, tot, H, K, device=dev, dtype=torch.bfloat16)
        k = torch.randn(1, tot, H, K, device=dev, dtype=torch.bfloat16)
        v = torch.randn(1, tot, HV, V, device=dev, dtype=torch.bfloat16)
        A_log = torch.rand(HV, device=dev) * 3.77 - 1.0
        dt_bias = torch.randn(HV, device=dev) * 0.5 - 3.0
        a_in = torch.randn(1, tot, HV, device=dev, dtype=torch.bfloat16)
        b_in = torch.randn(1, tot, HV, device=dev, dtype=torch.bfloat16)
        g = (-A_log.exp() * torch.nn.functional.softplus(a_in.float() + dt_bias)).contiguous()
        beta = torch.sigmoid(b_in.float()).contiguous()
        h0 = torch.randn(N, HV, K, V, device=dev, dtype=torch.float32) * 0.1
        cu = torch.arange(0, N + 1, device=dev, dtype=torch.long) * T
        results = {}
        for grouped in (True, False):
            qq, kk = (q, k) if grouped else (q.repeat_interleave(HV // H, dim=2), k.repeat_interleave(HV // H, dim=2))

            def call():
                return chunk_gated_delta_rule(qq, kk, v, g, beta, scale=K ** -0.5, initial_state=h0,
                                              output_final_state=True, use_qk_l2norm_in_kernel=True,
                                              cu_seqlens=cu, cu_seqlens_cpu=cu.cpu())
            try:
                try:
                    ms, method = time_graph(torch, call, a.replays), "graph"
                except Exception:  # noqa: BLE001 - capture unsupported: profiler kernel time
                    torch.cuda.synchronize()
                    ms, method = time_profiler(torch, call, a.replays), "profiler"
                results["grouped" if grouped else "expanded"] = (ms, method)
            except Exception as e:  # noqa: BLE001
                results["grouped" if grouped else "expanded"] = (None, f"error: {type(e).__name__}: {e}"[:200])
            torch.cuda.synchronize()
        for form, (ms, method) in results.items():
            if ms is None:
                print(f"fla_chunk {form:8s} {N:4d}x{T:<6d} {method}")
                rows.append({"impl": "fla_chunk", "form": form, "N": N, "T": T, "error": method})
                continue
            tfl = tot * HV * flops_per_token(K, V) / (ms * 1e9)
            print(f"fla_chunk {form:8s} {N:4d}x{T:<6d} {ms:9.3f} ms {tot / ms / 1e3:8.1f} Mtok/s {tfl:7.1f} TFLOP/s "
                  f"{100 * tfl / peak if peak else 0:5.1f}% peak ({method})")
            rows.append({"impl": "fla_chunk", "form": form, "N": N, "T": T, "ms": ms, "method": method,
                         "tflops": tfl, "tokens_per_s": tot / ms * 1e3})
        del q, k, v, g, beta, h0
        torch.cuda.empty_cache()
    if a.ours:
        ours = json.load(open(a.ours))
        print("\nside by side (ms; FLA: the faster of its grouped and expanded forms)")
        print(f"{'shape':>10s} {'state':>5s} {'gdn':>9s} {'fla':>9s} {'gdn/fla':>8s}")
        for r in ours["results"]:
            if r.get("op") != "chunked":
                continue
            f = [x["ms"] for x in rows if x.get("N") == r["N"] and x.get("T") == r["T"] and x.get("ms")]
            fms = min(f) if f else math.nan
            print(f"{str(r['N']) + 'x' + str(r['T']):>10s} {r['state']:>5s} {r['us'] / 1e3:9.3f} {fms:9.3f} "
                  f"{r['us'] / 1e3 / fms:8.3f}")
    json.dump({"device": name, "model": a.model, "results": rows}, open(a.out, "w"), indent=1)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
