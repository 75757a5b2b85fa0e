"""Every golden case through the torch ops, on the CPU (and CUDA when present): functional form,
out= form into a NaN-poisoned buffer, and pools whose slots are padded (dim-0 stride > row)."""

import math

import pytest
import torch

from conftest import DEVICES
from golden import Case, check_case, golden_files, golden_ids, run_case

FILES = golden_files()


def test_golden_cases_exist():
    assert len(FILES) >= 16, "tests/data/golden holds the 16 golden cases"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("path", FILES, ids=golden_ids())
def test_golden(path, device):
    case = Case(path)
    check_case(case, run_case(case, device))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("path", FILES, ids=golden_ids())
def test_golden_out_buffers_poisoned(path, device):
    """out= buffers (and gdn_attention's caller buffers) start as NaN: every row a sequence covers
    is written, every other row keeps its NaN."""
    case = Case(path)
    check_case(case, run_case(case, device, use_out=True, fill=math.nan), fill=math.nan)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("path", FILES, ids=golden_ids())
def test_golden_strided_pools(path, device):
    """Pools with padded slots (docs/contract.md §2): same results, and the padding between slots survives."""
    case = Case(path)
    res = run_case(case, device, pool_pad=24)
    check_case(case, res)
    for name, buf in res["_buffers"].items():
        pad = buf[:, buf.shape[1] - 24 :]
        assert torch.equal(pad, torch.full_like(pad, -3.0)), f"{case.name}: {name} padding between slots changed"
