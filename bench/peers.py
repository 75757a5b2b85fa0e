#!/usr/bin/env python3
"""Peer decode/verify kernels (vLLM, FLA; Python + Triton) on the GPU, side by side with ours.

Method (docs/performance.md, the same as `gdn bench`):
  * each timed unit is a CUDA graph of R calls; call c works on its own slot range of one pool, and
    the slots touched by the graph exceed 3 x the 60 MB L2, so replays do not measure the cache;
  * one eager call first (Triton compiles there; its wall time is reported as first_call_s), three
    warm-up replays, then >= 20 replays each between two CUDA events; us per call = median / R;
  * random data, fresh per case; bf16 activations, float32 or bfloat16 state;
  * GB/s counts the fewest bytes a call must move (each state read once, each stored state written
    once, q k v o a b once) and is given as % of an SM copy kernel (Triton and torch elementwise
    copies, never cudaMemcpy, which a graph turns into a slower copy-engine node) measured in this run.
Implementations ("peers"):
  vllm_sigmoid    vLLM fused_sigmoid_gating_delta_rule_update (production decode/verify: gates, l2 norm
                  and recurrence in one kernel, state [slot, HV, V, K], per-token slots for verify)
  vllm_recurrent  vLLM fused_recurrent_gated_delta_rule (older FLA-derived kernel, state [slot, HV, K, V]);
                  its gates g, beta come from a separate elementwise kernel (2 launches, as in vLLM;
                  beta kept in float32 here, where vLLM rounds it to bf16, so the results match ours)
  fla_recurrent   FLA fused_recurrent_gated_delta_rule kernel (gates in kernel, state_v_first); no slot
                  indices: a dense state per sequence, T tokens from it, final state stored in place
                  (verify = "deferred commit" semantics, so it moves 2 states per sequence, not 1 + T)
  gdn             ours, gdn_kernels.gated_delta_rule_recurrent (the torch extension), in the same harness
  gdn_deferred    ours in the deferred-commit mode (docs/contract.md §7): one slot per sequence, verify_log
                  in and verify_log_out written; each call replays T logged rows (num_accepted_tokens = T,
                  as `gdn bench --ops deferred`), commits one state, then runs and logs its T tokens
(bench/peer_kernels.py loads and calls each.)
Semantics everywhere: g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b), q and k l2-normalised in
the kernel, scale K^-1/2. A correctness check against a torch reference runs first for every peer.
Each peer runs in its own subprocess, so one that fails to import or crashes leaves an error row and
the others still run. Sources come from .peers/ (scripts/fetch_peers.sh), never from an installed vLLM.
"""
import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import time
import traceback
import zlib
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_kernels import _jit, load_peer, tl, triton  # noqa: E402  (the peers; triton where it imports)

ROOT = Path(__file__).resolve().parent.parent
MODELS = {"qwen3-next-tp1": (16, 32, 128, 128), "qwen3-next-tp4": (4, 8, 128, 128), "qwen3.6-27b": (16, 48, 128, 128)}
PEERS = ["vllm_sigmoid", "vllm_recurrent", "fla_recurrent", "gdn", "gdn_deferred"]
L2_BYTES = 60e6
ACT_BYTES = 2  # bf16 activations
DEVICE = "cuda"

@_jit
def _copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)


