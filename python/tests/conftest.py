"""pytest setup: import gdn_kernels from this source tree unless it is installed, and the device
parameter shared by the tests (CUDA cases skip without a GPU or without CUDA in the extension)."""

import os
import sys
from pathlib import Path

import pytest

_PYTHON_DIR = Path(__file__).resolve().parents[1]

# The test run may name the extension to test (make test-python: the one of its build folder); the
# package itself reads no environment and uses what is registered already.
_LIB = os.environ.get("GDN_TORCH_LIB")
if _LIB:
    import torch

    _lib = Path(_LIB)
    torch.ops.load_library(str(_lib / "libgdn_torch.so" if _lib.is_dir() else _lib))

try:
    import gdn_kernels  # noqa: F401  (an installed package wins)
except ImportError:
    sys.path.insert(0, str(_PYTHON_DIR))

import torch  # noqa: E402


def cuda_usable():
    return torch.cuda.is_available()


requires_cuda = pytest.mark.skipif(not cuda_usable(), reason="needs a CUDA device and a torch with CUDA")

DEVICES = ["cpu", pytest.param("cuda", marks=requires_cuda)]
