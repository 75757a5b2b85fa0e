// Deferred-commit verify of gated_delta_rule_recurrent (docs/contract.md §7), on the CPU and (PropDeferred)
// on CUDA with each of the deferred kernel's forms; the CUDA kernel against the CPU, its trees and
// determinism in test_cuda_deferred.cpp, hostile metadata and untouched memory in
// test_deferred_meta.cpp.
//   PropDeferred.TrajectoriesEqualThePerTokenSlotMode: random trajectories of 4 sequences — a
//     prefill without initial state, verify steps of 1..4 tokens with random accepted counts, a
//     plain decode in between (verify -> decode -> verify), a final decode — run in the per-token
//     slot mode (a slot per draft column) and in the deferred mode (one slot per sequence, two logs
//     alternating) on the same backend: every step's outputs, and the state each mode reads next
//     (after the final decode), are equal: on the CPU bit for bit with float32 state, relative L2
//     1e-2 with bf16 state (the per-token mode rounds the state after token a-1, the deferred one
//     the state before the step); on CUDA within docs/contract.md §6 (1e-5 float32 activations and
//     state, else 1e-2). Both state layouts, float32 and bf16 activations.
//   PropDeferred.PaddingClampingAndFreshSequences: a null-slot sequence (outputs zero, its state
//     and both logs' rows untouched), an accepted count above log_cols (clamped: every logged token
//     replayed), a negative one (nothing replayed), a sequence without initial state (zeros, its log
//     ignored) and one of zero tokens (its replay committed) against the same calls done by hand.
//   PropDeferred.TreesEqualTheirPaths: token-tree verify, float32: a chain-shaped tree equals linear
//     verify (outputs, committed state, log, byte for byte); in random trees of up to 16 nodes and
//     depth 8 (two sequences) each node's output equals the last output of linear verify of its
//     root-to-node path from the same committed state, and committing an accepted path
//     (accepted_path) leaves the state linear verify of that path commits; parents outside [0, t)
//     make a root, a path entry outside the log ends the replay.
//   PropDeferredValidation.InvalidArgumentsAreRejected: the chunked op, a log that is not float32,
//     of another shape, overlapping the other log, [n, cols] slots, no num_accepted_tokens, a tree
//     without the log or with log_tokens false: errors, nothing written.
#include "prop_ops.h"

