"""gdn_attention arguments from a vLLM-style GDN metadata object.

vLLM's ``GDNAttentionMetadata`` (vllm/v1/attention/backends/gdn_attn.py) carries the counts
``num_prefills``, ``num_decodes``, ``num_spec_decodes``, ``num_actual_tokens`` and the tensors
``has_initial_state``, ``non_spec_query_start_loc``, ``spec_query_start_loc``,
``non_spec_state_indices_tensor``, ``spec_state_indices_tensor``, ``non_spec_token_indx``,
``spec_token_indx`` and ``num_accepted_tokens``. For a full CUDA graph vLLM pads a decode-only or
verify-only batch to the graph's size: the state indices get ``PAD_SLOT_ID`` (-1), the query start
locations repeat their last value (empty sequences), ``num_accepted_tokens`` gets 1 — while the
counts stay the real ones. gdn_attention checks that each tensor has exactly the length its count
implies, and inside a graph the counts are frozen at capture, so the helper counts the padded
sequences: a group's sequence count is the length of its state-index tensor (the padding
sequences are harmless: padded slot, no tokens).
"""

import operator
from typing import Any, Dict, Optional

import torch

__all__ = ["PAD_SLOT_ID", "attention_args_from_vllm_metadata"]

PAD_SLOT_ID = -1


def _get(meta, name):
    if isinstance(meta, dict):
        return meta.get(name)
    return getattr(meta, name, None)


def _pad_rows(t: torch.Tensor, n: int, value) -> torch.Tensor:
    """``t`` with dim 0 extended to ``n`` rows of ``value`` (a new tensor; ``t`` when long enough)."""
    if t.shape[0] >= n:
        return t
    pad = t.new_full((n - t.shape[0],) + tuple(t.shape[1:]), value)
    return torch.cat([t, pad], dim=0)


def _pad_qsl(qsl: torch.Tensor, n: int) -> torch.Tensor:
    """Query start locations for ``n`` sequences: the extra ones repeat the last value (empty)."""
    if qsl.shape[0] >= n + 1:
        return qsl
    return torch.cat([qsl, qsl[-1:].expand(n + 1 - qsl.shape[0])])


def _fail(msg: str):
    raise ValueError(f"attention_args_from_vllm_metadata: {msg}")


def _rows_at_least(what: str, t: torch.Tensor, rows: int, of: str) -> None:
    """t has dims and at least ``rows`` rows (the real sequences' entries)."""
    if t.dim() == 0:
        _fail(f"{what} must have a sequence dimension, got a 0-dim tensor")
    if t.shape[0] < rows:
        _fail(f"{what} has {t.shape[0]} entries, fewer than {rows} for {of}")


def _group(name, count, state, qsl, pad_to, pad_slot_id):
    """Sequence count of one group (padded sequences included) and its sliced/padded tensors. Without
    pad_to the count is the state-index tensor's rows; with it, pad_to (the real sequences' entries
    are checked before anything is padded)."""
    if state is None or qsl is None:
        if count > 0:
            missing = f"{name}_state_indices_tensor" if state is None else f"{name}_query_start_loc"
            _fail(f"{count} {name} sequences but {missing} is None")
        return 0, None, None
    _rows_at_least(f"{name}_state_indices_tensor", state, count, f"the {count} {name} sequences")
    _rows_at_least(f"{name}_query_start_loc", qsl, count + 1, f"the {count} {name} sequences")
    if pad_to is None:
        n = state.shape[0]
        _rows_at_least(f"{name}_query_start_loc", qsl, n + 1, f"the {n} sequences of {name}_state_indices_tensor")
        return n, state, qsl[: n + 1]
    n = pad_to
    state = _pad_rows(state[:n], n, pad_slot_id)
    return n, state, _pad_qsl(qsl[: n + 1], n)


def _padded(what: str, t: torch.Tensor, real: int, n: int, value, pad: bool) -> torch.Tensor:
    """A per-sequence tensor for n sequences: at least ``real`` entries given (``n`` without padding),
    padded with ``value`` up to n when ``pad``."""
    _rows_at_least(what, t, real if pad else n, f"the {real if pad else n} sequences")
    return _pad_rows(t[:n], n, value) if pad else t[:n]


