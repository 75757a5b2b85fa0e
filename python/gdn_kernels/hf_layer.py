"""transformers' Gated DeltaNet layer core in one :func:`gdn_kernels.gdn_attention` call per layer.

``gdn_kernels.hf.enable(model, whole_layer=True)`` replaces the forward of each Qwen3-Next /
Qwen3.5 / Qwen3.5-MoE GDN layer by :func:`whole_layer_forward`, which

1. runs the layer's own input projections, as transformers does: ``in_proj_qkvz`` and ``in_proj_ba``
   (Qwen3-Next; their outputs are interleaved per key head, the layout gdn_attention reads with
   ``reorder_input=False``), or ``in_proj_qkv``, ``in_proj_z``, ``in_proj_b`` and ``in_proj_a``
   (Qwen3.5; concatenated into the blocks ``[q | k | v | z]`` and ``[b | a]`` of
   ``reorder_input=True``);
2. makes one gdn_attention call for the whole batch: sequence ``i`` of the ``[B, T]`` batch is rows
   ``i*T .. i*T+T-1`` in slot ``i`` of two pools built for the call, the conv windows
   ``[B, W-1, D]`` (the last ``W - 1`` columns of transformers' conv cache ``[B, D, W]``, transposed)
   and the states ``[B, HV, V, K]`` (the "vk" layout gdn_attention takes; transformers keeps
   ``[B, HV, K, V]``, transposed here), with ``has_initial_state`` true when the cache has a previous
   state (decode, or a prefill continued from the cache);
3. updates transformers' cache as its own forward does: a decode shifts the conv cache in place by
   the token's conv inputs (as ``causal_conv1d_update``), anything else goes through the cache's
   ``update_conv_state`` (the last ``min(T, W)`` inputs: the cache keeps the last ``W``); the final
   state goes through ``update_recurrent_state`` (``[B, HV, K, V]``, in the pool's dtype: float32 for a
   new sequence, the cache's own when continuing);
4. runs the layer's gated RMSNorm (``layer.norm(core, z)`` per value head) and ``out_proj``, as
   transformers does.

The conv cache is thus written from the same inputs by the same copies as transformers' path (bit
for bit); the recurrent state and the outputs agree with it to rounding (the kernel computes the
gates, the conv and the recurrence in float32 in its own order).

Anything else runs the layer's original forward (which uses the kernel functions ``hf.enable``
installs): an attention mask with padding, packed sequences (``cu_seq_lens_q``, ``seq_idx``), a
cache that records its past (``record_past``), autograd, dtypes or shapes other than expected, a
conv activation other than silu, and any argument error gdn_attention reports (it changes nothing
when it refuses, e.g. head sizes its CUDA kernels do not take). The handle counts both paths.

The cache protocol is transformers' ``LinearAttentionLayer`` of 5.x: ``cache.layers[i]`` with
``conv_states[0]`` ``[B, D, W]`` (channels first, the latest input last, zero-padded on the left
after a short prompt), ``recurrent_states[0]`` ``[B, HV, K, V]`` and ``record_past``;
``cache.has_previous_state(i)``, ``cache.update_conv_state(x, i, conv_kernel_size=W)`` and
``cache.update_recurrent_state(state, i)``.
"""

from collections import Counter
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor

from . import ops as _ops

# Keyword arguments that mean packed sequences in one row (transformers' varlen path): not supported.
PACKING_KWARGS = ("cu_seq_lens_q", "cu_seq_lens_k", "cu_seqlens", "seq_idx", "max_length_q", "max_length_k")
# Names the layer's forward must use for its cache (checked by hf.enable): the protocol above.
CACHE_PROTOCOL = ("has_previous_state", "update_conv_state", "update_recurrent_state", "record_past", "conv_states",
                  "recurrent_states")
_ACTIVATIONS = {"silu": "silu", "swish": "silu"}


class Fallback(Exception):
    """A case the whole-layer path does not take; the message says why."""


