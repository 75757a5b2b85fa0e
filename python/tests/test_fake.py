"""The fake implementations give the real ops' output shapes, dtypes and strides."""

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
