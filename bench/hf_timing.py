#!/usr/bin/env python3
"""Prefill and decode timing of transformers' Qwen3-Next on its torch path, on gdn-kernels and on FLA.

Random weights built in code (nothing downloaded), bf16 on one CUDA device, batch 1. Cases:
  tiny      a small Qwen3NextForCausalLM (3 Gated DeltaNet layers, 4 key / 8 value heads of K = V = 128,
            1 attention layer, dense MLPs: no MoE routing to flip on bf16 rounding); prefill = one forward
            of the prompt (use_cache=True); decode = greedy tokens fed one at a time with the model's
            cache after a short prompt (not timed).
  layer80b  one Qwen3NextGatedDeltaNet at Qwen3-Next-80B-A3B's sizes (hidden 2048, 16 key / 32 value
            heads of 128, conv 4: Qwen3NextConfig's defaults), called directly with a cache made as the
            model's forward makes one; prefill into an empty cache, decode = one-token steps after a
            short prompt. If the direct call fails, a 1-layer model of these sizes is timed and named so.
Backends: torch (the model's own kernels; models and references are made before FLA is imported), gdn
(gdn_kernels.hf.enable), fla (FLA's chunk / fused recurrent gated delta rule from --fla-dir, installed
where enable() installs its functions; the convs are gdn-kernels'). The functions each row calls are
printed. Each backend's prefill (100 tokens) and 4 decode steps are first compared with the torch path
(relative max error <= 3e-2); one that disagrees is not timed. Timing: CUDA events around the prefill
call or around all decode steps, after --warmup calls; median of --runs; tok/s = tokens / ms.
"""
import argparse
import datetime
import inspect
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def shown(value):
    """A path as the results record it: relative to the source tree, else its file name (no machine's
    folders in a results file); other values unchanged."""
    if not isinstance(value, str) or "/" not in value:
        return value
    p = Path(value).resolve()
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else p.name
DEVICE = "cuda"
TOL = 3e-2
CHECK_PROMPT, CHECK_STEPS = 100, 4
TINY = dict(vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=64, hidden_act="silu",
            layer_types=["linear_attention"] * 3 + ["full_attention"], linear_conv_kernel_dim=4,
            linear_key_head_dim=128, linear_value_head_dim=128, linear_num_key_heads=4, linear_num_value_heads=8,
            mlp_only_layers=[0, 1, 2, 3])
# The GDN layer's sizes are Qwen3-Next-80B-A3B's; the rest (one attention layer after it, dense MLPs, a
# small vocabulary) only makes the model that holds the layer and its cache, and is not timed.
LAYER80B = dict(hidden_size=2048, linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
                linear_value_head_dim=128, linear_conv_kernel_dim=4, hidden_act="silu", rms_norm_eps=1e-6)
HOLDER = dict(vocab_size=1024, intermediate_size=512, num_attention_heads=16, num_key_value_heads=2, head_dim=256,
              num_hidden_layers=2, layer_types=["linear_attention", "full_attention"], mlp_only_layers=[0, 1])
ONE_LAYER = dict(HOLDER, num_hidden_layers=1, layer_types=["linear_attention"], mlp_only_layers=[0])


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", default=str(ROOT / "build" / "lib" / "libgdn_torch.so"),
                   help="libgdn_torch.so (or its folder), loaded before gdn_kernels is imported from python/")
    p.add_argument("--fla-dir", default=str(ROOT / ".peers" / "fla_full"), help="a folder holding FLA's fla package")
    p.add_argument("--cases", default="tiny,layer80b", help="comma list of tiny, layer80b")
    p.add_argument("--backends", default="torch,gdn,fla", help="comma list of torch, gdn, fla")
    p.add_argument("--prefill-tokens", type=int, default=8192)
    p.add_argument("--torch-prefill-tokens", type=int, default=2048, help="prefill tokens of the torch rows")
    p.add_argument("--decode-tokens", type=int, default=32, help="decode steps timed together")
    p.add_argument("--decode-prompt", type=int, default=64, help="prompt tokens before the decode steps")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--runs", type=int, default=5, help="timed runs; the median is reported")
    p.add_argument("--out", default="hf_timing.json")
    return p.parse_args(argv)


def git_commit():
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except Exception:  # noqa: BLE001 - not a git checkout, or no git
        return None


