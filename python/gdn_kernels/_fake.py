"""Fake (shape-only) implementations of the gdn ops, for torch.compile and FakeTensor tracing.

Registered with ``torch.library.register_fake`` (torch >= 2.4), else ``torch.library.impl_abstract``
(2.2, 2.3), else as Meta kernels (2.0, 2.1). Torch 1.13 has no torch.compile, and a Meta kernel
alone does not serve meta tensors there (they dispatch through AutogradMeta first): nothing is
registered and ``register_fakes`` returns None.

Outputs match the real ops: ``y`` is ``[T, D]`` like ``x``, ``o`` is ``[T, HV, V]`` with the dtype
of ``q``, both contiguous; the ``_out`` ops and ``gdn_attention`` return nothing (they mutate
arguments, which the schemas declare). The keyword-only deferred-commit arguments of the recurrent
ops and ``gdn_attention`` (``verify_log_out``, ``conv_log_out`` written in place) change no output
shape; the ``_out`` forms and ``gdn_attention`` accept them through ``**kwargs``.
"""

import torch

_meta_library = None  # keeps the torch 2.0/2.1 Meta registrations alive


def causal_conv1d_fwd(x, weight, bias, conv_state, query_start_loc, state_indices, has_initial_state=None,
                      activation="silu", null_block_id=None):
    return x.new_empty((x.shape[0], x.shape[1]))


def causal_conv1d_update(x, weight, bias, conv_state, query_start_loc, state_indices, num_accepted_tokens=None,
                         spec_layout="rolling", activation="silu", null_block_id=None):
    return x.new_empty((x.shape[0], x.shape[1]))


def gated_delta_rule_recurrent(q, k, v, a, b, A_log, dt_bias, ssm_state, query_start_loc, state_indices,
                               num_accepted_tokens=None, has_initial_state=None, scale=None, state_layout="vk",
                               null_block_id=None, qk_l2norm=True, beta_sigmoid=True, *, verify_log=None,
                               verify_log_out=None, log_tokens=True, token_parents=None, accepted_path=None):
    # The deferred-commit mode (verify_log ...) writes verify_log_out in place: the output is the same.
    return q.new_empty((q.shape[0], v.shape[1], v.shape[2]))


def gated_delta_rule_chunked(q, k, v, a, b, A_log, dt_bias, ssm_state, query_start_loc, state_indices,
                             has_initial_state=None, scale=None, state_layout="vk", null_block_id=None,
                             qk_l2norm=True, beta_sigmoid=True):
    return q.new_empty((q.shape[0], v.shape[1], v.shape[2]))


def _returns_nothing(*args, **kwargs):
    return None


FAKES = {
    "causal_conv1d_fwd": causal_conv1d_fwd,
    "causal_conv1d_fwd_out": _returns_nothing,
    "causal_conv1d_update": causal_conv1d_update,
    "causal_conv1d_update_out": _returns_nothing,
    "gated_delta_rule_recurrent": gated_delta_rule_recurrent,
    "gated_delta_rule_recurrent_out": _returns_nothing,
    "gated_delta_rule_chunked": gated_delta_rule_chunked,
    "gated_delta_rule_chunked_out": _returns_nothing,
    "gdn_attention": _returns_nothing,
}


def _torch_version():
    parts = torch.__version__.split("+")[0].split(".")
    return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)


def register_fakes():
    """Registers FAKES for the loaded gdn ops; returns the mechanism used, or None (torch < 2.0)."""
    global _meta_library
    if hasattr(torch.library, "register_fake"):
        for name, fn in FAKES.items():
            torch.library.register_fake(f"gdn::{name}")(fn)
        return "register_fake"
    if hasattr(torch.library, "impl_abstract"):
        for name, fn in FAKES.items():
            torch.library.impl_abstract(f"gdn::{name}")(fn)
        return "impl_abstract"
    if _torch_version() >= (2, 0):
        _meta_library = torch.library.Library("gdn", "IMPL")
        for name, fn in FAKES.items():
            _meta_library.impl(name, fn, "Meta")
        return "meta"
    return None