def family(layer) -> Optional[str]:
    """``"qwen3_next"`` (in_proj_qkvz / in_proj_ba), ``"qwen3_5"`` (in_proj_qkv / _z / _b / _a) or None."""
    if all(hasattr(layer, n) for n in ("in_proj_qkvz", "in_proj_ba", "fix_query_key_value_ordering")):
        return "qwen3_next"
    if all(hasattr(layer, n) for n in ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a")):
        return "qwen3_5"
    return None


def attention_metadata(batch: int, seq_len: int, has_previous_state: bool, device) -> Dict[str, object]:
    """gdn_attention's metadata for a ``[batch, seq_len]`` batch without padding: sequence ``i`` is rows
    ``i*seq_len ..`` in slot ``i``, all non-speculative (prefills, or decodes when ``seq_len == 1``),
    each starting from its slot when ``has_previous_state``, else from zeros."""
    B, T = batch, seq_len
    return {
        "num_prefills": B if T > 1 else 0,
        "num_decodes": 0 if T > 1 else B,
        "num_spec_decodes": 0,
        "has_initial_state": torch.full((B,), bool(has_previous_state), dtype=torch.bool, device=device),
        "non_spec_query_start_loc": torch.arange(0, (B + 1) * T, T, dtype=torch.int32, device=device),
        "non_spec_token_indx": None,
        "non_spec_state_indices_tensor": torch.arange(B, dtype=torch.int32, device=device),
        "spec_query_start_loc": None,
        "spec_token_indx": None,
        "spec_state_indices_tensor": None,
        "num_accepted_tokens": None,
        "num_actual_tokens": B * T,
    }


def conv_pool_from_cache(conv_cache: Tensor, width: int) -> Tensor:
    """transformers' conv cache ``[B, D, L]`` (L >= W - 1, the latest input last) -> gdn_attention's
    conv pool ``[B, W - 1, D]`` (oldest first): a contiguous copy of the last ``W - 1`` columns."""
    B, D, L = conv_cache.shape
    if L < width - 1:
        raise Fallback(f"conv cache holds {L} inputs, the conv needs {width - 1}")
    return conv_cache[:, :, L - (width - 1):].transpose(1, 2).clone(memory_format=torch.contiguous_format)


def advance_conv_cache(conv_cache: Tensor, inputs: Tensor) -> None:
    """A decode's conv cache update, in place: ``conv_cache`` ``[B, D, L]`` keeps the last ``L`` of
    (its inputs, then ``inputs`` ``[B, D, T]``), as transformers' ``causal_conv1d_update`` leaves it."""
    L = conv_cache.shape[-1]
    conv_cache.copy_(torch.cat([conv_cache, inputs.to(conv_cache.dtype)], dim=-1)[:, :, -L:])


def ssm_pool_from_cache(state: Tensor) -> Tensor:
    """transformers' recurrent state ``[B, HV, K, V]`` -> gdn_attention's "vk" pool ``[B, HV, V, K]`` (a copy)."""
    return state.transpose(-1, -2).contiguous()


def ssm_cache_from_pool(pool: Tensor) -> Tensor:
    """The "vk" pool ``[B, HV, V, K]`` -> transformers' ``[B, HV, K, V]`` (contiguous)."""
    return pool.transpose(-1, -2).contiguous()


def _projections(layer, fam: str, hidden_states: Tensor) -> Tuple[Tensor, Tensor, bool]:
    """The layer's input projections as gdn_attention takes them: ``([B*T, qkvz], [B*T, 2 HV], reorder_input)``."""
    B, T, _ = hidden_states.shape
    if fam == "qwen3_next":
        qkvz = layer.in_proj_qkvz(hidden_states)
        ba = layer.in_proj_ba(hidden_states)
        return qkvz.reshape(B * T, -1), ba.reshape(B * T, -1), False
    qkvz = torch.cat([layer.in_proj_qkv(hidden_states), layer.in_proj_z(hidden_states)], dim=-1)
    ba = torch.cat([layer.in_proj_b(hidden_states), layer.in_proj_a(hidden_states)], dim=-1)
    return qkvz.reshape(B * T, -1), ba.reshape(B * T, -1), True


def conv_inputs(layer, fam: str, qkvz: Tensor, ba: Tensor, batch: int, last: int) -> Tensor:
    """The conv inputs ``[B, D, last]`` (channels ``[q, k, v]``, as transformers' ``mixed_qkv``) of the
    last ``last`` tokens of each sequence, from gdn_attention's projection rows ``[B*T, *]``."""
    qkvz = qkvz.reshape(batch, -1, qkvz.shape[-1])[:, -last:]
    if fam == "qwen3_next":
        ba = ba.reshape(batch, -1, ba.shape[-1])[:, -last:]
        q, k, v, _, _, _ = layer.fix_query_key_value_ordering(qkvz, ba)
        mixed = torch.cat([x.reshape(x.shape[0], x.shape[1], -1) for x in (q, k, v)], dim=-1)
    else:
        mixed = qkvz[..., :2 * layer.key_dim + layer.value_dim]
    return mixed.transpose(1, 2)


def _check(layer, hidden_states: Tensor, cache_params, attention_mask, kwargs) -> str:
    """The layer's family, or raises Fallback naming what is not supported."""
    fam = family(layer)
    if fam is None:
        raise Fallback("unknown projection layout")
    if hidden_states.dim() != 3:
        raise Fallback("hidden_states is not [B, T, hidden]")
    for n in PACKING_KWARGS:
        if kwargs.get(n) is not None:
            raise Fallback(f"packed sequences ({n})")
    if torch.is_grad_enabled() and (hidden_states.requires_grad or layer.out_proj.weight.requires_grad):
        raise Fallback("autograd (gdn_attention is inference only)")
    if attention_mask is not None:
        if attention_mask.dim() != 2 or tuple(attention_mask.shape) != tuple(hidden_states.shape[:2]):
            raise Fallback("attention mask is not [B, T]")
        if not bool(attention_mask.bool().all()):
            raise Fallback("attention mask with padding")
    if str(layer.activation) not in _ACTIVATIONS:
        raise Fallback(f"conv activation {layer.activation!r}")
    w = layer.conv1d.weight
    if w.device != hidden_states.device or w.dim() != 3 or w.shape[1] != 1:
        raise Fallback("conv weight is not [D, 1, W] on the activations' device")
    if cache_params is not None and getattr(cache_params.layers[layer.layer_idx], "record_past", False):
        raise Fallback("cache records its past")
    return fam


def whole_layer_forward(layer, hidden_states: Tensor, cache_params=None, attention_mask: Optional[Tensor] = None,
                        **kwargs) -> Tensor:
    """The layer's forward with its core in one gdn_attention call (see the module doc). Raises
    :class:`Fallback` (before changing anything) for a case it does not take."""
    fam = _check(layer, hidden_states, cache_params, attention_mask, kwargs)
    B, T, _ = hidden_states.shape
    H, HV, K, V = layer.num_k_heads, layer.num_v_heads, layer.head_k_dim, layer.head_v_dim
    W = layer.conv_kernel_size
    D = 2 * H * K + HV * V
    device = hidden_states.device

    qkvz, ba, reorder = _projections(layer, fam, hidden_states)
    dtype = qkvz.dtype
    weight = layer.conv1d.weight.squeeze(1)
    if weight.dtype != dtype or (layer.conv1d.bias is not None and layer.conv1d.bias.dtype != dtype):
        raise Fallback("conv weight dtype differs from the projections'")

    previous = cache_params is not None and bool(cache_params.has_previous_state(layer.layer_idx))
    if previous:
        cache_layer = cache_params.layers[layer.layer_idx]
        conv_cache, state = cache_layer.conv_states[0], cache_layer.recurrent_states[0]
        if (conv_cache.dim() != 3 or tuple(conv_cache.shape[:2]) != (B, D) or conv_cache.dtype != dtype
                or conv_cache.device != device):
            raise Fallback("conv cache is not [B, D, L] in the projections' dtype")
        if tuple(state.shape) != (B, HV, K, V) or state.device != device:
            raise Fallback("recurrent state is not [B, HV, K, V]")
        conv_pool = conv_pool_from_cache(conv_cache, W)
        ssm_pool = ssm_pool_from_cache(state)
    else:
        conv_pool = torch.zeros(B, W - 1, D, dtype=dtype, device=device)
        ssm_pool = torch.zeros(B, HV, V, K, dtype=torch.float32, device=device)

    core = torch.empty(B * T, HV, V, dtype=dtype, device=device)
    z = torch.empty(B * T, HV, V, dtype=dtype, device=device)
    try:
        _ops.gdn_attention(core, z, qkvz, ba, H, HV, K, V, conv_pool, ssm_pool, weight, layer.conv1d.bias,
                           _ACTIVATIONS[str(layer.activation)], layer.A_log, layer.dt_bias, tp_size=1,
                           reorder_input=reorder, **attention_metadata(B, T, previous, device))
    except RuntimeError as e:  # refused before anything was written (docs/contract.md §5)
        raise Fallback(str(e).splitlines()[0] if str(e) else "gdn_attention refused the call") from e

    if cache_params is not None:
        if previous and T == 1:
            advance_conv_cache(conv_cache, conv_inputs(layer, fam, qkvz, ba, B, 1))
        else:
            cache_params.update_conv_state(conv_inputs(layer, fam, qkvz, ba, B, min(T, W)), layer.layer_idx,
                                           conv_kernel_size=W)
        cache_params.update_recurrent_state(ssm_cache_from_pool(ssm_pool), layer.layer_idx)

    out = layer.norm(core.reshape(-1, V), z.reshape(-1, V)).reshape(B, T, -1)
    return layer.out_proj(out)


class Stats:
    """How often the whole-layer path ran (``calls``) and why it fell back (``fallbacks``: reason -> count)."""

    def __init__(self):
        self.calls = 0
        self.fallbacks: Counter = Counter()


def make_forward(layer, original, stats: Stats):
    """The forward installed on ``layer``: the whole-layer path, else ``original``."""

    def forward(hidden_states, cache_params=None, attention_mask=None, **kwargs):
        try:
            out = whole_layer_forward(layer, hidden_states, cache_params, attention_mask, **kwargs)
        except Fallback as why:
            stats.fallbacks[str(why)] += 1
            return original(hidden_states, cache_params=cache_params, attention_mask=attention_mask, **kwargs)
        stats.calls += 1
        return out

    forward.gdn_whole_layer = True
    return forward
