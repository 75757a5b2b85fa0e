"""Deferred commit and token trees in gdn_attention (docs/contract.md §7), on the CPU, as
tests/test_prop_deferred_attention.cpp does through the C++ API.

* A trajectory of 4 sequences over 7 steps (prefills without initial state, verify steps of 1..4
  tokens with random accepted counts, a step mixing plain decodes and verify sequences, a continued
  prefill, verify with a chain-shaped tree, final decodes), tokens at shuffled global rows, in the
  per-token slot mode (per-token conv windows, a slot per draft column) and in the deferred mode
  (one slot per sequence, recurrence and conv logs alternating, replays through
  num_accepted_tokens and non_spec_num_accepted_tokens): core_attn_out and z equal at every step,
  and after the last the state and conv window each mode reads next; bit for bit with float32
  activations and state, relative L2 1e-2 for core_attn_out with bf16 activations.
* A mixed batch (a prefill, a decode, verify sequences whose tokens form trees of 9 and 3 nodes)
  after a logged verify step: each node's core_attn_out row equals linear verify of its root-to-node path, the other
  sequences' rows are unchanged by the tree, and committing accepted paths (spec_accepted_path for a
  sequence that keeps verifying, non_spec_accepted_path for one that stops) leaves outputs, pools and
  logs equal to those after linear verify of the paths.
* Bad deferred arguments raise RuntimeError naming the argument, and change nothing.
* With a GPU: a mixed deferred step on CUDA equals the CPU's (float32 tolerance; z, the conv pool and
  the conv log bit for bit).
"""

import random

import pytest
import torch

import gdn_kernels
from conftest import requires_cuda
from deferred import (D, HV, W, Seq, attention_call, attention_kwargs, attention_logs, attention_pools, expect_refused,
                      gen, index, layer, projections, rec_log, shuffled)
from golden import bit_equal, rel_l2

N, COLS = 4, 4
PLAN = ["pppp", "vvvv", "vvvv", "ddvv", "vvvv", "pvvt", "dddd"]  # p prefill, d decode, v verify, t tree (a chain)


