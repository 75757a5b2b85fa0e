"""Deferred-commit verify and token trees through gated_delta_rule_recurrent (docs/contract.md §7),
on the CPU, as tests/test_prop_deferred.cpp does through the C++ API.

* A trajectory (prefill without initial state, verify steps of 1..4 tokens with random accepted
  counts, a plain decode between them, a final decode) in the per-token-slot mode (a slot per draft
  column) and in the deferred mode (one slot per sequence, two logs alternating, the replay given
  by num_accepted_tokens): every step's outputs and, at the end, the state each mode reads next are
  equal, bit for bit with float32 state (relative L2 1e-2 with bf16 state: each mode rounds a
  different state). The deferred calls alternate between the functional and the out= form.
* Token trees: a chain-shaped tree is linear verify byte for byte; in random trees (hostile parents
  included) each node's output equals linear verify of its root-to-node path from the same
  committed state, and committing accepted paths (accepted_path) leaves the state and next output
  that linear verify of those paths leaves; a path entry outside the log ends the replay.
* Bad deferred arguments raise RuntimeError naming the argument, and change nothing.
"""

import random

import pytest
import torch

import gdn_kernels  # noqa: F401  (loads the ops)
from conftest import requires_cuda
from deferred import GATES, HV, LOG_E, V, expect_refused, gdr_in, gen, index, rec_log, recurrent, ssm_pool
from golden import bit_equal, rel_l2

N, COLS = 4, 4

PARAMS = [  # (activations, state, layout)
    (torch.float32, torch.float32, "vk"),
    (torch.float32, torch.float32, "kv"),
    (torch.bfloat16, torch.float32, "vk"),
    (torch.float32, torch.bfloat16, "kv"),
]


def same(got, want, tol, what):
    if tol == 0:
        assert bit_equal(got, want), f"{what}: not bit-equal"
    else:
        err = rel_l2(got, want)
        assert err <= tol, f"{what}: rel. L2 {err:.3e} > {tol}"


@pytest.mark.parametrize("act,state,layout", PARAMS, ids=[f"{a}-{s}-{l}".replace("torch.", "") for a, s, l in PARAMS])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_trajectory_equals_per_token_slot_mode(act, state, layout, seed):
    tol = 0.0 if state == torch.float32 else 1e-2
    g, rng = gen(7100 + seed), random.Random(seed)
    cols = [[i * COLS + c for c in range(COLS)] for i in range(N)]  # per-token mode: a row of slots
    pt_pool = ssm_pool(g, N * COLS, state, layout)  # garbage: every slot read is written first
    df_pool = ssm_pool(g, N, state, layout)
    logs = [rec_log(N, COLS), rec_log(N, COLS)]
    cur = 0  # the log the next step replays from
    acc, replay = [1] * N, [0] * N
    no_init = torch.zeros(N, dtype=torch.bool)
    for step in range(8):  # 0 prefill, 1-2 verify, 3 decode, 4-6 verify, 7 final decode
        prefill, decode = step == 0, step in (3, 7)
        lens = [rng.randint(1, 8) if prefill else 1 if decode else rng.randint(1, COLS) for _ in range(N)]
        x = gdr_in(g, sum(lens), act)
        use_out = step % 2 == 1
        out = torch.full((x.T, HV, V), 7.0, dtype=act) if use_out else None
        deferred = dict(verify_log=logs[cur], verify_log_out=logs[1 - cur])
        if not prefill and not decode:
            o_pt = recurrent(x, pt_pool, lens, cols, nacc=acc, layout=layout)
            o_df = recurrent(x, df_pool, lens, list(range(N)), nacc=replay, layout=layout, out=out,
                             log_tokens=True, **deferred)
            cur = 1 - cur
            acc = [rng.randint(1, n) for n in lens]
            replay = list(acc)
        else:
            for i in range(N):  # the per-token mode reads the accepted column's slot: it becomes column 0
                cols[i][0], cols[i][acc[i] - 1] = cols[i][acc[i] - 1], cols[i][0]
            init = no_init if prefill else None
            o_pt = recurrent(x, pt_pool, lens, [c[0] for c in cols], has_init=init, layout=layout)
            o_df = recurrent(x, df_pool, lens, list(range(N)), nacc=replay, has_init=init, layout=layout, out=out,
                             log_tokens=False, **deferred)
            acc, replay = [1] * N, [0] * N
        if use_out:
            assert o_df is out
        same(o_df, o_pt, tol, f"step {step}: outputs, deferred vs per-token slots")
    for i in range(N):
        same(df_pool[i], pt_pool[cols[i][0]], tol, f"sequence {i}: the state read next")