def csv(s):
    return [x for x in s.split(",") if x]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog="Method and peers: see the top of this file.")
    p.add_argument("--out", default="peers_results.json", help="JSON output: a list of records")
    p.add_argument("--models", help=f"comma list of {','.join(MODELS)} (default all)")
    p.add_argument("--n", help="batch sizes (default 1,4,16,64,256)")
    p.add_argument("--t", help="tokens per sequence; 1 = decode, >1 = verify (default 1,3,4)")
    p.add_argument("--state", help="state dtypes f32,bf16 (default both)")
    p.add_argument("--replays", type=int, default=20, help="timed graph replays, >= 20 (default 20)")
    p.add_argument("--quick", action="store_true", help="qwen3-next-tp1, N 1,64, T 1,4 unless given")
    p.add_argument("--peers", default=",".join(PEERS), help=f"comma list of {','.join(PEERS)}")
    p.add_argument("--peers-dir", default=os.environ.get("GDN_PEERS_DIR", str(ROOT / ".peers")),
                   help="folder made by scripts/fetch_peers.sh (default <repo>/.peers)")
    p.add_argument("--ours-json", help="a `gdn bench` JSON to show beside the peers (rows of op recurrent)")
    p.add_argument("--max-calls", type=int, default=1024, help="most calls per graph (gdn bench uses up to 1024)")
    p.add_argument("--no-check", action="store_true", help="skip the correctness check against torch")
    p.add_argument("--no-isolate", action="store_true", help="run the peers in this process")
    p.add_argument("--worker-timeout", type=int, default=900, help="seconds per peer subprocess")
    p.add_argument("--list", action="store_true", help="print the cases and exit (no GPU needed)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--jsonl", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.models = csv(a.models) if a.models else (["qwen3-next-tp1"] if a.quick else list(MODELS))
    a.n = [int(x) for x in csv(a.n)] if a.n else ([1, 64] if a.quick else [1, 4, 16, 64, 256])
    a.t = [int(x) for x in csv(a.t)] if a.t else ([1, 4] if a.quick else [1, 3, 4])
    a.state = csv(a.state) if a.state else ["f32", "bf16"]
    a.peers = csv(a.peers)
    a.replays = max(20, a.replays)
    for m in a.models:
        if m not in MODELS:
            p.error(f"unknown model {m}; expected one of {','.join(MODELS)}")
    for s in a.state:
        if s not in ("f32", "bf16"):
            p.error(f"unknown state dtype {s}; expected f32 or bf16")
    for x in a.peers:
        if x not in PEERS:
            p.error(f"unknown peer {x}; expected one of {','.join(PEERS)}")
    if any(v < 1 for v in a.n + a.t):
        p.error("--n and --t take positive integers")
    return a


def cases_of(a):
    return [(m, n, t, s) for m in a.models for s in a.state for t in a.t for n in a.n]


# ---- timing -----------------------------------------------------------------------------------
def time_graph(torch, record, calls, replays):
    """Captures record(0..calls-1) in one graph; returns (median, min) us per call."""
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for c in range(calls):
            record(c)
    for _ in range(3):
        g.replay()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(replays)]
    for e0, e1 in ev:
        e0.record()
        g.replay()
        e1.record()
    torch.cuda.synchronize()
    us = [e0.elapsed_time(e1) * 1000.0 / calls for e0, e1 in ev]
    del g
    return statistics.median(us), min(us)


