"""The torch ops give the C++ API's results bit for bit.

tests/harness/torch_api_harness.cpp runs each golden case through gdn/ops.h (tools/capture/runner.h)
with zero-filled outputs and writes every tensor after the call; the same call through
torch.ops.gdn must produce identical bytes in every output and pool. This shows that the binding
hands the core every tensor, stride, optional and default unchanged.

The deferred-commit mode and token trees (docs/contract.md §7) have no golden case: the test
builds calls of gated_delta_rule_recurrent and gdn_attention with every deferred argument (logs,
replay counts, paths, parents, log_tokens) and compares every argument tensor after the call.
"""

import os
import subprocess
from pathlib import Path

import pytest
import torch

import deferred as dfr
import gdn_kernels
from golden import REPO, Case, bit_equal, golden_files, golden_ids, read_safetensors, run_case, write_safetensors


def harness_path():
    env = os.environ.get("GDN_TORCH_HARNESS")
    if env:
        return Path(env)
    for build in ("build-torch", "build"):
        p = REPO / build / "bin" / "gdn_torch_api_harness"
        if p.is_file():
            return p
    return None


HARNESS = harness_path()


needs_harness = pytest.mark.skipif(
    HARNESS is None or not HARNESS.is_file(),
    reason="gdn_torch_api_harness not built (cmake -DGDN_BUILD_TORCH=ON; or set GDN_TORCH_HARNESS)")


@needs_harness
@pytest.mark.parametrize("path", golden_files(), ids=golden_ids())
def test_torch_equals_cpp_api(path, tmp_path):
    case = Case(path)
    out_file = tmp_path / "result.safetensors"
    proc = subprocess.run([str(HARNESS), str(path), str(out_file), "cpu"], capture_output=True, text=True)
    assert proc.returncode == 0, f"harness failed on {case.name}: {proc.stderr}"
    cpp, _ = read_safetensors(out_file)
    torch_res = run_case(case, "cpu")
    for name, got in torch_res.items():
        if name.startswith("_"):
            continue
        assert name in cpp, f"harness wrote no {name}"
        assert bit_equal(got, cpp[name]), f"{case.name}: {name} differs between torch.ops.gdn and the C++ API"


# ---- the deferred-commit mode ---------------------------------------------------------------------
DEFERRED_CALLS = {
    "recurrent_tree_kv": ("gated_delta_rule_recurrent", lambda: dfr.recurrent_call(True, "kv")),
    "recurrent_commit_vk": ("gated_delta_rule_recurrent", lambda: dfr.recurrent_call(False, "vk")),
    "attention_mixed_tree": ("gdn_attention", dfr.attention_call),
}


@needs_harness
@pytest.mark.parametrize("name", sorted(DEFERRED_CALLS))
def test_deferred_mode_torch_equals_cpp_api(name, tmp_path):
    op, make = DEFERRED_CALLS[name]
    kw = make()
    outputs = ("core_attn_out", "z")  # the harness allocates them zero-filled, as kw does
    tensors = {f"in.{k}": v for k, v in kw.items() if isinstance(v, torch.Tensor) and k not in outputs}
    params = {k: v for k, v in kw.items() if not isinstance(v, torch.Tensor) and v is not None}
    params["op"] = op
    case_file, out_file = tmp_path / "case.safetensors", tmp_path / "result.safetensors"
    write_safetensors(case_file, tensors, params)
    proc = subprocess.run([str(HARNESS), str(case_file), str(out_file), "cpu"], capture_output=True, text=True)
    assert proc.returncode == 0, f"harness failed on {name}: {proc.stderr}"
    cpp, _ = read_safetensors(out_file)
    res = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
    ret = getattr(gdn_kernels, op)(**res)
    if ret is not None:
        res["o"] = ret
    for arg, got in res.items():
        if isinstance(got, torch.Tensor):
            assert arg in cpp, f"harness wrote no {arg}"
            assert bit_equal(got, cpp[arg]), f"{name}: {arg} differs between torch.ops.gdn and the C++ API"
    if kw.get("log_tokens", True):
        assert not bit_equal(res["verify_log_out"], kw["verify_log_out"]), "the call logged nothing"
