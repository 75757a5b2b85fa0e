"""Finds and loads the extension libgdn_torch.so (TORCH_LIBRARY(gdn, ...)).

Search order:
  1. the environment variable GDN_TORCH_LIB (the file, or a folder holding it) — when set, it must
     be right: nothing else is tried;
  2. next to this package (where ``pip install .`` puts it);
  3. the build folders of the source tree this package sits in: build-torch/lib, build/lib, then
     any other build*/lib, newest first.
"""

import os
from pathlib import Path

import torch

LIBRARY_NAME = "libgdn_torch.so"

_loaded_path = None


def _candidates():
    here = Path(__file__).resolve().parent
    yield here / LIBRARY_NAME
    yield from sorted(here.glob("libgdn_torch*.so"))  # a build that kept a Python ABI suffix
    repo = here.parent.parent  # <repo>/python/gdn_kernels -> <repo>
    preferred = [repo / "build-torch", repo / "build"]
    others = sorted(
        (p for p in repo.glob("build*") if p.is_dir() and p not in preferred),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for build in preferred + others:
        yield build / "lib" / LIBRARY_NAME


def _already_registered():
    try:
        torch.ops.gdn.gdn_attention  # noqa: B018 - raises when the namespace has no such op
        return True
    except (AttributeError, RuntimeError):
        return False


def library_path():
    """The path of the loaded extension (None when it was registered by someone else)."""
    return _loaded_path


def load_library():
    """Loads the extension once; returns its path. Raises ImportError when it cannot be found."""
    global _loaded_path
    if _loaded_path is not None or _already_registered():
        return _loaded_path
    env = os.environ.get("GDN_TORCH_LIB")
    if env:
        path = Path(env)
        if path.is_dir():
            path = path / LIBRARY_NAME
        if not path.is_file():
            raise ImportError(f"gdn_kernels: GDN_TORCH_LIB={env} does not name {LIBRARY_NAME} or a folder holding it")
        candidates = [path]
    else:
        candidates = [p for p in _candidates() if p.is_file()]
    if not candidates:
        raise ImportError(
            f"gdn_kernels: {LIBRARY_NAME} not found next to the package or in the source tree's build "
            "folders; build it (make test-python, or cmake -DGDN_BUILD_TORCH=ON and build target gdn_torch), "
            "install the package (pip install .), or set GDN_TORCH_LIB"
        )
    torch.ops.load_library(str(candidates[0]))
    _loaded_path = str(candidates[0])
    return _loaded_path
