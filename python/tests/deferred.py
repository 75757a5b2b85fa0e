"""Helpers of the deferred-commit tests (docs/contract.md §7): random problems, calls of the
recurrent op and of gdn_attention in both modes, built like tests/test_prop_deferred*.cpp's."""

import random
from dataclasses import dataclass, field
from typing import List, Optional

import pytest
import torch

import gdn_kernels
from golden import bit_equal

H, HV, K, V, W = 2, 4, 16, 8, 4
D = 2 * H * K + HV * V          # conv channels [q | k | v]
QKVZ = D + HV * V               # block layout [q | k | v | z]
LOG_E = K + V + 2               # floats per logged token and value head


def gen(seed):
    return torch.Generator().manual_seed(seed)


def randn(g, *shape, dtype=torch.float32, std=1.0):
    return (torch.randn(*shape, generator=g) * std).to(dtype)


def index(values, dtype=torch.int32):
    return torch.tensor(values, dtype=dtype)


def prefix_sum(lens):
    out = [0]
    for n in lens:
        out.append(out[-1] + n)
    return out


def rec_log(slots, cols):
    return torch.zeros(slots, cols, HV, LOG_E)


# ---- gated_delta_rule_recurrent -----------------------------------------------------------------
@dataclass
class GdrIn:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    a: torch.Tensor
    b: torch.Tensor

    @property
    def T(self):
        return self.q.shape[0]

    def rows(self, rows):
        """The tokens at `rows`, in that order."""
        idx = torch.tensor(rows, dtype=torch.long)
        return GdrIn(*(t[idx] for t in (self.q, self.k, self.v, self.a, self.b)))


def gdr_in(g, T, act=torch.float32):
    return GdrIn(randn(g, T, H, K, dtype=act), randn(g, T, H, K, dtype=act), randn(g, T, HV, V, dtype=act),
                 randn(g, T, HV, dtype=act), randn(g, T, HV, dtype=act))


GATES = dict(A_log=torch.linspace(-1.0, 0.5, HV), dt_bias=torch.linspace(-0.3, 0.4, HV, dtype=torch.float64))


def ssm_pool(g, slots, dtype=torch.float32, layout="vk", std=1.0):
    shape = (slots, HV, V, K) if layout == "vk" else (slots, HV, K, V)
    return randn(g, *shape, dtype=dtype, std=std)


def recurrent(x, pool, lens, slots, nacc=None, has_init=None, layout="vk", out=None, **deferred):
    """One call of gated_delta_rule_recurrent over sequences of `lens` tokens (slots: a list, or a
    list of rows for [n, cols]); `deferred` holds the keyword-only deferred-commit arguments."""
    return gdn_kernels.gated_delta_rule_recurrent(
        x.q, x.k, x.v, x.a, x.b, ssm_state=pool, query_start_loc=index(prefix_sum(lens)), state_indices=index(slots),
        num_accepted_tokens=None if nacc is None else index(nacc), has_initial_state=has_init,
        state_layout=layout, out=out, **GATES, **deferred)


# ---- gdn_attention --------------------------------------------------------------------------------
@dataclass
class Seq:
    rows: List[int]                  # global rows of the tokens, in token order
    spec: bool = False
    slot: int = 0                    # non-spec
    cols: List[int] = field(default_factory=list)  # spec: its state_indices row
    has_init: bool = True            # non-spec
    nacc: int = 1                    # spec
    replay: int = 0                  # deferred, non-spec: non_spec_num_accepted_tokens
    path: Optional[List[int]] = None  # deferred: accepted_path row (None: identity)
    parents: Optional[List[int]] = None  # deferred, spec: its tokens' parents (None: a chain)


@dataclass
class Layer:
    act: torch.dtype
    conv_weights: torch.Tensor
    conv_bias: torch.Tensor
    A_log: torch.Tensor
    dt_bias: torch.Tensor


def layer(g, act=torch.float32):
    return Layer(act, randn(g, D, W, dtype=act, std=0.3), randn(g, D, dtype=act, std=0.1),
                 torch.linspace(-1.0, 0.5, HV), torch.linspace(-0.3, 0.4, HV, dtype=act))


def attention_pools(g, lay, slots, ssm_dtype=torch.float32, ssm_std=1.0):
    return randn(g, slots, W - 1, D, dtype=lay.act), randn(g, slots, HV, V, K, dtype=ssm_dtype, std=ssm_std)


def attention_logs(lay, slots, cols):
    """[recurrence log, conv log] pairs: two of each, alternated by the caller."""
    return [(rec_log(slots, cols), torch.zeros(slots, cols, D, dtype=lay.act)) for _ in range(2)]


def _pad_rows(rows, width):
    return [r + [-1] * (width - len(r)) for r in rows]


