"""The five operations of gdn-kernels as Python functions over ``torch.ops.gdn``.

Each function calls one op of the C++ library (CPU or CUDA by the tensors' device; on CUDA it
runs on the caller's current stream). Arguments are validated before anything is touched; a bad
argument raises ``RuntimeError`` whose message names it, what was expected and what was given, and
a failed call changes nothing. The functions are traceable by ``torch.compile`` (the ops have fake
implementations) and can be captured in CUDA graphs. There is no autograd: these are inference
kernels. Tensors an op writes in place behave as under torch's own in-place ops: their version
counters advance (autograd refuses a backward through a tensor the op overwrote), and a leaf that
requires grad is refused while grad mode is on.

Common conventions (docs/contract.md):

* Index tensors (``query_start_loc``, ``state_indices``, token remaps, ``num_accepted_tokens``)
  are int32 or int64. ``has_initial_state`` is bool; ``None`` means "true" for every sequence.
* Sequence ``i`` covers tokens ``[query_start_loc[i], query_start_loc[i+1])``. Output rows that no
  sequence covers are left as they were (zeros in a freshly allocated output).
* A slot that is negative, ``>= num_slots`` or equal to ``null_block_id`` marks a padded sequence:
  no state is read or written and its output rows are zero.
* Tensors must be dense except in dim 0, whose stride may be larger (padded pools, row views);
  the conv bias must be contiguous.
* Activations and conv weights/state: float32, bfloat16 or float16. ``A_log`` and ``dt_bias``: any
  float dtype (a bf16 checkpoint's own tensors); the gates are computed in float32.
* Deferred commit and token trees (docs/contract.md §7; :func:`gated_delta_rule_recurrent` and
  :func:`gdn_attention`, both backends):
  :func:`gated_delta_rule_recurrent` and :func:`gdn_attention` take ``verify_log`` /
  ``verify_log_out`` (and ``gdn_attention`` ``conv_log`` / ``conv_log_out``); None, the default,
  is the per-token-slot mode. Each sequence then owns one slot with its committed state, and the
  logs hold what its last verify step consumed; an engine keeps two logs of each kind and
  alternates them from step to step.
* ``out=`` writes a caller's buffer instead of allocating. It may be ``x`` itself (an in-place
  convolution, exact: each input row is read before its output row is written; eager mode only,
  not under ``torch.compile``); a buffer that overlaps ``x`` otherwise is rejected.
"""

from typing import Optional

import torch
from torch import Tensor

__all__ = [
    "causal_conv1d_fwd",
    "causal_conv1d_update",
    "gated_delta_rule_recurrent",
    "gated_delta_rule_chunked",
    "gdn_attention",
]


def causal_conv1d_fwd(
    x: Tensor,
    weight: Tensor,
    bias: Optional[Tensor] = None,
    *,
    conv_state: Tensor,
    query_start_loc: Tensor,
    state_indices: Tensor,
    has_initial_state: Optional[Tensor] = None,
    activation: str = "silu",
    null_block_id: Optional[int] = None,
    out: Optional[Tensor] = None,
) -> Tensor:
    """Causal depthwise conv1d over a varlen batch of non-speculative sequences (prefill).

    ``y[t, c] = act(bias[c] + sum_j weight[c, j] * u[t - W + 1 + j, c])`` where the inputs before a
    sequence's first token come from its conv window (rows ``0..W-2`` of its slot) if
    ``has_initial_state``, else zeros. Afterwards rows ``0..W-2`` of the slot hold the sequence's
    last ``W-1`` inputs (window included); other rows are untouched.

    Args:
        x: ``[T, D]`` float32 / bfloat16 / float16 inputs.
        weight: ``[D, W]``, dtype of ``x``, ``2 <= W <= 5``.
        bias: ``[D]``, dtype of ``x``, or None.
        conv_state: ``[num_slots, rows >= W-1, D]``, dtype of ``x``; updated in place.
        query_start_loc: ``[n+1]`` int32/int64 sequence boundaries.
        state_indices: ``[n]`` int32/int64, the conv slot of each sequence.
        has_initial_state: ``[n]`` bool, or None (all true).
        activation: ``"silu"`` (``"swish"``) or ``"identity"`` (``"none"``).
        null_block_id: a slot id treated like a negative (padding) slot, or None.
        out: ``[T, D]`` buffer for ``y`` (dtype of ``x``), or None to allocate one.

    Returns:
        ``y``: ``[T, D]``, dtype of ``x``.
    """
    if out is None:
        return torch.ops.gdn.causal_conv1d_fwd(
            x, weight, bias, conv_state, query_start_loc, state_indices, has_initial_state, activation, null_block_id
        )
    torch.ops.gdn.causal_conv1d_fwd_out(
        out, x, weight, bias, conv_state, query_start_loc, state_indices, has_initial_state, activation, null_block_id
    )
    return out


