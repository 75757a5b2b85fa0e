"""gdn_kernels — Gated DeltaNet linear-attention kernels (CPU and CUDA) for PyTorch.

Importing the package loads the extension ``libgdn_torch.so``, which registers the ops under
``torch.ops.gdn`` (see ``gdn_kernels._library`` for where it is looked for), and registers their
fake implementations for torch.compile. The functions here are documented wrappers of those ops:

* :func:`causal_conv1d_fwd` — varlen prefill convolution;
* :func:`causal_conv1d_update` — decode / verify convolution;
* :func:`gated_delta_rule_recurrent` — the delta rule token by token (decode, verify);
* :func:`gated_delta_rule_chunked` — the delta rule chunk-parallel (prefill);
* :func:`gdn_attention` — the fused layer core for a mixed batch, with vllm-xpu-kernels' arguments;
* :func:`attention_args_from_vllm_metadata` — gdn_attention's metadata arguments from vLLM's
  ``GDNAttentionMetadata``;
* :mod:`gdn_kernels.fla` — FLA's ``chunk_gated_delta_rule`` and ``fused_recurrent_gated_delta_rule``;
* :mod:`gdn_kernels.hf` — transformers' Gated DeltaNet layers on these kernels (``enable(model)``).
"""

from ._library import library_path, load_library

load_library()

from . import _fake  # noqa: E402
from .ops import (  # noqa: E402
    causal_conv1d_fwd,
    causal_conv1d_update,
    gated_delta_rule_chunked,
    gated_delta_rule_recurrent,
    gdn_attention,
)
from .vllm import PAD_SLOT_ID, attention_args_from_vllm_metadata  # noqa: E402
from . import fla  # noqa: E402

#: How the fake implementations were registered ("register_fake", "impl_abstract", "meta"), or
#: None on torch < 2.0 (no torch.compile there).
FAKE_REGISTRATION = _fake.register_fakes()

__version__ = "0.1.0"

__all__ = [
    "PAD_SLOT_ID",
    "FAKE_REGISTRATION",
    "attention_args_from_vllm_metadata",
    "causal_conv1d_fwd",
    "causal_conv1d_update",
    "gated_delta_rule_chunked",
    "gated_delta_rule_recurrent",
    "gdn_attention",
    "library_path",
    "load_library",
]
