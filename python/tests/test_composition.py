"""gdn_attention equals the composition of the primitive torch ops, bit for bit on the CPU
(docs/contract.md §4: the conv output is rounded to the activation dtype before the recurrence), and the
interleaved (Qwen3-Next) and block (Qwen3.5/3.6) projection layouts give the same bytes."""

import pytest
import torch

import gdn_kernels
from golden import bit_equal
from samples import attention_args

ATTENTION_CASES = ["attention_mixed_interleaved", "attention_prefill_decode_block", "attention_spec_block_layout",
                   "attention_qwen3next_shape"]

# Positions of gdn_attention's arguments (samples.attention_args order = the schema's).
NAMES = ["core_attn_out", "z", "projected_states_qkvz", "projected_states_ba", "num_k_heads", "num_v_heads",
         "head_k_dim", "head_v_dim", "conv_state", "ssm_state", "conv_weights", "conv_bias", "activation", "A_log",
         "dt_bias", "num_prefills", "num_decodes", "num_spec_decodes", "has_initial_state",
         "non_spec_query_start_loc", "non_spec_token_indx", "non_spec_state_indices_tensor",
         "spec_query_start_loc", "spec_token_indx", "spec_state_indices_tensor", "num_accepted_tokens",
         "num_actual_tokens", "tp_size", "reorder_input", "null_block_id", "spec_conv_layout"]


def as_kwargs(args):
    return dict(zip(NAMES, args))


def interleaved_to_block(kw):
    """Permutes the projections of an interleaved case into the block layout."""
    H = kw["num_k_heads"] // kw["tp_size"]
    HV = kw["num_v_heads"] // kw["tp_size"]
    K, V, r = kw["head_k_dim"], kw["head_v_dim"], HV // H
    qkvz = kw["projected_states_qkvz"].view(-1, H, 2 * K + 2 * r * V)
    q, k = qkvz[..., :K], qkvz[..., K:2 * K]
    v, z = qkvz[..., 2 * K:2 * K + r * V], qkvz[..., 2 * K + r * V:]
    rows = qkvz.shape[0]
    ba = kw["projected_states_ba"].view(-1, H, 2 * r)
    out = dict(kw)
    out["projected_states_qkvz"] = torch.cat(
        [t.reshape(rows, -1) for t in (q, k, v, z)], dim=1).contiguous()
    out["projected_states_ba"] = torch.cat([ba[..., :r].reshape(rows, -1), ba[..., r:].reshape(rows, -1)],
                                           dim=1).contiguous()
    out["reorder_input"] = True
    return out


def composition(kw):
    """gdn_attention(kw) (block layout) as causal_conv1d_* + gated_delta_rule_recurrent."""
    H = kw["num_k_heads"] // kw["tp_size"]
    HV = kw["num_v_heads"] // kw["tp_size"]
    K, V = kw["head_k_dim"], kw["head_v_dim"]
    qkvz, ba = kw["projected_states_qkvz"], kw["projected_states_ba"]
    D = 2 * H * K + HV * V
    x_all, z_all = qkvz[:, :D], qkvz[:, D:].reshape(-1, HV, V)
    b_all, a_all = ba[:, :HV], ba[:, HV:]
    nat = kw["num_actual_tokens"]
    core, z = kw["core_attn_out"], kw["z"]
    z[:nat] = z_all[:nat]

    def rows_of(qsl, indx):
        n = int(qsl[-1])
        return indx[:n].long() if indx is not None else torch.arange(n)

    def recurrence(y, rows, **extra):
        T = y.shape[0]
        q, k = y[:, :H * K].reshape(T, H, K), y[:, H * K:2 * H * K].reshape(T, H, K)
        v = y[:, 2 * H * K:].reshape(T, HV, V)
        core[rows] = gdn_kernels.gated_delta_rule_recurrent(
            q, k, v, a_all[rows], b_all[rows], A_log=kw["A_log"], dt_bias=kw["dt_bias"], ssm_state=kw["ssm_state"],
            **extra)

    if kw["num_prefills"] + kw["num_decodes"] > 0:
        qsl, slots = kw["non_spec_query_start_loc"], kw["non_spec_state_indices_tensor"]
        rows = rows_of(qsl, kw["non_spec_token_indx"])
        y = gdn_kernels.causal_conv1d_fwd(x_all[rows], kw["conv_weights"], kw["conv_bias"],
                                          conv_state=kw["conv_state"], query_start_loc=qsl, state_indices=slots,
                                          has_initial_state=kw["has_initial_state"], activation=kw["activation"])
        recurrence(y, rows, query_start_loc=qsl, state_indices=slots, has_initial_state=kw["has_initial_state"])
    if kw["num_spec_decodes"] > 0:
        qsl, slots = kw["spec_query_start_loc"], kw["spec_state_indices_tensor"]
        rows = rows_of(qsl, kw["spec_token_indx"])
        y = gdn_kernels.causal_conv1d_update(x_all[rows], kw["conv_weights"], kw["conv_bias"],
                                             conv_state=kw["conv_state"], query_start_loc=qsl, state_indices=slots,
                                             num_accepted_tokens=kw["num_accepted_tokens"],
                                             spec_layout=kw["spec_conv_layout"],
                                             activation=kw["activation"])
        recurrence(y, rows, query_start_loc=qsl, state_indices=slots, num_accepted_tokens=kw["num_accepted_tokens"])


def block_kwargs(case):
    kw = as_kwargs(attention_args(case))
    return kw if kw["reorder_input"] else interleaved_to_block(kw)


@pytest.mark.parametrize("layout", ["rolling", "per_token"])
@pytest.mark.parametrize("case", ATTENTION_CASES)
def test_gdn_attention_equals_composition(case, layout):
    """Both verify conv layouts (the cases' pools have rows for either)."""
    fused = block_kwargs(case)
    composed = block_kwargs(case)
    fused["spec_conv_layout"] = composed["spec_conv_layout"] = layout
    gdn_kernels.gdn_attention(**fused)
    composition(composed)
    for name in ("core_attn_out", "z", "conv_state", "ssm_state"):
        assert bit_equal(fused[name], composed[name]), f"{case}: {name} differs from the composition"


@pytest.mark.parametrize("case", [c for c in ATTENTION_CASES if c.endswith(("interleaved", "shape"))])
def test_interleaved_equals_block_layout(case):
    inter = as_kwargs(attention_args(case))
    assert not inter["reorder_input"]
    block = interleaved_to_block(as_kwargs(attention_args(case)))
    gdn_kernels.gdn_attention(**inter)
    gdn_kernels.gdn_attention(**block)
    for name in ("core_attn_out", "z", "conv_state", "ssm_state"):
        assert bit_equal(inter[name], block[name]), f"{case}: {name} differs between layouts"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_log_in_the_model_dtype(dtype):
    """A_log as a bf16 / fp16 checkpoint keeps it: the float32 run of the same values, byte for byte."""
    low, ref = block_kwargs(ATTENTION_CASES[0]), block_kwargs(ATTENTION_CASES[0])
    low["A_log"] = ref["A_log"].to(dtype)
    ref["A_log"] = low["A_log"].float()
    gdn_kernels.gdn_attention(**low)
    gdn_kernels.gdn_attention(**ref)
    for name in ("core_attn_out", "z", "conv_state", "ssm_state"):
        assert bit_equal(low[name], ref[name]), f"A_log {dtype}: {name} differs from the float32 run"