def causal_conv1d_update(
    x: Tensor,
    weight: Tensor,
    bias: Optional[Tensor] = None,
    *,
    conv_state: Tensor,
    query_start_loc: Tensor,
    state_indices: Tensor,
    num_accepted_tokens: Optional[Tensor] = None,
    spec_layout: str = "rolling",
    activation: str = "silu",
    null_block_id: Optional[int] = None,
    out: Optional[Tensor] = None,
) -> Tensor:
    """Causal conv1d for decode steps and speculative verify steps.

    Without ``num_accepted_tokens`` each sequence is non-speculative (as in ``causal_conv1d_fwd``,
    always with its initial state). With it, sequence ``i`` is a verify sequence with
    ``state_indices[i, 0..cols-1]`` (one slot per draft position) and ``a = num_accepted_tokens[i]``
    tokens accepted at the previous step (bonus token included; clamped into ``[1, cols]``):

    * ``spec_layout="rolling"`` (FLA, vLLM): one line per sequence in slot ``state_indices[i, 0]``
      with ``rows >= W - 2 + cols``; the window for token 0 is rows ``a-1 .. a+W-3``; afterwards
      rows ``0 .. W-3+T_i`` hold ``[old rows a .. a+W-3, u_0 .. u_{T_i-1}]``.
    * ``spec_layout="per_token"``: the window is rows ``0..W-2`` of slot ``state_indices[i, a-1]``;
      after token ``t`` rows ``0..W-2`` of slot ``state_indices[i, t]`` hold the last ``W-1``
      inputs up to token ``t``.

    Args:
        x: ``[T, D]`` float32 / bfloat16 / float16 inputs (``T_i <= cols`` tokens per sequence).
        weight: ``[D, W]``, dtype of ``x``.
        bias: ``[D]`` or None.
        conv_state: ``[num_slots, rows, D]``, dtype of ``x``; updated in place.
        query_start_loc: ``[n+1]`` int32/int64.
        state_indices: ``[n]`` (decode) or ``[n, cols]`` (verify) int32/int64.
        num_accepted_tokens: ``[n]`` int32/int64 (its presence means verify), or None.
        spec_layout: ``"rolling"`` or ``"per_token"`` (verify only).
        activation: ``"silu"`` or ``"identity"``.
        null_block_id: a slot id treated as padding, or None.
        out: ``[T, D]`` buffer for ``y``, or None to allocate one.

    Returns:
        ``y``: ``[T, D]``, dtype of ``x``.
    """
    if out is None:
        return torch.ops.gdn.causal_conv1d_update(
            x, weight, bias, conv_state, query_start_loc, state_indices, num_accepted_tokens, spec_layout,
            activation, null_block_id,
        )
    torch.ops.gdn.causal_conv1d_update_out(
        out, x, weight, bias, conv_state, query_start_loc, state_indices, num_accepted_tokens, spec_layout,
        activation, null_block_id,
    )
    return out