namespace gdn::prop {
namespace {

constexpr int64_t kH = 2, kHV = 4, kK = 16, kV = 8, kCols = 4, kN = 4;

struct DefParam {
  Backend be;
  DType act, state;
  StateLayout layout;
};
std::string def_name(const ::testing::TestParamInfo<DefParam>& i) {
  return capture::backend_name(i.param.be) + "_act" + dtype_short(i.param.act) + "_state" +
         dtype_short(i.param.state) + "_" + layout_name(i.param.layout);
}
class PropDeferred : public ::testing::TestWithParam<DefParam> {};

Buf log_buf(int64_t slots, int64_t cols = kCols) {
  Buf b(DType::kFloat32, {slots, cols, kHV, kK + kV + 2});
  fill_value(b, 0.0);
  return b;
}

// One deferred call: replay counts `replay`, this step's tokens logged when log_tokens.
Status run_deferred(Backend be, GdrIn& in, Buf& pool, StateLayout layout, Buf& qsl, Buf& slots,
                    const std::vector<int64_t>& replay, Buf* has_init, Buf& o, Buf& log_in, Buf& log_out,
                    bool log_tokens, std::optional<int64_t> null_id = {}) {
  Buf nacc = index_buf(replay);
  GatedDeltaRuleArgs a = gdr_args(in, pool, layout, qsl, slots, &nacc, has_init, o, null_id);
  a.verify_log = log_in.view();
  a.verify_log_out = log_out.view();
  a.log_tokens = log_tokens;
  return capture::run_recurrent_on(be, a);
}

TEST_P(PropDeferred, TrajectoriesEqualThePerTokenSlotMode) {
  const DefParam& prm = GetParam();
  PROP_SKIP_IF_UNAVAILABLE(prm.be);
  const Backend pt = prm.be.cuda() ? Backend(Backend::kCUDA) : Backend(Backend::kCPU);  // the per-token mode's
  const double tol = prm.be.cuda() ? (prm.act == DType::kFloat32 && prm.state == DType::kFloat32 ? 1e-5 : 1e-2)
                     : prm.state == DType::kFloat32 ? 0.0
                                                    : 1e-2;
  for (uint64_t seed : {1u, 2u, 3u}) {
    Rng r(7100 + seed * 13 + static_cast<int>(prm.layout));
    // per-token mode: kCols slots per sequence (rows of `cols`); deferred: slot i per sequence
    std::vector<std::vector<int64_t>> cols(kN, std::vector<int64_t>(kCols));
    for (int64_t i = 0; i < kN; ++i)
      for (int64_t c = 0; c < kCols; ++c) cols[i][c] = i * kCols + c;
    Buf pt_pool = make_ssm_pool(prm.state, kN * kCols, kHV, kK, kV, prm.layout);
    Buf df_pool = make_ssm_pool(prm.state, kN, kHV, kK, kV, prm.layout);
    fill_normal(pt_pool, r, 1.0);  // garbage: every read slot is written first (no initial state)
    fill_normal(df_pool, r, 1.0);
    Buf logs[2] = {log_buf(kN), log_buf(kN)};
    int cur = 0;  // the log the next step replays from
    std::vector<int64_t> acc(kN, 1), replay(kN, 0), dslots(kN);
    for (int64_t i = 0; i < kN; ++i) dslots[i] = i;
    Buf dslot_buf = index_buf(dslots);
    // steps: 0 prefill, 1-2 verify, 3 decode, 4-6 verify, 7 final decode
    for (int step = 0; step <= 7; ++step) {
      const bool prefill = step == 0, decode = step == 3 || step == 7, verify = !prefill && !decode;
      std::vector<int64_t> lens(kN);
      for (int64_t i = 0; i < kN; ++i) lens[i] = prefill ? r.randint(1, 9) : decode ? 1 : r.randint(1, kCols);
      const std::vector<int64_t> qsl_v = prefix_sum(lens);
      Buf qsl = index_buf(qsl_v);
      GdrIn in = make_gdr_in(r, qsl_v.back(), kH, kHV, kK, kV, prm.act, DType::kFloat32);
      Buf o_pt(prm.act, {qsl_v.back(), kHV, kV}), o_df = o_pt;
      SCOPED_TRACE(::testing::Message() << "seed " << seed << " step " << step);
      Buf no_init = bool_buf(std::vector<bool>(kN, false));
      if (verify) {
        Buf slots = index_buf2(cols, kCols), nacc = index_buf(acc);
        PROP_ASSERT_OK(run_gdr(pt, false, in, pt_pool, prm.layout, qsl, slots, &nacc, nullptr, o_pt));
        PROP_ASSERT_OK(run_deferred(prm.be, in, df_pool, prm.layout, qsl, dslot_buf, replay, nullptr, o_df, logs[cur],
                                    logs[1 - cur], true));
        cur = 1 - cur;
        for (int64_t i = 0; i < kN; ++i) replay[i] = acc[i] = r.randint(1, lens[i]);
      } else {
        // the per-token mode reads and writes the accepted column's slot, which becomes column 0
        std::vector<int64_t> read(kN);
        for (int64_t i = 0; i < kN; ++i) {
          std::swap(cols[i][0], cols[i][acc[i] - 1]);
          read[i] = cols[i][0];
        }
        Buf slots = index_buf(read);
        Buf* init = prefill ? &no_init : nullptr;
        PROP_ASSERT_OK(run_gdr(pt, false, in, pt_pool, prm.layout, qsl, slots, nullptr, init, o_pt));
        PROP_ASSERT_OK(run_deferred(prm.be, in, df_pool, prm.layout, qsl, dslot_buf, replay, init, o_df, logs[cur],
                                    logs[1 - cur], false));
        std::fill(acc.begin(), acc.end(), 1);
        std::fill(replay.begin(), replay.end(), 0);
      }
      if (tol == 0) {
        EXPECT_EQ(bit_diff(o_df, 0, o_pt, 0, o_pt.numel()), "") << "outputs: deferred vs per-token slots";
      } else {
        EXPECT_LE(rel_l2(o_df, o_pt, {{0, o_pt.numel()}}, {{0, o_pt.numel()}}), tol) << "outputs";
      }
      if (HasFailure()) return;
    }
    for (int64_t i = 0; i < kN; ++i)
      expect_slot_close(df_pool, i, pt_pool, cols[i][0], tol, "the state read next: deferred vs per-token slots");
  }
}

TEST_P(PropDeferred, PaddingClampingAndFreshSequences) {
  const DefParam& prm = GetParam();
  PROP_SKIP_IF_UNAVAILABLE(prm.be);
  Rng r(7300 + static_cast<int>(prm.layout));
  // sequences: 0 null slot, 1 accepted 99 (clamped to kCols), 2 accepted -3 (none), 3 no initial
  // state (log ignored), 4 zero tokens with 2 accepted
  const int64_t n = 5, null_id = 7;
  const std::vector<int64_t> lens = {2, 3, 1, 2, 0}, replay = {2, 99, -3, 4, 2}, slot_ids = {null_id, 1, 2, 3, 4};
  const std::vector<int64_t> qsl_v = prefix_sum(lens);
  Buf qsl = index_buf(qsl_v), slots = index_buf(slot_ids), has_init = bool_buf({true, true, true, false, true});
  GdrIn in = make_gdr_in(r, qsl_v.back(), kH, kHV, kK, kV, prm.act, DType::kFloat32);
  Buf pool = make_ssm_pool(prm.state, 8, kHV, kK, kV, prm.layout);
  fill_normal(pool, r, 0.5);
  Buf log_in = log_buf(8), log_out = log_buf(8);
  fill_normal(log_in, r, 0.3);
  fill_normal(log_out, r, 0.3);
  for (int64_t s = 0; s < 8; ++s)  // logged gates: a decay g <= 0 and a write strength in (0, 1)
    for (int64_t j = 0; j < kCols; ++j)
      for (int64_t hv = 0; hv < kHV; ++hv) {
        const int64_t e = ((s * kCols + j) * kHV + hv) * (kK + kV + 2);
        log_in.set(e + kK + kV, -std::fabs(log_in.get(e + kK + kV)));
        log_in.set(e + kK + kV + 1, 0.5);
      }
  Buf o(prm.act, {qsl_v.back(), kHV, kV});
  fill_value(o, 3.0);
  const Buf pool0 = pool, log_out0 = log_out;
  PROP_ASSERT_OK(
      run_deferred(prm.be, in, pool, prm.layout, qsl, slots, replay, &has_init, o, log_in, log_out, true, null_id));
  const int64_t E = kK + kV + 2, row = kHV * E;
  auto expect_rows = [&](const Buf& got, const Buf& want, int64_t s, int64_t j0, int64_t j1, const char* what) {
    EXPECT_EQ(bit_diff(got, (s * kCols + j0) * row, want, (s * kCols + j0) * row, (j1 - j0) * row), "")
        << what << " slot " << s;
  };
  expect_slot_close(pool, null_id, pool0, null_id, 0.0, "null slot's state");
  expect_rows(log_out, log_out0, null_id, 0, kCols, "null slot's log");
  for (int64_t t = 0; t < lens[0] * kHV * kV; ++t) EXPECT_EQ(o.get(t), 0.0) << "padding output " << t;
  for (int64_t i = 1; i < n; ++i) {
    SCOPED_TRACE(::testing::Message() << "sequence " << i);
    const int64_t s = slot_ids[i];
    const bool init = i != 3;
    const int64_t a = init ? std::clamp<int64_t>(replay[i], 0, kCols) : 0;
    // the committed state: the slot's state (zeros without an initial state), then the log's first
    // a tokens replayed, in float64
    std::vector<double> S(kHV * kV * kK, 0.0);
    for (int64_t hv = 0; hv < kHV; ++hv)
      for (int64_t v = 0; v < kV; ++v)
        for (int64_t k = 0; k < kK; ++k) {
          const int64_t off = s * pool.row_elems() + hv * kV * kK +
                              (prm.layout == StateLayout::kVK ? v * kK + k : k * kV + v);
          S[(hv * kV + v) * kK + k] = init ? pool0.get(off) : 0.0;
        }
    for (int64_t j = 0; j < a; ++j)
      for (int64_t hv = 0; hv < kHV; ++hv) {
        const int64_t e = ((s * kCols + j) * kHV + hv) * E;
        const double g = log_in.get(e + kK + kV), beta = log_in.get(e + kK + kV + 1);
        for (int64_t v = 0; v < kV; ++v) {
          double sk = 0;
          for (int64_t k = 0; k < kK; ++k) {
            S[(hv * kV + v) * kK + k] *= std::exp(g);
            sk += S[(hv * kV + v) * kK + k] * log_in.get(e + k);
          }
          const double d = beta * (log_in.get(e + kK + v) - sk);
          for (int64_t k = 0; k < kK; ++k) S[(hv * kV + v) * kK + k] += d * log_in.get(e + k);
        }
      }
    Buf want = pool0;
    for (int64_t hv = 0; hv < kHV; ++hv)
      for (int64_t v = 0; v < kV; ++v)
        for (int64_t k = 0; k < kK; ++k)
          want.set(s * pool.row_elems() + hv * kV * kK + (prm.layout == StateLayout::kVK ? v * kK + k : k * kV + v),
                   S[(hv * kV + v) * kK + k]);
    expect_slot_close(pool, s, want, s, prm.state == DType::kFloat32 ? 1e-5 : 1e-2, "committed state");
    // this step's tokens logged in rows 0..len-1, the rest of the slot's log untouched
    expect_rows(log_out, log_out0, s, lens[i], kCols, "log rows past the step's tokens");
    for (int64_t t = 0; t < lens[i]; ++t)
      for (int64_t hv = 0; hv < kHV; ++hv) {
        const int64_t e = ((s * kCols + t) * kHV + hv) * E;
        EXPECT_NEAR(log_out.get(e + kK + kV + 1), 1.0 / (1.0 + std::exp(-in.b.get((qsl_v[i] + t) * kHV + hv))), 1e-6)
            << "logged beta, token " << t;
      }
  }
}

std::vector<DefParam> def_params() {
  std::vector<DefParam> v;
  for (Backend be : capture::test_backends(capture::Ops::kDeferred))
    for (DType act : {DType::kFloat32, DType::kBFloat16})
      for (DType st : {DType::kFloat32, DType::kBFloat16})
        for (StateLayout l : {StateLayout::kVK, StateLayout::kKV}) v.push_back({be, act, st, l});
  return v;
}
INSTANTIATE_TEST_SUITE_P(Prop, PropDeferred, ::testing::ValuesIn(def_params()), def_name);

// The tree tests' problem: float32 everywhere, two sequences, a committed state per slot and a log
// holding a previous step of kCols tokens.
constexpr int64_t kTreeCols = 16;  // the log holds every node of a tree
struct TreeCase {
  Buf pool = make_ssm_pool(DType::kFloat32, 3, kHV, kK, kV, StateLayout::kVK);
  Buf log_in = log_buf(3, kTreeCols), log_out = log_buf(3, kTreeCols);
  Buf slots = index_buf({0, 1});
};
TreeCase make_tree_case(Rng& r) {
  TreeCase c;
  fill_normal(c.pool, r, 0.5);
  // a previous verify step of kCols tokens per sequence, logged
  GdrIn prev = make_gdr_in(r, 2 * kCols, kH, kHV, kK, kV, DType::kFloat32, DType::kFloat32);
  Buf qsl = index_buf({0, kCols, 2 * kCols}), o(DType::kFloat32, {2 * kCols, kHV, kV});
  Buf scratch = log_buf(3, kTreeCols);
  EXPECT_TRUE(run_deferred(Backend::kCPU, prev, c.pool, StateLayout::kVK, qsl, c.slots, {0, 0}, nullptr, o, scratch,
                           c.log_in, true)
                  .ok());
  return c;
}

// One deferred step of `in` (tokens per sequence `lens`) on a copy of c with replay counts `replay`
// (path rows `path`, or none), tree `parents` (or a chain); returns outputs, pool and written log.
struct StepOut {
  Buf o, pool, log;
};
StepOut tree_step(const TreeCase& c, GdrIn& in, const std::vector<int64_t>& lens, const std::vector<int64_t>& replay,
                  const std::vector<std::vector<int64_t>>* path, const std::vector<int64_t>* parents,
                  bool log_tokens = true) {
  StepOut r{Buf(DType::kFloat32, {in.T, kHV, kV}), c.pool, c.log_out};
  Buf qsl = index_buf(prefix_sum(lens)), nacc = index_buf(replay), slots = c.slots, log_in = c.log_in;
  GatedDeltaRuleArgs a = gdr_args(in, r.pool, StateLayout::kVK, qsl, slots, &nacc, nullptr, r.o);
  a.verify_log = log_in.view();
  a.verify_log_out = r.log.view();
  a.log_tokens = log_tokens;
  Buf pbuf, par;
  if (path) {
    pbuf = index_buf2(*path, kTreeCols);
    a.accepted_path = pbuf.view();
  }
  if (parents) {
    par = index_buf(*parents);
    a.token_parents = par.view();
  }
  const Status st = gated_delta_rule_recurrent(a);
  EXPECT_TRUE(st.ok()) << st.message();
  return r;
}

TEST(PropDeferredTree, TreesEqualTheirPaths) {
  Rng r(7500);
  const TreeCase c = make_tree_case(r);
  // a chain is linear verify
  {
    GdrIn in = make_gdr_in(r, 7, kH, kHV, kK, kV, DType::kFloat32, DType::kFloat32);
    const std::vector<int64_t> lens = {3, 4}, chain = {-1, 0, 1, -1, 0, 1, 2};
    const StepOut lin = tree_step(c, in, lens, {2, 4}, nullptr, nullptr);
    const StepOut tr = tree_step(c, in, lens, {2, 4}, nullptr, &chain);
    EXPECT_TRUE(tr.o.same_bytes(lin.o)) << "chain outputs: " << byte_diff(tr.o, lin.o);
    EXPECT_TRUE(tr.pool.same_bytes(lin.pool)) << "chain committed state";
    EXPECT_TRUE(tr.log.same_bytes(lin.log)) << "chain log";
  }
  for (int trial = 0; trial < 4; ++trial) {
    SCOPED_TRACE(::testing::Message() << "tree " << trial);
    // two trees of up to 16 nodes, depth <= 8 (parents precede children); trial 3 adds hostile parents
    std::vector<int64_t> lens = {r.randint(1, 16), r.randint(1, 16)}, parents, depth;
    std::vector<std::vector<int64_t>> par_of(2);
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t t = 0; t < lens[i]; ++t) {
        int64_t p = t == 0 ? -1 : r.randint(-1, t - 1);
        while (p >= 0 && depth[depth.size() - t + p] >= 7) p = par_of[i][p];  // keep depth <= 8
        const int64_t d = p < 0 ? 0 : depth[depth.size() - t + p] + 1;
        par_of[i].push_back(p);
        depth.push_back(d);
        parents.push_back(p);
      }
    }
    if (trial == 3) {  // outside [0, t): roots
      parents[lens[0] > 1 ? 1 : 0] = 99;
      parents.back() = -7;
      par_of[0][lens[0] > 1 ? 1 : 0] = -1;
      par_of[1].back() = -1;
    }
    const int64_t T = lens[0] + lens[1];
    GdrIn in = make_gdr_in(r, T, kH, kHV, kK, kV, DType::kFloat32, DType::kFloat32);
    const std::vector<int64_t> replay = {r.randint(0, kCols), r.randint(0, kCols)};  // the previous step logged kCols
    const StepOut tr = tree_step(c, in, lens, replay, nullptr, &parents);
    // each node against linear verify of its root-to-node path (the other sequence: its root only)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t t = 0; t < lens[i]; ++t) {
        std::vector<int64_t> path;
        for (int64_t u = t; u >= 0; u = par_of[i][u]) path.insert(path.begin(), u);
        const int64_t base = i == 0 ? 0 : lens[0], other = i == 0 ? lens[0] : 0;
        std::vector<int64_t> rows;
        if (i == 1) rows.push_back(other);
        for (int64_t u : path) rows.push_back(base + u);
        if (i == 0) rows.push_back(lens[0]);
        GdrIn pin = slice_tokens(in, rows);
        const std::vector<int64_t> plens = i == 0 ? std::vector<int64_t>{static_cast<int64_t>(path.size()), 1}
                                                  : std::vector<int64_t>{1, static_cast<int64_t>(path.size())};
        const StepOut lin = tree_step(c, pin, plens, replay, nullptr, nullptr);
        const int64_t last = (i == 0 ? static_cast<int64_t>(path.size()) - 1 : static_cast<int64_t>(path.size()));
        EXPECT_EQ(bit_diff(tr.o, (base + t) * kHV * kV, lin.o, last * kHV * kV, kHV * kV), "")
            << "sequence " << i << " node " << t << " vs its path of " << path.size();
        EXPECT_TRUE(tr.pool.same_bytes(lin.pool)) << "the committed state does not depend on the tree";
        if (t + 1 == lens[i] && i == 1) {
          // commit the path: a decode replaying it equals one replaying linear verify's log of it
          GdrIn dec = make_gdr_in(r, 2, kH, kHV, kK, kV, DType::kFloat32, DType::kFloat32);
          std::vector<std::vector<int64_t>> acc_path(2, std::vector<int64_t>(kTreeCols, -1));
          for (size_t j = 0; j < path.size(); ++j) acc_path[1][j] = path[j];
          const int64_t plen = static_cast<int64_t>(path.size());
          TreeCase after_tree{tr.pool, tr.log, log_buf(3, kTreeCols), c.slots};
          TreeCase after_lin{lin.pool, lin.log, log_buf(3, kTreeCols), c.slots};
          // linear verify logged sequence 1's path after sequence 0's single token: rows 0.. of slot 1
          std::vector<std::vector<int64_t>> lin_path(2, std::vector<int64_t>(kTreeCols, -1));
          for (int64_t j = 0; j < plen; ++j) lin_path[1][j] = j;
          const StepOut d1 = tree_step(after_tree, dec, {1, 1}, {0, plen}, &acc_path, nullptr, false);
          const StepOut d2 = tree_step(after_lin, dec, {1, 1}, {0, plen}, &lin_path, nullptr, false);
          EXPECT_EQ(bit_diff(d1.o, kHV * kV, d2.o, kHV * kV, kHV * kV), "") << "decode after committing the path";
          EXPECT_EQ(bit_diff(d1.pool, d1.pool.row_elems(), d2.pool, d2.pool.row_elems(), d1.pool.row_elems()), "")
              << "state after committing the path";
        }
      }
  }
  // a path entry outside the log ends the replay: [1, -1, 2] replays row 1 only
  GdrIn in = make_gdr_in(r, 2, kH, kHV, kK, kV, DType::kFloat32, DType::kFloat32);
  std::vector<std::vector<int64_t>> cut(2, std::vector<int64_t>(kTreeCols, 0)), one = cut;
  cut[0][0] = cut[1][0] = one[0][0] = one[1][0] = 1;
  cut[0][1] = -1, cut[0][2] = 2, cut[1][1] = 99;
  const StepOut a = tree_step(c, in, {1, 1}, {3, 4}, &cut, nullptr, false);
  const StepOut b = tree_step(c, in, {1, 1}, {1, 1}, &one, nullptr, false);
  EXPECT_TRUE(a.o.same_bytes(b.o) && a.pool.same_bytes(b.pool)) << "a path cut by an entry outside the log";
}

