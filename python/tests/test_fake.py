"""The fake implementations give the real ops' output shapes, dtypes and strides, and take the
schemas' arguments (the deferred-commit keywords included)."""

import inspect

import pytest
import torch

import gdn_kernels
from gdn_kernels import _fake
from samples import attention_args, chunked_args, conv_fwd_args, conv_update_args, recurrent_args

CASES = [
    ("causal_conv1d_fwd", conv_fwd_args),
    ("causal_conv1d_update", conv_update_args),
    ("gated_delta_rule_recurrent", recurrent_args),
    ("gated_delta_rule_chunked", chunked_args),
]


def to_meta(args):
    return [a.to("meta") if isinstance(a, torch.Tensor) else a for a in args]


@pytest.mark.parametrize("name,sample", CASES, ids=[c[0] for c in CASES])
def test_fake_function_matches_real_output(name, sample):
    real = getattr(torch.ops.gdn, name)(*sample())
    fake = _fake.FAKES[name](*to_meta(sample()))
    assert fake.shape == real.shape and fake.dtype == real.dtype and fake.stride() == real.stride()


def test_mutating_ops_fake_returns_none():
    for name in ("causal_conv1d_fwd_out", "causal_conv1d_update_out", "gated_delta_rule_recurrent_out",
                 "gated_delta_rule_chunked_out", "gdn_attention"):
        assert _fake.FAKES[name](*to_meta(attention_args())) is None


def test_every_op_has_a_fake_and_cpu_cuda_kernels():
    for key in ("CPU", "CUDA"):
        registered = {n[len("gdn::"):] for n in torch._C._dispatch_get_registrations_for_dispatch_key(key)
                      if n.startswith("gdn::")}
        assert registered == set(_fake.FAKES), key


def test_registration_mechanism():
    major = int(torch.__version__.split(".")[0])
    if major < 2:
        assert gdn_kernels.FAKE_REGISTRATION is None
    else:
        assert gdn_kernels.FAKE_REGISTRATION in ("register_fake", "impl_abstract", "meta")


@pytest.mark.skipif(gdn_kernels.FAKE_REGISTRATION is None, reason="no fake registration on torch < 2.0")
@pytest.mark.parametrize("name,sample", CASES, ids=[c[0] for c in CASES])
def test_ops_run_under_fake_tensor_mode(name, sample):
    from torch._subclasses.fake_tensor import FakeTensorMode

    real = getattr(torch.ops.gdn, name)(*sample())
    inputs = sample()  # real tensors, made outside the fake mode (reading a case runs torch ops)
    with FakeTensorMode() as mode:
        args = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in inputs]
        fake = getattr(torch.ops.gdn, name)(*args)
    assert fake.shape == real.shape and fake.dtype == real.dtype


DEFERRED = {  # op -> its keyword-only deferred-commit arguments (docs/contract.md §7); mutated ones
    "gated_delta_rule_recurrent": (["verify_log", "verify_log_out", "log_tokens", "token_parents", "accepted_path"],
                                   {"verify_log_out"}),
    "gdn_attention": (["verify_log", "verify_log_out", "conv_log", "conv_log_out", "non_spec_num_accepted_tokens",
                       "spec_accepted_path", "non_spec_accepted_path", "spec_token_parents"],
                      {"verify_log_out", "conv_log_out"}),
}
DEFERRED["gated_delta_rule_recurrent_out"] = DEFERRED["gated_delta_rule_recurrent"]


@pytest.mark.parametrize("name", sorted(DEFERRED))
def test_deferred_arguments_are_trailing_keywords_with_defaults(name):
    names, written = DEFERRED[name]
    args = getattr(torch.ops.gdn, name).default._schema.arguments
    tail = args[-len(names):]
    assert [a.name for a in tail] == names
    for a in args[:-len(names)]:
        assert not a.kwarg_only, f"{name}: {a.name} must stay positional"
    for a in tail:
        assert a.kwarg_only, f"{name}: {a.name} must be keyword-only"
        assert a.default_value == (True if a.name == "log_tokens" else None), f"{name}: default of {a.name}"
        is_written = a.alias_info is not None and a.alias_info.is_write
        assert is_written == (a.name in written), f"{name}: alias annotation of {a.name}"


@pytest.mark.parametrize("name", sorted(_fake.FAKES))
def test_fake_takes_the_schema_arguments(name):
    schema = getattr(torch.ops.gdn, name).default._schema
    params = inspect.signature(_fake.FAKES[name]).parameters
    if any(p.kind == p.VAR_POSITIONAL for p in params.values()):
        return  # _returns_nothing
    assert [a.name for a in schema.arguments] == list(params), name
    for a in schema.arguments:
        assert (params[a.name].kind == params[a.name].KEYWORD_ONLY) == a.kwarg_only, f"{name}: {a.name}"


def test_fake_of_a_deferred_call_matches_real_output():
    args = recurrent_args()
    q, v = args[0], args[2]
    slots, log = args[7].shape[0], (args[7].shape[0], 4, v.shape[1], q.shape[2] + v.shape[2] + 2)
    n = args[9].shape[0]
    real_args = args[:9] + [torch.arange(n, dtype=torch.int32) % slots, torch.ones(n, dtype=torch.int32)] + args[11:]
    kw = dict(verify_log=torch.zeros(log), verify_log_out=torch.zeros(log), log_tokens=True,
              token_parents=torch.full((q.shape[0],), -1, dtype=torch.int32))
    real = torch.ops.gdn.gated_delta_rule_recurrent(*real_args, **kw)
    fake = _fake.FAKES["gated_delta_rule_recurrent"](*to_meta(real_args), **dict(zip(kw, to_meta(list(kw.values())))))
    assert fake.shape == real.shape and fake.dtype == real.dtype and fake.stride() == real.stride()
    assert kw["verify_log_out"].abs().sum() > 0, "the real call logged its tokens"