def gated_delta_rule_recurrent(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    a: Tensor,
    b: Tensor,
    *,
    A_log: Optional[Tensor],
    dt_bias: Optional[Tensor],
    ssm_state: Tensor,
    query_start_loc: Tensor,
    state_indices: Tensor,
    num_accepted_tokens: Optional[Tensor] = None,
    has_initial_state: Optional[Tensor] = None,
    scale: Optional[float] = None,
    state_layout: str = "vk",
    null_block_id: Optional[int] = None,
    qk_l2norm: bool = True,
    beta_sigmoid: bool = True,
    out: Optional[Tensor] = None,
    verify_log: Optional[Tensor] = None,
    verify_log_out: Optional[Tensor] = None,
    log_tokens: bool = True,
    token_parents: Optional[Tensor] = None,
    accepted_path: Optional[Tensor] = None,
) -> Tensor:
    """The gated delta rule, token by token (decode, verify, short non-speculative sequences).

    Per token and value head ``h`` (key head ``h // (HV // H)``), with the state ``S`` (``V x K``)::

        g = -exp(A_log[h]) * softplus(a[h] + dt_bias[h]);  beta = sigmoid(b[h])
        q^ = l2norm(q) * scale;  k^ = l2norm(k)          (eps 1e-6; scale defaults to K**-0.5)
        S = exp(g) * S;  S = S + beta * (v - S k^) k^T;  o[h] = S q^

    Non-speculative sequences (``state_indices [n]``) start from slot ``state_indices[i]`` (zeros
    when ``has_initial_state[i]`` is false) and store the final state there. Verify sequences
    (``state_indices [n, cols]`` with ``num_accepted_tokens``) read the state from column
    ``num_accepted_tokens[i] - 1`` and store the state after token ``t`` into column ``t``.

    Deferred commit (``verify_log`` and ``verify_log_out`` given; docs/contract.md §7, CPU and CUDA): each
    sequence owns one slot ``s = state_indices[i]`` (``[n]``) holding its committed state, and row
    ``s`` of the logs holds the tokens of its last verify step as the recurrence consumed them.
    ``S`` = slot ``s`` (zeros without an initial state) with the first ``num_accepted_tokens[i]``
    logged tokens of ``verify_log[s]`` replayed (required; clamped to ``[0, log_cols]``; 0 after a
    prefill, a plain decode or for a new sequence); the step's tokens run from ``S``. With
    ``log_tokens`` (a verify step) ``S`` goes to slot ``s`` and the first ``log_cols`` tokens to
    ``verify_log_out[s]``; without (a prefill or plain decode) the state after every token goes to
    slot ``s`` and no log is written. Outputs and the next-read states equal the per-token-slot
    mode's (bit for bit with float32 state on the CPU).

    Args:
        q, k: ``[T, H, K]`` float32 / bfloat16 / float16.
        v: ``[T, HV, V]``, dtype of ``q``; ``HV`` a multiple of ``H``; ``K != V`` is fine.
        a, b: ``[T, HV]`` gate inputs, dtype of ``q`` or float32: with ``A_log`` and ``dt_bias``,
            ``a`` is the raw decay input (``g = -exp(A_log) * softplus(a + dt_bias)``); with both
            None, ``a`` is the log-space decay ``g`` itself. ``b`` is the raw logit
            (``beta = sigmoid(b)``) unless ``beta_sigmoid=False``, when it is ``beta``.
        A_log: ``[HV]`` any float dtype (float32, bfloat16, float16, float64), or None.
        dt_bias: ``[HV]`` any float dtype, or None (exactly when ``A_log`` is None).
        ssm_state: ``[num_slots, HV, V, K]`` (``state_layout="vk"``) or ``[num_slots, HV, K, V]``
            (``"kv"``), float32 / bfloat16 / float16; updated in place.
        query_start_loc: ``[n+1]`` int32/int64.
        state_indices: ``[n]`` or ``[n, cols]`` int32/int64.
        num_accepted_tokens: ``[n]`` int32/int64 (verify), or None.
        has_initial_state: ``[n]`` bool, or None (all true).
        scale: the query scale, or None for ``K ** -0.5``.
        state_layout: ``"vk"`` or ``"kv"``.
        null_block_id: a slot id treated as padding, or None.
        qk_l2norm: l2-normalise q and k (True), or use them as given (``q^ = q * scale``).
        beta_sigmoid: ``beta = sigmoid(b)`` (True) or ``beta = b``.
        out: ``[T, HV, V]`` buffer for ``o`` (dtype of ``q``), or None to allocate one.
        verify_log: ``[num_slots, log_cols, HV, K + V + 2]`` float32, read: per slot, logged token
            and value head ``[k^ (K) | v (V) | g | beta]``; or None (the per-token-slot mode).
        verify_log_out: the same shape, float32, written (rows ``0..`` of each logging sequence's
            slot); must not overlap ``verify_log``, ``ssm_state`` or ``out``. Given exactly when
            ``verify_log`` is.
        log_tokens: deferred only: True for a verify step (the tokens are drafts and are logged),
            False for a prefill or a plain decode (every token accepted, nothing logged).
        token_parents: ``[T]`` int32/int64, deferred with ``log_tokens``: per token its parent's
            index within its sequence (0 = the sequence's first token), -1 (or any value outside
            ``[0, t)``) for a root; the step's tokens then form a tree, each node's output being
            that of linear verify of its root-to-node path (node states stay in scratch; the log
            receives every node, so ``log_cols`` must hold the tree). None: a chain.
        accepted_path: ``[n, log_cols]`` int32/int64, deferred: the log rows to replay, in order,
            the first ``num_accepted_tokens[i]`` of row ``i`` (the accepted root-to-leaf path of a
            tree; an entry outside ``[0, log_cols)`` ends the replay). None: rows ``0, 1, ...``.

    Every gate and norm form runs on both backends (on CUDA, the other forms than the default take
    the kernels' gate-form instances, at or near the default form's speed: docs/performance.md).

    Returns:
        ``o``: ``[T, HV, V]``, dtype of ``q``.
    """
    deferred = dict(verify_log=verify_log, verify_log_out=verify_log_out, log_tokens=log_tokens,
                    token_parents=token_parents, accepted_path=accepted_path)
    if out is None:
        return torch.ops.gdn.gated_delta_rule_recurrent(
            q, k, v, a, b, A_log, dt_bias, ssm_state, query_start_loc, state_indices, num_accepted_tokens,
            has_initial_state, scale, state_layout, null_block_id, qk_l2norm, beta_sigmoid, **deferred,
        )
    torch.ops.gdn.gated_delta_rule_recurrent_out(
        out, q, k, v, a, b, A_log, dt_bias, ssm_state, query_start_loc, state_indices, num_accepted_tokens,
        has_initial_state, scale, state_layout, null_block_id, qk_l2norm, beta_sigmoid, **deferred,
    )
    return out