def attention_args_from_vllm_metadata(
    meta: Any, *, pad_to: Optional[int] = None, pad_slot_id: int = PAD_SLOT_ID
) -> Dict[str, Any]:
    """The metadata arguments of :func:`gdn_kernels.gdn_attention` from vLLM's GDN metadata.

    Args:
        meta: a ``GDNAttentionMetadata`` or any object (or dict) with its fields (see the module
            doc). Tensors are used as they are (int32 or int64, strided rows of a block table
            included); nothing is copied unless ``pad_to`` asks for padding.
        pad_to: pad each present sequence group (non-speculative, speculative) to this many
            sequences (at least each group's count), as vLLM does for a full CUDA graph: slots
            ``pad_slot_id``, query start locations repeating the last real value,
            ``num_accepted_tokens`` 1, ``has_initial_state`` False, after the real sequences'
            entries (which must be there). This makes new tensors: for a graph, pad the graph's own
            static buffers instead (as vLLM does) and pass metadata that is already padded.
        pad_slot_id: the slot id of padding sequences (vLLM's PAD_SLOT_ID, -1).

    Returns:
        A dict with the keys ``num_prefills``, ``num_decodes``, ``num_spec_decodes``,
        ``has_initial_state``, ``non_spec_query_start_loc``, ``non_spec_token_indx``,
        ``non_spec_state_indices_tensor``, ``spec_query_start_loc``, ``spec_token_indx``,
        ``spec_state_indices_tensor``, ``num_accepted_tokens`` and ``num_actual_tokens``, to pass as
        keyword arguments: ``gdn_attention(core_attn_out, z, ..., tp_size=tp, reorder_input=r,
        spec_conv_layout="rolling", **attention_args_from_vllm_metadata(meta))``: vLLM's CUDA GDN
        layer keeps a verify sequence's conv window as one rolling line in its pool (W - 1 + drafts
        rows), not the op's default per-draft-slot layout. Padding sequences of the non-speculative
        group are counted as decodes.

    Raises:
        ValueError: a count that the tensors cannot describe (a missing tensor, too few rows), or a
            pad_to below a group's count.
    """
    num_prefills = int(_get(meta, "num_prefills") or 0)
    num_decodes = int(_get(meta, "num_decodes") or 0)
    num_spec = int(_get(meta, "num_spec_decodes") or 0)
    num_actual_tokens = int(_get(meta, "num_actual_tokens") or 0)
    n_ns_real = num_prefills + num_decodes
    if pad_to is not None:
        given = pad_to
        try:
            if isinstance(given, bool):
                raise TypeError
            pad_to = operator.index(given)
        except TypeError:
            _fail(f"pad_to must be an integer or None, got {given!r}")
        if pad_to < max(n_ns_real, num_spec):
            _fail(f"pad_to ({pad_to}) must be at least each group's sequence count "
                  f"({n_ns_real} non_spec, {num_spec} spec)")

    n_ns, ns_state, ns_qsl = _group(
        "non_spec", n_ns_real, _get(meta, "non_spec_state_indices_tensor"), _get(meta, "non_spec_query_start_loc"),
        pad_to if n_ns_real > 0 else None, pad_slot_id,
    )
    n_sp, sp_state, sp_qsl = _group(
        "spec", num_spec, _get(meta, "spec_state_indices_tensor"), _get(meta, "spec_query_start_loc"),
        pad_to if num_spec > 0 else None, pad_slot_id,
    )

    has_initial_state = _get(meta, "has_initial_state") if n_ns > 0 else None
    if has_initial_state is not None:
        has_initial_state = _padded("has_initial_state", has_initial_state, n_ns_real, n_ns, False,
                                    pad_to is not None)

    num_accepted_tokens = None
    if n_sp > 0:
        num_accepted_tokens = _get(meta, "num_accepted_tokens")
        if num_accepted_tokens is None:
            _fail("spec sequences but num_accepted_tokens is None")
        num_accepted_tokens = _padded("num_accepted_tokens", num_accepted_tokens, num_spec, n_sp, 1,
                                      pad_to is not None)

    return {
        "num_prefills": num_prefills if n_ns > 0 else 0,
        "num_decodes": n_ns - num_prefills if n_ns > 0 else 0,
        "num_spec_decodes": n_sp,
        "has_initial_state": has_initial_state,
        "non_spec_query_start_loc": ns_qsl,
        # vLLM hands an empty remap when there is no non-spec token: pass none for an empty group.
        "non_spec_token_indx": _get(meta, "non_spec_token_indx") if n_ns > 0 else None,
        "non_spec_state_indices_tensor": ns_state,
        "spec_query_start_loc": sp_qsl,
        "spec_token_indx": _get(meta, "spec_token_indx") if n_sp > 0 else None,
        "spec_state_indices_tensor": sp_state,
        "num_accepted_tokens": num_accepted_tokens,
        "num_actual_tokens": num_actual_tokens,
    }