def measure_copy(torch, replays):
    """SM copy kernels over 1 GiB, 4 per graph; GB/s counts read + write."""
    nbytes = 1 << 30
    src = torch.randn(nbytes // 4, device="cuda")
    dst = torch.empty_like(src)
    out = []
    for block, warps in ((2048, 4), (4096, 4), (8192, 8)):
        grid = (triton.cdiv(src.numel(), block),)
        rec = lambda c, grid=grid, block=block, warps=warps: _copy_kernel[grid](src, dst, src.numel(), BLOCK=block, num_warps=warps)  # noqa: E731
        rec(0)
        us, _ = time_graph(torch, rec, 4, replays)
        out.append((f"triton copy BLOCK={block} warps={warps}", 2.0 * nbytes / (us * 1e-6) / 1e9))
    torch.neg(src, out=dst)
    us, _ = time_graph(torch, lambda c: torch.neg(src, out=dst), 4, replays)
    out.append(("torch elementwise (neg) copy", 2.0 * nbytes / (us * 1e-6) / 1e9))
    return out


# ---- case data ----------------------------------------------------------------------------------
def lcg_accepted(N, T):
    """num_accepted_tokens in [1, T], the same sequence as `gdn bench`."""
    x, acc = 12345, []
    for _ in range(N):
        x = (x * 1664525 + 1013904223) & 0xFFFFFFFF
        acc.append(1 + (x >> 16) % T)
    return acc


def make_data(torch, model, N, T, state, per_token, layout, max_calls, min_pool=3 * L2_BYTES, seed=0):
    H, HV, K, V = MODELS[model]
    spec = T > 1
    cols = T if spec and per_token else 1
    rows = N * T
    sdt = torch.float32 if state == "f32" else torch.bfloat16
    slot_bytes = HV * V * K * (4 if state == "f32" else 2)
    per_call = N * cols
    calls = int(min(max(math.ceil(min_pool / (per_call * slot_bytes)), 1), max_calls))
    torch.manual_seed(seed)
    dev, bf = DEVICE, torch.bfloat16
    d = SimpleNamespace(H=H, HV=HV, K=K, V=V, N=N, T=T, rows=rows, spec=spec, cols=cols, calls=calls,
                        per_token=per_token, layout=layout, scale=K ** -0.5, slot_bytes=slot_bytes)
    d.q = torch.randn(rows, H, K, device=dev, dtype=bf)
    d.k = torch.randn(rows, H, K, device=dev, dtype=bf)
    d.v = torch.randn(rows, HV, V, device=dev, dtype=bf)
    d.a = torch.randn(rows, HV, device=dev, dtype=bf)
    d.b = torch.randn(rows, HV, device=dev, dtype=bf)
    d.A_log = torch.empty(HV, device=dev).uniform_(0.0, math.log(16.0))
    d.dt_bias = (0.5 * torch.randn(HV, device=dev)).to(bf)
    shape = (calls * per_call, HV, V, K) if layout == "vk" else (calls * per_call, HV, K, V)
    d.pool = (0.05 * torch.randn(shape, device=dev, dtype=sdt))
    d.qsl = torch.arange(0, rows + 1, T, device=dev, dtype=torch.int32)
    d.acc_list = lcg_accepted(N, T) if spec else [1] * N
    d.acc = torch.tensor(d.acc_list, device=dev, dtype=torch.int32) if spec else None
    # Slots of call c: c*per_call + i*cols + t. Each call's index tensor starts 16-byte aligned, so
    # Triton sees one pointer specialisation for every call (no compile inside the graph capture).
    pad = -(-per_call // 4) * 4
    store = torch.full((calls, pad), -1, device=dev, dtype=torch.int32)
    store[:, :per_call] = torch.arange(calls * per_call, device=dev, dtype=torch.int32).view(calls, per_call)
    d.idx = [store[c, :per_call].view(N, cols) if (spec and per_token) else store[c, :per_call] for c in range(calls)]
    states = N * slot_bytes * ((1 + T) if (spec and per_token) else 2)
    d.bytes = states + rows * ACT_BYTES * (2 * H * K + 2 * HV * V + 2 * HV)
    return d


# ---- correctness against torch ---------------------------------------------------------------------
def rel_l2(torch, x, ref):
    x, ref = x.double(), ref.double()
    if not torch.isfinite(x).all():
        return float("inf")
    return float((x - ref).norm() / ref.norm().clamp_min(1e-30))


def check_peer(torch, peer, model, T, state, max_calls):
    """One call on N = 4 against a float32 torch reference; returns (ok, text)."""
    d = make_data(torch, model, 4, T, state, peer.per_token, peer.layout, 1, min_pool=0, seed=99)
    pool0 = d.pool.float().clone()
    if d.layout == "kv":
        pool0 = pool0.transpose(-1, -2)
    o = peer.prepare(d)(0).reshape(d.rows, d.HV, d.V)
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    N, r = d.N, d.HV // d.H
    idx = d.idx[0].view(N, -1).long()
    read = idx[torch.arange(N), torch.tensor(d.acc_list) - 1 if d.per_token and d.spec else 0]
    S = pool0[read].clone()  # [N, HV, V, K]
    rs = lambda x, h: x.float().view(N, T, h, -1)  # noqa: E731
    q = rs(d.q, d.H).repeat_interleave(r, dim=2)
    k = rs(d.k, d.H).repeat_interleave(r, dim=2)
    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) * d.scale
    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    v = rs(d.v, d.HV)
    g = -torch.exp(d.A_log) * torch.nn.functional.softplus(d.a.float().view(N, T, d.HV) + d.dt_bias.float())
    beta = torch.sigmoid(d.b.float().view(N, T, d.HV))
    o_ref = torch.empty(N, T, d.HV, d.V, device=DEVICE)
    stored = []
    deferred = getattr(peer, "deferred", False)
    if deferred:  # the T logged rows first (k^, v, g, beta as logged), then the committed state
        lg = d.log_in[read]  # [N, T, HV, E]
        for t in range(T):
            kl, vl = lg[:, t, :, :d.K], lg[:, t, :, d.K:d.K + d.V]
            gl, bl = lg[:, t, :, d.K + d.V], lg[:, t, :, d.K + d.V + 1]
            S = S * torch.exp(gl)[..., None, None]
            S = S + (bl[..., None] * (vl - torch.einsum("nhvk,nhk->nhv", S, kl)))[..., None] * kl[:, :, None, :]
        stored = [(read, S.clone())]
        log_ref = torch.cat([k, v, g[..., None], beta[..., None]], dim=-1)  # [N, T, HV, E]
    for t in range(T):
        S = S * torch.exp(g[:, t])[..., None, None]  # S = exp(g) S
        delta = beta[:, t, :, None] * (v[:, t] - torch.einsum("nhvk,nhk->nhv", S, k[:, t]))  # (v - S k) beta
        S = S + delta[..., None] * k[:, t, :, None, :]  # S += delta k^T
        o_ref[:, t] = torch.einsum("nhvk,nhk->nhv", S, q[:, t])  # o = S q
        if d.per_token and d.spec:
            stored.append((idx[:, t], S.clone()))
    if not stored:
        stored = [(idx[:, 0], S)]
    got = d.pool.float() if d.layout == "vk" else d.pool.float().transpose(-1, -2)
    e_o = rel_l2(torch, o, o_ref.view(d.rows, d.HV, d.V))
    e_s = max(rel_l2(torch, got[slots], ref) for slots, ref in stored)
    tol_s = 1e-4 if state == "f32" else 1e-2
    ok = e_o <= 1e-2 and e_s <= tol_s
    text = f"rel L2 o {e_o:.1e} (tol 1e-2), states {e_s:.1e} (tol {tol_s:g})"
    if deferred:  # the step's tokens logged as consumed (float32 log: k^, v, g, beta)
        e_l = rel_l2(torch, d.log_out[read].float(), log_ref)
        ok = ok and e_l <= 1e-4
        text += f", log {e_l:.1e} (tol 1e-4)"
    return ok, f"{'ok' if ok else 'MISMATCH'} T={T} {state}: {text}"


# ---- one peer over all cases (in a worker process) -------------------------------------------------
def run_peer(name, a, emit):
    """Runs one peer over the checks and cases; returns False after a sticky CUDA error."""
    import torch
    with torch.no_grad():
        return _run_peer(torch, name, a, emit)


def _run_peer(torch, name, a, emit):
    t0 = time.time()
    try:
        peer = load_peer(name, a.peers_dir)
    except Exception as e:  # noqa: BLE001
        emit({"kind": "error", "peer": name, "error": f"import failed: {type(e).__name__}: {e}"})
        return True
    emit({"kind": "info", "peer": name, "import_s": round(time.time() - t0, 2), "source": peer.source,
          "semantics": peer.semantics})
    if not a.no_check:
        for t in a.t:
            for s in a.state:
                try:
                    ok, text = check_peer(torch, peer, a.models[0], t, s, a.max_calls)
                except Exception as e:  # noqa: BLE001
                    ok, text = False, f"check T={t} {s} failed: {type(e).__name__}: {e}"
                emit({"kind": "check", "peer": name, "model": a.models[0], "N": 4, "T": t, "state": s,
                      "ok": ok, "check": text})
    for model, N, T, state in cases_of(a):
        rec = {"kind": "case", "peer": name, "model": model, "N": N, "T": T, "state": state,
               "launches": peer.launches, "semantics": peer.semantics}
        try:
            d = make_data(torch, model, N, T, state, peer.per_token, peer.layout, a.max_calls,
                          seed=zlib.crc32(f"{model} {N} {T} {state}".encode()))
            call = peer.prepare(d)
            t1 = time.time()
            call(0)
            torch.cuda.synchronize()
            rec["first_call_s"] = round(time.time() - t1, 3)
            call(d.calls - 1)  # any specialisation the graph needs is compiled before capture
            us, us_min = time_graph(torch, call, d.calls, a.replays)
            rec.update(us=us, us_min=us_min, bytes=d.bytes, gbps=d.bytes / (us * 1e-6) / 1e9, calls=d.calls,
                       pool_mb=round(d.pool.numel() * d.pool.element_size() / 1e6, 1))
            del d, call
        except Exception as e:  # noqa: BLE001
            rec["error"] = f"{type(e).__name__}: {e}".strip()[:500]
            traceback.print_exc()
            emit(rec)
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001  (sticky CUDA error: this process can do no more)
                return False
            continue
        emit(rec)
        torch.cuda.empty_cache()
    return True


def worker_main(a):
    with open(a.jsonl, "a") as f:
        def emit(rec):
            f.write(json.dumps(rec) + "\n")
            f.flush()
            show(rec)
        if not run_peer(a.worker, a, emit):
            sys.exit(3)


def show(rec):
    k = rec["kind"]
    if k == "case":
        tail = f"{rec['us']:9.2f} us {rec['gbps']:7.0f} GB/s  first call {rec['first_call_s']:.2f} s" \
            if "error" not in rec else "error: " + rec["error"]
        print(f"  {rec['peer']:<15} {rec['model']:<15} N={rec['N']:<4} T={rec['T']} {rec['state']:<4} {tail}", flush=True)
    elif k == "check":
        print(f"  {rec['peer']:<15} check: {rec['check']}", flush=True)
    elif k == "error":
        print(f"  {rec['peer']:<15} {rec['error']}", flush=True)
    elif k == "info":
        print(f"  {rec['peer']:<15} loaded in {rec['import_s']} s from {rec['source']}", flush=True)


def spawn(name, a, tmpdir):
    jsonl = Path(tmpdir) / f"{name}.jsonl"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", name, "--jsonl", str(jsonl), "--models", ",".join(a.models),
           "--n", ",".join(map(str, a.n)), "--t", ",".join(map(str, a.t)), "--state", ",".join(a.state),
           "--replays", str(a.replays), "--max-calls", str(a.max_calls), "--peers-dir", a.peers_dir]
    if a.no_check:
        cmd.append("--no-check")
    try:
        rc = subprocess.run(cmd, timeout=a.worker_timeout).returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    recs = [json.loads(x) for x in jsonl.read_text().splitlines()] if jsonl.exists() else []
    if rc != 0 and not any(r["kind"] == "error" for r in recs):
        done = {(r["model"], r["N"], r["T"], r["state"]) for r in recs if r["kind"] == "case"}
        for m, n, t, s in cases_of(a):
            if (m, n, t, s) not in done:
                recs.append({"kind": "case", "peer": name, "model": m, "N": n, "T": t, "state": s,
                             "error": f"the {name} process ended (rc {rc}) before this case; see its output"})
    return recs