def load_gdn(lib):
    """The package's loader (python/gdn_kernels/_library.py, run as a file) loads --lib; the package
    imported afterwards uses the ops registered."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("gdn_library_loader", ROOT / "python" / "gdn_kernels" / "_library.py")
    loader = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loader)
    loader.load_library(lib)
    sys.path.insert(0, str(ROOT / "python"))
    import gdn_kernels.hf
    return gdn_kernels.hf


def load_fla(fla_dir):
    """FLA's two functions, or (None, why)."""
    if not Path(fla_dir).is_dir():
        return None, f"{fla_dir} is not a directory"
    sys.path.insert(0, str(Path(fla_dir).resolve()))
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
    except Exception as e:  # noqa: BLE001
        return None, f"{type(e).__name__}: {e}".splitlines()[0][:200]
    return (chunk_gated_delta_rule, fused_recurrent_gated_delta_rule), None


def enable_fla(hf, model, fns):
    """gdn_kernels.hf.enable with FLA's delta-rule functions in place of gdn-kernels' (the convs stay
    gdn-kernels'); the adapters take transformers' arguments (positional in the order of its torch
    functions) and pass FLA keywords."""
    def adapt(fn, positional):
        def call(query, key, value, *args, **kw):
            kw.update(zip(positional, args))
            return fn(query, key, value, g=kw["g"], beta=kw["beta"], scale=kw.get("scale"),
                      initial_state=kw.get("initial_state"), output_final_state=kw.get("output_final_state", False),
                      use_qk_l2norm_in_kernel=kw.get("use_qk_l2norm_in_kernel", False), cu_seqlens=kw.get("cu_seqlens"))
        call.__module__, call.__qualname__ = "fla", getattr(fn, "__name__", "fla_function")
        return call

    tail = ("initial_state", "output_final_state", "use_qk_l2norm_in_kernel")
    chunk, recurrent = adapt(fns[0], ("g", "beta", "chunk_size") + tail), adapt(fns[1], ("g", "beta") + tail)
    saved = dict(hf.MODULE_NAMES), dict(hf.INSTANCE_NAMES)
    hf.MODULE_NAMES.update(torch_chunk_gated_delta_rule=chunk, torch_recurrent_gated_delta_rule=recurrent)
    hf.INSTANCE_NAMES.update(chunk_gated_delta_rule=chunk, recurrent_gated_delta_rule=recurrent)
    try:
        return hf.enable(model)
    finally:
        for d, old in zip((hf.MODULE_NAMES, hf.INSTANCE_NAMES), saved):
            d.clear()
            d.update(old)


def kernel_names(hf, model):
    """What the model's first GDN layer calls now: 'name=module.function, ...'."""
    for layer in (m for m in model.modules() if type(m).__name__ in hf.LAYER_CLASSES):
        if all(hasattr(layer, n) for n in hf.INSTANCE_NAMES):
            objs = {n: getattr(layer, n) for n in hf.INSTANCE_NAMES}
        else:
            objs = {n: getattr(sys.modules[type(layer).__module__], n, None) for n in hf.MODULE_NAMES}
        return ", ".join(f"{n}={getattr(f, '__module__', '?').rsplit('.', 1)[-1]}.{getattr(f, '__qualname__', f)}"
                         if f is not None else f"{n}=None" for n, f in objs.items())
    return "no GDN layer"


def new_cache(model):
    """An empty cache as the model's forward makes one: Qwen3NextDynamicCache, else DynamicCache(config=)."""
    cls = getattr(sys.modules[type(model).__module__], "Qwen3NextDynamicCache", None)
    if cls is not None:
        return cls(model.config)
    from transformers import DynamicCache
    return DynamicCache(config=model.config)


class Case:
    """start(x): prefill into a new cache -> (output, state); step(x, state): one decode token -> (output,
    state); rand(n): n random inputs."""

    def check_outputs(self):
        prefill, state = self.start(self.check_in[0])
        dec = []
        for x in self.check_in[1]:
            out, state = self.step(x, state)
            dec.append(out)
        return prefill, self.torch.cat(dec, 1)

    def prefill(self, T):
        x = self.rand(T)
        return (lambda: None), (lambda _: self.start(x, last_only=True))

    def decode(self, n, prompt_len):
        prompt, steps = self.rand(prompt_len), self.decode_inputs(n)

        def run(state):
            for x in steps:
                _, state = self.step(x, state)
        return (lambda: self.start(prompt, last_only=True)[1]), run