def gated_delta_rule_chunked(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    a: Tensor,
    b: Tensor,
    *,
    A_log: Optional[Tensor],
    dt_bias: Optional[Tensor],
    ssm_state: Tensor,
    query_start_loc: Tensor,
    state_indices: Tensor,
    has_initial_state: Optional[Tensor] = None,
    scale: Optional[float] = None,
    state_layout: str = "vk",
    null_block_id: Optional[int] = None,
    qk_l2norm: bool = True,
    beta_sigmoid: bool = True,
    out: Optional[Tensor] = None,
) -> Tensor:
    """The gated delta rule computed chunk-parallel (prefill of long sequences).

    Same contract and arguments as :func:`gated_delta_rule_recurrent` for non-speculative
    sequences (``state_indices [n]``; there is no ``num_accepted_tokens`` and no deferred-commit
    mode), and the same results up to rounding. On CUDA the chunk kernel takes prefill batches where
    it fits (K = 128, bfloat16 / float16 q, k, v and o with 16-byte aligned rows, V a multiple of 32,
    sm_80+), in every gate and norm form; other batches run the recurrence kernels.

    Returns:
        ``o``: ``[T, HV, V]``, dtype of ``q``.
    """
    if out is None:
        return torch.ops.gdn.gated_delta_rule_chunked(
            q, k, v, a, b, A_log, dt_bias, ssm_state, query_start_loc, state_indices, has_initial_state, scale,
            state_layout, null_block_id, qk_l2norm, beta_sigmoid,
        )
    torch.ops.gdn.gated_delta_rule_chunked_out(
        out, q, k, v, a, b, A_log, dt_bias, ssm_state, query_start_loc, state_indices, has_initial_state, scale,
        state_layout, null_block_id, qk_l2norm, beta_sigmoid,
    )
    return out


