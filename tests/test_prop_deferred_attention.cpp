// Deferred commit and token trees in gdn_attention (docs/contract.md §7), on the CPU.
//   PropDeferredAttention.TrajectoriesEqualThePerTokenSlotMode: 4 sequences over 7 steps — prefills
//     without initial state, verify steps of 1..4 tokens with random accepted counts, a step mixing
//     plain decodes and verify sequences, a continued prefill (initial state), verify with a
//     chain-shaped tree, final decodes — with tokens at shuffled global rows, in the per-token slot
//     mode (per-token conv windows, a slot per draft column) and in the deferred mode (one slot
//     per sequence, recurrence and conv logs alternating): core_attn_out and z equal at every step,
//     and after the last the state and conv window each mode reads next; byte for byte with float32
//     state, relative L2 1e-2 with bf16 state.
//   PropDeferredAttention.TreeNodesEqualTheirPaths: a verify sequence whose 9 tokens form a tree
//     (depth 4, beside a second sequence): each node's core_attn_out row equals the last row of a
//     linear verify of its root-to-node path (the path's tokens at their global rows) from the same
//     committed state, conv windows taken along the path.
#include "prop_deferred_attention.h"

namespace gdn::prop {
namespace {

constexpr int64_t kSeqs = 4, kCols = 4;

struct DAParam {
  DType act, ssm;
};
class PropDeferredAttention : public ::testing::TestWithParam<DAParam> {};

// The deferred problem's extra tensors: both logs of the recurrence and of the conv, two of each.
struct Logs {
  Buf rec[2], conv[2];
  int cur = 0;
};
Logs make_logs(const AttnProblem& p, int64_t slots, int64_t cols) {
  Logs l;
  for (int k = 0; k < 2; ++k) {
    l.rec[k] = Buf(DType::kFloat32, {slots, cols, p.HV, p.K + p.V + 2});
    l.conv[k] = Buf(p.act, {slots, cols, p.D()});
    fill_value(l.rec[k], 0.0);
    fill_value(l.conv[k], 0.0);
  }
  return l;
}

Status run_deferred_attention(AttnProblem& p, Buf& core, Buf& z, Logs& logs, Buf* ns_replay, Buf* parents,
                              Buf* sp_path = nullptr) {
  GdnAttentionArgs a = attention_args(p, core, z);
  a.verify_log = logs.rec[logs.cur].view();
  a.verify_log_out = logs.rec[1 - logs.cur].view();
  a.conv_log = logs.conv[logs.cur].view();
  a.conv_log_out = logs.conv[1 - logs.cur].view();
  if (ns_replay && p.num_prefills + p.num_decodes > 0) a.non_spec_num_accepted_tokens = ns_replay->view();
  if (parents && p.num_spec > 0) a.spec_token_parents = parents->view();
  if (sp_path && p.num_spec > 0) a.spec_accepted_path = sp_path->view();
  return capture::run_on(Backend::kCPU, a);
}

void expect_same(const Buf& got, const Buf& want, int64_t n, double tol, const char* what) {
  if (tol == 0) {
    EXPECT_EQ(bit_diff(got, 0, want, 0, n), "") << what;
  } else {
    EXPECT_LE(rel_l2(got, want, {{0, n}}, {{0, n}}), tol) << what;
  }
}

TEST_P(PropDeferredAttention, TrajectoriesEqualThePerTokenSlotMode) {
  const DAParam prm = GetParam();
  const double tol = prm.ssm == DType::kFloat32 && prm.act == DType::kFloat32 ? 0.0 : 1e-2;
  Rng r(7700 + static_cast<int>(prm.ssm) * 3 + static_cast<int>(prm.act));
  AttnProblem pt, df;
  for (AttnProblem* p : {&pt, &df}) {
    p->act = prm.act; p->ssm_dtype = prm.ssm; p->cols = kCols;
    p->conv_layout = SpecConvLayout::kPerToken; p->conv_rows_extra = 0;
  }
  pt.num_slots = kSeqs * kCols;
  df.num_slots = kSeqs;
  alloc_params_and_pools(pt, r);
  alloc_params_and_pools(df, r);
  df.weight = pt.weight; df.bias = pt.bias; df.A_log = pt.A_log; df.dt_bias = pt.dt_bias;
  fill_normal(pt.conv_pool, r, 1.0);  // garbage: every slot read is written first
  fill_normal(df.conv_pool, r, 1.0);
  fill_normal(pt.ssm_pool, r, 1.0);
  fill_normal(df.ssm_pool, r, 1.0);
  Logs logs = make_logs(df, kSeqs, kCols);
  std::vector<std::vector<int64_t>> cols(kSeqs, std::vector<int64_t>(kCols));
  for (int64_t i = 0; i < kSeqs; ++i)
    for (int64_t c = 0; c < kCols; ++c) cols[i][c] = i * kCols + c;
  std::vector<int64_t> acc(kSeqs, 1), replay(kSeqs, 0);
  // per step and sequence: 'p' prefill (0: without initial state), 'd' decode, 'v' verify, 't' tree verify (a chain)
  const char* plan[] = {"pppp", "vvvv", "vvvv", "ddvv", "vvvv", "pvvt", "dddd"};
  for (int step = 0; step < 7; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    pt.seqs.clear();
    df.seqs.clear();
    std::vector<int64_t> lens(kSeqs), ns_replay, parents;
    int64_t rows = 0;
    for (int64_t i = 0; i < kSeqs; ++i) {
      const char k = plan[step][i];
      lens[i] = k == 'p' ? r.randint(1, 7) : k == 'd' ? 1 : r.randint(1, kCols);
      rows += lens[i];
    }
    std::vector<int64_t> perm = random_perm(rows, r);  // tokens at shuffled global rows
    int64_t next = 0;
    for (int64_t i = 0; i < kSeqs; ++i) {
      const char k = plan[step][i];
      AttnSeq s;
      for (int64_t t = 0; t < lens[i]; ++t) s.rows.push_back(perm[next++]);
      s.spec = k == 'v' || k == 't';
      AttnSeq d = s;
      if (s.spec) {
        s.cols = cols[i];
        s.nacc = acc[i];
        d.cols = std::vector<int64_t>(kCols, i);
        d.nacc = replay[i];
        for (int64_t t = 0; t < lens[i]; ++t) parents.push_back(t - 1);  // a chain
      } else {
        std::swap(cols[i][0], cols[i][acc[i] - 1]);  // the per-token mode reads the accepted column
        s.slot = cols[i][0];
        s.has_init = d.has_init = step > 0;
        d.slot = i;
        ns_replay.push_back(replay[i]);
      }
      pt.seqs.push_back(s);
      df.seqs.push_back(d);
    }
    for (AttnProblem* p : {&pt, &df}) {
      p->rows_alloc = p->num_actual = rows;
      build_meta(*p);
    }
    pt.qkvz = Buf(prm.act, {rows, pt.qkvz_width()});
    pt.ba = Buf(prm.act, {rows, 2 * pt.HV});
    fill_normal(pt.qkvz, r, 1.0);
    fill_normal(pt.ba, r, 1.0);
    df.qkvz = pt.qkvz;
    df.ba = pt.ba;
    Buf core_pt, z_pt, core_df, z_df;
    make_outputs(pt, &core_pt, &z_pt, 0);
    make_outputs(df, &core_df, &z_df, 0);
    PROP_ASSERT_OK(run_attention(Backend::kCPU, pt, core_pt, z_pt));
    // the spec sequences' parents, in spec local token order (spec sequences come in seq order)
    Buf ns_buf = index_buf(ns_replay.empty() ? std::vector<int64_t>{0} : ns_replay);
    Buf par_buf = index_buf(parents.empty() ? std::vector<int64_t>{0} : parents);
    const bool tree = std::string(plan[step]).find('t') != std::string::npos;
    PROP_ASSERT_OK(run_deferred_attention(df, core_df, z_df, logs, &ns_buf, tree ? &par_buf : nullptr));
    logs.cur = 1 - logs.cur;
    expect_same(core_df, core_pt, core_pt.numel(), tol, "core_attn_out: deferred vs per-token slots");
    EXPECT_TRUE(z_df.same_bytes(z_pt)) << "z";
    if (HasFailure()) return;
    for (int64_t i = 0; i < kSeqs; ++i) {
      const bool spec = plan[step][i] == 'v' || plan[step][i] == 't';
      replay[i] = acc[i] = spec ? r.randint(1, lens[i]) : 1;
      if (!spec) replay[i] = 0;
    }
  }
  // after the final decodes: the state and window each mode reads next
  const double stol = prm.ssm == DType::kFloat32 ? 0.0 : 1e-2;
  for (int64_t i = 0; i < kSeqs; ++i) {
    expect_slot_close(df.ssm_pool, i, pt.ssm_pool, cols[i][0], stol, "ssm state: deferred vs per-token slots");
    const int64_t row = df.conv_pool.row_elems();
    EXPECT_EQ(bit_diff(df.conv_pool, i * row, pt.conv_pool, cols[i][0] * pt.conv_pool.row_elems(), (pt.W - 1) * pt.D()),
              "")
        << "conv window of sequence " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Prop, PropDeferredAttention,
                         ::testing::Values(DAParam{DType::kFloat32, DType::kFloat32},
                                           DAParam{DType::kFloat32, DType::kBFloat16},
                                           DAParam{DType::kBFloat16, DType::kFloat32}),
                         [](const ::testing::TestParamInfo<DAParam>& i) {
                           return std::string("act") + dtype_short(i.param.act) + "_ssm" + dtype_short(i.param.ssm);
                         });

TEST(PropDeferredAttentionTree, TreeNodesEqualTheirPaths) {
  Rng r(7800);
  AttnProblem p;
  p.act = DType::kFloat32; p.ssm_dtype = DType::kFloat32; p.cols = 16;
  p.conv_layout = SpecConvLayout::kPerToken; p.conv_rows_extra = 0;
  p.num_slots = 2;
  alloc_params_and_pools(p, r);
  fill_normal(p.conv_pool, r, 1.0);
  fill_normal(p.ssm_pool, r, 0.3);
  Logs logs = make_logs(p, 2, 16);
  // sequence 0: a tree of 9 nodes (depth 4); sequence 1: 2 tokens (a chain)
  const std::vector<int64_t> par0 = {-1, 0, 0, 1, 1, 2, 3, 5, -1};
  const int64_t rows = 11;
  p.rows_alloc = p.num_actual = rows;
  p.qkvz = Buf(p.act, {rows, p.qkvz_width()});
  p.ba = Buf(p.act, {rows, 2 * p.HV});
  fill_normal(p.qkvz, r, 1.0);
  fill_normal(p.ba, r, 1.0);
  const std::vector<int64_t> perm = random_perm(rows, r);
  AttnSeq s0, s1;
  s0.spec = s1.spec = true;
  for (int64_t t = 0; t < 9; ++t) s0.rows.push_back(perm[t]);
  s1.rows = {perm[9], perm[10]};
  s0.cols = std::vector<int64_t>(16, 0);
  s1.cols = std::vector<int64_t>(16, 1);
  s0.nacc = s1.nacc = 0;
  const AttnProblem base = p;
  auto run = [&](std::vector<AttnSeq> seqs, const std::vector<int64_t>* parents, Buf* core) {
    AttnProblem q = base;
    q.seqs = std::move(seqs);
    build_meta(q);
    Buf z;
    make_outputs(q, core, &z, 0);
    Logs l = logs;
    Buf par;
    if (parents) par = index_buf(*parents);
    PROP_ASSERT_OK(run_deferred_attention(q, *core, z, l, nullptr, parents ? &par : nullptr));
  };
  Buf tree_core;
  std::vector<int64_t> parents = par0;
  parents.insert(parents.end(), {-1, 0});
  run({s0, s1}, &parents, &tree_core);
  const int64_t row = p.HV * p.V;
  for (int64_t t = 0; t < 9; ++t) {
    std::vector<int64_t> path;
    for (int64_t u = t; u >= 0; u = par0[u]) path.insert(path.begin(), u);
    AttnSeq lin = s0;
    lin.rows.clear();
    for (int64_t u : path) lin.rows.push_back(perm[u]);
    Buf lin_core;
    run({lin, s1}, nullptr, &lin_core);
    EXPECT_EQ(bit_diff(tree_core, perm[t] * row, lin_core, perm[t] * row, row), "")
        << "node " << t << " vs linear verify of its path of " << path.size();
  }
}

}  // namespace
}  // namespace gdn::prop

namespace gdn::prop {
namespace {

// Hostile values in the deferred mode's metadata (replay counts, paths, parents far out of range,
// negative, huge) on a batch of prefills, decodes and verify sequences: the call succeeds (every
// value is clamped or makes a root / ends a replay: docs/contract.md §7), reads and writes stay in
// bounds (the sanitizer build checks), and the slots no sequence names — in both pools and all
// four logs — keep their bytes.
TEST(PropDeferredAttentionHostile, GarbageCountsPathsAndParentsStayInBounds) {
  Rng r(7900);
  for (int trial = 0; trial < 6; ++trial) {
    SCOPED_TRACE(::testing::Message() << "trial " << trial);
    AttnProblem p;
    const int64_t kLog = 3;
    HostileIndex hx = hostile_deferred_batch(p, r, kLog);  // slots 5..7 must stay untouched
    Logs logs = make_logs(p, p.num_slots, kLog);
    for (int k = 0; k < 2; ++k) {
      fill_normal(logs.rec[k], r, 0.5);
      fill_normal(logs.conv[k], r, 0.5);
    }
    const Buf conv0 = p.conv_pool, ssm0 = p.ssm_pool, rec_out0 = logs.rec[1], conv_out0 = logs.conv[1];
    Buf core, z;
    make_outputs(p, &core, &z, 0);
    GdnAttentionArgs a = attention_args(p, core, z);
    a.verify_log = logs.rec[0].view();
    a.verify_log_out = logs.rec[1].view();
    a.conv_log = logs.conv[0].view();
    a.conv_log_out = logs.conv[1].view();
    a.non_spec_num_accepted_tokens = hx.ns_replay.view();
    a.spec_token_parents = hx.parents.view();
    a.spec_accepted_path = hx.sp_path.view();
    a.non_spec_accepted_path = hx.ns_path.view();
    PROP_ASSERT_OK(capture::run_on(Backend::kCPU, a));
    for (int64_t s = 5; s < p.num_slots; ++s) {
      EXPECT_EQ(bit_diff(p.conv_pool, s * p.conv_pool.row_elems(), conv0, s * conv0.row_elems(), conv0.row_elems()), "")
          << "conv slot " << s;
      expect_slot_close(p.ssm_pool, s, ssm0, s, 0.0, "unnamed ssm slot");
      const int64_t lr = logs.rec[1].row_elems(), lc = logs.conv[1].row_elems();
      EXPECT_EQ(bit_diff(logs.rec[1], s * lr, rec_out0, s * lr, lr), "") << "recurrence log slot " << s;
      EXPECT_EQ(bit_diff(logs.conv[1], s * lc, conv_out0, s * lc, lc), "") << "conv log slot " << s;
    }
    for (int64_t e = 0; e < core.numel(); ++e) ASSERT_TRUE(std::isfinite(core.get(e))) << "core_attn_out " << e;
  }
}

// docs/contract.md §3 in the deferred mode: a sequence with a token past its group's tokens (here the
// remap's length) is padding — a verify sequence wholly past them commits no replay, a decode or
// verify sequence that runs past them advances no state. Bit for bit the call with those sequences'
// slots -1, on each backend.
class PropDeferredAttentionPast : public ::testing::TestWithParam<Backend> {};
TEST_P(PropDeferredAttentionPast, SequencesPastTheTokensArePadding) {
  const Backend be = GetParam();
  PROP_SKIP_IF_UNAVAILABLE(be);
  Rng r(7950);
  for (int trial = 0; trial < 4; ++trial) {
    SCOPED_TRACE(::testing::Message() << "trial " << trial);
    const int64_t kLog = 3;
    AttnProblem hostile;
    HostileIndex hx = hostile_deferred_batch(hostile, r, kLog);
    AttnProblem clean = hostile;
    clean.seqs[1].slot = -1;     // the decode
    clean.seqs[3].cols = {-1};  // a verify sequence that now runs past the spec tokens
    clean.seqs[4].cols = {-1};  // the verify sequence without tokens, now wholly past them
    build_meta(clean);
    const int64_t ns_len = hostile.ns_indx.numel(), sp_len = hostile.sp_indx.numel();
    hostile.ns_qsl.seti(2, ns_len + 2);  // the decode runs past the non-spec tokens
    hostile.sp_qsl.seti(2, sp_len + 1);  // sequence 3 runs past the spec tokens, sequence 4 lies past them
    hostile.sp_qsl.seti(3, sp_len + 3);
    Rng rs(8000 + trial);
    Side sh = make_side(hostile, kLog, rs), sc = sh;
    const Extra x{&hx.ns_replay, &hx.ns_path, &hx.sp_path, &hx.parents};
    Out oh, oc;
    PROP_ASSERT_OK(run_side(be, hostile, sh, 0, x, &oh));
    PROP_ASSERT_OK(run_side(be, clean, sc, 0, x, &oc));
    EXPECT_EQ(byte_diff(oh.core, oc.core), "") << "core_attn_out";
    EXPECT_EQ(byte_diff(oh.z, oc.z), "") << "z";
    EXPECT_EQ(byte_diff(sh.conv, sc.conv), "") << "conv_state";
    EXPECT_EQ(byte_diff(sh.ssm, sc.ssm), "") << "ssm_state";
    EXPECT_EQ(byte_diff(sh.rec[1], sc.rec[1]), "") << "verify_log_out";
    EXPECT_EQ(byte_diff(sh.cvl[1], sc.cvl[1]), "") << "conv_log_out";
  }
}

INSTANTIATE_TEST_SUITE_P(Prop, PropDeferredAttentionPast, ::testing::Values(Backend::kCPU, Backend::kCUDA),
                         [](const ::testing::TestParamInfo<Backend>& i) { return std::string(capture::backend_name(i.param)); });

}  // namespace
}  // namespace gdn::prop
