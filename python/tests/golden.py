"""Golden cases for the torch tests: a small safetensors reader, the call of each case through the
gdn_kernels functions, and the checks of tests/data/golden/README.md.

Tolerance principle (golden README): relative L2 error ||x - ref|| / ||ref|| over the elements the
op writes, against the float64 reference: 1e-5 for float32 activations, 1e-2 for bfloat16/float16;
SSM state 1e-5 only with float32 storage and float32 activations, else 1e-2. Conv state and z are
copies of inputs: bit-exact. Everything the op must not touch is compared bit for bit. NaN fails.
"""

import json
import os
import struct
from pathlib import Path

import torch

import gdn_kernels

REPO = Path(__file__).resolve().parents[2]
GOLDEN_DIR = Path(os.environ.get("GDN_GOLDEN_DIR", REPO / "tests" / "data" / "golden"))

_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "BOOL": torch.bool,
}


def read_safetensors(path):
    """(tensors by name, params dict) of a safetensors file; tensors are CPU copies."""
    data = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    meta = header.pop("__metadata__", {}) or {}
    params = json.loads(meta["params"]) if "params" in meta else {}
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = _DTYPES[info["dtype"]]
        raw = bytearray(data[base + begin : base + end])
        t = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        tensors[name] = t.reshape(info["shape"]).clone()
    return tensors, params


def write_safetensors(path, tensors, params=None):
    """Writes CPU tensors (and a params dict, as __metadata__["params"] JSON) to a safetensors file."""
    names = {v: k for k, v in _DTYPES.items()}
    header, chunks, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().cpu().contiguous()
        raw = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    if params is not None:
        header["__metadata__"] = {"params": json.dumps(params)}
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(head)) + head + b"".join(chunks))


def golden_files():
    return sorted(GOLDEN_DIR.glob("*.safetensors"))


def golden_ids():
    return [p.stem for p in golden_files()]


class Case:
    def __init__(self, path):
        self.path = Path(path)
        self.name = self.path.stem
        self.tensors, self.params = read_safetensors(path)
        self.op = self.params["op"]

    def input(self, name, device="cpu"):
        t = self.tensors.get("in." + name)
        return None if t is None else t.clone().to(device)

    def expected(self, name):
        return self.tensors.get("out." + name)


# ---- bit patterns and errors --------------------------------------------------------------------
def bits(t):
    """An integer view of t's bytes (NaN-safe bitwise comparison)."""
    t = t.detach().cpu().contiguous()
    if t.dtype in (torch.bfloat16, torch.float16):
        return t.view(torch.int16)
    if t.dtype == torch.float32:
        return t.view(torch.int32)
    if t.dtype == torch.float64:
        return t.view(torch.int64)
    return t