class ModelCase(Case):
    """A whole model: token ids in, logits out; decode is greedy."""

    def __init__(self, torch, model, name):
        self.torch, self.model, self.name = torch, model, name
        gen = torch.Generator(device=DEVICE).manual_seed(1)
        self.rand = lambda n: torch.randint(0, model.config.vocab_size, (1, n), device=DEVICE, generator=gen)
        self.check_in = (self.rand(CHECK_PROMPT), [self.rand(1) for _ in range(CHECK_STEPS)])
        self.keep = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}

    def decode_inputs(self, n):
        return [None] * n  # None: the previous step's greedy token

    def start(self, ids, last_only=False):
        out = self.model(ids, use_cache=True, **(self.keep if last_only else {}))
        return out.logits, (out.past_key_values, out.logits)

    def step(self, ids, state):
        cache, logits = state
        ids = logits[:, -1:].argmax(-1) if ids is None else ids
        out = self.model(ids, past_key_values=cache, use_cache=True)
        return out.logits[:, -1:], (out.past_key_values, out.logits)


class LayerCase(Case):
    """The first Qwen3NextGatedDeltaNet of a model, called directly: hidden states in and out."""

    def __init__(self, torch, model, name):
        self.torch, self.model, self.name = torch, model, name
        self.layer = next(m for m in model.modules() if type(m).__name__ == "Qwen3NextGatedDeltaNet")
        self.with_pos = "cache_position" in inspect.signature(self.layer.forward).parameters
        gen, H = torch.Generator(device=DEVICE).manual_seed(1), model.config.hidden_size
        self.rand = lambda n: torch.randn(1, n, H, device=DEVICE, generator=gen).to(torch.bfloat16)
        self.check_in = (self.rand(CHECK_PROMPT), [self.rand(1) for _ in range(CHECK_STEPS)])

    def decode_inputs(self, n):
        return [self.rand(1) for _ in range(n)]

    def call(self, x, cache, past):
        kw = {"cache_position": self.torch.arange(past, past + x.shape[1], device=DEVICE)} if self.with_pos else {}
        out = self.layer(x, cache_params=cache, **kw)
        return (out[0] if isinstance(out, tuple) else out), (cache, past + x.shape[1])

    def start(self, x, last_only=False):
        return self.call(x, new_cache(self.model), 0)

    def step(self, x, state):
        return self.call(x, *state)


def median_ms(torch, setup, run, warmup, runs):
    for _ in range(warmup):
        run(setup())
    times = []
    for _ in range(runs):
        state = setup()
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        run(state)
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    return statistics.median(times)


def rel_err(got, ref):
    return ((got.float() - ref.float()).abs().max() / ref.float().abs().max()).item()


def error_row(rows, backend, case, e):
    msg = e if isinstance(e, str) else f"{type(e).__name__}: {e}".splitlines()[0][:300]
    print(f"  {backend:5s} {case}: error: {msg}")
    rows.append({"backend": backend, "case": case, "error": msg})


def run_case(torch, hf, case, ref, backends, a, rows, info):
    for name, enable in backends:
        handle = None
        try:
            handle = enable(case.model) if enable else None
            info["calls"][name] = kernel_names(hf, case.model)
            print(f"  {name:5s} {case.name} calls: {info['calls'][name]}")
            if enable:
                errs = [rel_err(g, r) for g, r in zip(case.check_outputs(), ref)]
                info["checks"][name] = {"prefill": errs[0], "decode": errs[1], "ok": max(errs) <= TOL}
                print(f"  {name:5s} {case.name} against torch: relative max error prefill {errs[0]:.2e}, decode "
                      f"{errs[1]:.2e} (tolerance {TOL:g}: {'ok' if max(errs) <= TOL else 'DISAGREES'})")
                if max(errs) > TOL:
                    error_row(rows, name, case.name, "disagrees with the torch path (not timed)")
                    continue
            T = a.torch_prefill_tokens if name == "torch" else a.prefill_tokens
            for phase, n, (setup, run) in (("prefill", T, case.prefill(T)),
                                           ("decode", a.decode_tokens, case.decode(a.decode_tokens, a.decode_prompt))):
                ms = median_ms(torch, setup, run, a.warmup, a.runs)
                rows.append({"backend": name, "case": case.name, "phase": phase, "tokens": n, "ms": ms,
                             "ms_per_token": ms / n, "tokens_per_s": n / ms * 1e3})
                print(f"  {name:5s} {case.name} {phase:7s} {n:6d} tokens {ms:10.3f} ms")
        except Exception as e:  # noqa: BLE001 - an error row; the other backends still run
            error_row(rows, name, case.name, e)
        finally:
            if handle is not None:
                handle.disable()
            torch.cuda.empty_cache()


