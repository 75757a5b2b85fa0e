"""Bad arguments raise RuntimeError whose message names the op, the argument, what was expected and
what was given (the core's validation, docs/contract.md §5); a failed call changes nothing."""

import pytest
import torch

import gdn_kernels
from golden import GOLDEN_DIR, Case, bit_equal


@pytest.fixture
def conv():
    return Case(GOLDEN_DIR / "conv_prefill_f32.safetensors")


@pytest.fixture
def rec():
    return Case(GOLDEN_DIR / "recurrent_spec_vk_f32.safetensors")


@pytest.fixture
def attn():
    return Case(GOLDEN_DIR / "attention_spec_block_layout.safetensors")


def conv_fwd(c, **over):
    kw = dict(x=c.input("x"), weight=c.input("weight"), bias=c.input("bias"), conv_state=c.input("conv_state"),
              query_start_loc=c.input("query_start_loc"), state_indices=c.input("state_indices"),
              has_initial_state=c.input("has_initial_state"))
    kw.update(over)
    x, w, b = kw.pop("x"), kw.pop("weight"), kw.pop("bias")
    return gdn_kernels.causal_conv1d_fwd(x, w, b, **kw)


def recurrent(c, **over):
    kw = dict(A_log=c.input("A_log"), dt_bias=c.input("dt_bias"), ssm_state=c.input("ssm_state"),
              query_start_loc=c.input("query_start_loc"), state_indices=c.input("state_indices"),
              num_accepted_tokens=c.input("num_accepted_tokens"))
    kw.update(over)
    args = [kw.pop(n) if n in kw else c.input(n) for n in ("q", "k", "v", "a", "b")]
    return gdn_kernels.gated_delta_rule_recurrent(*args, **kw)


def attention(c, **over):
    p = c.params
    rows = c.expected("core_attn_out").shape[0]
    kw = dict(core_attn_out=torch.zeros(rows, 6, 16, dtype=torch.bfloat16),
              z=torch.zeros(rows, 6, 16, dtype=torch.bfloat16),
              projected_states_qkvz=c.input("projected_states_qkvz"), projected_states_ba=c.input("projected_states_ba"),
              num_k_heads=2, num_v_heads=6, head_k_dim=32, head_v_dim=16, conv_state=c.input("conv_state"),
              ssm_state=c.input("ssm_state"), conv_weights=c.input("conv_weights"), conv_bias=None, activation="silu",
              A_log=c.input("A_log"), dt_bias=c.input("dt_bias"), num_prefills=0, num_decodes=0,
              num_spec_decodes=p["num_spec_decodes"], has_initial_state=None, non_spec_query_start_loc=None,
              non_spec_token_indx=None, non_spec_state_indices_tensor=None,
              spec_query_start_loc=c.input("spec_query_start_loc"), spec_token_indx=c.input("spec_token_indx"),
              spec_state_indices_tensor=c.input("spec_state_indices"),
              num_accepted_tokens=c.input("num_accepted_tokens"), num_actual_tokens=p["num_actual_tokens"],
              tp_size=1, reorder_input=True)
    kw.update(over)
    gdn_kernels.gdn_attention(**kw)
    return kw


def raises(fn, *needles):
    with pytest.raises(RuntimeError) as info:
        fn()
    msg = str(info.value)
    for n in needles:
        assert n in msg, f"message {msg!r} lacks {n!r}"
    return msg


def test_unsupported_index_dtype(conv):
    raises(lambda: conv_fwd(conv, state_indices=conv.input("state_indices").to(torch.int16)),
           "causal_conv1d_fwd", "state_indices", "indices: int32 or int64", "got int16")


def test_unsupported_dtype_of_activation(conv):
    raises(lambda: conv_fwd(conv, x=conv.input("x").to(torch.complex64)), "causal_conv1d_fwd", "x", "complex64")


def test_too_many_dims(conv):
    raises(lambda: conv_fwd(conv, x=conv.input("x")[None, None, None]), "x", "at most 4 dimensions")