@pytest.mark.parametrize("act", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_trajectory_equals_per_token_slot_mode(act):
    tol = 0.0 if act == torch.float32 else 1e-2
    g, rng = gen(7700), random.Random(7700)
    lay = layer(g, act)
    pt_conv, pt_ssm = attention_pools(g, lay, N * COLS)  # garbage: every slot read is written first
    df_conv, df_ssm = attention_pools(g, lay, N)
    logs = attention_logs(lay, N, COLS)
    cur = 0
    cols = [[i * COLS + c for c in range(COLS)] for i in range(N)]
    acc, replay = [1] * N, [0] * N
    for step, plan in enumerate(PLAN):
        lens = [rng.randint(1, 6) if k == "p" else 1 if k == "d" else rng.randint(1, COLS) for k in plan]
        perm = shuffled(rng, sum(lens))
        pt, df, start = [], [], 0
        for i, k in enumerate(plan):
            rows = perm[start:start + lens[i]]
            start += lens[i]
            if k in "vt":
                pt.append(Seq(rows, spec=True, cols=list(cols[i]), nacc=acc[i]))
                df.append(Seq(rows, spec=True, cols=[i] * COLS, nacc=replay[i],
                              parents=list(range(-1, lens[i] - 1)) if k == "t" else None))
            else:
                cols[i][0], cols[i][acc[i] - 1] = cols[i][acc[i] - 1], cols[i][0]
                pt.append(Seq(rows, slot=cols[i][0], has_init=step > 0))
                df.append(Seq(rows, slot=i, has_init=step > 0, replay=replay[i]))
        qkvz, ba = projections(g, lay, sum(lens))
        kw_pt = attention_kwargs(lay, pt_conv, pt_ssm, pt, qkvz, ba)
        kw_df = attention_kwargs(lay, df_conv, df_ssm, df, qkvz, ba, logs=(logs[cur], logs[1 - cur]))
        gdn_kernels.gdn_attention(**kw_pt)
        gdn_kernels.gdn_attention(**kw_df)
        cur = 1 - cur
        if tol == 0:
            assert bit_equal(kw_df["core_attn_out"], kw_pt["core_attn_out"]), f"step {step}: core_attn_out"
        else:
            err = rel_l2(kw_df["core_attn_out"], kw_pt["core_attn_out"])
            assert err <= tol, f"step {step}: core_attn_out rel. L2 {err:.3e}"
        assert bit_equal(kw_df["z"], kw_pt["z"]), f"step {step}: z"
        for i, k in enumerate(plan):
            acc[i] = rng.randint(1, lens[i]) if k in "vt" else 1
            replay[i] = acc[i] if k in "vt" else 0
    for i in range(N):
        assert bit_equal(df_ssm[i], pt_ssm[cols[i][0]]), f"sequence {i}: the state read next"
        assert bit_equal(df_conv[i, :W - 1], pt_conv[cols[i][0], :W - 1]), f"sequence {i}: the conv window read next"


# ---- a token tree in a mixed batch ----------------------------------------------------------------
TREE_COLS = 16
PARENTS = [-1, 0, 0, 1, 1, 2, 3, 5, -1]  # depth 4, two roots
PARENTS1 = [-1, 0, 0]  # the second verify sequence: a root and two children


def path_of(parents, t):
    path = []
    while t >= 0:
        path.insert(0, t)
        t = parents[t]
    return path


class MixedCase:
    """Slots 0, 1: verify sequences with a logged step of COLS tokens; 2: a prefill; 3: a decode."""

    def __init__(self, seed):
        self.g, self.rng = gen(seed), random.Random(seed)
        self.lay = layer(self.g)
        self.conv, self.ssm = attention_pools(self.g, self.lay, 4, ssm_std=0.3)
        self.logs = attention_logs(self.lay, 4, TREE_COLS)
        rows = shuffled(self.rng, 2 * COLS)
        qkvz, ba = projections(self.g, self.lay, 2 * COLS)
        seqs = [Seq(rows[:COLS], spec=True, cols=[0] * TREE_COLS, nacc=0),
                Seq(rows[COLS:], spec=True, cols=[1] * TREE_COLS, nacc=0)]
        gdn_kernels.gdn_attention(**attention_kwargs(self.lay, self.conv, self.ssm, seqs, qkvz, ba,
                                                     logs=(self.logs[1], self.logs[0])))
        self.state = (self.conv, self.ssm, self.logs[0])  # pools and the log the next step reads

    def run(self, state, seqs, qkvz, ba):
        """One deferred step on copies of `state`; returns (kwargs after the call, the state after)."""
        conv, ssm, (rec_in, conv_in) = state
        conv, ssm = conv.clone(), ssm.clone()
        logs_in = (rec_in.clone(), conv_in.clone())
        logs_out = (rec_log(4, TREE_COLS), torch.zeros(4, TREE_COLS, D, dtype=self.lay.act))
        kw = attention_kwargs(self.lay, conv, ssm, seqs, qkvz, ba, logs=(logs_in, logs_out))
        gdn_kernels.gdn_attention(**kw)
        return kw, (conv, ssm, logs_out)


def test_tree_in_a_mixed_batch_equals_its_paths():
    c = MixedCase(7800)
    rows = 9 + 3 + 3 + 1
    qkvz, ba = projections(c.g, c.lay, rows)
    perm = shuffled(c.rng, rows)
    tree_rows, rows1, pre_rows, dec_rows = perm[:9], perm[9:12], perm[12:15], perm[15:]

    def batch(s0_rows, s0_parents, s1_rows, s1_parents):
        return [Seq(pre_rows, slot=2, has_init=False),
                Seq(s0_rows, spec=True, cols=[0] * TREE_COLS, nacc=3, parents=s0_parents),
                Seq(dec_rows, slot=3),
                Seq(s1_rows, spec=True, cols=[1] * TREE_COLS, nacc=2, parents=s1_parents)]

    kw_tree, after_tree = c.run(c.state, batch(tree_rows, PARENTS, rows1, PARENTS1), qkvz, ba)
    core = kw_tree["core_attn_out"]
    others = rows1 + pre_rows + dec_rows
    for t in range(len(PARENTS)):
        path = path_of(PARENTS, t)
        kw_lin, _ = c.run(c.state, batch([tree_rows[u] for u in path], None, rows1, PARENTS1), qkvz, ba)
        lin = kw_lin["core_attn_out"]
        assert bit_equal(core[tree_rows[t]], lin[tree_rows[t]]), f"node {t} vs linear verify of its path {path}"
        assert bit_equal(core[others], lin[others]), "the other sequences' rows do not depend on the tree"

    # commit: sequence 0 keeps verifying from a node's path (spec_accepted_path), sequence 1 stops
    # speculating after accepting a path of its tree (non_spec_accepted_path)
    qkvz2, ba2 = projections(c.g, c.lay, 4)
    for t0, t1 in ((7, 2), (4, 1), (8, 0)):
        path0, path1 = path_of(PARENTS, t0), path_of(PARENTS1, t1)
        _, after_lin = c.run(c.state, batch([tree_rows[u] for u in path0], None, [rows1[u] for u in path1], None),
                             qkvz, ba)

        def next_step(paths):
            return [Seq([0, 2, 3], spec=True, cols=[0] * TREE_COLS, nacc=len(path0), path=paths[0]),
                    Seq([1], slot=1, replay=len(path1), path=paths[1])]

        kw_a, state_a = c.run(after_tree, next_step([path0, path1]), qkvz2, ba2)
        kw_b, state_b = c.run(after_lin, next_step([None, None]), qkvz2, ba2)
        what = f"after committing paths {path0} and {path1}"
        assert bit_equal(kw_a["core_attn_out"], kw_b["core_attn_out"]), f"the next step's outputs {what}"
        for name, x, y in (("conv_state", state_a[0][:2, :W - 1], state_b[0][:2, :W - 1]),
                           ("ssm_state", state_a[1][:2], state_b[1][:2]),
                           ("recurrence log", state_a[2][0][0], state_b[2][0][0]),
                           ("conv log", state_a[2][1][0], state_b[2][1][0])):
            assert bit_equal(x, y), f"{name} {what}"


# ---- invalid arguments ----------------------------------------------------------------------------
@pytest.fixture
def mixed():
    c = MixedCase(7900)
    qkvz, ba = projections(c.g, c.lay, 5)
    seqs = [Seq([4, 0], slot=2, has_init=False), Seq([1, 3], spec=True, cols=[0, 0], nacc=2), Seq([2], slot=3)]
    return c, seqs, qkvz, ba


def refused(mixed, needles, **over):
    """The valid deferred call with `over` raises naming `needles`; nothing it was given changes."""
    c, seqs, qkvz, ba = mixed
    conv, ssm, (rec_in, conv_in) = c.state
    kw = attention_kwargs(c.lay, conv, ssm, seqs, qkvz, ba, fill=3.0,
                          logs=((rec_in, conv_in), (rec_log(4, TREE_COLS), torch.zeros(4, TREE_COLS, D))))
    kw.update(over)
    watched = [t for t in kw.values() if isinstance(t, torch.Tensor)]
    return expect_refused(lambda: gdn_kernels.gdn_attention(**kw), "gdn_attention", needles, watched)


def test_valid_deferred_attention_call(mixed):
    c, seqs, qkvz, ba = mixed
    conv, ssm, logs_in = c.state
    gdn_kernels.gdn_attention(**attention_kwargs(c.lay, conv, ssm, seqs, qkvz, ba,
                                                 logs=(logs_in, (rec_log(4, TREE_COLS), torch.zeros(4, TREE_COLS, D)))))


def test_attention_logs_of_wrong_dtype_or_shape(mixed):
    refused(mixed, ["conv_log_out must be float32", "(the dtype of projected_states_qkvz)", "got float64"],
            conv_log_out=torch.zeros(4, TREE_COLS, D, dtype=torch.float64))
    refused(mixed, ["verify_log must be float32", "got bfloat16"],
            verify_log=torch.zeros(4, TREE_COLS, HV, 26, dtype=torch.bfloat16))
    refused(mixed, ["verify_log_out", "got float32 [4, 15, 4, 26]"], verify_log_out=rec_log(4, TREE_COLS - 1))
    refused(mixed, ["conv_log", "got float32 [3, 16, 96]"], conv_log=torch.zeros(3, TREE_COLS, D))


def test_attention_overlapping_or_missing_logs(mixed):
    c = mixed[0]
    refused(mixed, ["conv_log_out", "does not overlap conv_log"], conv_log_out=c.state[2][1])
    refused(mixed, ["verify_log_out", "does not overlap verify_log"], verify_log_out=c.state[2][0])
    refused(mixed, ["conv_log", "got absent"], conv_log=None)
    refused(mixed, ["verify_log_out", "got absent"], verify_log_out=None)


def test_attention_tree_arguments(mixed):
    refused(mixed, ["spec_token_parents", "[>= spec tokens]"], spec_token_parents=index([-1]))
    refused(mixed, ["spec_accepted_path", "got int32 [1, 3]"], spec_accepted_path=index([[0, 1, 2]]))
    refused(mixed, ["non_spec_num_accepted_tokens", "got int32 [3]"], non_spec_num_accepted_tokens=index([0, 0, 0]))
    refused(mixed, ["non_spec_num_accepted_tokens", "absent without the deferred-commit logs"],
            verify_log=None, verify_log_out=None, conv_log=None, conv_log_out=None)


@requires_cuda
def test_cuda_equals_cpu():
    """attention_call()'s mixed deferred step (a prefill without initial state, a non-spec replay
    through a path, a verify tree replaying a path) on CUDA and on the CPU: core_attn_out, the SSM
    pool and the recurrence log within float32 tolerance (relative L2 1e-5, docs/contract.md §6), z,
    the conv pool and the conv log bit for bit (tests/test_cuda_deferred_attention.cpp has the C++
    suite)."""
    kw = attention_call()
    got = {}
    for dev in ("cpu", "cuda"):
        args = {k: v.clone().to(dev) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
        gdn_kernels.gdn_attention(**args)
        got[dev] = {k: args[k].cpu() for k in ("core_attn_out", "z", "conv_state", "ssm_state", "verify_log_out",
                                               "conv_log_out")}
    c, g = got["cpu"], got["cuda"]
    for name in ("core_attn_out", "ssm_state", "verify_log_out"):
        err = rel_l2(g[name], c[name])
        assert err <= 1e-5, f"{name}: rel. L2 {err:.3e}"
    for name in ("z", "conv_state", "conv_log_out"):
        assert bit_equal(g[name], c[name]), name