def build(torch, transformers, cls, cfg):
    torch.manual_seed(0)
    model = getattr(transformers, cls)(transformers.Qwen3NextConfig(**cfg))
    return model.to(device=DEVICE, dtype=torch.bfloat16).eval()


def make_case(torch, transformers, name):
    """(case, the torch path's check outputs, what is timed)."""
    if name == "tiny":
        case = ModelCase(torch, build(torch, transformers, "Qwen3NextForCausalLM", TINY), "tiny")
        return case, case.check_outputs(), {"config": TINY, "timed": "the whole model"}
    cfg = dict(HOLDER, **LAYER80B)
    try:
        case = LayerCase(torch, build(torch, transformers, "Qwen3NextModel", cfg), "layer80b")
        return case, case.check_outputs(), {"config": cfg, "timed": "the Qwen3NextGatedDeltaNet, called directly"}
    except Exception as e:  # noqa: BLE001
        print(f"layer80b: the direct layer call failed ({type(e).__name__}: {e}); timing a 1-layer model instead")
    cfg = dict(ONE_LAYER, **LAYER80B)
    case = ModelCase(torch, build(torch, transformers, "Qwen3NextForCausalLM", cfg), "layer80b(1-layer model)")
    return case, case.check_outputs(), {"config": cfg, "timed": "a 1-layer model (embedding, GDN, MLP, norm, head)"}


def main(argv=None):
    a = parse_args(argv)
    names, case_names = [b.strip() for b in a.backends.split(",")], [c.strip() for c in a.cases.split(",")]
    if set(names) - {"torch", "gdn", "fla"} or set(case_names) - {"tiny", "layer80b"}:
        sys.exit("hf_timing: --backends takes torch, gdn, fla and --cases tiny, layer80b")
    try:
        import torch
    except ImportError as e:
        sys.exit(f"hf_timing: needs PyTorch ({e})")
    if not torch.cuda.is_available():
        sys.exit("hf_timing: needs a CUDA device (torch.cuda.is_available() is False)")
    try:
        import transformers
        import transformers.models.qwen3_next.modeling_qwen3_next  # noqa: F401 - imported before FLA is on sys.path
    except ImportError as e:
        sys.exit(f"hf_timing: needs transformers with Qwen3-Next ({e})")
    try:
        hf = load_gdn(a.lib)
    except ImportError as e:
        sys.exit(f"hf_timing: {e}")
    device = torch.cuda.get_device_name(0)
    print(f"{device}; torch {torch.__version__}; transformers {transformers.__version__}")
    rows, cases, built = [], {}, []
    with torch.no_grad():
        for name in case_names:  # every model and torch reference before FLA is on sys.path
            try:
                built.append(make_case(torch, transformers, name))
            except Exception as e:  # noqa: BLE001 - no torch reference: an error row, the next case still runs
                error_row(rows, "torch", name, e)
    backends = [(n, e) for n, e in (("torch", None), ("gdn", hf.enable)) if n in names]
    fla = "not asked"
    if "fla" in names:
        fns, why = load_fla(a.fla_dir)
        fla = (f"skipped: FLA does not import from {shown(a.fla_dir)}: {why}" if fns is None
               else f"from {shown(a.fla_dir)}")
        if fns is not None:
            backends.append(("fla", lambda m: enable_fla(hf, m, fns)))
        print(f"fla: {fla}")
    with torch.no_grad():
        while built:
            case, ref, info = built.pop(0)
            cases[case.name] = dict(info, calls={}, checks={})
            run_case(torch, hf, case, ref, backends, a, rows, cases[case.name])
            del case, ref
            torch.cuda.empty_cache()
    print(f"\nmedian of {a.runs} runs after {a.warmup} warm-up; ms: the whole prefill, or all decode steps")
    print(f"{'backend':8s} {'case':24s} {'phase':8s} {'tokens':>7s} {'ms':>11s} {'ms/tok':>9s} {'tok/s':>12s}")
    for r in rows:
        print(f"{r['backend']:8s} {r['case']:24s} " + (f"error: {r['error']}" if "error" in r else
              f"{r['phase']:8s} {r['tokens']:7d} {r['ms']:11.3f} {r['ms_per_token']:9.4f} {r['tokens_per_s']:12.1f}"))
    report = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "device": device,
              "torch": torch.__version__, "transformers": transformers.__version__, "commit": git_commit(),
              "command": " ".join(["python3"] + [shown(x) for x in sys.argv]),
              "args": {k: shown(v) for k, v in vars(a).items()}, "fla": fla, "cases": cases,
              "results": rows}
    with open(a.out, "w") as f:
        json.dump(report, f, indent=1)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
