// The deferred-commit mode and token trees of gated_delta_rule_recurrent on CUDA (docs/contract.md §7),
// against the CPU reference, on each CUDA backend of the mode (the planner's choice, each kernel
// form forced); skipped without a GPU. Tolerances: docs/contract.md §6 (relative L2 1e-5 with
// float32 activations and state, else 1e-2); logs (float32) 1e-5; untouched entries bit for bit.
//   CudaDeferred.TrajectoriesMatchTheCpu: five sequences (one padding by the null block) through a
//     prefill without initial state (up to 24 tokens: more than a chunk), verify steps of 1..4
//     tokens with accepted counts 1..T, a plain decode, a continued prefill replaying the last
//     verify step, more verify steps and a final decode, run independently on the CPU and on CUDA:
//     every step's outputs, the committed states, the written log entries are equal within the
//     tolerances, other log entries and the null slot untouched. Float32 / bf16 / fp16 activations
//     and state, both layouts ("vk" dense, "kv" with a padded slot stride), K 32 / 48 / 64 / 128 / 256,
//     V 8 / 16 / 40 / 64 (partial row blocks), head ratios 1, 2, 4, the gate forms (decay and beta
//     given, no l2 norm, float32 a, b beside bf16 q); the K = 128 "vk" cases take the lean form on
//     the planner's choice.
//   CudaDeferred.TreesEqualTheirPaths: a chain-shaped tree is linear verify byte for byte (4 and 20
//     tokens: one chunk and several); random trees (up to 16 nodes and depth 8, one of 24 nodes,
//     parents outside [0, t)) equal the CPU's trees, each node equals CUDA linear verify of its
//     root-to-node path, and committing an accepted path equals the CPU's commit.
//   CudaDeferred.ChainShapedTreeAcrossKernels: at K = 128 (linear verify in the lean form, trees in
//     the general kernel) a chain-shaped tree equals linear verify within 1e-5 (outputs, committed
//     state, log).
//   CudaDeferred.IdenticalBytesRunAfterRun: a tree step and a linear step, twice each.
#include <algorithm>
#include <utility>

#include "prop_deferred.h"

