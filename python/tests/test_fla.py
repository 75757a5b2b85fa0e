"""gdn_kernels.fla: FLA's chunk_gated_delta_rule and fused_recurrent_gated_delta_rule against a
float64 reference written here from the math (FLA's conventions: state [K, V] per value head, g
the log-space decay, beta given or as a logit, l2 norm of q and k with eps 1e-6 when asked,
q scaled by K ** -0.5 by default).

Tolerance: FLA's own error ratio, ||x - ref|| / ||ref|| (RMS), at most 0.002 for the recurrent
function and 0.005 for the chunk function (the thresholds of FLA's tests), for outputs and final
states; float32 and bfloat16 inputs. Varlen batches (cu_seqlens) with empty and one-token
sequences, equal-length batches (B > 1), head ratios 1, 2 and 3, both state layouts, the gate
forms (log-space g or g with A_log / dt_bias inside; beta or its logit), with and without l2 norm.
On CUDA (where the extension has it) every form is checked the same way: the gates computed in
the kernel through both functions, the precomputed ones (float32 g, beta in float32 or bfloat16,
with and without l2 norm) through fused_recurrent_gated_delta_rule in decode steps (T = 1, B > 1)
and varlen batches, which must run gated_delta_rule_recurrent (the same bytes as that op's call).
"""

import math

import pytest
import torch

from gdn_kernels import fla, ops
from conftest import requires_cuda


def err_ratio(x, ref):
    x, ref = x.double().flatten(), ref.double().flatten()
    return ((x - ref).square().mean().sqrt() / ref.square().mean().sqrt().clamp_min(1e-30)).item()


