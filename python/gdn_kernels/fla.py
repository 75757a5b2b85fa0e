"""FLA's gated delta rule API on gdn-kernels.

``chunk_gated_delta_rule`` and ``fused_recurrent_gated_delta_rule`` take the arguments and follow
the conventions of flash-linear-attention's functions of the same names (``fla.ops.gated_delta_rule``),
so that code written against FLA (Hugging Face transformers' Qwen3-Next / Qwen3.5 layers, SGLang)
can call gdn-kernels instead:

* ``q``, ``k`` ``[B, T, H, K]``, ``v`` ``[B, T, HV, V]`` with ``HV`` a multiple of ``H`` (grouped
  value heads); with ``cu_seqlens`` (``[N + 1]``, varlen) ``B`` must be 1;
* ``g`` ``[B, T, HV]``: the log-space decay, or with ``use_gate_in_kernel=True`` the raw input of
  ``-exp(A_log) * softplus(g + dt_bias)``; ``beta`` ``[B, T, HV]``: beta itself, or with
  ``use_beta_sigmoid_in_kernel=True`` its logit (``allow_neg_eigval``: ``2 * sigmoid``). In
  ``fused_recurrent_gated_delta_rule`` either may be None, as in FLA: no decay, beta 1;
* ``initial_state`` ``[N, HV, K, V]`` (``state_v_first=True``, or FLA's deprecated
  ``transpose_state_layout=True``: ``[N, HV, V, K]``) or None;
* ``scale`` any number (``o`` is linear in it; the ops themselves take a positive scale);
* q, k, v of different dtypes are computed in float32, as FLA's kernels load them;
* ``chunk_size`` must be 16, 32 or 64, as FLA checks (the chunk kernel keeps its own size);
  other keywords are ignored, as FLA ignores them;
* returns ``(o, final_state)``: ``o`` ``[B, T, HV, V]`` in the dtype of ``q`` (chunk) or of ``v``
  (fused recurrent), as FLA returns it; ``final_state`` float32 like ``initial_state``'s layout
  when ``output_final_state``, else None.

Not supported (refused): per-channel ``beta`` ``[B, T, HV, V]``, per-key / per-value decays
(``gk``, ``gv``), context parallelism (``cp_context``).

No autograd (inference kernels). ``fused_recurrent_gated_delta_rule`` runs
``gated_delta_rule_recurrent``, which takes every form on both backends (on CUDA the log-space
``g``, ``beta`` given and no l2 norm run in the gate-form instances of the lean, pipelined and
register kernels, ``g`` and ``beta`` in float32 or the dtype of ``q``). ``chunk_gated_delta_rule`` runs
``gated_delta_rule_chunked``, which also takes every form on both backends (on CUDA in its chunk
kernel where that fits: K = 128, bf16/fp16 activations, V a multiple of 32; elsewhere in the
recurrence kernels).
"""

import warnings
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import ops

__all__ = ["chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule"]


def _rows(x: Tensor, *shape: int) -> Tensor:
    """x as ``shape`` with every dim but the first dense (what the ops take): a view where the memory
    allows it, else a copy (FLA makes its inputs contiguous, so any strides are accepted)."""
    x = x.reshape(shape)
    want = 1
    for d in range(x.dim() - 1, 0, -1):
        if x.shape[d] != 1 and x.stride(d) != want:
            return x.contiguous()
        want *= x.shape[d]
    return x if x.shape[0] <= 1 or x.stride(0) >= want else x.contiguous()  # rows must not overlap


