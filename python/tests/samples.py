"""Sample arguments for each torch op (positional, in schema order), from small golden cases."""

import torch

from golden import GOLDEN_DIR, Case


def _case(name):
    return Case(GOLDEN_DIR / f"{name}.safetensors")


def conv_fwd_args():
    c = _case("conv_prefill_f32")
    i = c.input
    return [i("x"), i("weight"), i("bias"), i("conv_state"), i("query_start_loc"), i("state_indices"),
            i("has_initial_state"), "silu", None]


def conv_update_args():
    c = _case("conv_update_spec_rolling")
    i = c.input
    return [i("x"), i("weight"), i("bias"), i("conv_state"), i("query_start_loc"), i("state_indices"),
            i("num_accepted_tokens"), "rolling", "silu", None]


def recurrent_args():
    c = _case("recurrent_spec_vk_f32")
    i = c.input
    return [i("q"), i("k"), i("v"), i("a"), i("b"), i("A_log"), i("dt_bias"), i("ssm_state"),
            i("query_start_loc"), i("state_indices"), i("num_accepted_tokens"), None, c.params["scale"], "vk", None]


def chunked_args():
    c = _case("chunk_prefill_vk")
    i = c.input
    return [i("q"), i("k"), i("v"), i("a"), i("b"), i("A_log"), i("dt_bias"), i("ssm_state"),
            i("query_start_loc"), i("state_indices"), i("has_initial_state"), c.params["scale"], "vk", None]


def attention_args(name="attention_mixed_interleaved", fill=0.0):
    c = _case(name)
    i, p = c.input, c.params
    rows = c.expected("core_attn_out").shape[0]
    shape = (rows, p["num_v_heads"] // p["tp_size"], p["head_v_dim"])
    qkvz = i("projected_states_qkvz")
    return [torch.full(shape, fill, dtype=qkvz.dtype), torch.full(shape, fill, dtype=qkvz.dtype), qkvz,
            i("projected_states_ba"), p["num_k_heads"], p["num_v_heads"], p["head_k_dim"], p["head_v_dim"],
            i("conv_state"), i("ssm_state"), i("conv_weights"), i("conv_bias"), p["activation"], i("A_log"),
            i("dt_bias"), p["num_prefills"], p["num_decodes"], p["num_spec_decodes"], i("has_initial_state"),
            i("non_spec_query_start_loc"), i("non_spec_token_indx"), i("non_spec_state_indices"),
            i("spec_query_start_loc"), i("spec_token_indx"), i("spec_state_indices"), i("num_accepted_tokens"),
            p["num_actual_tokens"], p["tp_size"], p["reorder_input"], None, p.get("spec_conv_layout", "rolling")]


def out_sample(fn):
    """(functional args, _out args) where the _out form writes a zero buffer shaped like the result."""
    args = fn()
    res = {conv_fwd_args: "causal_conv1d_fwd", conv_update_args: "causal_conv1d_update",
           recurrent_args: "gated_delta_rule_recurrent", chunked_args: "gated_delta_rule_chunked"}[fn]
    x, v = args[0], args[2]
    shape = x.shape if res.startswith("causal") else (x.shape[0], v.shape[1], v.shape[2])
    return res, [torch.zeros(shape, dtype=x.dtype)] + fn()


def to_device(args, device):
    return [a.to(device) if isinstance(a, torch.Tensor) else a for a in args]


def split_by_schema(op, kwargs):
    """(positional args, keyword-only kwargs) of a call of torch.ops.gdn.<op> given all by name."""
    schema = getattr(torch.ops.gdn, op).default._schema
    args = [kwargs[a.name] for a in schema.arguments if not a.kwarg_only]
    return args, {a.name: kwargs[a.name] for a in schema.arguments if a.kwarg_only and a.name in kwargs}


def deferred_samples():
    """{op: (args, kwargs)}: deferred-commit calls (docs/contract.md §7) with a tree, paths and both
    logs (deferred.py's sample calls)."""
    from deferred import attention_call, recurrent_call

    rec = recurrent_call(True, "vk")
    args, kw = split_by_schema("gated_delta_rule_recurrent", {"scale": None, "null_block_id": None, "qk_l2norm": True,
                                                              "beta_sigmoid": True, **rec})
    o = torch.zeros(rec["q"].shape[0], rec["v"].shape[1], rec["v"].shape[2])
    return {"gated_delta_rule_recurrent": (args, kw), "gated_delta_rule_recurrent_out": ([o] + args, dict(kw)),
            "gdn_attention": split_by_schema("gdn_attention", {"null_block_id": None, **attention_call()})}