def test_dtype_mismatch_names_argument_expected_and_given(conv):
    raises(lambda: conv_fwd(conv, weight=conv.input("weight").double()),
           "causal_conv1d_fwd: weight must be float32", "(the dtype of x)", "got float64 [48, 4]")


def test_wrong_length_of_query_start_loc(conv):
    raises(lambda: conv_fwd(conv, query_start_loc=conv.input("query_start_loc")[:-1]),
           "query_start_loc", "[n+1] = [6]", "got int32 [5]")


def test_has_initial_state_must_be_bool(conv):
    raises(lambda: conv_fwd(conv, has_initial_state=conv.input("has_initial_state").int()),
           "has_initial_state must be bool", "got int32")


def test_non_dense_inner_dims(conv):
    raises(lambda: conv_fwd(conv, x=conv.input("x").t().contiguous().t()), "x must be dense")


def test_out_buffer_of_wrong_shape(conv):
    raises(lambda: conv_fwd(conv, out=torch.empty(3, 3)), "y must be float32 [T, D] = [43, 48]", "got float32 [3, 3]")


def test_unknown_strings(conv, rec):
    raises(lambda: conv_fwd(conv, activation="gelu"), "causal_conv1d_fwd", "activation", "gelu")
    raises(lambda: gdn_kernels.causal_conv1d_update(
        conv.input("x"), conv.input("weight"), conv.input("bias"), conv_state=conv.input("conv_state"),
        query_start_loc=conv.input("query_start_loc"), state_indices=conv.input("state_indices"),
        spec_layout="ring"), "causal_conv1d_update", "spec_layout", "ring")
    raises(lambda: recurrent(rec, state_layout="xy"), "gated_delta_rule_recurrent", "state_layout", "xy")


def test_verify_pair_both_or_neither(rec):
    raises(lambda: recurrent(rec, num_accepted_tokens=None),
           "state_indices [n, cols] (verify) requires num_accepted_tokens", "absent")


def test_chunked_rejects_verify_slots(rec):
    c = rec
    raises(lambda: gdn_kernels.gated_delta_rule_chunked(
        c.input("q"), c.input("k"), c.input("v"), c.input("a"), c.input("b"), A_log=c.input("A_log"),
        dt_bias=c.input("dt_bias"), ssm_state=c.input("ssm_state"), query_start_loc=c.input("query_start_loc"),
        state_indices=c.input("state_indices")), "gated_delta_rule_chunked", "state_indices")


def test_bad_scale(rec):
    raises(lambda: recurrent(rec, scale=-1.0), "scale must be finite and > 0")


def test_attention_missing_optional(attn):
    raises(lambda: attention(attn, spec_state_indices_tensor=None),
           "gdn_attention: spec_state_indices_tensor must be int32 or int64 [num_spec_decodes, cols] = [4, *]",
           "got absent")
    raises(lambda: attention(attn, num_accepted_tokens=None), "num_accepted_tokens", "got absent")


def test_attention_wrong_slot_shape_spec_example(attn):
    bad = attn.input("spec_state_indices")[:3].long()
    raises(lambda: attention(attn, spec_state_indices_tensor=bad), "spec_state_indices_tensor", "got int64 [3, 3]")


def test_attention_tp_size(attn):
    raises(lambda: attention(attn, tp_size=4), "gdn_attention", "tp_size")


def test_failed_call_changes_nothing(conv, attn):
    state = conv.input("conv_state")
    before = state.clone()
    out = torch.full((43, 48), 5.0)
    raises(lambda: conv_fwd(conv, conv_state=state, out=out, has_initial_state=conv.input("has_initial_state").int()))
    assert bit_equal(state, before) and torch.equal(out, torch.full((43, 48), 5.0))

    conv_state, ssm_state = attn.input("conv_state"), attn.input("ssm_state")
    c0, s0 = conv_state.clone(), ssm_state.clone()
    rows = attn.expected("core_attn_out").shape[0]
    core = torch.full((rows, 6, 16), 2.0, dtype=torch.bfloat16)
    z = core.clone()
    raises(lambda: attention(attn, conv_state=conv_state, ssm_state=ssm_state, core_attn_out=core, z=z,
                             num_accepted_tokens=attn.input("num_accepted_tokens")[:2]))
    assert bit_equal(conv_state, c0) and bit_equal(ssm_state, s0)
    assert torch.equal(core, torch.full_like(core, 2.0)) and torch.equal(z, torch.full_like(z, 2.0))


