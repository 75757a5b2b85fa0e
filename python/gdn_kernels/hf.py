"""Hugging Face transformers' Gated DeltaNet layers (Qwen3-Next, Qwen3.5, Qwen3.5-MoE) on gdn-kernels.

    import gdn_kernels.hf
    handle = gdn_kernels.hf.enable(model)   # the model's GDN layers now run on gdn-kernels
    handle.disable()                        # back to what they ran before
    handle = gdn_kernels.hf.enable(model, whole_layer=True)  # each layer's core in one gdn_attention call

transformers calls four kernel functions from these layers, by the conventions of its own torch
fallbacks: ``causal_conv1d_fn`` and ``causal_conv1d_update`` (channels-first ``[B, D, T]``
activations, a conv cache ``[B, D, state_len]``), and a chunked (prefill, continued prefill) and a
recurrent (decode) gated delta rule (``[B, T, HV, K]`` q / k expanded to the value heads, log-space
``g`` in float32, ``beta``, the state ``[B, HV, K, V]`` in float32, l2 norm in the kernel). The
functions here take exactly those arguments (and ignore the others transformers passes, as its own
kernel lookup does) and run gdn-kernels' ops on the tensors' device: the delta rule through
:mod:`gdn_kernels.fla`, the convolutions through :func:`gdn_kernels.causal_conv1d_fwd` /
:func:`gdn_kernels.causal_conv1d_update`.

:func:`enable` installs them where the installed transformers looks them up: module-level
functions of the layer's modeling module (recent versions, where the layer calls
``torch_chunk_gated_delta_rule`` and friends by name), or the layer instances' attributes
``chunk_gated_delta_rule``, ``recurrent_gated_delta_rule``, ``causal_conv1d_fn`` and
``causal_conv1d_update`` (earlier versions). Other layouts, and transformers older than
``MIN_VERSION``, are refused with an error naming what was found.

``enable(model, whole_layer=True)`` also replaces each layer's forward: its conv, gates and delta
rule become one :func:`gdn_kernels.gdn_attention` call per layer between transformers' own input
projections and its gated norm and out projection (:mod:`gdn_kernels.hf_layer`); cases that path
does not take (a padded attention mask, packed sequences, ...) run the original forward on the four
functions. ``handle.stats`` counts both.
"""

from typing import Callable, Dict, List, Optional, Tuple

import torch
from torch import Tensor

from . import fla
from . import hf_layer
from . import ops as _ops

MIN_VERSION = (4, 57)  # Qwen3-Next's first release; Qwen3.5 from 5.2
LAYER_CLASSES = ("Qwen3NextGatedDeltaNet", "Qwen3_5GatedDeltaNet", "Qwen3_5MoeGatedDeltaNet")


def _activation(activation) -> str:
    if activation in (None, False, "identity", "none"):
        return "identity"
    if activation in (True, "silu", "swish"):
        return "silu"
    raise ValueError(f"gdn_kernels.hf: unsupported conv activation {activation!r} (silu or none)")


def _rows(x: Tensor) -> Tensor:
    """[B, D, T] channels-first -> [B * T, D] rows (the ops' layout)."""
    B, D, T = x.shape
    return x.transpose(1, 2).reshape(B * T, D).contiguous()


def _batch_meta(B: int, T: int, device) -> Tuple[Tensor, Tensor]:
    qsl = torch.arange(B + 1, dtype=torch.int32, device=device) * T
    slots = torch.arange(B, dtype=torch.int32, device=device)
    return qsl, slots


def causal_conv1d_fn(hidden_states: Tensor, weight: Tensor, bias: Optional[Tensor] = None, activation=None,
                     **kwargs) -> Tensor:
    """transformers' ``causal_conv1d_fn``: a causal depthwise conv of ``[B, D, T]`` with zeros before
    each row's first column; ``weight`` ``[D, W]`` (or ``[D, 1, W]``). Returns ``[B, D, T]``."""
    if weight.dim() == 3:
        weight = weight.squeeze(1)
    B, D, T = hidden_states.shape
    W = weight.shape[-1]
    qsl, slots = _batch_meta(B, T, hidden_states.device)
    pool = torch.zeros(B, W - 1, D, dtype=hidden_states.dtype, device=hidden_states.device)
    y = _ops.causal_conv1d_fwd(_rows(hidden_states), weight.contiguous(), bias, conv_state=pool, query_start_loc=qsl,
                          state_indices=slots,
                          has_initial_state=torch.zeros(B, dtype=torch.bool, device=hidden_states.device),
                          activation=_activation(activation))
    return y.reshape(B, T, D).transpose(1, 2)