TEST(PropDeferredValidation, InvalidArgumentsAreRejected) {
  Rng r(7400);
  GdrIn in = make_gdr_in(r, 3, kH, kHV, kK, kV, DType::kFloat32, DType::kFloat32);
  Buf pool = make_ssm_pool(DType::kFloat32, 4, kHV, kK, kV, StateLayout::kVK);
  Buf qsl = index_buf({0, 1, 3}), slots = index_buf({0, 1}), nacc = index_buf({1, 2});
  Buf o(DType::kFloat32, {3, kHV, kV});
  Buf log_in = log_buf(4), log_out = log_buf(4);
  auto base = [&]() {
    GatedDeltaRuleArgs a = gdr_args(in, pool, StateLayout::kVK, qsl, slots, &nacc, nullptr, o);
    a.verify_log = log_in.view();
    a.verify_log_out = log_out.view();
    return a;
  };
  const Buf pool0 = pool, o0 = o;
  auto refused = [&](GatedDeltaRuleArgs a, bool chunked, const char* needle) {
    const Status s = chunked ? gated_delta_rule_chunked(a) : gated_delta_rule_recurrent(a);
    EXPECT_FALSE(s.ok()) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
    EXPECT_TRUE(pool.same_bytes(pool0) && o.same_bytes(o0)) << "written before the error: " << needle;
  };
  PROP_ASSERT_OK(gated_delta_rule_recurrent(base()));  // the valid call
  pool = pool0;
  o = o0;
  GatedDeltaRuleArgs a = base();
  a.num_accepted_tokens = absent();
  refused(a, true, "verify_log");
  refused(a, false, "num_accepted_tokens");
  Buf log_bf(DType::kBFloat16, {4, kCols, kHV, kK + kV + 2});
  a = base();
  a.verify_log = log_bf.view();
  refused(a, false, "verify_log");
  Buf log_short = log_buf(3);
  a = base();
  a.verify_log_out = log_short.view();
  refused(a, false, "verify_log_out");
  a = base();
  a.verify_log_out = log_in.view();
  refused(a, false, "does not overlap");
  a = base();
  a.verify_log_out = TensorView{};
  refused(a, false, "verify_log_out");
  Buf slots2 = index_buf2({{0, 1}, {2, 3}}, 2);
  a = base();
  a.state_indices = slots2.view();
  refused(a, false, "state_indices");
  Buf parents = index_buf({-1, -1, 0});
  a = base();
  a.token_parents = parents.view();
  a.log_tokens = false;
  refused(a, false, "log_tokens");
  a = base();
  a.verify_log = a.verify_log_out = TensorView{};
  a.token_parents = parents.view();
  refused(a, false, "token_parents");
}

}  // namespace
}  // namespace gdn::prop
