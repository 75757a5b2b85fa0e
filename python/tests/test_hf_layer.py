"""gdn_kernels.hf's whole_layer mode (gdn_kernels.hf_layer): one gdn_attention call per GDN layer.

* On stand-in layers of both projection layouts with a stand-in of transformers' cache protocol:
  metadata, pool copies, outputs against a torch reference, caches, fallbacks, refusals.
* With transformers installed, on the tiny random models of test_hf.py: logits and greedy tokens
  against the model's own torch path (every call on the whole-layer path), its caches after prefill
  and decode against the four-function mode's (conv bit for bit, states 1e-4), its fallback for a
  padded prefill; bf16 on CUDA with 128-wide heads (relative max error 3e-2).
"""

import sys

import pytest
import torch

import gdn_kernels.hf as hf
from conftest import requires_cuda
from gdn_kernels import hf_layer
from test_hf import make_module_layout, teacher_forced_logits, tiny_models


def test_attention_metadata():
    m = hf_layer.attention_metadata(3, 5, True, "cpu")
    assert (m["num_prefills"], m["num_decodes"], m["num_spec_decodes"], m["num_actual_tokens"]) == (3, 0, 0, 15)
    assert m["non_spec_query_start_loc"].tolist() == [0, 5, 10, 15]
    assert m["non_spec_state_indices_tensor"].tolist() == [0, 1, 2]
    assert m["has_initial_state"].dtype == torch.bool and m["has_initial_state"].tolist() == [True] * 3
    assert all(m[n] is None for n in ("non_spec_token_indx", "spec_query_start_loc", "spec_token_indx",
                                      "spec_state_indices_tensor", "num_accepted_tokens"))
    m = hf_layer.attention_metadata(2, 1, False, "cpu")
    assert (m["num_prefills"], m["num_decodes"], m["num_actual_tokens"]) == (0, 2, 2)
    assert m["non_spec_query_start_loc"].tolist() == [0, 1, 2] and m["has_initial_state"].tolist() == [False] * 2


@pytest.mark.parametrize("L", [3, 4, 6])
def test_conv_and_state_pools(L):
    """transformers' caches <-> gdn_attention's pools: copies (bit for bit), not views."""
    g = torch.Generator().manual_seed(5)
    B, D, W = 2, 12, 4
    cache = torch.randn(B, D, L, generator=g)
    pool = hf_layer.conv_pool_from_cache(cache, W)
    assert pool.shape == (B, W - 1, D) and pool.is_contiguous()
    assert torch.equal(pool, cache[:, :, -(W - 1):].transpose(1, 2)), "oldest first, the latest input last"
    pool.add_(1)
    assert not torch.equal(pool.transpose(1, 2), cache[:, :, -(W - 1):]), "a copy"
    with pytest.raises(hf_layer.Fallback, match="conv needs 3"):
        hf_layer.conv_pool_from_cache(cache[:, :, :2], W)
    x = torch.randn(B, D, 1, generator=g)
    expect = torch.cat([cache, x], -1)[:, :, -L:].clone()
    hf_layer.advance_conv_cache(cache, x)
    assert torch.equal(cache, expect)
    state = torch.randn(B, 3, 8, 5, generator=g)  # [B, HV, K, V]
    vk = hf_layer.ssm_pool_from_cache(state)
    assert vk.shape == (B, 3, 5, 8) and vk.is_contiguous() and torch.equal(vk, state.transpose(-1, -2))
    back = hf_layer.ssm_cache_from_pool(vk)
    assert back.is_contiguous() and torch.equal(back, state)


class StandInCacheLayer:
    def __init__(self):
        self.conv_states, self.recurrent_states = [None], [None]
        self.has_previous, self.record_past = False, False


class StandInCache:
    """transformers' linear-attention cache protocol (5.x), written from its documented behaviour: the
    conv cache keeps the last W inputs (zero-padded on the left), the state is copied in."""

    def __init__(self, n):
        self.layers = [StandInCacheLayer() for _ in range(n)]

    def has_previous_state(self, i, state_idx=0):
        return self.layers[i].has_previous

    def update_conv_state(self, x, i, conv_kernel_size):
        layer = self.layers[i]
        full = torch.cat([layer.conv_states[0], x], -1) if layer.has_previous else x
        kept = torch.nn.functional.pad(full, (max(conv_kernel_size - full.shape[-1], 0), 0))[..., -conv_kernel_size:]
        layer.conv_states[0], layer.has_previous = kept.clone(), True
        return full

    def update_recurrent_state(self, state, i):
        self.layers[i].recurrent_states[0] = state.clone()