namespace gdn::prop {
namespace {

class CudaDeferred : public ::testing::TestWithParam<Backend> {};

double tol_of(DType act, DType state) { return act == DType::kFloat32 && state == DType::kFloat32 ? 1e-5 : 1e-2; }

struct TCase {
  const char* name;
  DType act, state;
  StateLayout layout;
  int64_t H, HV, K, V;
  DeferredOpts gates;  // gate forms only
  bool gates_f32;      // a, b in float32 (else the activation dtype)
};

std::vector<TCase> traj_cases() {
  DeferredOpts plain, forms;
  forms.decay_given = forms.beta_given = forms.no_l2norm = true;
  return {{"f32_vk_K32", DType::kFloat32, DType::kFloat32, StateLayout::kVK, 2, 4, 32, 16, plain, false},
          {"bf16_kv_K48", DType::kBFloat16, DType::kBFloat16, StateLayout::kKV, 1, 4, 48, 40, plain, false},
          {"f16_vk_K128", DType::kFloat16, DType::kFloat16, StateLayout::kVK, 2, 2, 128, 64, plain, false},
          {"bf16_f32state_vk_K128", DType::kBFloat16, DType::kFloat32, StateLayout::kVK, 1, 2, 128, 128, plain, false},
          {"bf16_f32state_K256_abf32", DType::kBFloat16, DType::kFloat32, StateLayout::kVK, 1, 4, 256, 8, plain, true},
          {"f32_vk_K128_forms", DType::kFloat32, DType::kFloat32, StateLayout::kVK, 2, 4, 128, 40, forms, false},
          {"bf16_kv_K64_forms", DType::kBFloat16, DType::kBFloat16, StateLayout::kKV, 2, 2, 64, 16, forms, true}};
}

TEST_P(CudaDeferred, TrajectoriesMatchTheCpu) {
  const Backend be = GetParam();
  PROP_SKIP_IF_UNAVAILABLE(be);
  constexpr int64_t n = 5, kCols = 4;
  const int64_t null_id = n - 1;  // sequence 4's slot: padding
  for (const TCase& tc : traj_cases()) {
    SCOPED_TRACE(::testing::Message() << "case " << tc.name << " backend " << capture::backend_name(be));
    Rng r(8100 + tc.K + tc.V);
    const double tol = tol_of(tc.act, tc.state);
    // "vk" pools dense (the vector loads), "kv" pools with a padded slot stride (element loads)
    Buf pool_c = make_ssm_pool(tc.state, n, tc.HV, tc.K, tc.V, tc.layout, tc.layout == StateLayout::kKV ? 3 : 0);
    fill_normal(pool_c, r, 1.0);  // garbage: the prefill starts without initial state
    Buf pool_g = pool_c;
    const Buf pool0 = pool_c;
    Buf logs_c[2] = {deferred_log(n, kCols, tc.HV, tc.K, tc.V), deferred_log(n, kCols, tc.HV, tc.K, tc.V)};
    fill_log(logs_c[1], tc.K, r);  // (never replayed: replay counts start at 0)
    Buf logs_g[2] = {logs_c[0], logs_c[1]};
    int cur = 0;
    std::vector<int64_t> replay(n, 0), slot_ids(n);
    for (int64_t i = 0; i < n; ++i) slot_ids[i] = i;
    Buf slots = index_buf(slot_ids, DType::kInt64);
    // 0 prefill, 1-2 verify, 3 decode, 4 verify, 5 continued prefill, 6 verify, 7 decode
    for (int step = 0; step <= 7; ++step) {
      const bool prefill = step == 0 || step == 5, decode = step == 3 || step == 7, verify = !prefill && !decode;
      std::vector<int64_t> lens(n);
      for (int64_t i = 0; i < n; ++i) lens[i] = prefill ? r.randint(1, 24) : decode ? 1 : r.randint(1, kCols);
      const std::vector<int64_t> qsl_v = prefix_sum(lens);
      Buf qsl = index_buf(qsl_v), nacc = index_buf(replay);
      GdrIn in = make_gdr_in(r, qsl_v.back(), tc.H, tc.HV, tc.K, tc.V, tc.act, DType::kFloat32);
      if (tc.gates_f32) {
        Buf a(DType::kFloat32, in.a.shape()), b(DType::kFloat32, in.b.shape());
        copy_elems(a, 0, in.a, 0, a.numel());
        copy_elems(b, 0, in.b, 0, b.numel());
        in.a = a, in.b = b;
      }
      shape_gate_inputs(in, tc.gates);
      Buf no_init = bool_buf(std::vector<bool>(n, false));
      DeferredOpts op = tc.gates;
      op.layout = tc.layout;
      op.null_id = null_id;
      op.log_tokens = verify;
      op.has_init = step == 0 ? &no_init : nullptr;
      Buf o_c(tc.act, {qsl_v.back(), tc.HV, tc.V}), o_g = o_c;
      const Buf log_before = logs_g[1 - cur];
      SCOPED_TRACE(::testing::Message() << "step " << step);
      PROP_ASSERT_OK(
          run_deferred_on(Backend::kCPU, in, pool_c, qsl, slots, nacc, o_c, logs_c[cur], logs_c[1 - cur], op));
      PROP_ASSERT_OK(run_deferred_on(be, in, pool_g, qsl, slots, nacc, o_g, logs_g[cur], logs_g[1 - cur], op));
      EXPECT_LE(rel_l2(o_g, o_c), tol) << "outputs";
      for (int64_t t = qsl_v[n - 1]; t < qsl_v[n]; ++t)
        for (int64_t e = 0; e < tc.HV * tc.V; ++e) EXPECT_EQ(o_g.get(t * tc.HV * tc.V + e), 0.0) << "padding output";
      for (int64_t s = 0; s < n; ++s)
        expect_slot_close(pool_g, s, s == null_id ? pool0 : pool_c, s, s == null_id ? 0.0 : tol, "committed state");
      expect_logs(logs_g[1 - cur], logs_c[1 - cur], log_before,
                  logged_entries(lens, slot_ids, n, kCols, verify, null_id), 1e-5, "written log");
      if (HasFailure()) return;
      if (verify) {
        cur = 1 - cur;
        for (int64_t i = 0; i < n; ++i) replay[i] = r.randint(1, lens[i]);
      } else {
        std::fill(replay.begin(), replay.end(), 0);
      }
    }
  }
}

// The tree tests' problem: float32, H 1, HV 2, K 64 (dense), V 40 (a partial second row block of the
// four-warp form); a committed state per slot and a log holding a previous step of 4 tokens.
constexpr int64_t kTH = 1, kTHV = 2, kTK = 64, kTV = 40, kTreeCols = 24;
struct TreeCase {
  Buf pool = make_ssm_pool(DType::kFloat32, 3, kTHV, kTK, kTV, StateLayout::kVK);
  Buf log_in = deferred_log(3, kTreeCols, kTHV, kTK, kTV), log_out = deferred_log(3, kTreeCols, kTHV, kTK, kTV);
  Buf slots = index_buf({0, 1});
};
TreeCase make_tree_case(Rng& r, int64_t K = kTK) {
  TreeCase c{make_ssm_pool(DType::kFloat32, 3, kTHV, K, kTV, StateLayout::kVK),
             deferred_log(3, kTreeCols, kTHV, K, kTV), deferred_log(3, kTreeCols, kTHV, K, kTV)};
  fill_normal(c.pool, r, 0.5);
  fill_log(c.log_in, K, r);
  fill_normal(c.log_out, r, 1.0);
  return c;
}

struct StepOut {
  Buf o, pool, log;
};
// One deferred step of `in` on a copy of c: replay counts, path rows (or none), parents (or a chain).
StepOut tree_step(Backend be, const TreeCase& c, GdrIn& in, const std::vector<int64_t>& lens,
                  const std::vector<int64_t>& replay, const std::vector<std::vector<int64_t>>* path,
                  const std::vector<int64_t>* parents, bool log_tokens = true) {
  StepOut s{Buf(DType::kFloat32, {in.T, kTHV, kTV}), c.pool, c.log_out};
  Buf qsl = index_buf(prefix_sum(lens)), nacc = index_buf(replay), slots = c.slots, log_in = c.log_in, pb, par;
  DeferredOpts op;
  op.log_tokens = log_tokens;
  if (path) op.path = &(pb = index_buf2(*path, kTreeCols));
  if (parents) op.parents = &(par = index_buf(*parents, DType::kInt64));
  const Status st = run_deferred_on(be, in, s.pool, qsl, slots, nacc, s.o, log_in, s.log, op);
  EXPECT_TRUE(st.ok()) << st.message();
  return s;
}

// Random trees of lens[i] nodes, depth <= 8, parents before children (per sequence, concatenated).
std::vector<int64_t> random_trees(Rng& r, const std::vector<int64_t>& lens, std::vector<std::vector<int64_t>>* par_of) {
  std::vector<int64_t> parents;
  par_of->assign(lens.size(), {});
  for (size_t i = 0; i < lens.size(); ++i) {
    std::vector<int64_t> depth;
    for (int64_t t = 0; t < lens[i]; ++t) {
      int64_t p = t == 0 ? -1 : r.randint(-1, t - 1);
      while (p >= 0 && depth[p] >= 7) p = (*par_of)[i][p];
      (*par_of)[i].push_back(p);
      depth.push_back(p < 0 ? 0 : depth[p] + 1);
      parents.push_back(p);
    }
  }
  return parents;
}

// Two sequences of lens tokens (float32, K), replaying 2 and 4 logged rows: linear verify, then the
// same tokens as a chain-shaped tree (token t's parent t - 1 in each sequence).
std::pair<StepOut, StepOut> linear_and_chain_tree(Backend be, const TreeCase& c, Rng& r, int64_t K,
                                                  const std::vector<int64_t>& lens) {
  std::vector<int64_t> chain;
  for (int64_t l : lens)
    for (int64_t t = 0; t < l; ++t) chain.push_back(t - 1);
  GdrIn in = make_gdr_in(r, lens[0] + lens[1], kTH, kTHV, K, kTV, DType::kFloat32, DType::kFloat32);
  StepOut lin = tree_step(be, c, in, lens, {2, 4}, nullptr, nullptr);
  return {std::move(lin), tree_step(be, c, in, lens, {2, 4}, nullptr, &chain)};
}

TEST_P(CudaDeferred, TreesEqualTheirPaths) {
  const Backend be = GetParam();
  PROP_SKIP_IF_UNAVAILABLE(be);
  Rng r(8300);
  const TreeCase c = make_tree_case(r);
  for (const std::vector<int64_t>& lens : {std::vector<int64_t>{3, 4}, std::vector<int64_t>{20, 2}}) {
    const auto [lin, tr] = linear_and_chain_tree(be, c, r, kTK, lens);
    EXPECT_EQ(byte_diff(tr.o, lin.o), "") << "chain of " << lens[0] << ": outputs";
    EXPECT_EQ(byte_diff(tr.pool, lin.pool), "") << "chain of " << lens[0] << ": committed state";
    EXPECT_EQ(byte_diff(tr.log, lin.log), "") << "chain of " << lens[0] << ": log";
  }
  for (int trial = 0; trial < 5; ++trial) {
    SCOPED_TRACE(::testing::Message() << "tree " << trial);
    std::vector<int64_t> lens = {r.randint(1, 16), trial == 4 ? 24 : r.randint(1, 16)};
    std::vector<std::vector<int64_t>> par_of;
    std::vector<int64_t> parents = random_trees(r, lens, &par_of);
    if (trial == 3) {  // parents outside [0, t): roots
      parents[lens[0] > 1 ? 1 : 0] = int64_t{1} << 40;
      parents.back() = -7;
      par_of[0][lens[0] > 1 ? 1 : 0] = -1;
      par_of[1].back() = -1;
    }
    GdrIn in = make_gdr_in(r, lens[0] + lens[1], kTH, kTHV, kTK, kTV, DType::kFloat32, DType::kFloat32);
    const std::vector<int64_t> replay = {r.randint(0, 4), r.randint(0, 4)};
    const StepOut tg = tree_step(be, c, in, lens, replay, nullptr, &parents);
    const StepOut tc = tree_step(Backend::kCPU, c, in, lens, replay, nullptr, &parents);
    EXPECT_LE(rel_l2(tg.o, tc.o), 1e-5) << "tree outputs vs the CPU";
    for (int64_t s = 0; s < 3; ++s) expect_slot_close(tg.pool, s, tc.pool, s, 1e-5, "committed state vs the CPU");
    EXPECT_LE(rel_l2(tg.log, tc.log), 1e-5) << "log vs the CPU";
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t t = 0; t < lens[i]; ++t) {
        std::vector<int64_t> path;
        for (int64_t u = t; u >= 0; u = par_of[i][u]) path.insert(path.begin(), u);
        const int64_t base = i == 0 ? 0 : lens[0], plen = static_cast<int64_t>(path.size());
        std::vector<int64_t> rows;  // the other sequence keeps its first token
        if (i == 1) rows.push_back(0);
        for (int64_t u : path) rows.push_back(base + u);
        if (i == 0) rows.push_back(lens[0]);
        GdrIn pin = slice_tokens(in, rows);
        const StepOut lin =
            tree_step(be, c, pin, i == 0 ? std::vector<int64_t>{plen, 1} : std::vector<int64_t>{1, plen}, replay,
                      nullptr, nullptr);
        const int64_t last = i == 0 ? plen - 1 : plen, row = kTHV * kTV;
        const double e = rel_l2(tg.o, lin.o, {{(base + t) * row, row}}, {{last * row, row}});
        EXPECT_LE(e, 1e-5) << "sequence " << i << " node " << t << " vs linear verify of its path of " << plen;
        if (i == 1 && t + 1 == lens[1]) {  // commit that path, then a decode: CUDA as the CPU
          std::vector<std::vector<int64_t>> acc(2, std::vector<int64_t>(kTreeCols, -1));
          for (int64_t j = 0; j < plen; ++j) acc[1][j] = path[j];
          GdrIn dec = make_gdr_in(r, 2, kTH, kTHV, kTK, kTV, DType::kFloat32, DType::kFloat32);
          TreeCase after_g{tg.pool, tg.log, deferred_log(3, kTreeCols, kTHV, kTK, kTV), c.slots};
          TreeCase after_c{tc.pool, tc.log, deferred_log(3, kTreeCols, kTHV, kTK, kTV), c.slots};
          const StepOut dg = tree_step(be, after_g, dec, {1, 1}, {0, plen}, &acc, nullptr, false);
          const StepOut dc = tree_step(Backend::kCPU, after_c, dec, {1, 1}, {0, plen}, &acc, nullptr, false);
          EXPECT_LE(rel_l2(dg.o, dc.o), 1e-5) << "decode after committing the path";
          expect_slot_close(dg.pool, 1, dc.pool, 1, 1e-5, "state after committing the path");
        }
      }
    if (HasFailure()) return;
  }
}

// K = 128 dense state: linear verify takes the lean form, a chain-shaped tree the general kernel
// (docs/contract.md §7): equal within the tolerances of §6 (float32: relative L2 1e-5).
TEST_P(CudaDeferred, ChainShapedTreeAcrossKernels) {
  const Backend be = GetParam();
  PROP_SKIP_IF_UNAVAILABLE(be);
  Rng r(8500);
  constexpr int64_t K = 128;
  const TreeCase c = make_tree_case(r, K);
  const auto [lin, tr] = linear_and_chain_tree(be, c, r, K, {5, 3});
  EXPECT_LE(rel_l2(tr.o, lin.o), 1e-5) << "outputs";
  for (int64_t s = 0; s < 2; ++s) expect_slot_close(tr.pool, s, lin.pool, s, 1e-5, "committed state");
  expect_slot_close(tr.pool, 2, lin.pool, 2, 0.0, "the slot no sequence names");
  EXPECT_LE(rel_l2(tr.log, lin.log), 1e-5) << "log";
}

TEST_P(CudaDeferred, IdenticalBytesRunAfterRun) {
  const Backend be = GetParam();
  PROP_SKIP_IF_UNAVAILABLE(be);
  Rng r(8400);
  const TreeCase c = make_tree_case(r);
  const std::vector<int64_t> lens = {16, 9};
  std::vector<std::vector<int64_t>> par_of;
  const std::vector<int64_t> parents = random_trees(r, lens, &par_of);
  GdrIn in = make_gdr_in(r, 25, kTH, kTHV, kTK, kTV, DType::kFloat32, DType::kFloat32);
  for (const std::vector<int64_t>* par : {&parents, static_cast<const std::vector<int64_t>*>(nullptr)}) {
    const StepOut a = tree_step(be, c, in, lens, {3, 4}, nullptr, par),
                  b = tree_step(be, c, in, lens, {3, 4}, nullptr, par);
    EXPECT_EQ(byte_diff(a.o, b.o), "") << (par ? "tree" : "linear") << " outputs";
    EXPECT_EQ(byte_diff(a.pool, b.pool), "") << (par ? "tree" : "linear") << " committed state";
    EXPECT_EQ(byte_diff(a.log, b.log), "") << (par ? "tree" : "linear") << " log";
  }
}

// The lean form's two row layouts give the same bytes: 16-row warps reading their token inputs from
// deferred_prep_kernel (the same prep_regs over the same 16 lanes) and 8-row warps preparing their
// own, for linear verify steps at K = 128, V = 48 (each row's operations are the same in both).
TEST(CudaDeferredLean, SixteenRowWarpsAndPrepKernelGiveTheEightRowBytes) {
  const Backend wide = Backend(Backend::kCUDA, cuda::plan::Path::kDeferredLean16),
                narrow = Backend(Backend::kCUDA, cuda::plan::Path::kDeferredLean8);
  PROP_SKIP_IF_UNAVAILABLE(wide);
  constexpr int64_t H = 1, HV = 2, K = 128, V = 48, cols = 8;
  Rng r(8500);
  for (DType act : {DType::kFloat32, DType::kBFloat16})
    for (const std::vector<int64_t>& lens : {std::vector<int64_t>{3, 4}, std::vector<int64_t>{1, 8}}) {
      GdrIn in = make_gdr_in(r, lens[0] + lens[1], H, HV, K, V, act, act);
      Buf pool = make_ssm_pool(DType::kFloat32, 3, HV, K, V, StateLayout::kVK);
      fill_normal(pool, r, 0.5);
      Buf log_in = deferred_log(3, cols, HV, K, V), log_out = deferred_log(3, cols, HV, K, V);
      fill_log(log_in, K, r);
      fill_normal(log_out, r, 1.0);
      Buf qsl = index_buf(prefix_sum(lens)), slots = index_buf({0, 1}), nacc = index_buf({2, 4});
      auto step = [&](Backend be, Buf& o, Buf& pl, Buf& lo) {
        const Status st = run_deferred_on(be, in, pl, qsl, slots, nacc, o, log_in, lo, DeferredOpts{});
        EXPECT_TRUE(st.ok()) << st.message();
      };
      Buf oa(act, {in.T, HV, V}), ob = oa, pa = pool, pb = pool, la = log_out, lb = log_out;
      step(wide, oa, pa, la);
      step(narrow, ob, pb, lb);
      EXPECT_EQ(byte_diff(oa, ob), "") << "outputs";
      EXPECT_EQ(byte_diff(pa, pb), "") << "committed state";
      EXPECT_EQ(byte_diff(la, lb), "") << "log";
    }
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaDeferred, ::testing::ValuesIn(cuda_deferred_backends()),
                         [](const ::testing::TestParamInfo<Backend>& i) { return capture::backend_name(i.param); });

}  // namespace
}  // namespace gdn::prop
