"""attention_args_from_vllm_metadata: gdn_attention's metadata arguments from a vLLM-style
GDNAttentionMetadata, including vLLM's CUDA-graph padding (padded slot rows, repeated query start
locations, num_accepted_tokens 1, real counts) and strided/int64 index tensors."""

from types import SimpleNamespace

import pytest
import torch

import gdn_kernels
from gdn_kernels import PAD_SLOT_ID, attention_args_from_vllm_metadata
from golden import bit_equal
from samples import attention_args
from test_composition import as_kwargs

LAYER_KEYS = ["core_attn_out", "z", "projected_states_qkvz", "projected_states_ba", "num_k_heads", "num_v_heads",
              "head_k_dim", "head_v_dim", "conv_state", "ssm_state", "conv_weights", "conv_bias", "activation",
              "A_log", "dt_bias", "tp_size", "reorder_input", "spec_conv_layout"]


def vllm_metadata(kw):
    """The GDNAttentionMetadata vLLM would hand over for this call (extra fields included)."""
    n_spec = kw["num_spec_decodes"]
    return SimpleNamespace(
        num_prefills=kw["num_prefills"], num_prefill_tokens=0, num_decodes=kw["num_decodes"], num_decode_tokens=0,
        num_spec_decodes=n_spec, num_spec_decode_tokens=0, num_actual_tokens=kw["num_actual_tokens"],
        has_initial_state=kw["has_initial_state"] if kw["num_prefills"] > 0 else None,
        spec_query_start_loc=kw["spec_query_start_loc"], non_spec_query_start_loc=kw["non_spec_query_start_loc"],
        spec_state_indices_tensor=kw["spec_state_indices_tensor"],
        non_spec_state_indices_tensor=kw["non_spec_state_indices_tensor"],
        spec_sequence_masks=None, spec_token_indx=kw["spec_token_indx"],
        non_spec_token_indx=(kw["non_spec_token_indx"] if kw["non_spec_token_indx"] is not None
                             else torch.empty(0, dtype=torch.int32)),
        num_accepted_tokens=kw["num_accepted_tokens"], nums_dict=None, batch_ptr=None, token_chunk_offset_ptr=None)


def run_direct(case):
    kw = as_kwargs(attention_args(case))
    gdn_kernels.gdn_attention(**kw)
    return kw


def run_with_meta(case, edit=None, **helper_kw):
    kw = as_kwargs(attention_args(case))
    meta = vllm_metadata(kw)
    if edit:
        edit(meta)
    layer = {k: kw[k] for k in LAYER_KEYS}
    gdn_kernels.gdn_attention(**layer, **attention_args_from_vllm_metadata(meta, **helper_kw))
    return kw


def assert_same(a, b, what):
    for name in ("core_attn_out", "z", "conv_state", "ssm_state"):
        assert bit_equal(a[name], b[name]), f"{what}: {name} differs"


CASES = ["attention_mixed_interleaved", "attention_prefill_decode_block", "attention_spec_block_layout",
         "attention_qwen3next_shape"]


@pytest.mark.parametrize("case", CASES)
def test_metadata_helper_matches_direct_call(case):
    assert_same(run_direct(case), run_with_meta(case), case)


@pytest.mark.parametrize("case", CASES)
def test_pad_to_adds_padding_sequences(case):
    assert_same(run_direct(case), run_with_meta(case, pad_to=9), case)


def test_vllm_padded_spec_only_graph_batch():
    """vLLM pads a verify-only batch to the graph size: slots PAD_SLOT_ID, qsl repeating its last
    value, num_accepted_tokens 1, num_spec_decodes the real count."""

    def pad(meta):
        n, size = meta.num_spec_decodes, 12
        meta.spec_state_indices_tensor = torch.cat(
            [meta.spec_state_indices_tensor,
             torch.full((size - n, meta.spec_state_indices_tensor.shape[1]), PAD_SLOT_ID, dtype=torch.int32)])
        last = meta.spec_query_start_loc[-1:]
        meta.spec_query_start_loc = torch.cat([meta.spec_query_start_loc, last.expand(size - n)])
        meta.num_accepted_tokens = torch.cat([meta.num_accepted_tokens, torch.ones(size - n, dtype=torch.int32)])

    kw = as_kwargs(attention_args("attention_spec_block_layout"))
    args = attention_args_from_vllm_metadata(vllm_metadata(kw))
    assert args["num_spec_decodes"] == 4 and args["non_spec_state_indices_tensor"] is None
    meta = vllm_metadata(kw)
    pad(meta)
    args = attention_args_from_vllm_metadata(meta)
    assert args["num_spec_decodes"] == 12 and args["spec_query_start_loc"].shape[0] == 13
    assert args["non_spec_token_indx"] is None  # vLLM's empty remap for an empty group
    assert_same(run_direct("attention_spec_block_layout"), run_with_meta("attention_spec_block_layout", pad),
                "padded")