def _run(chunked, q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
         use_gate_in_kernel, A_log, dt_bias, use_beta_sigmoid_in_kernel, allow_neg_eigval, state_v_first,
         cu_seqlens) -> Tuple[Tensor, Optional[Tensor]]:
    if q.dim() != 4 or k.shape != q.shape or v.dim() != 4 or v.shape[:2] != q.shape[:2]:
        raise ValueError(f"q, k must be [B, T, H, K] and v [B, T, HV, V], got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}")
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if HV % H != 0:
        raise ValueError(f"num_v_heads (HV={HV}) must be a multiple of num_heads (H={H})")
    if chunked and (g is None or beta is None):
        raise ValueError("g and beta are required")
    if use_gate_in_kernel and g is None:
        raise ValueError("`g` (raw pre-activation) must be provided when `use_gate_in_kernel=True`.")
    if g is None:  # FLA's fused recurrent: no decay
        g = torch.zeros(B, T, HV, device=q.device, dtype=torch.float32)
    if beta is None:  # and ones for beta, read as FLA reads them (a logit with use_beta_sigmoid_in_kernel)
        beta = torch.ones(B, T, HV, device=q.device, dtype=torch.float32)
    if beta.dim() == 4:
        raise NotImplementedError("gdn_kernels.fla: per-channel beta [B, T, HV, V] is not supported; pass [B, T, HV]")
    if g.shape != (B, T, HV) or beta.shape != (B, T, HV):
        raise ValueError(f"g and beta must be [B, T, HV] = {(B, T, HV)}, got {tuple(g.shape)}, {tuple(beta.shape)}")
    if allow_neg_eigval and not use_beta_sigmoid_in_kernel:
        raise ValueError("`allow_neg_eigval=True` requires `use_beta_sigmoid_in_kernel=True`.")
    if use_gate_in_kernel and A_log is None:  # FLA: an assert in chunk, a ValueError in fused recurrent
        if chunked:
            raise AssertionError("A_log must be provided when use_gate_in_kernel=True.")
        raise ValueError("`A_log` must be provided when `use_gate_in_kernel=True`.")
    if cu_seqlens is not None:
        if B != 1:
            raise ValueError(f"The batch size is expected to be 1 rather than {B} when using `cu_seqlens`.")
        if cu_seqlens.dim() != 1 or cu_seqlens.shape[0] < 1 or cu_seqlens.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"cu_seqlens must be a 1-D int32 or int64 tensor [N + 1], got {cu_seqlens.dtype} "
                             f"{tuple(cu_seqlens.shape)}")
        qsl = cu_seqlens.to(device=q.device, dtype=torch.int64)
        N = qsl.shape[0] - 1
    else:
        N = B
        qsl = torch.arange(B + 1, device=q.device, dtype=torch.int64) * T
    state_shape = (N, HV, V, K) if state_v_first else (N, HV, K, V)
    if initial_state is not None:
        if tuple(initial_state.shape) != state_shape:
            raise ValueError(f"initial_state must be {list(state_shape)}, got {list(initial_state.shape)}")
        state = initial_state.to(device=q.device, dtype=torch.float32).clone(memory_format=torch.contiguous_format)
    else:
        state = torch.zeros(state_shape, device=q.device, dtype=torch.float32)

    act = q.dtype if q.dtype == k.dtype == v.dtype else torch.float32  # mixed: float32, as FLA loads them

    def gate(x):  # [B, T, HV] -> [B T, HV] in the activation dtype or float32
        x = _rows(x, B * T, HV)
        return x if x.dtype in (act, torch.float32) else x.float()

    a = gate(g)
    if allow_neg_eigval:  # beta = 2 sigmoid(logit): given to the op as beta itself
        b, beta_sigmoid = 2.0 * torch.sigmoid(_rows(beta, B * T, HV).float()), False
    else:
        b, beta_sigmoid = gate(beta), use_beta_sigmoid_in_kernel
    if use_gate_in_kernel:
        if dt_bias is None:
            dt_bias = torch.zeros(HV, device=q.device, dtype=torch.float32)
    else:
        A_log, dt_bias = None, None
    # o is linear in the scale (the state does not depend on q): a scale <= 0 runs at |scale| (or 1)
    # and the output is negated (or zeroed); the ops take a positive one.
    sign = 1.0
    if scale is not None and scale <= 0:
        sign, scale = (-1.0, -scale) if scale < 0 else (0.0, 1.0)
    kw = dict(A_log=A_log, dt_bias=dt_bias, ssm_state=state, query_start_loc=qsl,
              state_indices=torch.arange(N, device=q.device, dtype=torch.int64), scale=scale,
              state_layout="vk" if state_v_first else "kv", qk_l2norm=use_qk_l2norm_in_kernel,
              beta_sigmoid=beta_sigmoid)
    qf, kf = _rows(q.to(act), B * T, H, K), _rows(k.to(act), B * T, H, K)
    vf = _rows(v.to(act), B * T, HV, V)
    fn = ops.gated_delta_rule_chunked if chunked else ops.gated_delta_rule_recurrent
    o = fn(qf, kf, vf, a, b, **kw)
    if sign != 1.0:
        o = o.neg_() if sign < 0 else o.zero_()
    out_dtype = q.dtype if chunked else v.dtype
    return o.reshape(B, T, HV, V).to(out_dtype), (state if output_final_state else None)


