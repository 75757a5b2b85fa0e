// The deferred mode's algebra on tensor cores (forced path deferred_lean_alg: deferred_mma.cuh, which
// takes token trees) against the CPU reference (docs/contract.md §7), float32 activations, K = 128,
// V = 64, float32 state (relative L2 1e-5) and bfloat16 state (1e-2: the committed state rounded
// once on both sides); the slot no sequence names bit for bit; skipped without a GPU:
//   trees whose replay plus tokens fill the chunk (16: the algebra) and overflow it (17: the general
//   kernel after it), chains (the recurrence: the planner never gives them the algebra), a
//   zero-length step (its replay committed), a sequence without an initial state (nothing
//   replayed), and a draft with a NaN input (one value row of the last token; in a chain and in a
//   tree), whose output there is NaN while the earlier outputs and the committed state (the state
//   before the step's tokens) stay the CPU's.
#include <cmath>

#include "prop_deferred.h"

namespace gdn::prop {
namespace {

constexpr int64_t kH = 1, kHV = 2, kK = 128, kV = 64, kCols = 24;

struct AlgCase {
  const char* name;
  std::vector<int64_t> lens, replay;
  bool tree, no_init, nan_draft;
};

// Random parents (depth <= 8, parents before children) per sequence, concatenated; chains: t - 1.
std::vector<int64_t> parents_of(Rng& r, const std::vector<int64_t>& lens, bool tree) {
  std::vector<int64_t> out;
  for (int64_t n : lens) {
    std::vector<int64_t> depth;
    for (int64_t t = 0; t < n; ++t) {
      int64_t p = t - 1;
      if (tree && t > 0) {
        p = r.randint(-1, t - 1);
        while (p >= 0 && depth[p] >= 7) p = out[out.size() - t + p];
      }
      depth.push_back(p < 0 ? 0 : depth[p] + 1);
      out.push_back(p);
    }
  }
  return out;
}

TEST(CudaDeferredAlgebra, MatchesTheCpu) {
  const Backend alg = Backend(Backend::kCUDA, cuda::plan::Path::kDeferredLeanAlg);
  PROP_SKIP_IF_UNAVAILABLE(alg);
  const AlgCase cases[] = {
      {"chain, replay + tokens = 16 and 17", {12, 13}, {4, 4}, false, false, false},
      {"tree, replay + tokens = 16 and 17", {16, 9}, {0, 8}, true, false, false},
      {"tree of 16 nodes beside one of 17 (general kernel)", {16, 17}, {0, 0}, true, false, false},
      {"zero-length step beside a tree", {0, 7}, {5, 3}, true, false, false},
      {"no initial state", {6, 4}, {3, 2}, true, true, false},
      {"a NaN draft", {4, 5}, {3, 2}, false, false, true},
      {"a NaN draft in a tree", {5, 4}, {3, 2}, true, false, true},
  };
  Rng r(8700);
  for (const DType state : {DType::kFloat32, DType::kBFloat16})
  for (const AlgCase& c : cases) {
    SCOPED_TRACE(c.name);
    SCOPED_TRACE(state == DType::kFloat32 ? "float32 state" : "bfloat16 state");
    const double tol = state == DType::kFloat32 ? 1e-5 : 1e-2;
    const int64_t T = c.lens[0] + c.lens[1];
    GdrIn in = make_gdr_in(r, T, kH, kHV, kK, kV, DType::kFloat32, DType::kFloat32);
    if (c.nan_draft) in.v.set((c.lens[0] - 1) * kHV * kV + 5, std::nan(""));  // sequence 0's last token
    Buf pool = make_ssm_pool(state, 3, kHV, kK, kV, StateLayout::kVK);
    fill_normal(pool, r, 0.5);
    Buf log_in = deferred_log(3, kCols, kHV, kK, kV), log_out = deferred_log(3, kCols, kHV, kK, kV);
    fill_log(log_in, kK, r);
    fill_normal(log_out, r, 1.0);
    Buf qsl = index_buf(prefix_sum(c.lens)), slots = index_buf({0, 1}), nacc = index_buf(c.replay);
    Buf par = index_buf(parents_of(r, c.lens, c.tree), DType::kInt64);
    Buf init = bool_buf({!c.no_init, !c.no_init});
    DeferredOpts op;
    op.parents = &par;
    op.has_init = &init;
    Buf og(DType::kFloat32, {T, kHV, kV}), oc = og, pg = pool, pc = pool, lg = log_out, lc = log_out;
    const Status sg = run_deferred_on(alg, in, pg, qsl, slots, nacc, og, log_in, lg, op);
    const Status sc = run_deferred_on(Backend::kCPU, in, pc, qsl, slots, nacc, oc, log_in, lc, op);
    ASSERT_TRUE(sg.ok()) << sg.message();
    ASSERT_TRUE(sc.ok()) << sc.message();
    for (int64_t s = 0; s < 2; ++s) expect_slot_close(pg, s, pc, s, tol, "committed state");
    expect_slot_close(pg, 2, pc, 2, 0.0, "the slot no sequence names");
    if (c.nan_draft) {
      for (int64_t e = 0; e < pg.numel(); ++e) ASSERT_TRUE(std::isfinite(pg.get(e))) << "committed state " << e;
      const int64_t row = kHV * kV;  // sequence 1's outputs and sequence 0's before the NaN token
      EXPECT_LE(rel_l2(og, oc, {{c.lens[0] * row, c.lens[1] * row}}, {{c.lens[0] * row, c.lens[1] * row}}), tol);
      EXPECT_LE(rel_l2(og, oc, {{0, (c.lens[0] - 1) * row}}, {{0, (c.lens[0] - 1) * row}}), tol);
      EXPECT_TRUE(std::isnan(og.get((c.lens[0] - 1) * row + 5))) << "the NaN token's output at its NaN row";
      continue;
    }
    EXPECT_LE(rel_l2(og, oc), tol) << "outputs";
    EXPECT_LE(rel_l2(lg, lc), 1e-5) << "log";
  }
}

}  // namespace
}  // namespace gdn::prop
