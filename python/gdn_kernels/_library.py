"""Finds and loads the extension libgdn_torch.so (TORCH_LIBRARY(gdn, ...)).

Nothing is loaded when the process has already registered the ops (for example by
``torch.ops.load_library(path)`` before the import, which is how a build elsewhere is chosen).
Otherwise ``load_library(path)`` loads the given file (or the file in the given folder), and
without a path it searches:
  1. next to this package (where ``pip install .`` puts it);
  2. the build folders of the source tree this package sits in: build-torch/lib, build/lib, then
     any other build*/lib, newest first.
The package reads no environment variable.
"""

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


def load_library(path=None):
    """Loads the extension once; returns its path (None when the ops were registered by someone
    else). path: the library file or a folder holding it; None: the search above. Raises
    ImportError when it cannot be found."""
    global _loaded_path
    if _loaded_path is not None or _already_registered():
        return _loaded_path
    if path is not None:
        p = Path(path)
        if p.is_dir():
            p = p / LIBRARY_NAME
        if not p.is_file():
            raise ImportError(f"gdn_kernels: {path} does not name {LIBRARY_NAME} or a folder holding it")
        candidates = [p]
    else:
        candidates = [p for p in _candidates() if p.is_file()]
    if not candidates:
        raise ImportError(
            f"gdn_kernels: {LIBRARY_NAME} not found next to the package or in the source tree's build "
            "folders; build it (make test-python, or cmake -DGDN_BUILD_TORCH=ON and build target gdn_torch), "
            "install the package (pip install .), or load it first with torch.ops.load_library(path)"
        )
    torch.ops.load_library(str(candidates[0]))
    _loaded_path = str(candidates[0])
    return _loaded_path