def causal_conv1d_update(hidden_states: Tensor, conv_state: Tensor, weight: Tensor, bias: Optional[Tensor] = None,
                         activation=None, **kwargs) -> Tensor:
    """transformers' ``causal_conv1d_update``: ``hidden_states`` ``[B, D, T]`` after the inputs held in
    ``conv_state`` ``[B, D, state_len]`` (state_len >= W - 1, the latest last); the conv's output
    ``[B, D, T]``; ``conv_state`` is updated in place to the last ``state_len`` inputs."""
    if weight.dim() == 3:
        weight = weight.squeeze(1)
    B, D, T = hidden_states.shape
    W, state_len = weight.shape[-1], conv_state.shape[-1]
    if state_len < W - 1:
        raise ValueError(f"gdn_kernels.hf: conv_state holds {state_len} inputs, the conv needs {W - 1}")
    qsl, slots = _batch_meta(B, T, hidden_states.device)
    # [B, W - 1, D], oldest first: a copy, also where the transposed slice is already contiguous (a
    # channels-last cache), so that the op's in-place window update does not reach conv_state
    pool = conv_state[:, :, state_len - (W - 1):].transpose(1, 2).clone(memory_format=torch.contiguous_format)
    y = _ops.causal_conv1d_update(_rows(hidden_states), weight.contiguous(), bias, conv_state=pool, query_start_loc=qsl,
                             state_indices=slots, activation=_activation(activation))
    conv_state.copy_(torch.cat([conv_state, hidden_states.to(conv_state.dtype)], dim=-1)[:, :, -state_len:])
    return y.reshape(B, T, D).transpose(1, 2)


def chunk_gated_delta_rule(query: Tensor, key: Tensor, value: Tensor, g: Tensor, beta: Tensor, chunk_size: int = 64,
                           initial_state: Optional[Tensor] = None, output_final_state: bool = False,
                           use_qk_l2norm_in_kernel: bool = False, cu_seqlens: Optional[Tensor] = None,
                           scale: Optional[float] = None, **kwargs) -> Tuple[Tensor, Optional[Tensor]]:
    """transformers' chunked gated delta rule (prefill, and prefill continued from the cache)."""
    return fla.chunk_gated_delta_rule(query, key, value, g, beta, scale=scale, initial_state=initial_state,
                                      output_final_state=output_final_state,
                                      use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, cu_seqlens=cu_seqlens)


def recurrent_gated_delta_rule(query: Tensor, key: Tensor, value: Tensor, g: Tensor, beta: Tensor,
                               initial_state: Optional[Tensor] = None, output_final_state: bool = False,
                               use_qk_l2norm_in_kernel: bool = False, cu_seqlens: Optional[Tensor] = None,
                               scale: Optional[float] = None, **kwargs) -> Tuple[Tensor, Optional[Tensor]]:
    """transformers' recurrent gated delta rule (decode): the log-space decay and beta as given, in
    gated_delta_rule_recurrent (on CUDA the gate-form instances of its kernels)."""
    return fla.fused_recurrent_gated_delta_rule(query, key, value, g=g, beta=beta, scale=scale,
                                                initial_state=initial_state, output_final_state=output_final_state,
                                                use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                                                cu_seqlens=cu_seqlens)


# Where each layout looks its kernels up: module-level names (recent transformers) and instance
# attributes (earlier versions).
MODULE_NAMES: Dict[str, Callable] = {
    "torch_chunk_gated_delta_rule": chunk_gated_delta_rule,
    "torch_recurrent_gated_delta_rule": recurrent_gated_delta_rule,
    "causal_conv1d_fn": causal_conv1d_fn,
    "causal_conv1d_update": causal_conv1d_update,
}
INSTANCE_NAMES: Dict[str, Callable] = {
    "chunk_gated_delta_rule": chunk_gated_delta_rule,
    "recurrent_gated_delta_rule": recurrent_gated_delta_rule,
    "causal_conv1d_fn": causal_conv1d_fn,
    "causal_conv1d_update": causal_conv1d_update,
}


class Handle:
    """What :func:`enable` changed; :meth:`disable` puts the previous objects back."""

    def __init__(self):
        self._undo: List[Tuple[object, str, object]] = []
        self.layers = 0
        self.stats = hf_layer.Stats()  # whole_layer: calls taken, fallbacks by reason

    def _set(self, owner, name: str, fn: Callable) -> None:
        self._undo.append((owner, name, getattr(owner, name)))
        setattr(owner, name, fn)

    def _set_instance(self, owner, name: str, fn: Callable) -> None:
        """Sets an instance attribute; disable removes it again when the instance had none (a method)."""
        had = name in vars(owner)
        self._undo.append((owner, name, vars(owner)[name] if had else _ABSENT))
        setattr(owner, name, fn)

    def disable(self) -> None:
        for owner, name, old in reversed(self._undo):
            if old is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, old)
        self._undo.clear()


_ABSENT = object()


