// gdn_attention's deferred-commit mode and token trees on CUDA (docs/contract.md §7, "In
// gdn_attention"), against the CPU backend, on each CUDA backend of the mode (the planner's choice,
// each deferred kernel form forced); skipped without a GPU. The CPU and the device each keep their
// own pools and logs along a trajectory and get the same inputs at every step.
// Tolerances (docs/contract.md §6): core_attn_out and the SSM states of the sequences' slots within
// relative L2 1e-5 when activations and state are float32, else 1e-2; the written recurrence-log
// entries (k^, v, g, beta of conv outputs) 1e-5 with float32 activations, else 1e-2; z, the conv
// pool and the conv logs (copies of inputs) bit for bit; everything the contract leaves alone bit for
// bit: rows >= num_actual_tokens, log entries not written, the read logs, padded sequences' and the
// spare slot's state, stride gaps. Padded sequences' rows of core_attn_out are zero.
//   CudaDeferredAttention.TrajectoriesMatchTheCpu: 4 sequences over 7 steps (prefills without
//     initial state, verify chains and trees of 1..5 tokens with random accepted counts and paths,
//     decodes, an empty verify sequence committing its replay, continued prefills of up to 20
//     tokens, one without initial state beside a replay count), their replays through
//     num_accepted_tokens / non_spec_num_accepted_tokens and the two accepted paths (a count of 1000
//     clamped, a path ending early at an entry outside the log), tokens at shuffled global rows, with
//     a sequence made padding by a token outside the buffer, one by the null block, zero-length graph
//     padding and graph-padded rows; float32 / bf16 / fp16 activations and state, K 16 / 32 / 64 /
//     128, V 8 / 16 / 40 / 64, conv widths 2 / 4 / 5, both projection layouts, int32 / int64 indices,
//     strided logs.
//   CudaDeferredAttention.HostileMetadataMatchesTheCpu: replay counts, paths and parents far out of
//     range, negative or huge: the same results as the CPU, unnamed slots untouched.
//   CudaDeferredAttention.TreeNodesEqualTheirPaths: a tree of 9 nodes beside a chain: equal to the
//     CPU, each node to linear verify of its root-to-node path on CUDA, and a chain-shaped tree to
//     linear verify byte for byte.
//   CudaDeferredAttention.IdenticalBytesRunAfterRun: that tree step twice, every byte equal.
#include <algorithm>

#include "prop_deferred_attention.h"