# ---- report ---------------------------------------------------------------------------------------
def load_ours(path):
    doc = json.loads(Path(path).read_text())
    rows = doc.get("results", []) if isinstance(doc, dict) else doc
    out = []
    for r in rows:
        if r.get("op", "recurrent") == "recurrent" and r.get("impl", "gdn") == "gdn" and "us" in r:
            out.append({"kind": "case", "peer": "gdn(bench)", "model": r["model"], "N": r["N"], "T": r["T"],
                        "state": r["state"], "us": r["us"], "gbps": r.get("gbps"), "pct_copy": r.get("pct_copy"),
                        "bytes": r.get("bytes"), "semantics": f"from {Path(path).name} (its own run, copy "
                        f"{doc.get('copy_gbps', '?') if isinstance(doc, dict) else '?'} GB/s)"})
    return out


def report(records, a):
    cases = [r for r in records if r["kind"] == "case"]
    print(f"\n{'peer':<15} {'model':<15} {'N':>4} {'T':>2} {'state':<5} {'us':>9} {'GB/s':>7} {'%copy':>6}  note")
    for r in cases:
        if "error" in r:
            print(f"{r['peer']:<15} {r['model']:<15} {r['N']:>4} {r['T']:>2} {r['state']:<5} error: {r['error']}")
        else:
            pc = f"{r['pct_copy']:5.1f}%" if r.get("pct_copy") is not None else "    ?"
            note = "final state only" if r["peer"] == "fla_recurrent" and r["T"] > 1 else ""
            print(f"{r['peer']:<15} {r['model']:<15} {r['N']:>4} {r['T']:>2} {r['state']:<5} {r['us']:9.2f} "
                  f"{r['gbps'] or 0:7.0f} {pc}  {note}")
    checks = {}
    for r in records:
        if r["kind"] == "check":
            checks.setdefault(r["peer"], []).append(r)
        if r["kind"] in ("error", "check") and not r.get("ok", False):
            print(f"{r['peer']}: {r.get('error') or r.get('check')}")
    for p, rs in checks.items():
        print(f"{p}: correctness {sum(r['ok'] for r in rs)}/{len(rs)} checks ok against the torch reference")
    peers = list(dict.fromkeys(r["peer"] for r in cases if "error" not in r))
    if len(peers) > 1:
        keys = list(dict.fromkeys((r["model"], r["state"], r["T"], r["N"]) for r in cases))
        us = {(r["peer"], r["model"], r["state"], r["T"], r["N"]): r["us"] for r in cases if "error" not in r}
        print("\nside by side, us per call" + (" (last column: gdn / vllm_sigmoid)" if {"gdn", "vllm_sigmoid"} <= set(peers) else ""))
        print(f"{'model':<15} {'state':<5} {'T':>2} {'N':>4} " + " ".join(f"{p:>15}" for p in peers))
        for key in keys:
            cells = [us.get((p, *key)) for p in peers]
            line = f"{key[0]:<15} {key[1]:<5} {key[2]:>2} {key[3]:>4} " + " ".join(
                f"{c:15.2f}" if c is not None else f"{'-':>15}" for c in cells)
            g, v = us.get(("gdn", *key)), us.get(("vllm_sigmoid", *key))
            if g and v:
                line += f"  {g / v:5.2f}x"
            print(line)
    firsts = {}
    for r in cases:
        if "first_call_s" in r:
            firsts.setdefault(r["peer"], []).append(r["first_call_s"])
    for p, f in firsts.items():
        print(f"{p}: first calls (compile included) {sum(f):.1f} s in all, longest {max(f):.2f} s")