def reference(q, k, v, g, beta, scale, h0, cu, l2norm, state_v_first):
    """float64 loop over tokens; q, k [T, H, K], v [T, HV, V], g, beta [T, HV] (beta already in [0, 1]
    or [0, 2]); h0 [N, HV, K, V] (or [N, HV, V, K]) or None. Returns o [T, HV, V] and the final states."""
    T, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    r = HV // H
    N = cu.numel() - 1
    o = torch.zeros(T, HV, V, dtype=torch.float64)
    hs = torch.zeros(N, HV, K, V, dtype=torch.float64)
    if h0 is not None:
        hs = (h0.transpose(-1, -2) if state_v_first else h0).double().clone()
    for n in range(N):
        for t in range(int(cu[n]), int(cu[n + 1])):
            for hv in range(HV):
                qt, kt = q[t, hv // r].double(), k[t, hv // r].double()
                if l2norm:
                    qt = qt / math.sqrt(float(qt.square().sum()) + 1e-6)
                    kt = kt / math.sqrt(float(kt.square().sum()) + 1e-6)
                qt = qt * scale
                S = hs[n, hv] * math.exp(float(g[t, hv]))           # [K, V]
                S = S + torch.outer(kt, float(beta[t, hv]) * (v[t, hv].double() - kt @ S))
                hs[n, hv] = S
                o[t, hv] = qt @ S
    if state_v_first:
        hs = hs.transpose(-1, -2)
    return o, hs


def make(B, T_list, H, HV, K, V, dtype, seed, varlen):
    gen = torch.Generator().manual_seed(seed)
    if varlen:
        total = sum(T_list)
        shape_bt = (1, total)
        cu = torch.tensor([0] + list(torch.tensor(T_list).cumsum(0)), dtype=torch.int64)
    else:
        shape_bt = (B, T_list[0])
        cu = None
    q = torch.randn(*shape_bt, H, K, generator=gen).to(dtype)
    k = torch.randn(*shape_bt, H, K, generator=gen).to(dtype)
    v = torch.randn(*shape_bt, HV, V, generator=gen).to(dtype)
    a = torch.randn(*shape_bt, HV, generator=gen)  # raw decay input
    blog = torch.randn(*shape_bt, HV, generator=gen)  # beta logit
    A_log = torch.empty(HV).uniform_(-1.0, 1.5, generator=gen)
    dt_bias = torch.randn(HV, generator=gen) * 0.5
    return q, k, v, a, blog, A_log, dt_bias, cu


def flat(x):
    return x.reshape(-1, *x.shape[2:])


CASES = [  # (B, lengths, H, HV, varlen)
    (1, [37, 0, 1, 70, 5], 2, 4, True),
    (3, [20], 1, 3, False),
    (1, [9, 64, 65], 2, 2, True),
]


@pytest.mark.parametrize("state_v_first", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("fn", ["chunk", "recurrent"])
def test_fla_api_against_float64(fn, case, dtype, state_v_first):
    B, lens, H, HV, varlen = CASES[case]
    K, V = 16, 8
    q, k, v, a, blog, A_log, dt_bias, cu = make(B, lens, H, HV, K, V, dtype, 100 + case, varlen)
    N = len(lens) if varlen else B
    gen = torch.Generator().manual_seed(7)
    h0_shape = (N, HV, V, K) if state_v_first else (N, HV, K, V)
    h0 = torch.randn(*h0_shape, generator=gen) * 0.3
    scale = K ** -0.5
    cu_ref = cu if varlen else torch.arange(0, (B + 1) * lens[0], lens[0])
    call = fla.chunk_gated_delta_rule if fn == "chunk" else fla.fused_recurrent_gated_delta_rule
    tol = 0.005 if fn == "chunk" else 0.002
    g_log = -A_log.exp() * torch.nn.functional.softplus(a + dt_bias)  # float32
    for form in ["given", "in_kernel"]:
        for l2norm in [True, False]:
            if form == "given":
                beta = torch.sigmoid(blog)
                kw = dict(g=g_log, beta=beta)
            else:
                kw = dict(g=a, beta=blog, use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias,
                          use_beta_sigmoid_in_kernel=True)
            # without the kernel's l2 norm: inputs of norm 2 (q) and 0.7 (k), used as given
            qq, kk = (q, k) if l2norm else (2.0 * torch.nn.functional.normalize(q.float(), dim=-1).to(dtype),
                                            0.7 * torch.nn.functional.normalize(k.float(), dim=-1).to(dtype))
            o, ht = call(qq, kk, v, initial_state=h0, output_final_state=True, cu_seqlens=cu,
                         use_qk_l2norm_in_kernel=l2norm, state_v_first=state_v_first, **kw)
            assert o.shape == v.shape and o.dtype == v.dtype
            assert ht.shape == h0.shape and ht.dtype == torch.float32
            o_ref, h_ref = reference(flat(qq), flat(kk), flat(v), flat(g_log), flat(torch.sigmoid(blog)), scale, h0,
                                     cu_ref, l2norm, state_v_first)
            what = f"{fn} case {case} {dtype} {form} l2norm={l2norm} v_first={state_v_first}"
            assert err_ratio(flat(o), o_ref) <= tol, f"{what}: o error ratio {err_ratio(flat(o), o_ref)}"
            assert err_ratio(ht, h_ref) <= tol, f"{what}: final state error ratio {err_ratio(ht, h_ref)}"


def test_fla_defaults_and_flags():
    """No initial state and no final state; allow_neg_eigval (beta = 2 sigmoid); the final state of
    one call continues in the next (a prompt in two pieces)."""
    q, k, v, a, blog, A_log, dt_bias, cu = make(1, [30], 2, 4, 16, 8, torch.float32, 5, False)
    g = -A_log.exp() * torch.nn.functional.softplus(a + dt_bias)
    o, ht = fla.chunk_gated_delta_rule(q, k, v, g, blog, use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True,
                                       use_qk_l2norm_in_kernel=True)
    assert ht is None
    cu_ref = torch.tensor([0, 30])
    o_ref, _ = reference(flat(q), flat(k), flat(v), flat(g), flat(2 * torch.sigmoid(blog)), 16 ** -0.5, None, cu_ref,
                         True, False)
    assert err_ratio(flat(o), o_ref) <= 0.005
    # two pieces: 18 tokens, then 12 from the first piece's final state
    kw = dict(use_beta_sigmoid_in_kernel=True, use_qk_l2norm_in_kernel=True)
    beta = blog
    o1, h1 = fla.fused_recurrent_gated_delta_rule(q[:, :18], k[:, :18], v[:, :18], g[:, :18], beta=beta[:, :18],
                                                  output_final_state=True, **kw)
    o2, h2 = fla.fused_recurrent_gated_delta_rule(q[:, 18:], k[:, 18:], v[:, 18:], g[:, 18:], beta=beta[:, 18:],
                                                  initial_state=h1, output_final_state=True, **kw)
    o_all, h_all = fla.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, output_final_state=True, **kw)
    assert err_ratio(torch.cat([o1, o2], dim=1), o_all) <= 1e-6
    assert err_ratio(h2, h_all) <= 1e-6


@pytest.mark.parametrize("fn", ["chunk", "recurrent"])
def test_fla_any_strides_and_empty(fn):
    """Inputs in any memory layout FLA takes (it makes them contiguous): head-major q, k, v, g and
    beta, q and beta expanded (stride 0), a transposed initial state; the bytes of the same call on
    contiguous copies. And T = 0 without cu_seqlens: empty outputs, the initial state unchanged."""
    call = fla.chunk_gated_delta_rule if fn == "chunk" else fla.fused_recurrent_gated_delta_rule
    B, T, H, HV, K, V = 2, 9, 2, 4, 16, 8
    torch.manual_seed(7)
    major = lambda *shape: torch.randn(shape[0], shape[2], shape[1], *shape[3:]).transpose(1, 2)  # noqa: E731
    args = dict(q=major(B, T, H, K), k=major(B, T, H, K), v=major(B, T, HV, V),
                g=-torch.rand(B, HV, T).transpose(1, 2), beta=torch.rand(B, T, 1).expand(B, T, HV),
                initial_state=torch.randn(B, HV, V, K).transpose(-1, -2), output_final_state=True,
                use_qk_l2norm_in_kernel=True)
    args["q"] = torch.randn(B, 1, H, K).expand(B, T, H, K)
    dense = {n: (t.contiguous() if torch.is_tensor(t) else t) for n, t in args.items()}
    assert not args["q"].is_contiguous() and not args["initial_state"].is_contiguous()
    o, h = call(**args)
    o_ref, h_ref = call(**dense)
    assert torch.equal(o, o_ref) and torch.equal(h, h_ref)
    h0 = torch.randn(B, HV, K, V)
    o, h = call(torch.zeros(B, 0, H, K), torch.zeros(B, 0, H, K), torch.zeros(B, 0, HV, V), g=torch.zeros(B, 0, HV),
                beta=torch.zeros(B, 0, HV), initial_state=h0, output_final_state=True)
    assert o.shape == (B, 0, HV, V) and torch.equal(h, h0)


def test_fla_errors():
    q, k, v, a, blog, A_log, dt_bias, cu = make(2, [8], 2, 4, 16, 8, torch.float32, 6, False)
    with pytest.raises(ValueError, match="batch size is expected to be 1"):
        fla.chunk_gated_delta_rule(q, k, v, a, blog, cu_seqlens=torch.tensor([0, 8, 16]))
    with pytest.raises(ValueError, match="`A_log` must be provided"):
        fla.fused_recurrent_gated_delta_rule(q, k, v, a, beta=blog, use_gate_in_kernel=True)
    with pytest.raises(AssertionError, match="A_log must be provided"):  # FLA's chunk asserts it
        fla.chunk_gated_delta_rule(q, k, v, a, blog, use_gate_in_kernel=True)
    with pytest.raises(ValueError, match="`chunk_size` must be 16, 32, or 64"):
        fla.chunk_gated_delta_rule(q, k, v, a, blog, chunk_size=128)
    with pytest.raises(NotImplementedError, match="per-channel beta"):
        fla.fused_recurrent_gated_delta_rule(q, k, v, a, beta=torch.rand(2, 8, 4, 8))
    with pytest.raises(ValueError, match="allow_neg_eigval"):
        fla.chunk_gated_delta_rule(q, k, v, a, blog, allow_neg_eigval=True)
    with pytest.raises(ValueError, match="initial_state must be"):
        fla.chunk_gated_delta_rule(q, k, v, a, blog, initial_state=torch.zeros(2, 4, 8, 16))
    with pytest.raises(NotImplementedError):
        fla.fused_recurrent_gated_delta_rule(q, k, v, gk=a, beta=blog)
    q1, k1, v1, a1, b1 = (x[:1] for x in (q, k, v, a, blog))
    for cu in [torch.tensor([0.0, 2.7, 8.0]), torch.tensor([[0, 3, 8]]), torch.tensor([], dtype=torch.int64)]:
        with pytest.raises(ValueError, match="cu_seqlens must be a 1-D int32 or int64"):
            fla.chunk_gated_delta_rule(q1, k1, v1, a1, b1, cu_seqlens=cu)
    with pytest.raises(ValueError, match="Cannot pass both"):
        fla.fused_recurrent_gated_delta_rule(q, k, v, a, beta=blog, state_v_first=True, transpose_state_layout=True)


def test_fla_conventions_as_fla():
    """FLA's conventions beyond the math: fused recurrent without g (no decay) or beta (ones, read as
    logits with use_beta_sigmoid_in_kernel); q, k, v of different dtypes computed in float32; the
    chunk function's output in q's dtype, the recurrent one's in v's; any scale (o is linear in it);
    chunk_size 16 / 32 / 64 accepted."""
    q, k, v, a, blog, A_log, dt_bias, cu = make(1, [21], 2, 4, 16, 8, torch.float32, 8, False)
    cu_ref = torch.tensor([0, 21])
    zeros, ones = torch.zeros(1, 21, 4), torch.ones(1, 21, 4)
    o, _ = fla.fused_recurrent_gated_delta_rule(q, k, v, use_qk_l2norm_in_kernel=True)
    o_ref, _ = reference(flat(q), flat(k), flat(v), flat(zeros), flat(ones), 16 ** -0.5, None, cu_ref, True, False)
    assert err_ratio(flat(o), o_ref) <= 0.002
    o, _ = fla.fused_recurrent_gated_delta_rule(q, k, v, a.sigmoid().log(), use_beta_sigmoid_in_kernel=True,
                                                use_qk_l2norm_in_kernel=True)
    o_ref, _ = reference(flat(q), flat(k), flat(v), flat(a.sigmoid().log()), flat(ones.sigmoid()), 16 ** -0.5, None,
                         cu_ref, True, False)
    assert err_ratio(flat(o), o_ref) <= 0.002
    g, beta = -torch.rand(1, 21, 4), torch.rand(1, 21, 4)
    qb, kb = q.bfloat16(), k.bfloat16()
    o_ref, _ = reference(flat(qb), flat(kb), flat(v), flat(g), flat(beta), 16 ** -0.5, None, cu_ref, True, False)
    for call in (fla.chunk_gated_delta_rule, fla.fused_recurrent_gated_delta_rule):
        o, _ = call(qb, kb, v, g, beta=beta, use_qk_l2norm_in_kernel=True)
        assert o.dtype == (torch.bfloat16 if call is fla.chunk_gated_delta_rule else torch.float32)
        if o.dtype == torch.float32:  # v is not rounded to bfloat16 first
            assert err_ratio(flat(o), o_ref) <= 1e-5
    o, _ = fla.chunk_gated_delta_rule(q, k, v.bfloat16(), g, beta, chunk_size=32)
    assert o.dtype == torch.float32
    for call in (fla.chunk_gated_delta_rule, fla.fused_recurrent_gated_delta_rule):
        pos, _ = call(q, k, v, g, beta=beta, scale=0.125)
        neg, _ = call(q, k, v, g, beta=beta, scale=-0.125)
        zero, _ = call(q, k, v, g, beta=beta, scale=0.0)
        assert torch.equal(neg, -pos) and torch.equal(zero, torch.zeros_like(pos))


@pytest.mark.parametrize("fn", ["chunk", "recurrent"])
def test_fla_transpose_state_layout_alias(fn):
    """FLA's deprecated keyword transpose_state_layout is state_v_first, with FLA's warning."""
    call = fla.chunk_gated_delta_rule if fn == "chunk" else fla.fused_recurrent_gated_delta_rule
    q, k, v, a, blog, A_log, dt_bias, cu = make(1, [11], 2, 4, 16, 8, torch.float32, 9, False)
    h0 = torch.randn(1, 4, 8, 16)
    kw = dict(g=-torch.rand(1, 11, 4), beta=torch.sigmoid(blog), initial_state=h0, output_final_state=True,
              use_qk_l2norm_in_kernel=True)
    with pytest.warns(DeprecationWarning, match="transpose_state_layout"):
        o, h = call(q, k, v, transpose_state_layout=True, **kw)
    o_ref, h_ref = call(q, k, v, state_v_first=True, **kw)
    assert torch.equal(o, o_ref) and torch.equal(h, h_ref)


@requires_cuda
def test_fla_api_on_cuda():
    q, k, v, a, blog, A_log, dt_bias, cu = make(1, [33, 1, 64], 2, 4, 128, 128, torch.bfloat16, 9, True)
    a, blog = a.to(torch.bfloat16), blog.to(torch.bfloat16)  # raw gate inputs in the model's dtype
    h0 = torch.randn(3, 4, 128, 128) * 0.1
    dev = dict(device="cuda")
    args = [x.to(**dev) for x in (q, k, v, a, blog)]
    kw = dict(use_gate_in_kernel=True, A_log=A_log.to(**dev), dt_bias=dt_bias.to(**dev),
              use_beta_sigmoid_in_kernel=True, use_qk_l2norm_in_kernel=True, initial_state=h0.to(**dev),
              output_final_state=True, cu_seqlens=cu.to(**dev))
    g_log = -A_log.exp() * torch.nn.functional.softplus(a.float() + dt_bias)
    o_ref, h_ref = reference(flat(q), flat(k), flat(v), flat(g_log), flat(torch.sigmoid(blog.float())), 128 ** -0.5,
                             h0, cu, True, False)
    for call, tol in [(fla.chunk_gated_delta_rule, 0.005), (fla.fused_recurrent_gated_delta_rule, 0.002)]:
        qc, kc, vc, ac, bc = args
        if call is fla.chunk_gated_delta_rule:
            o, ht = call(qc, kc, vc, ac, bc, **kw)
        else:
            o, ht = call(qc, kc, vc, ac, beta=bc, **kw)
        assert err_ratio(flat(o).cpu(), o_ref) <= tol
        assert err_ratio(ht.cpu(), h_ref) <= tol
    # The precomputed log-space decay and beta (float32): the chunk kernel's gate-given form.
    o, ht = fla.chunk_gated_delta_rule(*args[:3], g_log.to(**dev), torch.sigmoid(blog.float()).to(**dev),
                                       use_qk_l2norm_in_kernel=True, initial_state=h0.to(**dev),
                                       output_final_state=True, cu_seqlens=cu.to(**dev))
    assert err_ratio(flat(o).cpu(), o_ref) <= 0.005
    assert err_ratio(ht.cpu(), h_ref) <= 0.005
    # fused_recurrent with the same precomputed gates: the recurrent op (a gate-form instance of its
    # kernels), within the recurrent threshold, the same bytes as that op's own call
    o_r, ht_r = fla.fused_recurrent_gated_delta_rule(*args[:3], g_log.to(**dev),
                                                     beta=torch.sigmoid(blog.float()).to(**dev),
                                                     use_qk_l2norm_in_kernel=True, initial_state=h0.to(**dev),
                                                     output_final_state=True, cu_seqlens=cu.to(**dev))
    assert err_ratio(flat(o_r).cpu(), o_ref) <= 0.002
    assert err_ratio(ht_r.cpu(), h_ref) <= 0.002
    state = h0.to(**dev).clone()
    o_op = ops.gated_delta_rule_recurrent(flat(args[0]), flat(args[1]), flat(args[2]), flat(g_log).to(**dev),
                                          flat(torch.sigmoid(blog.float())).to(**dev), A_log=None, dt_bias=None,
                                          ssm_state=state, query_start_loc=cu.to(**dev),
                                          state_indices=torch.arange(3, **dev), state_layout="kv",
                                          beta_sigmoid=False)
    assert torch.equal(flat(o_r), o_op) and torch.equal(ht_r, state)


@requires_cuda
@pytest.mark.parametrize("dtype,K", [(torch.float32, 128), (torch.bfloat16, 64)])
@pytest.mark.parametrize("l2norm", [True, False])
def test_fla_chunk_given_gates_beyond_the_chunk_kernel_on_cuda(dtype, K, l2norm):
    """chunk_gated_delta_rule with precomputed gates where the chunk kernel cannot run (float32
    activations, or K = 64): the chunked op takes the recurrence kernels, within FLA's chunk
    threshold of the float64 reference, varlen with initial states."""
    q, k, v, a, blog, A_log, dt_bias, cu = make(1, [40, 1, 70], 2, 4, K, 32, dtype, 13, True)
    if not l2norm:  # FLA's callers normalise beforehand then
        q, k = (torch.nn.functional.normalize(x.float(), dim=-1).to(dtype) for x in (q, k))
    g_log = -A_log.exp() * torch.nn.functional.softplus(a.float() + dt_bias)
    beta = torch.sigmoid(blog.float())
    h0 = torch.randn(3, 4, K, 32) * 0.1
    dev = dict(device="cuda")
    o, ht = fla.chunk_gated_delta_rule(q.to(**dev), k.to(**dev), v.to(**dev), g_log.to(**dev), beta.to(**dev),
                                       use_qk_l2norm_in_kernel=l2norm, initial_state=h0.to(**dev),
                                       output_final_state=True, cu_seqlens=cu.to(**dev))
    o_ref, h_ref = reference(flat(q), flat(k), flat(v), flat(g_log), flat(beta), K ** -0.5, h0, cu, l2norm, False)
    assert err_ratio(flat(o).cpu(), o_ref) <= 0.005
    assert err_ratio(ht.cpu(), h_ref) <= 0.005


@requires_cuda
@pytest.mark.parametrize("state_v_first", [False, True])
@pytest.mark.parametrize("beta_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("l2norm", [True, False])
def test_fla_recurrent_given_gates_decode_on_cuda(state_v_first, beta_dtype, l2norm):
    """transformers' decode step: B sequences of one token, bf16 q / k / v, the log-space decay in
    float32 and beta in float32 or bf16, the float32 state; four steps in a row, each from the last
    one's final state, against the float64 reference (FLA's recurrent threshold 0.002)."""
    B, H, HV, K, V = 5, 2, 6, 128, 128
    gen = torch.Generator().manual_seed(21)
    h_shape = (B, HV, V, K) if state_v_first else (B, HV, K, V)
    h = torch.randn(*h_shape, generator=gen) * 0.1
    h_ref = h.clone()
    dev = dict(device="cuda")
    for step in range(4):
        q, k, v, a, blog, A_log, dt_bias, _ = make(B, [1], H, HV, K, V, torch.bfloat16, 300 + step, False)
        if not l2norm:  # inputs of norm 1.5 (q) and 0.8 (k), used as given
            q = (1.5 * torch.nn.functional.normalize(q.float(), dim=-1)).to(torch.bfloat16)
            k = (0.8 * torch.nn.functional.normalize(k.float(), dim=-1)).to(torch.bfloat16)
        g = -A_log.exp() * torch.nn.functional.softplus(a + dt_bias)  # float32
        beta = torch.sigmoid(blog).to(beta_dtype)
        o, h_next = fla.fused_recurrent_gated_delta_rule(q.to(**dev), k.to(**dev), v.to(**dev), g.to(**dev),
                                                         beta=beta.to(**dev), initial_state=h.to(**dev),
                                                         output_final_state=True, use_qk_l2norm_in_kernel=l2norm,
                                                         state_v_first=state_v_first)
        o_ref, h_ref = reference(flat(q), flat(k), flat(v), flat(g), flat(beta.float()), K ** -0.5, h_ref,
                                 torch.arange(B + 1), l2norm, state_v_first)
        what = f"step {step} beta {beta_dtype} l2norm={l2norm} v_first={state_v_first}"
        assert err_ratio(flat(o).cpu(), o_ref) <= 0.002, f"{what}: o error ratio {err_ratio(flat(o).cpu(), o_ref)}"
        assert err_ratio(h_next.cpu(), h_ref) <= 0.002, f"{what}: state error ratio {err_ratio(h_next.cpu(), h_ref)}"
        h = h_next.cpu()
