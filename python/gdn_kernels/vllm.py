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


def _group(name, count, state, qsl, pad_to, pad_slot_id):
    """Sequence count of one group (padded sequences included) and its sliced/padded tensors."""
    if state is None or qsl is None:
        if count > 0:
            missing = f"{name}_state_indices_tensor" if state is None else f"{name}_query_start_loc"
            raise ValueError(f"attention_args_from_vllm_metadata: {count} {name} sequences but {missing} is None")
        return 0, None, None
    n = state.shape[0]
    if pad_to is not None and pad_to > n:
        state = _pad_rows(state, pad_to, pad_slot_id)
        n = pad_to
    qsl = _pad_qsl(qsl, n) if pad_to is not None else qsl
    if n < count:
        raise ValueError(
            f"attention_args_from_vllm_metadata: {name}_state_indices_tensor has {n} rows, fewer than the "
            f"{count} {name} sequences"
        )
    if qsl.shape[0] < n + 1:
        raise ValueError(
            f"attention_args_from_vllm_metadata: {name}_query_start_loc has {qsl.shape[0]} entries, "
            f"fewer than {n + 1} for {n} sequences"
        )
    return n, state, qsl[: n + 1]


def attention_args_from_vllm_metadata(
    meta: Any, *, pad_to: Optional[int] = None, pad_slot_id: int = PAD_SLOT_ID
) -> Dict[str, Any]:
    """The metadata arguments of :func:`gdn_kernels.gdn_attention` from vLLM's GDN metadata.

    Args:
        meta: a ``GDNAttentionMetadata`` or any object (or dict) with its fields (see the module
            doc). Tensors are used as they are (int32 or int64, strided rows of a block table
            included); nothing is copied unless ``pad_to`` asks for padding.
        pad_to: pad each present sequence group (non-speculative, speculative) to this many
            sequences, as vLLM does for a full CUDA graph: slots ``pad_slot_id``, query start
            locations repeating the last value, ``num_accepted_tokens`` 1, ``has_initial_state``
            False. This makes new tensors: for a graph, pad the graph's own static buffers instead
            (as vLLM does) and pass metadata that is already padded.
        pad_slot_id: the slot id of padding sequences (vLLM's PAD_SLOT_ID, -1).

    Returns:
        A dict with the keys ``num_prefills``, ``num_decodes``, ``num_spec_decodes``,
        ``has_initial_state``, ``non_spec_query_start_loc``, ``non_spec_token_indx``,
        ``non_spec_state_indices_tensor``, ``spec_query_start_loc``, ``spec_token_indx``,
        ``spec_state_indices_tensor``, ``num_accepted_tokens`` and ``num_actual_tokens``, to pass as
        keyword arguments: ``gdn_attention(core_attn_out, z, ..., tp_size=tp, reorder_input=r,
        **attention_args_from_vllm_metadata(meta))``. Padding sequences of the non-speculative group
        are counted as decodes.

    Raises:
        ValueError: a count that the tensors cannot describe (a missing tensor, too few rows).
    """
    num_prefills = int(_get(meta, "num_prefills") or 0)
    num_decodes = int(_get(meta, "num_decodes") or 0)
    num_spec = int(_get(meta, "num_spec_decodes") or 0)
    num_actual_tokens = int(_get(meta, "num_actual_tokens") or 0)

    n_ns, ns_state, ns_qsl = _group(
        "non_spec", num_prefills + num_decodes, _get(meta, "non_spec_state_indices_tensor"),
        _get(meta, "non_spec_query_start_loc"), pad_to if num_prefills + num_decodes > 0 else None, pad_slot_id,
    )
    n_sp, sp_state, sp_qsl = _group(
        "spec", num_spec, _get(meta, "spec_state_indices_tensor"), _get(meta, "spec_query_start_loc"),
        pad_to if num_spec > 0 else None, pad_slot_id,
    )

    has_initial_state = _get(meta, "has_initial_state") if n_ns > 0 else None
    if has_initial_state is not None:
        if has_initial_state.shape[0] < n_ns:
            if pad_to is None:
                raise ValueError(
                    f"attention_args_from_vllm_metadata: has_initial_state has {has_initial_state.shape[0]} "
                    f"entries, fewer than the {n_ns} non_spec sequences"
                )
            has_initial_state = _pad_rows(has_initial_state, n_ns, False)
        has_initial_state = has_initial_state[:n_ns]

    num_accepted_tokens = None
    if n_sp > 0:
        num_accepted_tokens = _get(meta, "num_accepted_tokens")
        if num_accepted_tokens is None:
            raise ValueError("attention_args_from_vllm_metadata: spec sequences but num_accepted_tokens is None")
        if pad_to is not None:
            num_accepted_tokens = _pad_rows(num_accepted_tokens, n_sp, 1)
        if num_accepted_tokens.shape[0] < n_sp:
            raise ValueError(
                f"attention_args_from_vllm_metadata: num_accepted_tokens has {num_accepted_tokens.shape[0]} "
                f"entries, fewer than the {n_sp} spec sequences"
            )
        num_accepted_tokens = num_accepted_tokens[:n_sp]

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