def gdn_attention(
    core_attn_out: Tensor,
    z: Tensor,
    projected_states_qkvz: Tensor,
    projected_states_ba: Tensor,
    num_k_heads: int,
    num_v_heads: int,
    head_k_dim: int,
    head_v_dim: int,
    conv_state: Tensor,
    ssm_state: Tensor,
    conv_weights: Tensor,
    conv_bias: Optional[Tensor],
    activation: str,
    A_log: Tensor,
    dt_bias: Tensor,
    num_prefills: int,
    num_decodes: int,
    num_spec_decodes: int,
    has_initial_state: Optional[Tensor],
    non_spec_query_start_loc: Optional[Tensor],
    non_spec_token_indx: Optional[Tensor],
    non_spec_state_indices_tensor: Optional[Tensor],
    spec_query_start_loc: Optional[Tensor],
    spec_token_indx: Optional[Tensor],
    spec_state_indices_tensor: Optional[Tensor],
    num_accepted_tokens: Optional[Tensor],
    num_actual_tokens: int,
    tp_size: int,
    reorder_input: bool,
    *,
    null_block_id: Optional[int] = None,
    spec_conv_layout: str = "per_token",
    verify_log: Optional[Tensor] = None,
    verify_log_out: Optional[Tensor] = None,
    conv_log: Optional[Tensor] = None,
    conv_log_out: Optional[Tensor] = None,
    non_spec_num_accepted_tokens: Optional[Tensor] = None,
    spec_accepted_path: Optional[Tensor] = None,
    non_spec_accepted_path: Optional[Tensor] = None,
    spec_token_parents: Optional[Tensor] = None,
) -> None:
    """The GDN layer core for a mixed batch: conv, gates, l2 norm and the delta rule in one call.

    The argument list is vllm-xpu-kernels' ``gdn_attention``, so an engine's call site works
    unchanged (``torch.ops.gdn.gdn_attention`` takes the same arguments). Head counts are global
    (divided by ``tp_size`` inside); below, ``H = num_k_heads / tp_size``, ``HV = num_v_heads /
    tp_size``, ``K = head_k_dim``, ``V = head_v_dim``, ``D = 2 H K + HV V``. Any mix of prefills,
    decodes and verify sequences (ragged, padded) works; nothing depends on the order of prefills
    and decodes. The query scale is ``K ** -0.5``.

    Args:
        core_attn_out: ``[rows, HV, V]`` output, dtype of the projections; the rows of the
            sequences' tokens are written (zeros for padded sequences), other rows untouched.
        z: ``[rows, HV, V]``: the z part of the projections, copied for every row
            ``< num_actual_tokens``.
        projected_states_qkvz: ``[rows, H (2K + 2 (HV/H) V)]`` float32 / bfloat16 / float16;
            interleaved per key head (``reorder_input=False``, Qwen3-Next) or blocks
            ``[q | k | v | z]`` (``reorder_input=True``, Qwen3.5/3.6).
        projected_states_ba: ``[rows, 2 HV]``: per key head ``[b | a]`` or blocks ``[b | a]``.
        num_k_heads, num_v_heads, head_k_dim, head_v_dim: global head counts and head dims.
        conv_state: ``[num_slots, rows, D]``, dtype of the projections; updated. Rows ``>= W - 1``
            (``spec_conv_layout="per_token"``) or ``>= W - 2 + cols`` (``"rolling"``).
        ssm_state: ``[num_slots, HV, V, K]`` ("vk") float32 / bfloat16 / float16; updated.
        conv_weights: ``[D, W]``; conv_bias: ``[D]`` or None.
        activation: ``"silu"`` or ``"identity"``.
        A_log: ``[HV]``, dt_bias: ``[HV]``, any float dtype each (the gates are computed in float32).
        num_prefills, num_decodes: counts of non-speculative sequences (only their sum matters).
        num_spec_decodes: count of verify sequences.
        has_initial_state: ``[num_prefills + num_decodes]`` bool or None (all true).
        non_spec_query_start_loc: ``[num_prefills + num_decodes + 1]``, or None without them.
        non_spec_token_indx: global row of each non-spec token, or None (identity).
        non_spec_state_indices_tensor: ``[num_prefills + num_decodes]`` slots.
        spec_query_start_loc: ``[num_spec_decodes + 1]``, or None without verify sequences.
        spec_token_indx: global row of each spec token, or None (identity).
        spec_state_indices_tensor: ``[num_spec_decodes, cols]`` slots (a block-table row each).
        num_accepted_tokens: ``[num_spec_decodes]`` tokens accepted at the previous step.
        num_actual_tokens: rows that hold tokens (graph-padded buffers may have more).
        tp_size: tensor-parallel size.
        reorder_input: the projection layout (see ``projected_states_qkvz``).
        null_block_id: a slot id treated as padding, or None.
        spec_conv_layout: where verify sequences keep their conv windows. ``"per_token"`` (the
            default, vllm-xpu-kernels' layout): the window is rows ``0..W-2`` of the slot of column
            ``a - 1`` (``a = num_accepted_tokens[i]``), and after token ``t`` rows ``0..W-2`` of
            column ``t``'s slot hold the last ``W - 1`` inputs. ``"rolling"`` (vLLM's CUDA path,
            FLA): one line in column 0's slot, window rows ``a-1..a+W-3``, afterwards rows
            ``0..W-3+T`` hold ``[old rows a..a+W-3, u_0, ..., u_{T-1}]``.
        verify_log, verify_log_out: the recurrence's logs, ``[num_slots, log_cols, HV, K + V + 2]``
            float32 (read, written), as in :func:`gated_delta_rule_recurrent`; or None (the
            per-token-slot mode). The four logs are given together or not at all, and none may
            overlap another or an output or pool.
        conv_log, conv_log_out: the conv logs, ``[num_slots, log_cols, D]`` in the projections'
            dtype (read, written): each logged token's conv input (its q/k/v projection columns).
        non_spec_num_accepted_tokens: ``[num_prefills + num_decodes]``, deferred: logged tokens a
            non-spec sequence replays first (a sequence that stops speculating passes its last
            accepted count here), or None (none).
        spec_accepted_path, non_spec_accepted_path: ``[n of the group, log_cols]``, deferred: the
            log rows each sequence replays, in order (see ``accepted_path`` of
            :func:`gated_delta_rule_recurrent`), or None (rows ``0, 1, ...``).
        spec_token_parents: ``[>= spec tokens]`` (``spec_token_indx``'s length, or
            ``num_actual_tokens``), deferred: per local spec token its parent's index within its
            sequence, -1 for a root: the verify tokens form trees (a node's conv window is the
            ``W - 1`` inputs before it on its root-to-node path). None: chains.

    Deferred commit (``verify_log`` given; docs/contract.md §7, CPU and CUDA): a sequence's slot is column 0
    of its state indices (a verify sequence's other columns are not read), its committed conv
    window rows ``0..W-2`` of that ``conv_state`` slot. Each sequence first replays its accepted
    logged tokens (``num_accepted_tokens`` for verify sequences, ``non_spec_num_accepted_tokens``
    for the others) into window and state; verify sequences then commit window and state before
    their tokens and log the tokens, non-spec sequences store window and state after theirs.

    All index tensors are int32 or int64. ``attention_args_from_vllm_metadata`` builds the
    metadata arguments from vLLM's ``GDNAttentionMetadata``.
    """
    torch.ops.gdn.gdn_attention(
        core_attn_out, z, projected_states_qkvz, projected_states_ba, num_k_heads, num_v_heads, head_k_dim,
        head_v_dim, conv_state, ssm_state, conv_weights, conv_bias, activation, A_log, dt_bias, num_prefills,
        num_decodes, num_spec_decodes, has_initial_state, non_spec_query_start_loc, non_spec_token_indx,
        non_spec_state_indices_tensor, spec_query_start_loc, spec_token_indx, spec_state_indices_tensor,
        num_accepted_tokens, num_actual_tokens, tp_size, reorder_input, null_block_id, spec_conv_layout,
        verify_log=verify_log, verify_log_out=verify_log_out, conv_log=conv_log, conv_log_out=conv_log_out,
        non_spec_num_accepted_tokens=non_spec_num_accepted_tokens, spec_accepted_path=spec_accepted_path,
        non_spec_accepted_path=non_spec_accepted_path, spec_token_parents=spec_token_parents,
    )
