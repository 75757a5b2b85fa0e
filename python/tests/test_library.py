"""Loading the extension: a second copy of libgdn_torch.so (another build, or an installed copy
beside the build tree), loaded after the first, registers nothing and the first copy's ops keep
working; it must not abort the process (contract §5: no library code aborts). Each case runs in a
child interpreter, so that a crash fails the test instead of ending the run."""

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

from gdn_kernels import _library  # the package registers the ops in this process: the path below is theirs

PYTHON_DIR = Path(__file__).resolve().parents[1]


def loaded_library():
    for lib in torch.ops.loaded_libraries:
        if Path(lib).name.startswith("libgdn_torch"):
            return Path(lib)
    return _library._loaded_path and Path(_library._loaded_path)


def test_a_second_copy_registers_nothing(tmp_path):
    first = loaded_library()
    assert first is not None and first.exists(), "the test process loaded no libgdn_torch.so"
    second = tmp_path / "copy" / "libgdn_torch.so"
    second.parent.mkdir()
    shutil.copy(first, second)
    script = textwrap.dedent(f"""
        import sys, torch
        torch.ops.load_library({str(first)!r})
        sys.path.insert(0, {str(PYTHON_DIR)!r})
        import gdn_kernels
        torch.ops.load_library({str(second)!r})  # the second copy: no abort, no exception
        x = torch.randn(5, 8)
        y = gdn_kernels.causal_conv1d_fwd(x, torch.randn(8, 4), None, conv_state=torch.zeros(1, 3, 8),
                                          query_start_loc=torch.tensor([0, 5]), state_indices=torch.tensor([0]))
        assert y.shape == (5, 8) and torch.isfinite(y).all()
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", f"rc {r.returncode}\n{r.stdout}\n{r.stderr[-2000:]}"