# ---- token trees ----------------------------------------------------------------------------------
TREE_COLS = 16  # the log holds every node of a tree


def tree_case(g):
    """A committed state in slots 0 and 1 and a log holding a previous verify step of COLS tokens each."""
    pool = ssm_pool(g, 3, std=0.5)
    log_in, scratch = rec_log(3, TREE_COLS), rec_log(3, TREE_COLS)
    recurrent(gdr_in(g, 2 * COLS), pool, [COLS, COLS], [0, 1], nacc=[0, 0], verify_log=scratch, verify_log_out=log_in)
    return pool, log_in


def tree_step(case, x, lens, replay, *, parents=None, path=None, log_tokens=True):
    """One deferred step on copies of the case: (outputs, pool, written log)."""
    pool, log_in = case[0].clone(), case[1].clone()
    log_out = rec_log(3, TREE_COLS)
    o = recurrent(x, pool, lens, [0, 1], nacc=replay, verify_log=log_in, verify_log_out=log_out,
                  log_tokens=log_tokens, token_parents=None if parents is None else index(parents),
                  accepted_path=None if path is None else index(path))
    return o, pool, log_out


def path_of(parents, t):
    path = []
    while t >= 0:
        path.insert(0, t)
        t = parents[t]
    return path


def padded(path):
    return path + [-1] * (TREE_COLS - len(path))


def test_chain_shaped_tree_is_linear_verify():
    g = gen(7500)
    case = tree_case(g)
    x = gdr_in(g, 7)
    lin = tree_step(case, x, [3, 4], [2, 4])
    tree = tree_step(case, x, [3, 4], [2, 4], parents=[-1, 0, 1, -1, 0, 1, 2])
    for what, a, b in zip(("outputs", "committed state", "log"), tree, lin):
        assert bit_equal(a, b), f"chain: {what}"
    ident = tree_step(case, x, [3, 4], [2, 4], path=[list(range(TREE_COLS))] * 2)
    for what, a, b in zip(("outputs", "committed state", "log"), ident, lin):
        assert bit_equal(a, b), f"identity path: {what}"