def test_strided_block_table_column_and_int64_remaps():
    """non_spec_state_indices_tensor = block_table[:, 0] (a strided view) and argsort's int64 remaps."""

    def edit(meta):
        slots = meta.non_spec_state_indices_tensor
        table = torch.full((slots.shape[0], 5), 99, dtype=torch.int32)
        table[:, 0] = slots
        meta.non_spec_state_indices_tensor = table[:, 0]
        assert meta.non_spec_state_indices_tensor.stride() == (5,)
        meta.non_spec_token_indx = meta.non_spec_token_indx.long()
        meta.spec_token_indx = meta.spec_token_indx.long()

    assert_same(run_direct("attention_mixed_interleaved"), run_with_meta("attention_mixed_interleaved", edit),
                "strided")


def test_dict_metadata():
    kw = as_kwargs(attention_args("attention_mixed_interleaved"))
    as_dict = vars(vllm_metadata(kw))
    a = attention_args_from_vllm_metadata(as_dict)
    b = attention_args_from_vllm_metadata(vllm_metadata(kw))
    assert a.keys() == b.keys() and a["num_spec_decodes"] == 3 and a["num_prefills"] == 2


def test_inconsistent_metadata_raises():
    kw = as_kwargs(attention_args("attention_mixed_interleaved"))
    meta = vllm_metadata(kw)
    meta.spec_state_indices_tensor = None
    with pytest.raises(ValueError, match="spec_state_indices_tensor is None"):
        attention_args_from_vllm_metadata(meta)
    meta = vllm_metadata(kw)
    meta.non_spec_query_start_loc = meta.non_spec_query_start_loc[:2]
    with pytest.raises(ValueError, match="non_spec_query_start_loc"):
        attention_args_from_vllm_metadata(meta)
    meta = vllm_metadata(kw)
    meta.num_accepted_tokens = None
    with pytest.raises(ValueError, match="num_accepted_tokens"):
        attention_args_from_vllm_metadata(meta)


@pytest.mark.parametrize("pad_to", [None, 9])
@pytest.mark.parametrize("field,keep", [("has_initial_state", 1), ("num_accepted_tokens", 1),
                                        ("non_spec_query_start_loc", 2), ("spec_query_start_loc", 3),
                                        ("spec_state_indices_tensor", 2)])
def test_metadata_short_for_the_real_sequences_raises(field, keep, pad_to):
    """A tensor with fewer entries than the real sequences need is an error, with or without pad_to
    (padding is for sequences past the real count, never in place of real entries)."""
    meta = vllm_metadata(as_kwargs(attention_args("attention_mixed_interleaved")))
    setattr(meta, field, getattr(meta, field)[:keep])
    with pytest.raises(ValueError, match=field):
        attention_args_from_vllm_metadata(meta, pad_to=pad_to)


def test_bad_pad_to_and_shapes_raise():
    kw = as_kwargs(attention_args("attention_mixed_interleaved"))
    for bad in (1, 0, -3):  # below the group's counts (3 non_spec, 3 spec)
        with pytest.raises(ValueError, match="pad_to"):
            attention_args_from_vllm_metadata(vllm_metadata(kw), pad_to=bad)
    for bad in (True, 9.0, "9"):
        with pytest.raises(ValueError, match="pad_to must be an integer"):
            attention_args_from_vllm_metadata(vllm_metadata(kw), pad_to=bad)
    meta = vllm_metadata(kw)
    meta.non_spec_state_indices_tensor = meta.non_spec_state_indices_tensor[0]  # 0-dim
    with pytest.raises(ValueError, match="0-dim"):
        attention_args_from_vllm_metadata(meta)
    meta = vllm_metadata(kw)
    meta.non_spec_query_start_loc = meta.non_spec_query_start_loc[:0]
    with pytest.raises(ValueError, match="non_spec_query_start_loc has 0 entries"):
        attention_args_from_vllm_metadata(meta, pad_to=9)
    assert attention_args_from_vllm_metadata(vllm_metadata(kw), pad_to=3)["num_spec_decodes"] == 3
