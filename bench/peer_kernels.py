"""The peers that bench/peers.py times (its docstring says what each is): how each is loaded from
.peers/ (scripts/fetch_peers.sh) or from this source tree, and called on the harness's data `d`
(make_data in peers.py). Tensors go to the device of d's tensors."""
import inspect
import re
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent

try:  # triton is imported lazily everywhere else; --help and --list work without it
    import triton
    import triton.language as tl
    _jit = triton.jit
except Exception:  # noqa: BLE001
    triton, tl = None, SimpleNamespace(constexpr=object)

    def _jit(fn):
        return fn


@_jit
def _gates_kernel(a, b, A_log, dt_bias, g, beta, n, HV: tl.constexpr, BLOCK: tl.constexpr):
    # g = -exp(A_log) * softplus(a + dt_bias) (float32);  beta = sigmoid(b) (dtype of beta)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    h = offs % HV
    x = tl.load(a + offs, mask=mask, other=0).to(tl.float32) + tl.load(dt_bias + h, mask=mask, other=0).to(tl.float32)
    sp = tl.where(x <= 20.0, tl.log(1.0 + tl.exp(x)), x)
    tl.store(g + offs, -tl.exp(tl.load(A_log + h, mask=mask, other=0).to(tl.float32)) * sp, mask=mask)
    bb = tl.load(b + offs, mask=mask, other=0).to(tl.float32)
    tl.store(beta + offs, tl.sigmoid(bb).to(beta.dtype.element_ty), mask=mask)



def make_log(torch, d):
    """A deferred-commit log [slots, T, HV, K + V + 2] float32 of plausible entries, as the previous
    step wrote them: k^ of unit norm, v, g = -softplus(.) in log space, beta in (0, 1)."""
    slots, E = d.pool.shape[0], d.K + d.V + 2
    log = torch.empty(slots, d.T, d.HV, E, device=d.q.device, dtype=torch.float32)
    k = torch.randn(slots, d.T, d.HV, d.K, device=d.q.device)
    log[..., :d.K] = k / k.norm(dim=-1, keepdim=True)
    log[..., d.K:d.K + d.V] = torch.randn(slots, d.T, d.HV, d.V, device=d.q.device)
    log[..., d.K + d.V] = -torch.nn.functional.softplus(torch.randn(slots, d.T, d.HV, device=d.q.device))
    log[..., d.K + d.V + 1] = torch.rand(slots, d.T, d.HV, device=d.q.device)
    return log


def _import_from(path, module):
    import importlib
    path = str(Path(path).resolve())
    if not Path(path).is_dir():
        raise ImportError(f"{path} is missing: run scripts/fetch_peers.sh and carry .peers")
    sys.path.insert(0, path)
    mod = importlib.import_module(module)
    if not str(Path(mod.__file__).resolve()).startswith(path):
        raise ImportError(f"{module} was imported from {mod.__file__}, not from {path}")
    return mod


def _in_tree(path):
    """A path relative to this source tree (else its file name): results name no machine's folders."""
    p = Path(path).resolve()
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else p.name


def _source(path):
    f = Path(path) / "SOURCE"
    return f.read_text().splitlines()[0] if f.is_file() else "?"