namespace gdn::prop {
namespace {

class CudaDeferredAttention : public ::testing::TestWithParam<Backend> {};

// Random trees of len nodes (parents before children, several roots possible).
std::vector<int64_t> random_tree(Rng& r, int64_t len) {
  std::vector<int64_t> par;
  for (int64_t t = 0; t < len; ++t) par.push_back(t == 0 ? -1 : r.randint(-1, t - 1));
  return par;
}
std::vector<int64_t> path_to(const std::vector<int64_t>& par, int64_t t) {
  std::vector<int64_t> path;
  for (; t >= 0; t = par[t]) path.insert(path.begin(), t);
  return path;
}

struct TCase {
  const char* name;
  DType act, ssm, idx;
  int64_t H, HV, K, V, W;
  bool reorder, bias;
};

// Sequences 0..3 live in slots 0..3; sequence 4 (slot 4) is padding by a token outside the buffer,
// sequence 5 by the null block (slot 5); slot 6 is never named. Per step and sequence: 'p' prefill,
// 'd' decode, 'v' verify (a chain), 't' verify (a tree), 'e' verify without tokens.
constexpr int64_t kSeqs = 6, kCols = 5, kSlots = 7, kNull = 5;
const char* const kPlan[] = {"pppppp", "vvvvvv", "vvtvvt", "ddvevd", "vtvvtv", "pvtpvv", "dddddd"};

TEST_P(CudaDeferredAttention, TrajectoriesMatchTheCpu) {
  const Backend be = GetParam();
  PROP_SKIP_IF_UNAVAILABLE(be);
  const TCase cases[] = {
      {"f32_K16_V8_W4", DType::kFloat32, DType::kFloat32, DType::kInt32, 2, 4, 16, 8, 4, false, true},
      {"bf16_f32state_K128_V64_W4_reorder", DType::kBFloat16, DType::kFloat32, DType::kInt64, 1, 2, 128, 64, 4, true,
       true},
      {"f32_bf16state_K32_V16_W2_nobias", DType::kFloat32, DType::kBFloat16, DType::kInt32, 2, 4, 32, 16, 2, false,
       false},
      {"f16_K64_V40_W5_reorder", DType::kFloat16, DType::kFloat16, DType::kInt32, 2, 2, 64, 40, 5, true, true}};
  for (const TCase& tc : cases) {
    SCOPED_TRACE(::testing::Message() << "case " << tc.name << " backend " << capture::backend_name(be));
    Rng r(9100 + tc.K + tc.V + tc.W);
    AttnProblem base;
    base.H = tc.H; base.HV = tc.HV; base.K = tc.K; base.V = tc.V; base.W = tc.W;
    base.act = tc.act; base.ssm_dtype = tc.ssm; base.index_dtype = tc.idx;
    base.reorder = tc.reorder; base.has_bias = tc.bias;
    base.cols = kCols; base.conv_layout = SpecConvLayout::kPerToken; base.conv_rows_extra = 1;
    base.num_slots = kSlots; base.null_id = kNull;
    alloc_params_and_pools(base, r);
    fill_normal(base.conv_pool, r, 1.0);  // garbage: the prefills start without initial state
    fill_normal(base.ssm_pool, r, 1.0);
    Side cpu = make_side(base, kCols, r), gpu = cpu;
    int cur = 0;
    std::vector<int64_t> count(kSeqs, 0);  // the replay of each sequence's next step
    std::vector<std::vector<int64_t>> path(kSeqs, std::vector<int64_t>(kCols, -1)), par_of(kSeqs);
    for (int step = 0; step < 7; ++step) {
      SCOPED_TRACE(::testing::Message() << "step " << step);
      if (step == 3) {  // a count far above the log (clamped: 5 rows), a path ending at a row outside it
        count[1] = 1000;
        for (int64_t j = 0; j < kCols; ++j) path[1][j] = j;
        if (count[2] < kCols) path[2][count[2]++] = kCols + 7;
      }
      std::vector<int64_t> lens(kSeqs);
      int64_t total = 0;
      for (int64_t i = 0; i < kSeqs; ++i) {
        const char k = kPlan[step][i];
        lens[i] = k == 'p' ? r.randint(1, step == 5 ? 20 : 7) : k == 'd' ? 1 : k == 'e' ? 0 : r.randint(1, kCols);
        total += lens[i];
      }
      AttnProblem p = base;
      p.num_actual = total - 1;  // sequence 4's last token at a row outside the buffer
      p.rows_alloc = p.num_actual + 3;
      const std::vector<int64_t> perm = random_perm(p.num_actual, r);
      std::vector<int64_t> ns_replay, parents;
      std::vector<std::vector<int64_t>> ns_path, sp_path;
      bool tree = false;
      int64_t next = 0;
      for (int64_t i = 0; i < kSeqs; ++i) {
        const char k = kPlan[step][i];
        AttnSeq s;
        for (int64_t t = 0; t < lens[i]; ++t)
          s.rows.push_back(i == 4 && t + 1 == lens[i] ? p.num_actual + 1 : perm[next++]);
        s.spec = k == 'v' || k == 't' || k == 'e';
        const int64_t slot = i == 5 ? kNull : i;
        if (s.spec) {
          s.cols.assign(kCols, slot);
          s.nacc = count[i];
          sp_path.push_back(path[i]);
          par_of[i] = k == 't' ? random_tree(r, lens[i]) : std::vector<int64_t>{};
          for (int64_t t = 0; t < lens[i]; ++t) parents.push_back(k == 't' ? par_of[i][t] : t - 1);
          tree = tree || k == 't';
        } else {
          s.slot = slot;
          s.has_init = step > 0 && !(step == 5 && i == 3);  // (sequence 3 at step 5: its count is ignored)
          ns_replay.push_back(count[i]);
          ns_path.push_back(path[i]);
        }
        p.seqs.push_back(s);
      }
      AttnSeq ns_pad, sp_pad;  // zero-length graph padding
      ns_pad.slot = -1;
      sp_pad.spec = true;
      sp_pad.cols.assign(kCols, -1);
      p.seqs.push_back(ns_pad);
      p.seqs.push_back(sp_pad);
      ns_replay.push_back(3);
      ns_path.push_back(std::vector<int64_t>(kCols, 0));
      sp_path.push_back(std::vector<int64_t>(kCols, 0));
      build_meta(p);
      p.qkvz = Buf(p.act, {p.rows_alloc, p.qkvz_width()});
      p.ba = Buf(p.act, {p.rows_alloc, 2 * p.HV});
      fill_normal(p.qkvz, r, 1.0);
      fill_normal(p.ba, r, 1.0);
      Buf ns_rep_b = index_buf(ns_replay, tc.idx), ns_path_b = index_buf2(ns_path, kCols, tc.idx);
      Buf sp_path_b = index_buf2(sp_path, kCols, tc.idx), par_b = index_buf(parents, tc.idx);
      Extra x;
      if (step > 0) x.ns_replay = &ns_rep_b;
      if (step >= 2) x.ns_path = &ns_path_b;
      if (step >= 2 && step != 4) x.sp_path = &sp_path_b;
      if (tree) x.parents = &par_b;
      const Side before = gpu;
      Out oc, og;
      PROP_ASSERT_OK(run_side(Backend::kCPU, p, cpu, cur, x, &oc));
      PROP_ASSERT_OK(run_side(be, p, gpu, cur, x, &og));
      expect_match(p, gpu, before, cpu, og, oc, cur);
      if (HasFailure()) return;
      cur = 1 - cur;
      for (int64_t i = 0; i < kSeqs; ++i) {  // what the next step replays
        const char k = kPlan[step][i];
        std::fill(path[i].begin(), path[i].end(), -1);
        count[i] = 0;
        if (k == 'v') {
          count[i] = r.randint(1, lens[i]);
          for (int64_t j = 0; j < count[i]; ++j) path[i][j] = j;
        } else if (k == 't') {
          const std::vector<int64_t> acc = path_to(par_of[i], r.randint(0, lens[i] - 1));
          count[i] = static_cast<int64_t>(acc.size());
          std::copy(acc.begin(), acc.end(), path[i].begin());
        }
      }
    }
  }
}

TEST_P(CudaDeferredAttention, HostileMetadataMatchesTheCpu) {
  const Backend be = GetParam();
  PROP_SKIP_IF_UNAVAILABLE(be);
  Rng r(9200);
  for (int trial = 0; trial < 6; ++trial) {
    SCOPED_TRACE(::testing::Message() << "trial " << trial);
    AttnProblem p;
    constexpr int64_t kLog = 3;
    HostileIndex hx = hostile_deferred_batch(p, r, kLog);  // slots 5..7 must stay untouched
    const Extra x{&hx.ns_replay, &hx.ns_path, &hx.sp_path, &hx.parents};
    Side cpu = make_side(p, kLog, r), gpu = cpu;
    const Side before = gpu;
    Out oc, og;
    PROP_ASSERT_OK(run_side(Backend::kCPU, p, cpu, 0, x, &oc));
    PROP_ASSERT_OK(run_side(be, p, gpu, 0, x, &og));
    expect_match(p, gpu, before, cpu, og, oc, 0);
    for (int64_t s = 5; s < p.num_slots; ++s) {
      EXPECT_EQ(bit_diff(gpu.conv, s * gpu.conv.row_elems(), before.conv, s * before.conv.row_elems(),
                         gpu.conv.row_elems()), "") << "conv slot " << s;
      expect_slot_close(gpu.ssm, s, before.ssm, s, 0.0, "unnamed ssm slot");
    }
    if (HasFailure()) return;
  }
}

// The tree problem: float32, cols 16; slot 0 holds a verify sequence of 9 tokens forming a tree
// (depth 4, two roots), slot 1 one of 2 tokens (a chain); both replay rows of their logged step.
constexpr int64_t kTreeCols = 16, kTreeRows = 11;
const std::vector<int64_t> kTree = {-1, 0, 0, 1, 1, 2, 3, 5, -1};
// The batch's token parents: slot 0's 9 tokens (parents), then slot 1's chain of 2.
std::vector<int64_t> batch_parents(std::vector<int64_t> parents) {
  parents.insert(parents.end(), {-1, 0});
  return parents;
}
struct TreeCase {
  AttnProblem p;
  Side side;
  std::vector<int64_t> perm;
  AttnSeq s0, s1;
};
TreeCase make_tree_case(Rng& r) {
  TreeCase c;
  AttnProblem& p = c.p;
  p.act = DType::kFloat32; p.ssm_dtype = DType::kFloat32; p.cols = kTreeCols;
  p.conv_layout = SpecConvLayout::kPerToken; p.conv_rows_extra = 0;
  p.num_slots = 2;
  alloc_params_and_pools(p, r);
  fill_normal(p.conv_pool, r, 1.0);
  fill_normal(p.ssm_pool, r, 0.3);
  c.side = make_side(p, kTreeCols, r);
  p.rows_alloc = p.num_actual = kTreeRows;
  p.qkvz = Buf(p.act, {kTreeRows, p.qkvz_width()});
  p.ba = Buf(p.act, {kTreeRows, 2 * p.HV});
  fill_normal(p.qkvz, r, 1.0);
  fill_normal(p.ba, r, 1.0);
  c.perm = random_perm(kTreeRows, r);
  c.s0.spec = c.s1.spec = true;
  for (int64_t t = 0; t < 9; ++t) c.s0.rows.push_back(c.perm[t]);
  c.s1.rows = {c.perm[9], c.perm[10]};
  c.s0.cols.assign(kTreeCols, 0);
  c.s1.cols.assign(kTreeCols, 1);
  c.s0.nacc = 3;
  c.s1.nacc = 2;
  return c;
}
// One step of sequences `seqs` (parents: per spec local token, or a chain) on a copy of c's memory.
struct TreeRun {
  Side side;
  Out out;
};
TreeRun run_tree(Backend be, const TreeCase& c, std::vector<AttnSeq> seqs, const std::vector<int64_t>* parents) {
  AttnProblem p = c.p;
  p.seqs = std::move(seqs);
  build_meta(p);
  TreeRun t{c.side, {}};
  Buf par;
  Extra x;
  if (parents) x.parents = &(par = index_buf(*parents));
  const Status st = run_side(be, p, t.side, 0, x, &t.out);
  EXPECT_TRUE(st.ok()) << st.message();
  return t;
}

// Every output, the committed state and window and the logs written: the same bytes in runs a and b.
void expect_same_bytes(const TreeRun& a, const TreeRun& b, const char* what) {
  EXPECT_EQ(byte_diff(a.out.core, b.out.core), "") << what << ": core_attn_out";
  EXPECT_EQ(byte_diff(a.out.z, b.out.z), "") << what << ": z";
  EXPECT_EQ(byte_diff(a.side.ssm, b.side.ssm), "") << what << ": ssm_state (committed)";
  EXPECT_EQ(byte_diff(a.side.conv, b.side.conv), "") << what << ": conv_state (committed window)";
  EXPECT_EQ(byte_diff(a.side.rec[1], b.side.rec[1]), "") << what << ": verify_log_out";
  EXPECT_EQ(byte_diff(a.side.cvl[1], b.side.cvl[1]), "") << what << ": conv_log_out";
}

TEST_P(CudaDeferredAttention, TreeNodesEqualTheirPaths) {
  const Backend be = GetParam();
  PROP_SKIP_IF_UNAVAILABLE(be);
  Rng r(9300);
  const TreeCase c = make_tree_case(r);
  const std::vector<int64_t> parents = batch_parents(kTree);
  const TreeRun tg = run_tree(be, c, {c.s0, c.s1}, &parents), tc = run_tree(Backend::kCPU, c, {c.s0, c.s1}, &parents);
  AttnProblem p = c.p;
  p.seqs = {c.s0, c.s1};
  expect_match(p, tg.side, c.side, tc.side, tg.out, tc.out, 0);
  const int64_t row = p.HV * p.V;
  for (int64_t t = 0; t < 9; ++t) {
    AttnSeq lin = c.s0;
    lin.rows.clear();
    for (int64_t u : path_to(kTree, t)) lin.rows.push_back(c.perm[u]);
    const TreeRun lg = run_tree(be, c, {lin, c.s1}, nullptr);
    const int64_t at = c.perm[t] * row;
    EXPECT_LE(rel_l2(tg.out.core, lg.out.core, {{at, row}}, {{at, row}}), 1e-5)
        << "node " << t << " vs linear verify of its path of " << lin.rows.size();
  }
  std::vector<int64_t> chain;  // a chain-shaped tree is linear verify, byte for byte
  for (int64_t t = 0; t < 9; ++t) chain.push_back(t - 1);
  chain = batch_parents(chain);
  expect_same_bytes(run_tree(be, c, {c.s0, c.s1}, &chain), run_tree(be, c, {c.s0, c.s1}, nullptr),
                    "chain-shaped tree against linear verify");
}

TEST_P(CudaDeferredAttention, IdenticalBytesRunAfterRun) {
  const Backend be = GetParam();
  PROP_SKIP_IF_UNAVAILABLE(be);
  Rng r(9400);
  const TreeCase c = make_tree_case(r);
  const std::vector<int64_t> parents = batch_parents(kTree);
  expect_same_bytes(run_tree(be, c, {c.s0, c.s1}, &parents), run_tree(be, c, {c.s0, c.s1}, &parents),
                    "the same call twice");
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaDeferredAttention, ::testing::ValuesIn(cuda_deferred_backends()),
                         [](const ::testing::TestParamInfo<Backend>& i) { return capture::backend_name(i.param); });

}  // namespace
}  // namespace gdn::prop
