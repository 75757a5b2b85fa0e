"""The torch ops give the C++ API's results bit for bit.

tests/harness/torch_api_harness.cpp runs each golden case through gdn/ops.h (tools/capture/runner.h)
with zero-filled outputs and writes every tensor after the call; the same call through
torch.ops.gdn must produce identical bytes in every output and pool. This shows that the binding
hands the core every tensor, stride, optional and default unchanged.
"""

import os
import subprocess
from pathlib import Path

import pytest

from golden import REPO, Case, bit_equal, golden_files, golden_ids, read_safetensors, run_case


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


@pytest.mark.skipif(HARNESS is None or not HARNESS.is_file(),
                    reason="gdn_torch_api_harness not built (cmake -DGDN_BUILD_TORCH=ON; or set GDN_TORCH_HARNESS)")
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