def _check_version() -> None:
    import transformers

    parts = []
    for p in transformers.__version__.split(".")[:2]:
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    if tuple(parts) < MIN_VERSION:
        raise RuntimeError(f"gdn_kernels.hf: transformers {transformers.__version__} is older than "
                           f"{'.'.join(map(str, MIN_VERSION))}, the first with these layers")


def _global_names(fn, depth: int = 4) -> set:
    """The global names a function's code looks up, through decorators: the function, what it wraps
    (``__wrapped__``) and the functions its closure holds (a decorator's inner function calls the
    decorated one from a cell)."""
    names, seen, todo = set(), set(), [(fn, 0)]
    while todo:
        f, d = todo.pop()
        if id(f) in seen or d > depth:
            continue
        seen.add(id(f))
        code = getattr(f, "__code__", None)
        if code is not None:
            names.update(code.co_names)
        if getattr(f, "__wrapped__", None) is not None:
            todo.append((f.__wrapped__, d + 1))
        for cell in getattr(f, "__closure__", None) or ():
            try:
                v = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if callable(v):
                todo.append((v, d + 1))
    return names


def _check_whole_layer(layer) -> None:
    names = _global_names(type(layer).forward)
    missing = [n for n in hf_layer.CACHE_PROTOCOL if n not in names]
    if missing:
        raise RuntimeError(f"gdn_kernels.hf: whole_layer: {type(layer).__name__}.forward does not use the cache "
                           f"protocol it needs (missing {missing}); use enable(model) for this transformers")
    if hf_layer.family(layer) is None:
        raise RuntimeError(f"gdn_kernels.hf: whole_layer: {type(layer).__name__} has neither in_proj_qkvz/in_proj_ba "
                           "nor in_proj_qkv/in_proj_z/in_proj_b/in_proj_a")


def enable(model: torch.nn.Module, check_version: bool = True, whole_layer: bool = False) -> Handle:
    """Runs the Gated DeltaNet layers of ``model`` (classes ``LAYER_CLASSES``) on gdn-kernels: their
    modeling modules' kernel functions, or the layers' kernel attributes, whichever the installed
    transformers uses. With ``whole_layer`` each layer's forward also becomes
    :func:`gdn_kernels.hf_layer.whole_layer_forward` (one gdn_attention call per layer), falling back
    to the original forward (on the four functions) for the cases it does not take. Returns a
    :class:`Handle`; raises if the model has no such layer, a layer looks up its kernels in a way
    this module does not know, (``whole_layer``) its forward does not use transformers' 5.x
    cache protocol or its projections are of neither known layout, or the layers (or their modeling
    module) already run on gdn-kernels through a handle not yet disabled."""
    import sys

    if check_version:
        _check_version()
    ours = set(map(id, INSTANCE_NAMES.values())) | set(map(id, MODULE_NAMES.values()))

    def refuse_twice(owner, names, what):  # a second handle would restore the first one's functions
        if any(id(getattr(owner, n, None)) in ours for n in names) or \
                getattr(vars(owner).get("forward"), "gdn_whole_layer", False):
            raise RuntimeError(f"gdn_kernels.hf: {what} already runs on gdn-kernels (an enable() whose handle "
                               "is not disabled); disable that handle first")

    handle = Handle()
    patched_modules = set()
    try:
        for layer in model.modules():
            if type(layer).__name__ not in LAYER_CLASSES:
                continue
            refuse_twice(layer, INSTANCE_NAMES, f"layer {type(layer).__name__}")
            if all(hasattr(layer, n) for n in INSTANCE_NAMES):
                for n, fn in INSTANCE_NAMES.items():
                    handle._set(layer, n, fn)
            else:
                mod = sys.modules[type(layer).__module__]
                names = _global_names(type(layer).forward)
                if not all(hasattr(mod, n) and n in names for n in MODULE_NAMES):
                    raise RuntimeError(f"gdn_kernels.hf: {type(layer).__name__} ({type(layer).__module__}) calls its "
                                       f"kernels neither through {sorted(INSTANCE_NAMES)} attributes nor through the "
                                       f"module functions {sorted(MODULE_NAMES)}: unsupported transformers layout")
                if mod not in patched_modules:
                    refuse_twice(mod, MODULE_NAMES, f"module {mod.__name__}")
                    for n, fn in MODULE_NAMES.items():
                        handle._set(mod, n, fn)
                    patched_modules.add(mod)
            if whole_layer:
                _check_whole_layer(layer)
                handle._set_instance(layer, "forward", hf_layer.make_forward(layer, layer.forward, handle.stats))
            handle.layers += 1
    except Exception:
        handle.disable()  # nothing stays patched when a layer is refused
        raise
    if handle.layers == 0:
        raise RuntimeError(f"gdn_kernels.hf: the model has no layer of {LAYER_CLASSES}")
    return handle
