"""torch.library.opcheck on every op (schema mutation annotations, fake implementations,
functionalization under AOT dispatch with dynamic shapes). Needs torch >= 2.4; skipped before."""

import pytest
import torch

import gdn_kernels  # noqa: F401  (loads the ops and their fakes)
from conftest import DEVICES
from samples import (attention_args, chunked_args, conv_fwd_args, conv_update_args, deferred_samples, out_sample,
                     recurrent_args, to_device)

pytestmark = pytest.mark.skipif(not hasattr(torch.library, "opcheck"),
                                reason=f"torch.library.opcheck needs torch >= 2.4 (have {torch.__version__})")

FUNCTIONAL = {
    "causal_conv1d_fwd": conv_fwd_args,
    "causal_conv1d_update": conv_update_args,
    "gated_delta_rule_recurrent": recurrent_args,
    "gated_delta_rule_chunked": chunked_args,
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(FUNCTIONAL))
def test_opcheck_functional(name, device):
    torch.library.opcheck(getattr(torch.ops.gdn, name).default, tuple(to_device(FUNCTIONAL[name](), device)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(FUNCTIONAL))
def test_opcheck_out(name, device):
    op_name, args = out_sample(FUNCTIONAL[name])
    torch.library.opcheck(getattr(torch.ops.gdn, op_name + "_out").default, tuple(to_device(args, device)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", ["attention_mixed_interleaved", "attention_spec_block_layout",
                                  "attention_prefill_decode_block"])
def test_opcheck_gdn_attention(case, device):
    torch.library.opcheck(torch.ops.gdn.gdn_attention.default, tuple(to_device(attention_args(case), device)))


@pytest.mark.parametrize("name", ["gated_delta_rule_recurrent", "gated_delta_rule_recurrent_out", "gdn_attention"])
def test_opcheck_deferred(name):
    """The deferred-commit keywords (verify_log_out, conv_log_out written; CPU only)."""
    args, kwargs = deferred_samples()[name]
    torch.library.opcheck(getattr(torch.ops.gdn, name).default, tuple(args), kwargs)