@pytest.mark.parametrize("trial", range(4))
def test_tree_nodes_equal_their_paths(trial):
    g, rng = gen(7510 + trial), random.Random(trial)
    case = tree_case(g)
    lens = [rng.randint(1, TREE_COLS), rng.randint(1, TREE_COLS)]
    par = [[-1 if t == 0 else rng.randint(-1, t - 1) for t in range(n)] for n in lens]
    given = [list(p) for p in par]
    if trial == 3:  # parents outside [0, t) make roots
        given[0][min(1, lens[0] - 1)] = 99
        given[1][-1] = -7
        par[0][min(1, lens[0] - 1)] = -1
        par[1][-1] = -1
    x = gdr_in(g, sum(lens))
    replay = [rng.randint(0, COLS), rng.randint(0, COLS)]  # the previous step logged COLS tokens
    o_tree, pool_tree, log_tree = tree_step(case, x, lens, replay, parents=given[0] + given[1])
    base = [0, lens[0]]
    for i in range(2):
        for t in range(lens[i]):
            path = path_of(par[i], t)
            # linear verify of the path; the other sequence keeps one token (its root)
            other = base[1 - i]
            rows = [base[i] + u for u in path]
            rows = rows + [other] if i == 0 else [other] + rows
            plens = [len(path), 1] if i == 0 else [1, len(path)]
            o_lin, pool_lin, _ = tree_step(case, x.rows(rows), plens, replay)
            last = len(path) - 1 if i == 0 else len(path)
            assert bit_equal(o_tree[base[i] + t], o_lin[last]), f"sequence {i} node {t} vs its path {path}"
            assert bit_equal(pool_tree, pool_lin), "the committed state does not depend on the tree"
    # commit an accepted path per sequence (a random node's, one that is not the chain's prefix where
    # the tree has such a node): a decode replaying the tree's log along the path equals one
    # replaying linear verify's log of the paths
    paths = []
    for i in range(2):
        all_paths = [path_of(par[i], t) for t in range(lens[i])]
        paths.append(rng.choice([p for p in all_paths if p != list(range(len(p)))] or all_paths))
    o_lin, pool_lin, log_lin = tree_step(case, x.rows([base[i] + u for i in range(2) for u in paths[i]]),
                                         [len(p) for p in paths], replay)
    dec = gdr_in(g, 2)
    counts = [len(p) for p in paths]
    d_tree = tree_step((pool_tree, log_tree), dec, [1, 1], counts, path=[padded(p) for p in paths], log_tokens=False)
    d_lin = tree_step((pool_lin, log_lin), dec, [1, 1], counts, log_tokens=False)
    assert bit_equal(d_tree[0], d_lin[0]), "decode after committing the paths: outputs"
    assert bit_equal(d_tree[1][:2], d_lin[1][:2]), "decode after committing the paths: states"


def test_path_entry_outside_the_log_ends_the_replay():
    g = gen(7520)
    case = tree_case(g)
    x = gdr_in(g, 2)
    cut = [padded([1, -1, 2]), padded([1, 99, 0])]
    one = [padded([1]), padded([1])]
    a = tree_step(case, x, [1, 1], [3, 4], path=cut, log_tokens=False)
    b = tree_step(case, x, [1, 1], [1, 1], path=one, log_tokens=False)
    assert bit_equal(a[0], b[0]) and bit_equal(a[1], b[1]), "a path cut by an entry outside the log"


# ---- invalid arguments ----------------------------------------------------------------------------
@pytest.fixture
def problem():
    g = gen(7400)
    x = gdr_in(g, 3)
    pool = ssm_pool(g, 4)
    logs = rec_log(4, COLS).normal_(generator=g), rec_log(4, COLS).normal_(generator=g)
    return x, pool, logs


def refused(problem, needles, **over):
    """The call with `over` replacing the valid deferred arguments raises naming `needles` and leaves
    the pool, both logs, every tensor passed and the out= buffer as they were."""
    x, pool, (log_in, log_out) = problem
    kw = dict(nacc=[1, 2], verify_log=log_in, verify_log_out=log_out)
    kw.update(over)
    o = torch.full((3, HV, V), 5.0)
    watched = [pool, log_in, log_out, o] + [t for t in kw.values() if isinstance(t, torch.Tensor)]
    return expect_refused(lambda: recurrent(x, pool, [1, 2], [0, 1], out=o, **kw), "gated_delta_rule_recurrent",
                          needles, watched)


def test_valid_deferred_call(problem):
    x, pool, (log_in, log_out) = problem
    recurrent(x, pool, [1, 2], [0, 1], nacc=[1, 2], verify_log=log_in, verify_log_out=log_out)


def test_log_of_wrong_dtype(problem):
    bf = torch.zeros(4, COLS, HV, LOG_E, dtype=torch.bfloat16)
    refused(problem, ["verify_log must be float32", "got bfloat16"], verify_log=bf)
    refused(problem, ["verify_log_out must be float32", "got bfloat16"], verify_log_out=bf)


def test_log_of_wrong_shape(problem):
    refused(problem, ["verify_log_out", "[4, 4, 4, 26]", "got float32 [3, 4, 4, 26]"], verify_log_out=rec_log(3, COLS))
    refused(problem, ["verify_log_out", "got float32 [4, 3, 4, 26]"], verify_log_out=rec_log(4, 3))
    refused(problem, ["verify_log", "K+V+2", "got float32 [4, 4, 4, 25]"],
            verify_log=torch.zeros(4, COLS, HV, LOG_E - 1))
    refused(problem, ["verify_log", "log_cols"], verify_log=rec_log(4, 0), verify_log_out=rec_log(4, 0))