def main():
    a = parse_args()
    if a.list:
        for c in cases_of(a):
            print(*c)
        print(f"{len(cases_of(a))} cases x peers {','.join(a.peers)}")
        return 0
    if a.worker:
        worker_main(a)
        return 0
    t_start = time.time()
    import torch
    if not torch.cuda.is_available() or triton is None:
        print("peers: needs a CUDA device, torch and triton", file=sys.stderr)
        return 2
    device = torch.cuda.get_device_name(0)
    env = f"torch {torch.__version__}, triton {triton.__version__}"
    copies = measure_copy(torch, a.replays)
    torch.cuda.empty_cache()
    copy_gbps = max(g for _, g in copies)
    print(f"device: {device}; {env}")
    for what, g in copies:
        print(f"  {what}: {g:.0f} GB/s")
    print(f"copy ceiling (best SM copy): {copy_gbps:.0f} GB/s (read + write)")
    records = [{"kind": "copy", "peer": what, "gbps": g} for what, g in copies]
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.peers:
            print(f"== {name}", flush=True)
            if a.no_isolate:
                if not run_peer(name, a, lambda r: (records.append(r), show(r))):
                    print(f"peers: {name} left a sticky CUDA error; later peers may fail too", flush=True)
            else:
                records += spawn(name, a, tmp)
    if a.ours_json:
        try:
            records += load_ours(a.ours_json)
        except Exception as e:  # noqa: BLE001
            records.append({"kind": "error", "peer": "gdn(bench)", "error": f"--ours-json {a.ours_json}: {e}"})
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    for r in records:
        r.update(date=date, device=device, env=env, copy_gbps=copy_gbps)
        if r["kind"] == "case" and "gbps" in r and r["peer"] != "gdn(bench)":
            r["pct_copy"] = 100.0 * r["gbps"] / copy_gbps
    report(records, a)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(records, indent=1) + "\n")
    print(f"wrote {a.out} ({len(records)} records) in {time.time() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
