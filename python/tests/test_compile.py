"""torch.compile(fullgraph=True) of functions that call the gdn ops: gdn_attention (mutating four
arguments, returning nothing) and a decode step made of the functional primitives. The compiled
function must give the eager bytes for the op results and pools. Needs torch >= 2.0 (fakes)."""

import pytest
import torch

import gdn_kernels
from conftest import DEVICES
from golden import bit_equal, rel_l2
from samples import attention_args, conv_update_args, recurrent_args, to_device
from test_composition import as_kwargs

pytestmark = pytest.mark.skipif(not hasattr(torch, "compile") or gdn_kernels.FAKE_REGISTRATION is None,
                                reason=f"torch.compile needs torch >= 2.0 (have {torch.__version__})")

# aot_eager: functionalization with the fake implementations, on any device. inductor: the full
# compiler, on CUDA only (its CPU code generation needs a host toolchain and Python headers that a
# test machine need not have; the op itself is opaque to inductor either way).
BACKENDS = ["aot_eager", "inductor"]
LAYER = ["projected_states_qkvz", "projected_states_ba", "num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim",
         "conv_weights", "conv_bias", "activation", "A_log", "dt_bias", "tp_size", "reorder_input", "spec_conv_layout"]
META = ["num_prefills", "num_decodes", "num_spec_decodes", "has_initial_state", "non_spec_query_start_loc",
        "non_spec_token_indx", "non_spec_state_indices_tensor", "spec_query_start_loc", "spec_token_indx",
        "spec_state_indices_tensor", "num_accepted_tokens", "num_actual_tokens"]


def skip_cpu_inductor(device, backend):
    if backend == "inductor" and device == "cpu":
        pytest.skip("inductor is exercised on CUDA (see BACKENDS)")


def layer_core(conv_state, ssm_state, rows, layer, meta):
    H = layer["num_v_heads"] // layer["tp_size"]
    qkvz = layer["projected_states_qkvz"]
    core_attn_out = torch.zeros((rows, H, layer["head_v_dim"]), dtype=qkvz.dtype, device=qkvz.device)
    z = torch.zeros_like(core_attn_out)  # rows >= num_actual_tokens are never written: start them equal
    gdn_kernels.gdn_attention(core_attn_out, z, qkvz, layer["projected_states_ba"], layer["num_k_heads"],
                              layer["num_v_heads"], layer["head_k_dim"], layer["head_v_dim"], conv_state, ssm_state,
                              layer["conv_weights"], layer["conv_bias"], layer["activation"], layer["A_log"],
                              layer["dt_bias"], meta["num_prefills"], meta["num_decodes"], meta["num_spec_decodes"],
                              meta["has_initial_state"], meta["non_spec_query_start_loc"], meta["non_spec_token_indx"],
                              meta["non_spec_state_indices_tensor"], meta["spec_query_start_loc"],
                              meta["spec_token_indx"], meta["spec_state_indices_tensor"], meta["num_accepted_tokens"],
                              meta["num_actual_tokens"], layer["tp_size"], layer["reorder_input"],
                              spec_conv_layout=layer["spec_conv_layout"])
    n = meta["num_actual_tokens"]
    gated = core_attn_out[:n].float() * torch.sigmoid(z[:n].float())  # something for inductor to fuse
    return core_attn_out, z, gated


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", ["attention_mixed_interleaved", "attention_spec_block_layout"])
def test_compile_fullgraph_gdn_attention(case, device, backend):
    skip_cpu_inductor(device, backend)
    torch._dynamo.reset()
    kw = as_kwargs(to_device(attention_args(case), device))
    layer = {k: kw[k] for k in LAYER}
    meta = {k: kw[k] for k in META}
    rows = kw["core_attn_out"].shape[0]
    eager_states = (kw["conv_state"].clone(), kw["ssm_state"].clone())
    comp_states = (kw["conv_state"].clone(), kw["ssm_state"].clone())
    ref = layer_core(*eager_states, rows, layer, meta)
    compiled = torch.compile(layer_core, fullgraph=True, backend=backend)
    got = compiled(*comp_states, rows, layer, meta)
    for a, b, name in zip(got[:2] + comp_states, ref[:2] + eager_states, ["core_attn_out", "z", "conv", "ssm"]):
        assert bit_equal(a, b), f"{case} {backend}: {name} differs from eager"
    assert rel_l2(got[2], ref[2]) <= 1e-6


def decode_step(x, q, k, v, a, b, conv_args, rec_args):
    """A decode/verify step of primitives: y = conv(x) feeds nothing but is returned; o from q..b."""
    y = gdn_kernels.causal_conv1d_update(x, conv_args["weight"], conv_args["bias"], conv_state=conv_args["conv_state"],
                                         query_start_loc=conv_args["qsl"], state_indices=conv_args["slots"],
                                         num_accepted_tokens=conv_args["nat"], spec_layout="rolling")
    o = gdn_kernels.gated_delta_rule_recurrent(q, k, v, a, b, A_log=rec_args["A_log"], dt_bias=rec_args["dt_bias"],
                                               ssm_state=rec_args["ssm_state"], query_start_loc=rec_args["qsl"],
                                               state_indices=rec_args["slots"], num_accepted_tokens=rec_args["nat"])
    return y * 2, o + 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_primitives(device, backend):
    skip_cpu_inductor(device, backend)
    torch._dynamo.reset()

    def make():
        c = to_device(conv_update_args(), device)
        r = to_device(recurrent_args(), device)
        conv = dict(weight=c[1], bias=c[2], conv_state=c[3], qsl=c[4], slots=c[5], nat=c[6])
        rec = dict(A_log=r[5], dt_bias=r[6], ssm_state=r[7], qsl=r[8], slots=r[9], nat=r[10])
        return (c[0], r[0], r[1], r[2], r[3], r[4], conv, rec)

    eager, comp = make(), make()
    ref = decode_step(*eager)
    got = torch.compile(decode_step, fullgraph=True, backend=backend)(*comp)
    assert rel_l2(got[0], ref[0]) == 0 and rel_l2(got[1], ref[1]) <= 1e-7
    assert bit_equal(comp[6]["conv_state"], eager[6]["conv_state"])
    assert bit_equal(comp[7]["ssm_state"], eager[7]["ssm_state"])