def test_overlapping_logs(problem):
    _, pool, (log_in, _) = problem
    refused(problem, ["verify_log_out", "does not overlap verify_log"], verify_log_out=log_in)
    buf = torch.zeros(5, COLS, HV, LOG_E)  # two views one slot apart
    refused(problem, ["verify_log_out", "does not overlap verify_log"], verify_log=buf[:4], verify_log_out=buf[1:])


def test_one_log_missing(problem):
    refused(problem, ["verify_log_out", "got absent"], verify_log_out=None)
    refused(problem, ["verify_log", "got absent"], verify_log=None)


def test_deferred_needs_one_slot_and_replay_counts(problem):
    x, pool, (log_in, log_out) = problem
    with pytest.raises(RuntimeError, match="num_accepted_tokens"):
        recurrent(x, pool, [1, 2], [0, 1], verify_log=log_in, verify_log_out=log_out)
    with pytest.raises(RuntimeError, match="state_indices"):
        recurrent(x, pool, [1, 2], [[0, 1], [2, 3]], nacc=[1, 2], verify_log=log_in, verify_log_out=log_out)


def test_tree_arguments_need_the_mode(problem):
    parents = index([-1, -1, 0])
    refused(problem, ["token_parents", "log_tokens"], token_parents=parents, log_tokens=False)
    refused(problem, ["token_parents", "absent without verify_log"], token_parents=parents, verify_log=None,
            verify_log_out=None, nacc=None)
    refused(problem, ["accepted_path", "absent without verify_log"], accepted_path=index([[0] * COLS] * 2),
            verify_log=None, verify_log_out=None, nacc=None)
    refused(problem, ["token_parents", "[T] = [3]", "got int32 [2]"], token_parents=index([-1, -1]))
    refused(problem, ["accepted_path", "got int32 [2, 3]"], accepted_path=index([[0] * 3] * 2))


def test_chunked_op_has_no_deferred_mode(problem):
    x, pool, (log_in, log_out) = problem
    with pytest.raises(TypeError):
        gdn_kernels.gated_delta_rule_chunked(x.q, x.k, x.v, x.a, x.b, A_log=None, dt_bias=None, ssm_state=pool,
                                             query_start_loc=index([0, 1, 3]), state_indices=index([0, 1]),
                                             verify_log=log_in)


@requires_cuda
@pytest.mark.parametrize("tree", [False, True], ids=["linear", "tree"])
def test_cuda_deferred_equals_cpu(problem, tree):
    """The same deferred step (a replay through accepted_path, three tokens: a chain or a tree) on
    CUDA and on the CPU: outputs, committed states and written logs within float32 tolerance
    (docs/contract.md §6; tests/test_cuda_deferred.cpp has the kernel's own suite)."""
    x, pool, (log_in, log_out) = problem
    meta = dict(query_start_loc=index([0, 1, 3]), state_indices=index([0, 1]), num_accepted_tokens=index([1, 2]),
                accepted_path=index([[1, 0, 2, 3], [2, 3, 0, 1]]), token_parents=index([-1, -1, 0]) if tree else None)
    got = {}
    for dev in ("cpu", "cuda"):
        on = {k: None if t is None else t.to(dev) for k, t in meta.items()}
        p, lo = pool.clone().to(dev), log_out.clone().to(dev)
        o = gdn_kernels.gated_delta_rule_recurrent(
            *(t.to(dev) for t in (x.q, x.k, x.v, x.a, x.b)), ssm_state=p, verify_log=log_in.to(dev), verify_log_out=lo,
            **{k: t.to(dev) for k, t in GATES.items()}, **on)
        got[dev] = (o.cpu(), p.cpu(), lo.cpu())
    for what, c, g in zip(("outputs", "committed states", "written log"), got["cpu"], got["cuda"]):
        assert rel_l2(g, c) <= 1e-5, what