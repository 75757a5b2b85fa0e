"""gdn_kernels.hf: transformers' Gated DeltaNet kernel functions on gdn-kernels.

* The four functions against references written here from transformers' conventions (channels-first
  conv activations, a conv cache of the latest inputs, [B, T, HV, K] delta-rule inputs with the
  float32 log decay, [B, HV, K, V] states): the convs within float32 rounding (tap sums in another
  order), the cache bit for bit (a copy of inputs); the delta rule against test_fla's float64
  reference by FLA's error-ratio thresholds (0.005 chunked, 0.002 recurrent).
* enable / disable on stand-in layers of both lookup layouts (module functions, instance
  attributes): what is patched, that disable restores it, and the errors.
* With transformers installed: tiny random Qwen3-Next, Qwen3.5 and Qwen3.5-MoE models built in code, float32 on
  the CPU: logits of a prompt and of greedy decoding with gdn-kernels against the model's own torch
  path (relative max error 1e-3: float32 sums in another order), and the same greedy tokens, for one
  prompt and for a left-padded batch of two (attention_mask); bf16 on
  CUDA with 128-wide heads: prompt and teacher-forced decode logits (relative max error 3e-2).
whole_layer (gdn_kernels.hf_layer): test_hf_layer.py.
"""

import sys
import types

import pytest
import torch

import gdn_kernels.hf as hf
from conftest import requires_cuda
from test_fla import err_ratio, reference


def conv_reference(full, weight, bias, silu):
    """Valid depthwise conv of full [B, D, L] (taps oldest first): [B, D, L - W + 1]."""
    W = weight.shape[-1]
    out = torch.nn.functional.conv1d(full.double(), weight.double().unsqueeze(1),
                                     None if bias is None else bias.double(), groups=full.shape[1])
    assert out.shape[-1] == full.shape[-1] - W + 1
    return torch.nn.functional.silu(out) if silu else out


@pytest.mark.parametrize("silu", [True, False])
@pytest.mark.parametrize("with_bias", [True, False])
def test_conv_fn(silu, with_bias):
    g = torch.Generator().manual_seed(1)
    B, D, T, W = 3, 24, 9, 4
    x = torch.randn(B, D, T, generator=g)
    w = torch.randn(D, W, generator=g) * 0.5
    b = torch.randn(D, generator=g) * 0.2 if with_bias else None
    y = hf.causal_conv1d_fn(x, w.unsqueeze(1), b, activation="silu" if silu else None, seq_idx=None)
    ref = conv_reference(torch.nn.functional.pad(x, (W - 1, 0)), w, b, silu)
    assert y.shape == (B, D, T)
    torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("state_len", [3, 4, 6])
@pytest.mark.parametrize("T", [1, 3])
def test_conv_update(state_len, T, channels_last):
    g = torch.Generator().manual_seed(2)
    B, D, W = 2, 16, 4
    # channels_last: a cache [B, D, state_len] whose last W - 1 inputs, transposed, are contiguous
    state = (torch.randn(B, state_len, D, generator=g).transpose(1, 2) if channels_last
             else torch.randn(B, D, state_len, generator=g))
    x = torch.randn(B, D, T, generator=g)
    w = torch.randn(D, W, generator=g) * 0.5
    b = torch.randn(D, generator=g) * 0.2
    full = torch.cat([state, x], dim=-1)
    ref = conv_reference(full, w, b, True)[:, :, -T:]
    new_state = full[:, :, -state_len:].clone()
    y = hf.causal_conv1d_update(x, state, w, b, "silu")
    torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-6)
    assert torch.equal(state, new_state), "the cache holds the last state_len inputs"
    with pytest.raises(ValueError, match="conv_state holds"):
        hf.causal_conv1d_update(x, torch.zeros(B, D, W - 2), w, b, "silu")


def hf_inputs(B, T, HV, K, V, seed, dtype):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, HV, K, generator=g).to(dtype)
    k = torch.randn(B, T, HV, K, generator=g).to(dtype)
    v = torch.randn(B, T, HV, V, generator=g).to(dtype)
    a = torch.randn(B, T, HV, generator=g)
    decay = -torch.rand(HV, generator=g).exp() * torch.nn.functional.softplus(a + 0.3)  # as the layers compute it
    beta = torch.rand(B, T, HV, generator=g).to(dtype)
    h0 = torch.randn(B, HV, K, V, generator=g) * 0.1
    return q, k, v, decay.float(), beta, h0