def load_peer(name, peers_dir):
    """Returns SimpleNamespace(layout, per_token, launches, semantics, source, prepare(d) -> call(c))."""
    import torch
    if name == "vllm_sigmoid":
        base = Path(peers_dir) / "vllm_fla"
        fn = _import_from(base, "vllm.model_executor.layers.fla.ops.fused_sigmoid_gating").fused_sigmoid_gating_delta_rule_update

        def prepare(d):
            q, k, v = (x.view(1, d.rows, *x.shape[1:]) for x in (d.q, d.k, d.v))

            def call(c):
                o, _ = fn(A_log=d.A_log, a=d.a, b=d.b, dt_bias=d.dt_bias, q=q, k=k, v=v, beta=1.0, threshold=20.0,
                          scale=d.scale, initial_state=d.pool, inplace_final_state=True, cu_seqlens=d.qsl,
                          ssm_state_indices=d.idx[c], num_accepted_tokens=d.acc, use_qk_l2norm_in_kernel=True)
                return o
            return call
        return SimpleNamespace(layout="vk", per_token=True, launches=1, prepare=prepare, source=_source(base),
                               semantics="vLLM production kernel; per-token verify states; same op as gdn recurrent")
    if name == "vllm_recurrent":
        base = Path(peers_dir) / "vllm_fla"
        fn = _import_from(base, "vllm.model_executor.layers.fla.ops.fused_recurrent").fused_recurrent_gated_delta_rule

        def prepare(d):
            q, k, v = (x.view(1, d.rows, *x.shape[1:]) for x in (d.q, d.k, d.v))
            g = torch.empty(1, d.rows, d.HV, device=d.q.device, dtype=torch.float32)
            beta = torch.empty(1, d.rows, d.HV, device=d.q.device, dtype=torch.float32)  # vLLM keeps b's dtype
            n = d.rows * d.HV

            def call(c):
                _gates_kernel[(triton.cdiv(n, 1024),)](d.a, d.b, d.A_log, d.dt_bias, g, beta, n, HV=d.HV, BLOCK=1024)
                o, _ = fn(q=q, k=k, v=v, g=g, beta=beta, scale=d.scale, initial_state=d.pool, inplace_final_state=True,
                          cu_seqlens=d.qsl, ssm_state_indices=d.idx[c], num_accepted_tokens=d.acc,
                          use_qk_l2norm_in_kernel=True)
                return o
            return call
        return SimpleNamespace(layout="kv", per_token=True, launches=2, prepare=prepare, source=_source(base),
                               semantics="vLLM older kernel, state [K,V]; gates (fp32) by a separate kernel (2 launches)")
    if name == "fla_recurrent":
        base = Path(peers_dir) / "fla"
        mod = _import_from(base, "fla.ops.gated_delta_rule.fused_recurrent")
        kern = mod.fused_recurrent_gated_delta_rule_fwd_kernel
        # Launch shape as FLA's own wrapper chooses it (read from its source; these are the fallbacks).
        src = inspect.getsource(mod.fused_recurrent_gated_delta_rule_fwd)
        m_bv, m_w = re.search(r"BV = min\((\d+)", src), re.search(r"num_warps=(\d+)", src)
        bv_cap, warps = int(m_bv.group(1)) if m_bv else 8, int(m_w.group(1)) if m_w else 1
        jf = kern
        while not hasattr(jf, "arg_names") and hasattr(jf, "fn"):
            jf = jf.fn
        needed = {"q", "k", "v", "g", "beta", "A_log", "dt_bias", "o", "h0", "ht", "STATE_V_FIRST", "APPLY_BETA_SIGMOID"}
        missing = needed - set(getattr(jf, "arg_names", needed))
        if missing:
            raise ImportError(f"FLA's fused_recurrent kernel has no argument(s) {sorted(missing)}: version changed")

        def prepare(d):
            N, T = d.N, d.T
            q, k = d.q.view(N, T, d.H, d.K), d.k.view(N, T, d.H, d.K)
            v, a, b = d.v.view(N, T, d.HV, d.V), d.a.view(N, T, d.HV), d.b.view(N, T, d.HV)
            o = torch.empty_like(v)
            BK, BV = triton.next_power_of_2(d.K), min(bv_cap, triton.next_power_of_2(d.V))
            grid = (triton.cdiv(d.V, BV) * N * d.HV,)

            def call(c):
                h = d.pool[c * N:(c + 1) * N]  # the state of sequence i is read from and stored to slot c*N+i
                kern[grid](q=q, k=k, v=v, g=a, gk=None, gv=None, beta=b, A_log=d.A_log, dt_bias=d.dt_bias, o=o,
                           h0=h, ht=h, cu_seqlens=None, scale=d.scale, T=T, H=d.H, HV=d.HV, K=d.K, V=d.V, BK=BK,
                           BV=BV, IS_BETA_HEADWISE=True, USE_QK_L2NORM_IN_KERNEL=True, APPLY_BETA_SIGMOID=True,
                           ALLOW_NEG_EIGVAL=False, STATE_V_FIRST=True, num_warps=warps, num_stages=3)
                return o
            return call
        return SimpleNamespace(layout="vk", per_token=False, launches=1, prepare=prepare, source=_source(base),
                               semantics="FLA kernel: dense state per sequence, final state only (T>1 = deferred commit)")
    if name == "gdn_deferred":
        sys.path.insert(0, str(ROOT / "python"))
        import gdn_kernels

        def prepare(d):
            log_in = make_log(torch, d)
            log_out = torch.empty_like(log_in)
            nacc = torch.full((d.N,), d.T, device=d.q.device, dtype=torch.int32)
            o = torch.empty_like(d.v)
            d.bytes += 2 * d.N * d.T * d.HV * (d.K + d.V + 2) * 4  # T log entries replayed, T written

            def call(c):
                return gdn_kernels.gated_delta_rule_recurrent(
                    d.q, d.k, d.v, d.a, d.b, A_log=d.A_log, dt_bias=d.dt_bias, ssm_state=d.pool, query_start_loc=d.qsl,
                    state_indices=d.idx[c], num_accepted_tokens=nacc, out=o, verify_log=log_in,
                    verify_log_out=log_out, log_tokens=True)
            d.log_in, d.log_out = log_in, log_out
            return call
        return SimpleNamespace(layout="vk", per_token=False, deferred=True, launches=1, prepare=prepare,
                               source=f"gdn_kernels ({_in_tree(gdn_kernels.library_path())})",
                               semantics="ours, deferred commit: T logged rows replayed, one state read and written")
    if name == "gdn":
        sys.path.insert(0, str(ROOT / "python"))
        import gdn_kernels

        def prepare(d):
            o = torch.empty_like(d.v)

            def call(c):
                return gdn_kernels.gated_delta_rule_recurrent(
                    d.q, d.k, d.v, d.a, d.b, A_log=d.A_log, dt_bias=d.dt_bias, ssm_state=d.pool, query_start_loc=d.qsl,
                    state_indices=d.idx[c], num_accepted_tokens=d.acc, out=o)
            return call
        return SimpleNamespace(layout="vk", per_token=True, launches=1, prepare=prepare,
                               source=f"gdn_kernels ({_in_tree(gdn_kernels.library_path())})",
                               semantics="ours: gdn_kernels.gated_delta_rule_recurrent")
    raise ValueError(name)