def bit_equal(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(bits(a), bits(b))


def rel_l2(x, ref):
    x = x.detach().cpu().double()
    ref = ref.detach().cpu().double()
    den = ref.norm().item()
    num = (x - ref).norm().item()
    if den == 0:
        return 0.0 if num == 0 else float("inf")
    return num / den


def act_tol(dtype):
    return 1e-5 if dtype == torch.float32 else 1e-2


def covered_rows(qsl, limit):
    """Mask of the rows [0, limit) that some sequence of query_start_loc covers (clamped)."""
    mask = torch.zeros(limit, dtype=torch.bool)
    q = [min(max(int(v), 0), limit) for v in qsl.tolist()]
    for i in range(len(q) - 1):
        if q[i + 1] > q[i]:
            mask[q[i] : q[i + 1]] = True
    return mask


def strided_pool(pool, pad, pattern=-3.0):
    """A copy of `pool` whose slots lie `pad` elements apart beyond their dense size (dim-0 stride
    larger than the row), in a buffer whose padding holds `pattern`. Returns (view, buffer)."""
    slots = pool.shape[0]
    inner = pool[0].numel() if slots else 0
    buf = torch.full((slots, inner + pad), pattern, dtype=pool.dtype, device=pool.device)
    view = buf[:, :inner].view(pool.shape)
    view.copy_(pool)
    return view, buf


# ---- running a case -----------------------------------------------------------------------------
def run_case(case, device="cpu", *, use_out=False, pool_pad=0, fill=0.0):
    """Runs the case through gdn_kernels on `device`. Returns a dict of CPU results: the output
    (y / o, or core_attn_out and z) and the pools after the call, plus "_buffers" holding the
    padded pool buffers when pool_pad > 0.

    use_out: pass an `out=` buffer filled with `fill` (the functional form allocates zeros).
    For gdn_attention the caller's core_attn_out / z buffers are filled with `fill` either way.
    """
    p = case.params
    get = lambda name: case.input(name, device)  # noqa: E731
    buffers = {}

    def pool(name):
        t = get(name)
        if pool_pad:
            t, buffers[name] = strided_pool(t, pool_pad)
        return t

    def out_like(shape, dtype):
        return torch.full(shape, fill, dtype=dtype, device=device) if use_out else None

    res = {}
    if case.op in ("causal_conv1d_fwd", "causal_conv1d_update"):
        x = get("x")
        conv_state = pool("conv_state")
        common = dict(conv_state=conv_state, query_start_loc=get("query_start_loc"),
                      state_indices=get("state_indices"), activation=p.get("activation", "silu"),
                      out=out_like(x.shape, x.dtype))
        if case.op == "causal_conv1d_fwd":
            y = gdn_kernels.causal_conv1d_fwd(x, get("weight"), get("bias"),
                                              has_initial_state=get("has_initial_state"), **common)
        else:
            y = gdn_kernels.causal_conv1d_update(x, get("weight"), get("bias"),
                                                 num_accepted_tokens=get("num_accepted_tokens"),
                                                 spec_layout=p.get("spec_layout", "rolling"), **common)
        res["y"], res["conv_state"] = y, conv_state
    elif case.op in ("gated_delta_rule_recurrent", "gated_delta_rule_chunked"):
        q, v = get("q"), get("v")
        ssm_state = pool("ssm_state")
        common = dict(A_log=get("A_log"), dt_bias=get("dt_bias"), ssm_state=ssm_state,
                      query_start_loc=get("query_start_loc"), state_indices=get("state_indices"),
                      has_initial_state=get("has_initial_state"), scale=p.get("scale"),
                      state_layout=p.get("state_layout", "vk"),
                      out=out_like((q.shape[0], v.shape[1], v.shape[2]), q.dtype))
        if case.op == "gated_delta_rule_recurrent":
            o = gdn_kernels.gated_delta_rule_recurrent(q, get("k"), v, get("a"), get("b"),
                                                       num_accepted_tokens=get("num_accepted_tokens"), **common)
        else:
            o = gdn_kernels.gated_delta_rule_chunked(q, get("k"), v, get("a"), get("b"), **common)
        res["o"], res["ssm_state"] = o, ssm_state
    elif case.op == "gdn_attention":
        qkvz = get("projected_states_qkvz")
        rows = case.expected("core_attn_out").shape[0]
        tp = p.get("tp_size", 1)
        shape = (rows, p["num_v_heads"] // tp, p["head_v_dim"])
        core_attn_out = torch.full(shape, fill, dtype=qkvz.dtype, device=device)
        z = torch.full(shape, fill, dtype=qkvz.dtype, device=device)
        conv_state, ssm_state = pool("conv_state"), pool("ssm_state")
        gdn_kernels.gdn_attention(
            core_attn_out, z, qkvz, get("projected_states_ba"), p["num_k_heads"], p["num_v_heads"],
            p["head_k_dim"], p["head_v_dim"], conv_state=conv_state, ssm_state=ssm_state,
            conv_weights=get("conv_weights"), conv_bias=get("conv_bias"), activation=p.get("activation", "silu"),
            A_log=get("A_log"), dt_bias=get("dt_bias"), num_prefills=p["num_prefills"],
            num_decodes=p["num_decodes"], num_spec_decodes=p["num_spec_decodes"],
            has_initial_state=get("has_initial_state"), non_spec_query_start_loc=get("non_spec_query_start_loc"),
            non_spec_token_indx=get("non_spec_token_indx"),
            non_spec_state_indices_tensor=get("non_spec_state_indices"),
            spec_query_start_loc=get("spec_query_start_loc"), spec_token_indx=get("spec_token_indx"),
            spec_state_indices_tensor=get("spec_state_indices"), num_accepted_tokens=get("num_accepted_tokens"),
            num_actual_tokens=p["num_actual_tokens"], tp_size=tp, reorder_input=p["reorder_input"],
            spec_conv_layout=p.get("spec_conv_layout", "rolling"),
        )
        res.update(core_attn_out=core_attn_out, z=z, conv_state=conv_state, ssm_state=ssm_state)
    else:
        raise ValueError(f"unknown op {case.op} in {case.path}")
    out = {k: v.detach().cpu() for k, v in res.items()}
    out["_buffers"] = {k: v.detach().cpu() for k, v in buffers.items()}
    return out


# ---- checks -------------------------------------------------------------------------------------
def check_ssm_state(case, got, act_dtype):
    before, ref = case.input("ssm_state"), case.expected("ssm_state")
    written = [s for s in range(ref.shape[0]) if not bit_equal(ref[s], before[s])]
    untouched = [s for s in range(ref.shape[0]) if s not in written]
    for s in untouched:
        assert bit_equal(got[s], before[s]), f"{case.name}: ssm_state slot {s} must stay untouched"
    if written:
        tol = 1e-5 if (ref.dtype == torch.float32 and act_dtype == torch.float32) else 1e-2
        err = rel_l2(got[written], ref[written])
        assert err <= tol, f"{case.name}: ssm_state rel. L2 error {err:.3e} > {tol} over slots {written}"


def check_case(case, res, *, fill=0.0):
    """Asserts the golden README's checks on run_case's results (fill: the outputs' prior value)."""
    p = case.params
    if case.op in ("causal_conv1d_fwd", "causal_conv1d_update", "gated_delta_rule_recurrent",
                   "gated_delta_rule_chunked"):
        name = "y" if case.op.startswith("causal") else "o"
        got, ref = res[name], case.expected(name + "_f64")
        act = case.input("x" if name == "y" else "q").dtype
        mask = covered_rows(case.input("query_start_loc"), got.shape[0])
        err = rel_l2(got[mask], ref[mask])
        assert err <= act_tol(act), f"{case.name}: {name} rel. L2 error {err:.3e} > {act_tol(act)}"
        rest = got[~mask]
        prior = torch.full_like(rest, fill)
        assert bit_equal(rest, prior), f"{case.name}: {name} rows no sequence covers must keep their value"
        if name == "y":
            assert bit_equal(res["conv_state"], case.expected("conv_state")), f"{case.name}: conv_state not bit-exact"
        else:
            check_ssm_state(case, res["ssm_state"], act)
    else:
        nat = p["num_actual_tokens"]
        act = case.input("projected_states_qkvz").dtype
        got = res["core_attn_out"]
        err = rel_l2(got[:nat], case.expected("core_attn_out_f64")[:nat])
        assert err <= act_tol(act), f"{case.name}: core_attn_out rel. L2 error {err:.3e} > {act_tol(act)}"
        assert bit_equal(res["z"][:nat], case.expected("z")[:nat]), f"{case.name}: z not bit-exact"
        for name in ("core_attn_out", "z"):
            tail = res[name][nat:]
            assert bit_equal(tail, torch.full_like(tail, fill)), f"{case.name}: {name} rows >= num_actual_tokens changed"
        assert bit_equal(res["conv_state"], case.expected("conv_state")), f"{case.name}: conv_state not bit-exact"
        check_ssm_state(case, res["ssm_state"], act)