class GatedNorm(torch.nn.Module):
    def __init__(self, n, eps=1e-6):
        super().__init__()
        self.weight, self.eps = torch.nn.Parameter(1 + 0.1 * torch.randn(n)), eps

    def forward(self, x, gate):
        x32 = x.float()
        y = self.weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)
        return (y * torch.nn.functional.silu(gate.float())).to(x.dtype)


class StandInGDN(torch.nn.Module):
    """A GDN layer of either projection layout whose forward is a plain torch reference (conv over the
    cached window, gates, l2 norms, token-by-token delta rule on a [B, HV, K, V] state) using the cache
    protocol above; kernel attributes as transformers' instance layout, so hf.enable patches those."""

    def __init__(self, fam, H=2, HV=4, K=8, V=6, W=4, hidden=20, layer_idx=0):
        super().__init__()
        self.num_k_heads, self.num_v_heads, self.head_k_dim, self.head_v_dim = H, HV, K, V
        self.key_dim, self.value_dim, self.conv_kernel_size, self.layer_idx = H * K, HV * V, W, layer_idx
        self.activation = "silu"
        D = 2 * H * K + HV * V
        self.conv1d = torch.nn.Conv1d(D, D, W, groups=D, bias=False, padding=W - 1)
        if fam == "qwen3_next":
            self.in_proj_qkvz = torch.nn.Linear(hidden, D + HV * V, bias=False)
            self.in_proj_ba = torch.nn.Linear(hidden, 2 * HV, bias=False)
        else:
            self.in_proj_qkv = torch.nn.Linear(hidden, D, bias=False)
            self.in_proj_z = torch.nn.Linear(hidden, HV * V, bias=False)
            self.in_proj_b = torch.nn.Linear(hidden, HV, bias=False)
            self.in_proj_a = torch.nn.Linear(hidden, HV, bias=False)
        self.A_log = torch.nn.Parameter(torch.rand(HV).log())
        self.dt_bias = torch.nn.Parameter(torch.randn(HV) * 0.3)
        self.norm = GatedNorm(V)
        self.out_proj = torch.nn.Linear(HV * V, hidden, bias=False)
        for n in hf.INSTANCE_NAMES:
            setattr(self, n, "torch")

    def fix_query_key_value_ordering(self, qkvz, ba):
        """Per key head [q | k | v (r V) | z (r V)] and [b (r) | a (r)] -> q, k [.., H, K], v, z [.., HV, V], b, a."""
        H, K, V, r = self.num_k_heads, self.head_k_dim, self.head_v_dim, self.num_v_heads // self.num_k_heads
        lead = qkvz.shape[:-1]
        q, k, v, z = qkvz.reshape(*lead, H, 2 * K + 2 * r * V).split([K, K, r * V, r * V], -1)
        b, a = ba.reshape(*lead, H, 2 * r).split([r, r], -1)
        return (q, k, v.reshape(*lead, -1, V), z.reshape(*lead, -1, V), b.reshape(*lead, -1), a.reshape(*lead, -1))

    def forward(self, hidden_states, cache_params=None, attention_mask=None, **kwargs):
        if attention_mask is not None:
            hidden_states = hidden_states * attention_mask[:, :, None].to(hidden_states.dtype)
        B, T, _ = hidden_states.shape
        H, HV, K, V, W = self.num_k_heads, self.num_v_heads, self.head_k_dim, self.head_v_dim, self.conv_kernel_size
        if hasattr(self, "in_proj_qkvz"):
            q, k, v, z, b, a = self.fix_query_key_value_ordering(self.in_proj_qkvz(hidden_states),
                                                                 self.in_proj_ba(hidden_states))
            u = torch.cat([x.reshape(B, T, -1) for x in (q, k, v)], -1).transpose(1, 2)
        else:
            u = self.in_proj_qkv(hidden_states).transpose(1, 2)
            z = self.in_proj_z(hidden_states).reshape(B, T, HV, V)
            b, a = self.in_proj_b(hidden_states), self.in_proj_a(hidden_states)
        prev = cache_params is not None and cache_params.has_previous_state(self.layer_idx)
        layer = cache_params.layers[self.layer_idx] if prev else None
        window = layer.conv_states[0][:, :, -(W - 1):] if prev else u.new_zeros(B, u.shape[1], W - 1)
        y = torch.nn.functional.silu(torch.nn.functional.conv1d(torch.cat([window, u], -1), self.conv1d.weight,
                                                                groups=u.shape[1]))
        if cache_params is not None:
            if prev and T == 1 and not layer.record_past:
                layer.conv_states[0].copy_(torch.cat([layer.conv_states[0], u], -1)[:, :, -W:])
            else:
                cache_params.update_conv_state(u, self.layer_idx, conv_kernel_size=W)
        q, k, v = y.transpose(1, 2).split([H * K, H * K, HV * V], -1)
        q, k = (x.reshape(B, T, H, K).repeat_interleave(HV // H, 2).float() for x in (q, k))
        q = q / (q.pow(2).sum(-1, keepdim=True) + 1e-6).sqrt() * K ** -0.5
        k = k / (k.pow(2).sum(-1, keepdim=True) + 1e-6).sqrt()
        v = v.reshape(B, T, HV, V).float()
        decay = (-self.A_log.float().exp() * torch.nn.functional.softplus(a.float() + self.dt_bias.float())).exp()
        beta = torch.sigmoid(b.float())
        S = layer.recurrent_states[0].float().clone() if prev else torch.zeros(B, HV, K, V)
        o = torch.empty(B, T, HV, V)
        for t in range(T):
            S = S * decay[:, t, :, None, None]
            d = beta[:, t, :, None] * (v[:, t] - torch.einsum("bhkv,bhk->bhv", S, k[:, t]))
            S = S + k[:, t, :, :, None] * d[:, :, None, :]
            o[:, t] = torch.einsum("bhkv,bhk->bhv", S, q[:, t])
        if cache_params is not None:
            cache_params.update_recurrent_state(S, self.layer_idx)
        o = self.norm(o.to(hidden_states.dtype).reshape(-1, V), z.reshape(-1, V)).reshape(B, T, -1)
        return self.out_proj(o)


StandInGDN.__name__ = "Qwen3_5GatedDeltaNet"  # a class name hf.enable looks for


def run_reference(layer, *args, **kwargs):
    return type(layer).forward(layer, *args, **kwargs)


def rel_err(got, ref):
    return ((got - ref).abs().max() / ref.abs().max()).item()


@pytest.mark.parametrize("fam", ["qwen3_next", "qwen3_5"])
def test_whole_layer_stand_in(fam):
    """Prefill (longer and shorter than the conv), prefill continued from the cache, decode and no cache
    at all, float32 on the CPU: outputs against the stand-in's torch forward (relative 1e-4), the conv
    cache bit for bit, the state within 1e-5; every call on the whole-layer path."""
    torch.manual_seed(3)
    layer = StandInGDN(fam).eval()
    assert hf_layer.family(layer) == fam
    h = hf.enable(torch.nn.Sequential(layer), check_version=False, whole_layer=True)
    assert "forward" in vars(layer)
    ref_cache, cache = StandInCache(1), StandInCache(1)
    with torch.no_grad():
        for step, T in enumerate([7, 2, 1, 1, 3, 1]):  # prefill, continued prefill, decodes, ...
            x = torch.randn(2, T, 20)
            ref = run_reference(layer, x, cache_params=ref_cache)
            out = layer(x, cache_params=cache)
            assert rel_err(out, ref) <= 1e-4, f"step {step}: {rel_err(out, ref)}"
            got_l, ref_l = cache.layers[0], ref_cache.layers[0]
            assert torch.equal(got_l.conv_states[0], ref_l.conv_states[0]), f"step {step}: conv cache"
            assert got_l.recurrent_states[0].shape == ref_l.recurrent_states[0].shape
            assert got_l.recurrent_states[0].dtype == torch.float32
            torch.testing.assert_close(got_l.recurrent_states[0], ref_l.recurrent_states[0], rtol=1e-5, atol=1e-5)
        x = torch.randn(3, 5, 20)
        assert rel_err(layer(x), run_reference(layer, x)) <= 1e-4, "no cache"
        assert rel_err(layer(x[:, :1]), run_reference(layer, x[:, :1])) <= 1e-4, "one token, no cache"
        ones = torch.ones(3, 5, dtype=torch.long)
        assert rel_err(layer(x, attention_mask=ones), run_reference(layer, x)) <= 1e-4, "a mask without padding"
    assert h.stats.calls == 9 and not h.stats.fallbacks
    h.disable()
    assert "forward" not in vars(layer) and layer.chunk_gated_delta_rule == "torch"


def test_whole_layer_short_prompt_cache():
    """A 2-token prefill: the conv cache is the 2 inputs zero-padded on the left to W, as transformers keeps it."""
    torch.manual_seed(4)
    layer = StandInGDN("qwen3_5").eval()
    hf.enable(torch.nn.Sequential(layer), check_version=False, whole_layer=True)
    cache = StandInCache(1)
    x = torch.randn(1, 2, 20)
    with torch.no_grad():
        layer(x, cache_params=cache)
        u = layer.in_proj_qkv(x).transpose(1, 2)
    conv = cache.layers[0].conv_states[0]
    assert conv.shape == (1, u.shape[1], 4) and torch.equal(conv[:, :, :2], torch.zeros_like(conv[:, :, :2]))
    assert torch.equal(conv[:, :, 2:], u)


def test_whole_layer_fallbacks():
    """Padding in the mask, packed sequences, a cache recording its past, autograd: the original forward
    (the stand-in's reference here), counted by reason; results unchanged."""
    torch.manual_seed(5)
    layer = StandInGDN("qwen3_next").eval()
    h = hf.enable(torch.nn.Sequential(layer), check_version=False, whole_layer=True)
    x = torch.randn(2, 6, 20)
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[1, :2] = 0
    with torch.no_grad():
        assert torch.equal(layer(x, attention_mask=mask), run_reference(layer, x, attention_mask=mask))
        assert torch.equal(layer(x, cu_seq_lens_q=torch.tensor([0, 6])), run_reference(layer, x))
        cache = StandInCache(1)
        cache.layers[0].record_past = True
        assert torch.equal(layer(x, cache_params=cache), run_reference(layer, x, cache_params=StandInCache(1)))
    assert torch.equal(layer(x), run_reference(layer, x))  # grad enabled, parameters require grad
    assert h.stats.calls == 0
    assert h.stats.fallbacks == {"attention mask with padding": 1, "packed sequences (cu_seq_lens_q)": 1,
                                 "cache records its past": 1, "autograd (gdn_attention is inference only)": 1}


def test_whole_layer_refused():
    """A forward without the cache protocol: refused at enable, and nothing stays patched."""
    mod = make_module_layout()
    try:
        model = torch.nn.Sequential(mod.Qwen3_5GatedDeltaNet())
        old = {n: getattr(mod, n) for n in hf.MODULE_NAMES}
        with pytest.raises(RuntimeError, match="cache protocol"):
            hf.enable(model, check_version=False, whole_layer=True)
        assert all(getattr(mod, n) is old[n] for n in hf.MODULE_NAMES)
        assert "forward" not in vars(model[0])
    finally:
        del sys.modules[mod.__name__]


def linear_layers(model):
    return [m for m in model.modules() if type(m).__name__ in hf.LAYER_CLASSES]


def test_tiny_models_whole_layer_against_their_torch_path():
    """whole_layer on the tiny models, float32 on the CPU: prompt logits (relative 1e-3) and greedy
    tokens against the torch path, every GDN call on the whole-layer path; disable() restores the forward."""
    for name, build in tiny_models():
        torch.manual_seed(0)
        model = build().eval()
        prompt = torch.randint(0, 99, (1, 12))
        with torch.no_grad():
            ref_logits = model(prompt).logits
            ref_tokens = model.generate(prompt, max_new_tokens=32, do_sample=False)
            h = hf.enable(model, whole_layer=True)
            try:
                logits = model(prompt).logits
                tokens = model.generate(prompt, max_new_tokens=32, do_sample=False)
            finally:
                h.disable()
        err = rel_err(logits, ref_logits)
        assert err <= 1e-3, f"{name}: prompt logits, relative max error {err}"
        assert torch.equal(tokens, ref_tokens), f"{name}: greedy tokens differ"
        assert h.stats.calls > 0 and not h.stats.fallbacks, f"{name}: {h.stats.calls} calls, {dict(h.stats.fallbacks)}"
        assert all("forward" not in vars(m) for m in linear_layers(model)), f"{name}: disable left a forward"


def cache_snapshot(model, cache):
    """Copies of (conv cache, recurrent state) of each GDN layer (transformers' LinearAttentionLayer)."""
    return [(cache.layers[m.layer_idx].conv_states[0].clone(), cache.layers[m.layer_idx].recurrent_states[0].clone())
            for m in linear_layers(model)]


def test_tiny_models_whole_layer_cache_against_four_functions():
    """The cache after a prefill and after each of 3 decode steps, whole_layer against the four-function
    mode: conv caches bit for bit (copies of the same inputs), recurrent states within 1e-4."""
    for name, build in tiny_models():
        torch.manual_seed(2)
        model = build().eval()
        prompt = torch.randint(0, 99, (2, 9))
        steps = torch.randint(0, 99, (3, 2, 1))
        caches = []
        for whole in (False, True):
            h = hf.enable(model, whole_layer=whole)
            try:
                with torch.no_grad():
                    cache = model(prompt, use_cache=True).past_key_values
                    snaps = [cache_snapshot(model, cache)]
                    for tok in steps:
                        cache = model(tok, past_key_values=cache, use_cache=True).past_key_values
                        snaps.append(cache_snapshot(model, cache))
            finally:
                h.disable()
            if whole:
                assert h.stats.calls > 0 and not h.stats.fallbacks, f"{name}: {dict(h.stats.fallbacks)}"
            caches.append(snaps)
        for step, (four, whole) in enumerate(zip(*caches)):
            for (c4, s4), (cw, sw) in zip(four, whole):
                assert torch.equal(cw, c4), f"{name}: conv cache after step {step}"
                assert sw.dtype == s4.dtype and sw.shape == s4.shape
                torch.testing.assert_close(sw, s4, rtol=1e-4, atol=1e-4, msg=f"{name}: state after step {step}")


def test_tiny_models_whole_layer_padded_batch_falls_back():
    """A left-padded batch: the padded prefill takes the original forward (counted), the results are
    still those of the torch path; the decode steps after it (no padding) take the whole-layer path."""
    for name, build in tiny_models():
        torch.manual_seed(1)
        model = build().eval()
        prompt = torch.randint(1, 99, (2, 12))
        mask = torch.ones(2, 12, dtype=torch.long)
        mask[1, :4] = 0
        with torch.no_grad():
            ref_logits = model(prompt, attention_mask=mask).logits
            ref_tokens = model.generate(prompt, attention_mask=mask, max_new_tokens=8, do_sample=False)
            h = hf.enable(model, whole_layer=True)
            try:
                logits = model(prompt, attention_mask=mask).logits
                tokens = model.generate(prompt, attention_mask=mask, max_new_tokens=8, do_sample=False)
            finally:
                h.disable()
        valid = mask.bool()
        err = rel_err(logits[valid], ref_logits[valid])
        assert err <= 1e-3, f"{name}: padded batch logits, relative max error {err}"
        assert torch.equal(tokens, ref_tokens), f"{name}: padded batch greedy tokens differ"
        assert h.stats.fallbacks.get("attention mask with padding", 0) > 0, f"{name}: {dict(h.stats.fallbacks)}"
        assert h.stats.calls > 0, f"{name}: the decode steps after the padded prefill took the whole-layer path"


@requires_cuda
def test_tiny_models_whole_layer_on_cuda_against_their_torch_path():
    """As test_tiny_models_on_cuda_against_their_torch_path, with whole_layer: bf16, K = V = 128, a
    100-token prompt and 32 teacher-forced decode steps, relative max error 3e-2; whole-layer calls only."""
    for name, build in tiny_models(head_dim=128):
        torch.manual_seed(0)
        model = build().to(device="cuda", dtype=torch.bfloat16).eval()
        prompt = torch.randint(0, 99, (1, 100), device="cuda")
        with torch.no_grad():
            tokens = model.generate(prompt, max_new_tokens=32, do_sample=False)
            ref_prefill, ref_decode = teacher_forced_logits(model, prompt, tokens)
            h = hf.enable(model, whole_layer=True)
            try:
                prefill, decode = teacher_forced_logits(model, prompt, tokens)
            finally:
                h.disable()
        for what, got, ref in (("prompt", prefill, ref_prefill), ("decode", decode, ref_decode)):
            err = rel_err(got.float(), ref.float())
            assert err <= 3e-2, f"{name}: {what} logits, relative max error {err}"
        assert h.stats.calls > 0 and not h.stats.fallbacks, f"{name}: {dict(h.stats.fallbacks)}"