def attention_kwargs(lay, conv_state, ssm_state, seqs, qkvz, ba, *, logs=None, log_cols=None, fill=0.0):
    """gdn_attention's keyword arguments for `seqs` (a list of Seq, any order of groups), with new
    core_attn_out and z filled with `fill`. logs: (read, written) pairs of (recurrence log, conv
    log) turn on the deferred mode; log_cols sizes the path rows."""
    rows = qkvz.shape[0]
    ns = [s for s in seqs if not s.spec]
    sp = [s for s in seqs if s.spec]
    kw = dict(core_attn_out=torch.full((rows, HV, V), fill, dtype=lay.act),
              z=torch.full((rows, HV, V), fill, dtype=lay.act), projected_states_qkvz=qkvz, projected_states_ba=ba,
              num_k_heads=H, num_v_heads=HV, head_k_dim=K, head_v_dim=V, conv_state=conv_state, ssm_state=ssm_state,
              conv_weights=lay.conv_weights, conv_bias=lay.conv_bias, activation="silu", A_log=lay.A_log,
              dt_bias=lay.dt_bias, num_prefills=sum(1 for s in ns if not (len(s.rows) == 1 and s.has_init)),
              num_decodes=sum(1 for s in ns if len(s.rows) == 1 and s.has_init), num_spec_decodes=len(sp),
              has_initial_state=None, non_spec_query_start_loc=None, non_spec_token_indx=None,
              non_spec_state_indices_tensor=None, spec_query_start_loc=None, spec_token_indx=None,
              spec_state_indices_tensor=None, num_accepted_tokens=None, num_actual_tokens=rows, tp_size=1,
              reorder_input=True, spec_conv_layout="per_token")
    if ns:
        kw.update(has_initial_state=torch.tensor([s.has_init for s in ns]),
                  non_spec_query_start_loc=index(prefix_sum([len(s.rows) for s in ns])),
                  non_spec_token_indx=index([r for s in ns for r in s.rows]),
                  non_spec_state_indices_tensor=index([s.slot for s in ns]))
    if sp:
        kw.update(spec_query_start_loc=index(prefix_sum([len(s.rows) for s in sp])),
                  spec_token_indx=index([r for s in sp for r in s.rows]),
                  spec_state_indices_tensor=index([s.cols for s in sp]),
                  num_accepted_tokens=index([s.nacc for s in sp]))
    if logs is not None:
        (rec_in, conv_in), (rec_out, conv_out) = logs
        kw.update(verify_log=rec_in, verify_log_out=rec_out, conv_log=conv_in, conv_log_out=conv_out)
        cols = log_cols if log_cols is not None else rec_in.shape[1]
        if ns:
            kw["non_spec_num_accepted_tokens"] = index([s.replay for s in ns])
            if any(s.path is not None for s in ns):
                kw["non_spec_accepted_path"] = index(_pad_rows([s.path or list(range(cols)) for s in ns], cols))
        if sp:
            if any(s.path is not None for s in sp):
                kw["spec_accepted_path"] = index(_pad_rows([s.path or list(range(cols)) for s in sp], cols))
            if any(s.parents is not None for s in sp):
                kw["spec_token_parents"] = index(
                    [p for s in sp for p in (s.parents if s.parents is not None else range(-1, len(s.rows) - 1))])
    return kw


def projections(g, lay, rows):
    return randn(g, rows, QKVZ, dtype=lay.act), randn(g, rows, 2 * HV, dtype=lay.act)


def shuffled(rng: random.Random, n):
    rows = list(range(n))
    rng.shuffle(rows)
    return rows


# ---- sample calls with every deferred argument (test_cpp_api, test_opcheck) --------------------------
def recurrent_call(log_tokens, layout):
    """gated_delta_rule_recurrent's keyword arguments: two sequences with a committed state and a
    logged step each; a verify step of trees (log_tokens) or a commit of accepted paths."""
    g = gen(7600 + log_tokens)
    pool = ssm_pool(g, 3, layout=layout, std=0.5)
    logs = [rec_log(3, 8), rec_log(3, 8)]
    recurrent(gdr_in(g, 8), pool, [5, 3], [0, 2], nacc=[0, 0], layout=layout, verify_log=logs[1],
              verify_log_out=logs[0])
    x = gdr_in(g, 6)
    kw = dict(q=x.q, k=x.k, v=x.v, a=x.a, b=x.b, ssm_state=pool, query_start_loc=index([0, 4, 6]),
              state_indices=index([0, 2]), num_accepted_tokens=index([3, 2], torch.int64),
              has_initial_state=torch.tensor([True, log_tokens]), state_layout=layout, verify_log=logs[0],
              verify_log_out=logs[1].fill_(-2.0), log_tokens=log_tokens,
              accepted_path=index([[4, 1, 0] + [-1] * 5, [2, 0] + [-1] * 6]), **GATES)
    if log_tokens:
        kw["token_parents"] = index([-1, 0, 0, 2, -1, 0])
    return kw


def attention_call():
    """gdn_attention's keyword arguments: a mixed batch after a logged verify step, with a tree,
    replays, both groups' paths."""
    g = gen(7650)
    lay = layer(g)
    conv, ssm = attention_pools(g, lay, 4, ssm_std=0.3)
    logs = attention_logs(lay, 4, 8)
    qkvz, ba = projections(g, lay, 8)
    first = [Seq([0, 2, 4, 6], spec=True, cols=[0] * 4, nacc=0), Seq([1, 3, 5, 7], spec=True, cols=[1] * 4, nacc=0)]
    gdn_kernels.gdn_attention(**attention_kwargs(lay, conv, ssm, first, qkvz, ba, logs=(logs[1], logs[0])))
    seqs = [Seq([6, 0], slot=2, has_init=False), Seq([1], slot=1, replay=3, path=[3, 0, 1]),
            Seq([2, 7, 3, 5, 4], spec=True, cols=[0] * 4, nacc=2, path=[2, 0], parents=[-1, 0, 0, 1, -1])]
    qkvz, ba = projections(g, lay, 8)
    return attention_kwargs(lay, conv, ssm, seqs, qkvz, ba, logs=(logs[0], logs[1]))


def expect_refused(call, op, needles, watched):
    """call() raises a message naming op and every needle, and leaves every watched tensor as it
    was; returns the message."""
    before = [t.clone() for t in watched]
    with pytest.raises(RuntimeError) as info:
        call()
    msg = str(info.value)
    for n in (op,) + tuple(needles):
        assert n in msg, f"message {msg!r} lacks {n!r}"
    assert all(bit_equal(t, b) for t, b in zip(watched, before)), "a failed call changed a tensor"
    return msg