def _state_v_first(state_v_first: bool, kwargs: dict) -> bool:
    """FLA's deprecated alias ``transpose_state_layout`` of ``state_v_first``, taken as FLA takes it."""
    if "transpose_state_layout" not in kwargs:
        return state_v_first
    if state_v_first:
        raise ValueError("Cannot pass both `state_v_first` and the deprecated `transpose_state_layout`.")
    warnings.warn("`transpose_state_layout` is deprecated and renamed to `state_v_first`.", DeprecationWarning,
                  stacklevel=3)
    return bool(kwargs.pop("transpose_state_layout"))


def chunk_gated_delta_rule(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    scale: Optional[float] = None,
    initial_state: Optional[Tensor] = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    state_v_first: bool = False,
    cu_seqlens: Optional[Tensor] = None,
    cu_seqlens_cpu: Optional[Tensor] = None,
    chunk_indices: Optional[Tensor] = None,
    cp_context=None,
    **kwargs,
) -> Tuple[Tensor, Optional[Tensor]]:
    """FLA's ``chunk_gated_delta_rule`` (see the module doc), computed by ``gated_delta_rule_chunked``.

    ``cu_seqlens_cpu`` and ``chunk_indices`` are accepted and not needed, ``chunk_size`` checked;
    ``use_gate_in_kernel``, ``A_log`` and ``dt_bias`` may be passed as keywords, as in FLA.
    Context parallelism (``cp_context``) is not supported.
    """
    if cp_context is not None:
        raise NotImplementedError("gdn_kernels.fla: cp_context (context parallelism) is not supported")
    if "head_first" in kwargs:
        raise DeprecationWarning("head_first has been removed. Inputs must be in `[B, T, H, ...]` format.")
    chunk_size = kwargs.pop("chunk_size", 64)
    if chunk_size not in (16, 32, 64):
        raise ValueError(f"`chunk_size` must be 16, 32, or 64 for Gated Delta Rule, got {chunk_size}.")
    del cu_seqlens_cpu, chunk_indices
    state_v_first = _state_v_first(state_v_first, kwargs)
    return _run(True, q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
                kwargs.get("use_gate_in_kernel", False), kwargs.get("A_log"), kwargs.get("dt_bias"),
                use_beta_sigmoid_in_kernel, allow_neg_eigval, state_v_first, cu_seqlens)


def fused_recurrent_gated_delta_rule(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Optional[Tensor] = None,
    gk: Optional[Tensor] = None,
    gv: Optional[Tensor] = None,
    beta: Optional[Tensor] = None,
    scale: Optional[float] = None,
    initial_state: Optional[Tensor] = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    use_gate_in_kernel: bool = False,
    A_log: Optional[Tensor] = None,
    dt_bias: Optional[Tensor] = None,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    state_v_first: bool = False,
    cu_seqlens: Optional[Tensor] = None,
    **kwargs,
) -> Tuple[Tensor, Optional[Tensor]]:
    """FLA's ``fused_recurrent_gated_delta_rule`` (see the module doc), computed by
    ``gated_delta_rule_recurrent``; ``g`` and ``beta`` may be None (no decay, beta 1). Per-key or
    per-value decays (``gk``, ``gv``) are not supported."""
    if gk is not None or gv is not None:
        raise NotImplementedError("gdn_kernels.fla: gk / gv (per-channel decays) are not supported; pass g")
    state_v_first = _state_v_first(state_v_first, kwargs)
    return _run(False, q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
                use_gate_in_kernel, A_log, dt_bias, use_beta_sigmoid_in_kernel, allow_neg_eigval, state_v_first,
                cu_seqlens)