def test_written_tensors_must_not_overlap(rec, attn):
    """An output inside a pool (or two outputs in one buffer) is an error naming both, and nothing is
    written; the same call with separate memory runs."""
    state = rec.input("ssm_state")
    T, HV, V = rec.input("v").shape
    flat = state.view(-1)
    before = state.clone()
    raises(lambda: recurrent(rec, ssm_state=state, out=flat[: T * HV * V].view(T, HV, V)),
           "gated_delta_rule_recurrent", "o must be", "does not overlap ssm_state")
    assert bit_equal(state, before)
    recurrent(rec, ssm_state=state, out=torch.empty(T, HV, V, dtype=rec.input("q").dtype))

    rows = attn.expected("core_attn_out").shape[0]
    both = torch.full((2 * rows, 6, 16), 3.0, dtype=torch.bfloat16)
    conv_state, ssm_state = attn.input("conv_state"), attn.input("ssm_state")
    c0, s0 = conv_state.clone(), ssm_state.clone()
    raises(lambda: attention(attn, conv_state=conv_state, ssm_state=ssm_state, core_attn_out=both[:rows],
                             z=both[1:rows + 1]), "gdn_attention", "z must be", "does not overlap core_attn_out")
    assert bit_equal(conv_state, c0) and bit_equal(ssm_state, s0) and torch.equal(both, torch.full_like(both, 3.0))
    attention(attn, conv_state=conv_state, ssm_state=ssm_state, core_attn_out=both[:rows], z=both[rows:])


def test_schema_errors_raise_like_torch(conv):
    """A missing required argument is torch's own error (the schemas are plain TORCH_LIBRARY schemas)."""
    with pytest.raises((RuntimeError, TypeError)):
        torch.ops.gdn.causal_conv1d_fwd(conv.input("x"))


def test_scale_outside_float32(rec):
    raises(lambda: recurrent(rec, scale=1e300), "scale must be finite and > 0 in float32")


def test_pointer_off_its_element_boundary(rec):
    q = rec.input("q")
    raw = torch.zeros(q.numel() * 4 + 4, dtype=torch.uint8)
    off = torch.frombuffer(memoryview(raw.numpy()), dtype=torch.float32, count=q.numel(), offset=1).view(q.shape)
    off.copy_(q)
    assert off.data_ptr() % 4 == 1
    raises(lambda: recurrent(rec, q=off), "q must be aligned to its element size (4 bytes)")


def test_written_tensors_bump_their_version(conv, rec, attn):
    state = rec.input("ssm_state")
    v0 = state._version
    recurrent(rec, ssm_state=state)
    assert state._version > v0
    pool = conv.input("conv_state")
    v0 = pool._version
    conv_fwd(conv, conv_state=pool)
    assert pool._version > v0
    kw = attention(attn)
    versions = {n: kw[n]._version for n in ("core_attn_out", "z", "conv_state", "ssm_state")}
    attention(attn, **{n: kw[n] for n in versions})
    for n, v in versions.items():
        assert kw[n]._version > v, n


def test_autograd_sees_a_saved_tensor_overwritten(rec):
    base = rec.input("ssm_state").clone().requires_grad_(True)
    pool = base * 1.0  # saved by the product below for its backward
    loss = (pool * pool).sum()
    recurrent(rec, ssm_state=pool.detach())  # same storage and version counter as pool
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_leaf_that_requires_grad_is_not_written(rec):
    state = rec.input("ssm_state").clone().requires_grad_(True)
    before = state.detach().clone()
    raises(lambda: recurrent(rec, ssm_state=state), "ssm_state is a leaf tensor that requires grad")
    assert bit_equal(state.detach(), before)
    with torch.no_grad():
        recurrent(rec, ssm_state=state)  # torch.no_grad(): as torch's own in-place ops
    assert not bit_equal(state.detach(), before)