@pytest.mark.parametrize("fn,T,tol", [(hf.chunk_gated_delta_rule, 70, 0.005), (hf.recurrent_gated_delta_rule, 1, 0.002),
                                      (hf.recurrent_gated_delta_rule, 5, 0.002)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_delta_rule(fn, T, tol, dtype):
    B, HV, K, V = 2, 4, 16, 8
    q, k, v, decay, beta, h0 = hf_inputs(B, T, HV, K, V, 3, dtype)
    o, hT = fn(q, k, v, g=decay, beta=beta, initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True,
               use_cache=True)  # transformers passes keywords of its own: ignored
    cu = torch.arange(0, (B + 1) * T, T)
    flat = lambda x: x.reshape(B * T, *x.shape[2:])
    ref_o, ref_h = reference(flat(q), flat(k), flat(v), flat(decay), flat(beta).float(), K ** -0.5, h0, cu, True, False)
    assert o.shape == (B, T, HV, V) and o.dtype == dtype
    assert hT.shape == (B, HV, K, V) and hT.dtype == torch.float32
    assert err_ratio(o.reshape(B * T, HV, V), ref_o) <= tol
    assert err_ratio(hT, ref_h) <= tol


# Stand-ins for transformers' layers: one looking its kernels up as module functions, one as
# instance attributes.
# decorated: forward wrapped by a decorator that does not copy __wrapped__ (as transformers' hook
# decorators may), so its kernels are looked up by the inner function in the closure.
def make_module_layout(decorated=False):
    mod = types.ModuleType("gdn_hf_test_modeling")
    for n in hf.MODULE_NAMES:
        setattr(mod, n, lambda *a, **k: "torch")
    src = ("def hooks(fn):\n"
           "    def inner(self, *args, **kwargs):\n"
           "        return fn(self, *args, **kwargs)\n"
           "    return inner\n"
           "class Qwen3_5GatedDeltaNet(torch.nn.Module):\n"
           + ("    @hooks\n" if decorated else "") +
           "    def forward(self, x):\n"
           "        return (torch_chunk_gated_delta_rule, torch_recurrent_gated_delta_rule, causal_conv1d_fn,\n"
           "                causal_conv1d_update)\n")
    mod.torch = torch
    exec(src, mod.__dict__)
    mod.Qwen3_5GatedDeltaNet.__module__ = mod.__name__
    sys.modules[mod.__name__] = mod
    return mod


class Qwen3NextGatedDeltaNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        for n in hf.INSTANCE_NAMES:
            setattr(self, n, "torch")


@pytest.mark.parametrize("decorated", [False, True])
def test_enable_module_functions(decorated):
    mod = make_module_layout(decorated)
    try:
        model = torch.nn.Sequential(mod.Qwen3_5GatedDeltaNet(), mod.Qwen3_5GatedDeltaNet())
        old = {n: getattr(mod, n) for n in hf.MODULE_NAMES}
        h = hf.enable(model, check_version=False)
        assert h.layers == 2
        for n, fn in hf.MODULE_NAMES.items():
            assert getattr(mod, n) is fn
        assert model[0](None)[0] is hf.chunk_gated_delta_rule  # what the layer now calls
        h.disable()
        for n in hf.MODULE_NAMES:
            assert getattr(mod, n) is old[n]
    finally:
        del sys.modules[mod.__name__]


def test_enable_instance_attributes():
    model = torch.nn.Sequential(Qwen3NextGatedDeltaNet(), torch.nn.Linear(2, 2))
    h = hf.enable(model, check_version=False)
    assert h.layers == 1
    for n, fn in hf.INSTANCE_NAMES.items():
        assert getattr(model[0], n) is fn
    h.disable()
    for n in hf.INSTANCE_NAMES:
        assert getattr(model[0], n) == "torch"


def test_enable_twice_is_refused():
    """A second handle on patched layers (or their module) would put the first one's functions back
    when disabled first: refused, and the first handle still undoes everything."""
    model = torch.nn.Sequential(Qwen3NextGatedDeltaNet())
    h = hf.enable(model, check_version=False)
    with pytest.raises(RuntimeError, match="already runs on gdn-kernels"):
        hf.enable(model, check_version=False)
    h.disable()
    for n in hf.INSTANCE_NAMES:
        assert getattr(model[0], n) == "torch"
    mod = make_module_layout(False)
    try:
        first, second = torch.nn.Sequential(mod.Qwen3_5GatedDeltaNet()), torch.nn.Sequential(mod.Qwen3_5GatedDeltaNet())
        old = {n: getattr(mod, n) for n in hf.MODULE_NAMES}
        h = hf.enable(first, check_version=False)
        with pytest.raises(RuntimeError, match="already runs on gdn-kernels"):
            hf.enable(second, check_version=False)  # the same module's functions
        h.disable()
        for n in hf.MODULE_NAMES:
            assert getattr(mod, n) is old[n]
    finally:
        del sys.modules[mod.__name__]


def test_enable_errors():
    with pytest.raises(RuntimeError, match="has no layer"):
        hf.enable(torch.nn.Linear(2, 2), check_version=False)

    class Qwen3_5MoeGatedDeltaNet(torch.nn.Module):  # a layout this module does not know
        def forward(self, x):
            return x

    with pytest.raises(RuntimeError, match="unsupported transformers layout"):
        hf.enable(torch.nn.Sequential(Qwen3_5MoeGatedDeltaNet()), check_version=False)


def tiny_models(head_dim=16):
    """Tiny random models of every GDN family the installed transformers has: [(name, build)]."""
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    common = dict(vocab_size=99, hidden_size=32, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=2, head_dim=16, hidden_act="silu",
                  layer_types=["linear_attention", "full_attention"], linear_conv_kernel_dim=4,
                  linear_key_head_dim=head_dim, linear_value_head_dim=head_dim, linear_num_key_heads=2,
                  linear_num_value_heads=4)
    moe = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=16)
    out = []
    if hasattr(transformers, "Qwen3NextForCausalLM"):
        out.append(("qwen3_next", lambda: transformers.Qwen3NextForCausalLM(transformers.Qwen3NextConfig(**common, **moe))))
    if hasattr(transformers, "Qwen3_5ForCausalLM"):
        out.append(("qwen3_5", lambda: transformers.Qwen3_5ForCausalLM(transformers.Qwen3_5TextConfig(**common))))
    if hasattr(transformers, "Qwen3_5MoeForCausalLM"):
        out.append(("qwen3_5_moe", lambda: transformers.Qwen3_5MoeForCausalLM(
            transformers.Qwen3_5MoeTextConfig(**common, **moe))))
    if not out:
        pytest.skip("this transformers has neither Qwen3-Next nor Qwen3.5")
    return out


def test_tiny_models_against_their_torch_path():
    for name, build in tiny_models():
        torch.manual_seed(0)
        model = build().eval()
        prompt = torch.randint(0, 99, (1, 12))
        with torch.no_grad():
            ref_logits = model(prompt).logits
            ref_tokens = model.generate(prompt, max_new_tokens=32, do_sample=False)
            h = hf.enable(model)
            try:
                logits = model(prompt).logits
                tokens = model.generate(prompt, max_new_tokens=32, do_sample=False)
            finally:
                h.disable()
        err = ((logits - ref_logits).abs().max() / ref_logits.abs().max()).item()
        assert err <= 1e-3, f"{name}: prompt logits, relative max error {err}"
        assert torch.equal(tokens, ref_tokens), f"{name}: greedy tokens differ"


def test_tiny_models_padded_batch_against_their_torch_path():
    """A batch of two prompts, the second left-padded by 4 (attention_mask): the logits of the
    unmasked positions and the greedy tokens, as above."""
    for name, build in tiny_models():
        torch.manual_seed(1)
        model = build().eval()
        prompt = torch.randint(1, 99, (2, 12))
        mask = torch.ones(2, 12, dtype=torch.long)
        mask[1, :4] = 0
        with torch.no_grad():
            ref_logits = model(prompt, attention_mask=mask).logits
            ref_tokens = model.generate(prompt, attention_mask=mask, max_new_tokens=8, do_sample=False)
            h = hf.enable(model)
            try:
                logits = model(prompt, attention_mask=mask).logits
                tokens = model.generate(prompt, attention_mask=mask, max_new_tokens=8, do_sample=False)
            finally:
                h.disable()
        valid = mask.bool()
        err = ((logits[valid] - ref_logits[valid]).abs().max() / ref_logits[valid].abs().max()).item()
        assert err <= 1e-3, f"{name}: padded batch logits, relative max error {err}"
        assert torch.equal(tokens, ref_tokens), f"{name}: padded batch greedy tokens differ"


def teacher_forced_logits(model, prompt, tokens):
    """Logits of every prompt position (one prefill into a cache), then of each later token of tokens
    fed one at a time (decode): ([1, P, vocab], [1, steps, vocab])."""
    out = model(prompt, use_cache=True)
    prefill, cache, decode = out.logits, out.past_key_values, []
    for t in range(prompt.shape[1], tokens.shape[1]):
        out = model(tokens[:, t:t + 1], past_key_values=cache, use_cache=True)
        decode.append(out.logits[:, -1])
        cache = out.past_key_values
    return prefill, torch.stack(decode, 1)


@requires_cuda
def test_tiny_models_on_cuda_against_their_torch_path():
    """bf16 on CUDA with K = V = 128 (the chunk kernel's head size): a 100-token prompt (chunks of 64 and
    a remainder) and 32 decode steps fed the reference's greedy tokens, against the model's torch path:
    relative max error 3e-2 of each logits tensor (bf16 activations rounded at different points)."""
    for name, build in tiny_models(head_dim=128):
        torch.manual_seed(0)
        model = build().to(device="cuda", dtype=torch.bfloat16).eval()
        prompt = torch.randint(0, 99, (1, 100), device="cuda")
        with torch.no_grad():
            tokens = model.generate(prompt, max_new_tokens=32, do_sample=False)
            ref_prefill, ref_decode = teacher_forced_logits(model, prompt, tokens)
            h = hf.enable(model)
            try:
                prefill, decode = teacher_forced_logits(model, prompt, tokens)
            finally:
                h.disable()
        for what, got, ref in (("prompt", prefill, ref_prefill), ("decode", decode, ref_decode)):
            err = ((got.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
            assert err <= 3e-2, f"{name}: {what} logits, relative max error {err}"
