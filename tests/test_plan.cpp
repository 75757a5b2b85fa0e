// The CUDA backend's planner (src/cuda/plan/plan.h) at its decision boundaries, on the CPU: the
// kernel chosen for the model shapes of docs/performance.md on a 132-SM card (the table's
// reference, H200), the same thresholds scaled on a 114-SM card (H100 PCIe), forced paths where
// they can and cannot run, gdn_attention's step and the deferred-commit kernel.
#include <gtest/gtest.h>

#include "cuda/plan/plan.h"

namespace gdn::cuda::plan {
namespace {

class FakeFacts final : public Facts {
 public:
  explicit FakeFacts(int sms, bool pipelined = true, bool cluster = true)
      : sms_(sms), pipelined_(pipelined), cluster_(cluster) {}
  int sms() const override { return sms_; }
  int64_t pipelined_blocks(int kTok) const override {
    (void)kTok;
    return pipelined_ ? int64_t{2} * sms_ : 0;
  }
  bool cluster_resident(bool) const override { return cluster_; }
  int lean_blocks_per_sm(bool) const override { return 20; }

 private:
  int sms_;
  bool pipelined_, cluster_;
};

// Qwen3-Next TP1 (H 16, HV 32, K = V = 128), dense aligned state, int32 metadata: every family
// can run; nseq sequences of `tok` tokens each.
Problem qwen(int64_t nseq, int tok, int state_bytes, bool spec) {
  Problem p;
  p.state_bytes = state_bytes;
  p.K = 128, p.V = 128, p.H = 16, p.HV = 32, p.r = 2;
  p.nseq = nseq;
  p.tokens = nseq * tok;
  p.spec = spec;
  p.verify_cols = spec && tok > 1;
  p.dense = true;
  p.lean_ok = true;
  p.lean_staged_ok = state_bytes == 2;
  p.lean_blocks = 128 / 8 * p.HV * nseq;
  p.pipelined_ok = true;
  p.pipelined_tiles = 4;
  return p;
}
Problem step_of(Problem p) {
  p.step = true;
  p.lean_ok = false;
  p.cluster_ok = true;
  p.cluster_blocks = 4 * p.r;
  p.pipelined_group_bufs = 6;
  return p;
}

Path path_of(const Problem& p, int sms = 132, Override f = {}, bool pipelined = true) {
  return plan_launch(p, 9, FakeFacts(sms, pipelined), f).path;
}

TEST(Plan, Float32DecodeLeanAtTheEndsPipelinedBetween) {
  EXPECT_EQ(path_of(qwen(4, 1, 4, false)), Path::kLean);        // 128 sequence-heads
  EXPECT_EQ(path_of(qwen(5, 1, 4, false)), Path::kPipelined);   // 160
  EXPECT_EQ(path_of(qwen(15, 1, 4, false)), Path::kPipelined);  // 480
  EXPECT_EQ(path_of(qwen(16, 1, 4, false)), Path::kLeanMore);   // 512 (8192 blocks: 1 to 10 waves)
  EXPECT_EQ(plan_launch(qwen(5, 1, 4, false), 9, FakeFacts(132)).tok, 1);
}

TEST(Plan, ThresholdsScaleWithTheSmCount) {
  Problem p = qwen(7, 1, 4, false);
  p.HV = 16, p.H = 8;  // 112 sequence-heads: <= 128 on 132 SMs, > 128 x 114 / 132 = 110.5 on 114
  p.lean_blocks = 16 * p.HV * p.nseq;
  EXPECT_EQ(path_of(p, 132), Path::kLean);
  EXPECT_EQ(path_of(p, 114), Path::kPipelined);
}

TEST(Plan, Float32VerifyLeanWhereItRunsElseTheRegisterWindow) {
  EXPECT_EQ(path_of(qwen(16, 4, 4, true)), Path::kLeanMore);  // 8192 blocks: more than one wave, <= 10
  EXPECT_EQ(path_of(qwen(64, 4, 4, true)), Path::kLean);      // 32768 blocks: more than 10 waves
  Problem p = qwen(8, 4, 4, true);
  p.lean_ok = false;
  EXPECT_EQ(path_of(p), Path::kPipelined);  // 256 sequence-heads
  EXPECT_EQ(plan_launch(p, 9, FakeFacts(132)).tok, 4);
  p = qwen(16, 4, 4, true);
  p.lean_ok = false;
  EXPECT_EQ(path_of(p), Path::kRegisterLarge);  // 512: the register kernel's window [512, 4096)
  p = qwen(127, 4, 4, true);
  p.lean_ok = false;
  EXPECT_EQ(path_of(p), Path::kRegisterLarge);  // 4064
  p = qwen(128, 4, 4, true);
  p.lean_ok = false;
  EXPECT_EQ(path_of(p), Path::kPipelined);  // 4096
  p = qwen(128, 5, 4, true);
  p.lean_ok = false;
  EXPECT_EQ(path_of(p), Path::kRegisterLarge);  // 5 tokens per sequence: more than the 4 staged
}

TEST(Plan, SixteenBitDecodeBands) {
  EXPECT_EQ(path_of(qwen(4, 1, 2, false)), Path::kLean);        // 128
  EXPECT_EQ(path_of(qwen(6, 1, 2, false)), Path::kPacked);      // 192: below the pipelined 384
  EXPECT_EQ(path_of(qwen(8, 1, 2, false)), Path::kLean);        // 256: the band
  EXPECT_EQ(path_of(qwen(12, 1, 2, false)), Path::kPipelined);  // 384
  EXPECT_EQ(path_of(qwen(63, 1, 2, false)), Path::kPipelined);  // 2016
  EXPECT_EQ(path_of(qwen(64, 1, 2, false)), Path::kLeanStaged);  // 2048
  Problem p = qwen(64, 1, 2, false);
  p.lean_staged_ok = false;
  EXPECT_EQ(path_of(p), Path::kPipelined);
}

TEST(Plan, SixteenBitVerify) {
  EXPECT_EQ(path_of(qwen(24, 4, 2, true)), Path::kLeanMore);  // 768 sequence-heads, 12288 blocks
  EXPECT_EQ(path_of(qwen(25, 4, 2, true)), Path::kPipelined);
  Problem p = qwen(3, 4, 2, true);  // 96: below the pipelined threshold, the mid form
  p.lean_ok = false;
  EXPECT_EQ(path_of(p), Path::kRegisterMid);
  p = qwen(5, 4, 2, true);  // 160: large; several state columns keep the packed kernel off
  p.lean_ok = false;
  EXPECT_EQ(path_of(p), Path::kRegisterLarge);
}

TEST(Plan, RegisterFormsForOtherHeadDims) {
  Problem p = qwen(2, 1, 4, false);
  p.K = 64, p.lean_ok = false, p.pipelined_ok = false;
  EXPECT_EQ(path_of(p), Path::kRegisterSmall);  // 64 sequence-heads
  p.nseq = 3, p.tokens = 3;
  EXPECT_EQ(path_of(p), Path::kRegisterLarge);
  p.state_bytes = 2, p.K = 100, p.tokens = 6;  // K padded to 128, 16-bit verify-like batch of 96
  EXPECT_EQ(path_of(p), Path::kRegisterMid);
}

TEST(Plan, LeanMoreByGridBlocks) {
  Problem p = qwen(2, 1, 4, false);  // 1024 blocks: base form; 1536: more (one-token batches above 1024)
  EXPECT_EQ(path_of(p), Path::kLean);
  p = qwen(3, 1, 4, false);
  EXPECT_EQ(path_of(p), Path::kLeanMore);
  p = qwen(1, 4, 4, true);  // verify: the more form at every size up to 1536 blocks
  EXPECT_EQ(path_of(p), Path::kLeanMore);
}

TEST(Plan, ForcedPathsRunWhereTheyCan) {
  const Problem p = qwen(4, 1, 4, false);
  EXPECT_EQ(path_of(p, 132, {Path::kPipelined}), Path::kPipelined);
  EXPECT_EQ(path_of(p, 132, {Path::kPipelined}, false), Path::kLean);  // no resident pipelined blocks
  EXPECT_EQ(path_of(p, 132, {Path::kRegisterSmall}), Path::kRegisterSmall);
  EXPECT_EQ(path_of(p, 132, {Path::kLeanStaged}), Path::kLean);   // float32: no staged form
  EXPECT_EQ(path_of(p, 132, {Path::kPacked}), Path::kLean);       // float32: no packed kernel
  EXPECT_EQ(path_of(p, 132, {Path::kRegisterMid}), Path::kLean);  // float32: no mid form
  EXPECT_EQ(path_of(p, 132, {Path::kStepCluster}), Path::kLean);  // another op's path: ignored
  Problem q = qwen(4, 8, 4, true);  // 8 tokens per sequence: forced pipelined still takes it
  q.lean_ok = false;
  EXPECT_EQ(path_of(q, 132, {Path::kPipelined}), Path::kPipelined);
  Problem k = qwen(4, 1, 2, false);
  EXPECT_EQ(path_of(k, 132, {Path::kLeanStaged}), Path::kLeanStaged);
  EXPECT_EQ(path_of(k, 132, {Path::kPacked}), Path::kPacked);
}

// Gate or norm forms other than the default (the log-space decay or beta given, no l2 norm, a or b
// in another dtype): the paths with gate-form instances (lean, lean_more, lean_staged, pipelined,
// register_small, register_large) take them by the default form's rules, with the same launch shape;
// where the default form takes register_mid or packed (no gate-form instances), the register
// kernel's large shape. Forced: a path with instances runs where it can, as for the default form;
// register_mid and packed leave the planner's choice. On a 132-SM and a 114-SM card, dense and
// strided state, with and without the lean kernel, over decode and verify batches of 1-256 sequences.
TEST(Plan, GateFormsTakeTheDefaultFormsPathsWithInstances) {
  for (Path f : {Path::kLean, Path::kLeanMore, Path::kLeanStaged, Path::kPipelined, Path::kRegisterSmall,
                 Path::kRegisterLarge})
    EXPECT_TRUE(takes_gate_forms(f)) << path_name(f);
  for (Path f : {Path::kRegisterMid, Path::kPacked, Path::kDeferred, Path::kChunk32, Path::kStepCluster})
    EXPECT_FALSE(takes_gate_forms(f)) << path_name(f);
  auto with_forms = [](Path def) { return takes_gate_forms(def) ? def : Path::kRegisterLarge; };
  for (int state_bytes : {4, 2})
    for (int tok : {1, 4})
      for (int64_t nseq : {1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 25, 63, 64, 128, 256})
        for (bool dense : {true, false})
          for (bool lean_ok : {true, false}) {
            SCOPED_TRACE(::testing::Message() << "state bytes " << state_bytes << ", tokens " << tok << ", N " << nseq
                                              << ", dense " << dense << ", lean " << lean_ok);
            Problem p = qwen(nseq, tok, state_bytes, tok > 1);
            p.dense = dense;
            p.lean_ok = lean_ok;
            Problem q = p;
            q.gate_forms = true;
            for (int sms : {132, 114}) {
              const Plan def = plan_launch(p, 9, FakeFacts(sms)), got = plan_launch(q, 9, FakeFacts(sms));
              EXPECT_EQ(got.path, with_forms(def.path))
                  << sms << " SMs, default " << path_name(def.path);
              if (got.path == def.path) EXPECT_TRUE(got.tok == def.tok && got.blocks == def.blocks);
            }
            const Path own = path_of(q);
            for (Path f : {Path::kLean, Path::kLeanMore, Path::kLeanStaged, Path::kPipelined, Path::kRegisterSmall,
                           Path::kRegisterMid, Path::kRegisterLarge, Path::kPacked, Path::kChunk32, Path::kDeferred,
                           Path::kStepCluster}) {
              // a forced path with instances that runs for the default form runs for the forms too;
              // any other leaves the planner's choice
              const bool runs = path_of(p, 132, {f}) == f;
              EXPECT_EQ(path_of(q, 132, {f}), takes_gate_forms(f) && runs ? f : own) << path_name(f);
            }
          }
  // the batches of the issue: large decode batches take the lean and pipelined kernels with the forms
  Problem p = qwen(64, 1, 2, false);  // bf16 state, 2048 sequence-heads
  p.gate_forms = true;
  EXPECT_EQ(path_of(p), Path::kLeanStaged);
  p = qwen(12, 1, 2, false);  // 384
  p.gate_forms = true;
  EXPECT_EQ(path_of(p), Path::kPipelined);
  p = qwen(64, 1, 4, false);  // float32 state, 2048 sequence-heads
  p.gate_forms = true;
  EXPECT_EQ(path_of(p), Path::kLean);
  p = qwen(128, 1, 4, false);  // 4096: the lean kernel, as for the default form
  p.gate_forms = true;
  EXPECT_EQ(path_of(p), Path::kLean);
  EXPECT_EQ(path_of(qwen(128, 1, 4, false)), Path::kLean);
  p = qwen(128, 4, 4, true);  // verify batches keep the default form's choice
  p.gate_forms = true;
  EXPECT_EQ(path_of(p), path_of(qwen(128, 4, 4, true)));
  p = qwen(6, 1, 2, false);  // 192: the default form's packed kernel
  p.gate_forms = true;
  EXPECT_EQ(path_of(p), Path::kRegisterLarge);
  EXPECT_EQ(path_of(p, 132, {Path::kPacked}), Path::kRegisterLarge);
  p = qwen(3, 4, 2, true);  // 96, 16-bit verify without the lean kernel: the default form's mid form
  p.lean_ok = false;
  EXPECT_EQ(path_of(p), Path::kRegisterMid);
  p.gate_forms = true;
  EXPECT_EQ(path_of(p), Path::kRegisterLarge);
}

TEST(Plan, StepPipelinedFromItsGroupThresholds) {
  EXPECT_EQ(path_of(step_of(qwen(5, 1, 4, false))), Path::kStepClusterLean);  // 80 groups
  EXPECT_EQ(path_of(step_of(qwen(6, 1, 4, false))), Path::kStepPipelinedPrologue);  // 96, one per block
  EXPECT_EQ(path_of(step_of(qwen(8, 4, 2, false))), Path::kStepPipelinedPrologue);  // 16-bit verify-like, 128
  EXPECT_EQ(path_of(step_of(qwen(7, 4, 2, false))), Path::kStepCluster);
  EXPECT_EQ(path_of(step_of(qwen(12, 4, 4, true))), Path::kStepPipelinedPrologue);  // float32 verify, 192
  EXPECT_EQ(path_of(step_of(qwen(11, 4, 4, true))), Path::kStepClusterLean);
  EXPECT_EQ(path_of(step_of(qwen(16, 5, 4, true))), Path::kStepClusterLean);  // more tokens than staged
}

TEST(Plan, StepPrologueWhereEveryGroupOfABlockFits) {
  // 2 x 132 resident blocks: up to 6 groups per block (264 x 6 = 1584 groups) in the prologue
  EXPECT_EQ(path_of(step_of(qwen(99, 1, 4, false))), Path::kStepPipelinedPrologue);  // 1584
  EXPECT_EQ(path_of(step_of(qwen(100, 1, 4, false))), Path::kStepPipelined);         // 1600
  // verify batches alike
  EXPECT_EQ(path_of(step_of(qwen(99, 4, 4, true))), Path::kStepPipelinedPrologue);
  EXPECT_EQ(path_of(step_of(qwen(100, 4, 4, true))), Path::kStepPipelined);
  EXPECT_EQ(path_of(step_of(qwen(99, 3, 2, true))), Path::kStepPipelinedPrologue);
  Problem p = step_of(qwen(99, 1, 4, false));
  p.pipelined_group_bufs = 0;  // no prologue instance
  EXPECT_EQ(path_of(p), Path::kStepPipelined);
}

TEST(Plan, StepClusterLanesAndOverlap) {
  Problem p = step_of(qwen(2, 4, 4, true));
  p.cluster_blocks = 12;  // a 12-block cluster: lean lanes up to 32 groups
  EXPECT_EQ(path_of(p), Path::kStepClusterLean);
  p = step_of(qwen(3, 4, 4, true));
  p.cluster_blocks = 12;  // 48 groups
  EXPECT_EQ(path_of(p), Path::kStepCluster);
  EXPECT_TRUE(plan_launch(step_of(qwen(3, 1, 4, false)), 9, FakeFacts(132)).overlap);    // 96 sequence-heads
  EXPECT_FALSE(plan_launch(step_of(qwen(4, 1, 4, false)), 9, FakeFacts(132)).overlap);   // 128
  p = step_of(qwen(2, 1, 2, false));
  EXPECT_EQ(path_of(p), Path::kStepCluster);  // 16-bit state: the plain lanes only
}

TEST(Plan, StepFallsBackToTwoLaunches) {
  Problem p = step_of(qwen(2, 1, 4, false));
  p.cluster_ok = false;
  EXPECT_EQ(path_of(p), Path::kStepTwoLaunches);
  EXPECT_EQ(plan_launch(step_of(qwen(2, 1, 4, false)), 9, FakeFacts(132, true, false)).path, Path::kStepTwoLaunches);
  EXPECT_EQ(path_of(step_of(qwen(64, 1, 4, false)), 132, {Path::kStepTwoLaunches}), Path::kStepTwoLaunches);
  EXPECT_EQ(path_of(step_of(qwen(64, 1, 4, false)), 132, {Path::kStepCluster}), Path::kStepCluster);
  EXPECT_EQ(path_of(step_of(qwen(2, 1, 4, false)), 132, {Path::kStepPipelined}), Path::kStepPipelined);
  EXPECT_EQ(path_of(step_of(qwen(2, 1, 4, false)), 132, {Path::kLean}), Path::kStepClusterLean);  // ignored
}

TEST(Plan, PathNamesRoundTrip) {
  for (int i = 0; i < static_cast<int>(Path::kCount); ++i) {
    Path p = Path::kCount;
    ASSERT_TRUE(parse_path(path_name(static_cast<Path>(i)), &p)) << i;
    EXPECT_EQ(static_cast<int>(p), i);
  }
  Path p;
  EXPECT_FALSE(parse_path("tma", &p));
}

// The recurrence's planner ignores the chunk kernel's paths (test_plan_chunk.cpp tests those).
TEST(Plan, RecurrenceIgnoresChunkPaths) {
  for (Path p : {Path::kChunk32, Path::kChunk64, Path::kChunk128, Path::kChunkSplit, Path::kChunkSmall,
                 Path::kChunkSplitSmall})
    EXPECT_EQ(plan_launch(qwen(64, 1, 4, false), 9, FakeFacts(132), {p}).path,
              plan_launch(qwen(64, 1, 4, false), 9, FakeFacts(132)).path)
        << path_name(p);
}

// The deferred-commit kernel: four-warp blocks of 32 rows unless their grid has at most
// deferred_small_blocks (66 on 132 SMs, scaled) blocks; forced forms; the grid.
TEST(Plan, Deferred) {
  auto plan = [](int64_t nseq, int HV, int V = 128, int sms = 132, Override f = {}) {
    DeferredProblem p;
    p.nseq = nseq;
    p.HV = HV;
    p.V = V;
    return plan_deferred(p, 9, sms, f);
  };
  const DeferredPlan tp1 = plan(1, 32);  // 128 blocks of 32 rows
  EXPECT_EQ(tp1.path, Path::kDeferred);
  EXPECT_EQ(tp1.rows, kDeferredRows);
  EXPECT_TRUE(tp1.grid_x == 4 && tp1.grid_y == 32 && tp1.grid_z == 1);
  const DeferredPlan tp4 = plan(2, 8);  // 64 blocks: the one-warp form, 256 blocks of 8 rows
  EXPECT_EQ(tp4.path, Path::kDeferredSmall);
  EXPECT_EQ(tp4.rows, kDeferredSmallRows);
  EXPECT_TRUE(tp4.grid_x == 16 && tp4.grid_y == 8 && tp4.grid_z == 2);
  EXPECT_EQ(plan(3, 8).path, Path::kDeferred);         // 96 blocks
  EXPECT_EQ(plan(2, 8, 128, 114).path, Path::kDeferred);  // 64 > 66 x 114 / 132 = 57
  EXPECT_EQ(plan(1, 8, 128, 114).path, Path::kDeferredSmall);
  EXPECT_EQ(plan(16, 2, 40).path, Path::kDeferredSmall);  // V = 40: two blocks per head, 64 blocks
  EXPECT_EQ(plan(16, 2, 40).grid_x, 5);
  EXPECT_EQ(plan(17, 2, 40).path, Path::kDeferred);  // 68
  EXPECT_EQ(plan(17, 2, 40).grid_x, 2);
  EXPECT_EQ(plan(64, 32, 128, 132, {Path::kDeferredSmall}).path, Path::kDeferredSmall);  // forced
  EXPECT_EQ(plan(1, 8, 128, 132, {Path::kDeferred}).path, Path::kDeferred);
  EXPECT_EQ(plan(1, 8, 128, 132, {Path::kLean}).path, Path::kDeferredSmall);  // another kernel's path: ignored
  EXPECT_TRUE(is_deferred_path(Path::kDeferred) && is_deferred_path(Path::kDeferredSmall) &&
              is_deferred_path(Path::kDeferredLean));
  // The lean form wherever it applies, at every batch size: 8-row warps while their grid has at most
  // deferred_lean16_warps (2048) warps at 132 SMs, 16-row warps beyond; forcing the general kernel's
  // forms bypasses it; forcing it where it does not apply is the planner's choice.
  auto lean = [&](int64_t nseq, int HV, Override f = {}, bool ok = true, int sms = 132) {
    DeferredProblem p;
    p.nseq = nseq;
    p.HV = HV;
    p.V = 128;
    p.lean_ok = ok;
    return plan_deferred(p, 9, sms, f);
  };
  for (int64_t n : {1, 2, 4}) {  // 32 heads x 16 warps x n <= 2048
    const DeferredPlan l = lean(n, 32);
    EXPECT_EQ(l.path, Path::kDeferredLean) << n;
    EXPECT_TRUE(l.rows == kDeferredSmallRows && l.grid_x == 16 && l.grid_y == 32 && l.grid_z == n) << n;
  }
  for (int64_t n : {5, 16, 64, 256}) {
    const DeferredPlan l = lean(n, 32);
    EXPECT_EQ(l.path, Path::kDeferredLean) << n;
    EXPECT_TRUE(l.rows == kDeferredLean16Rows && l.grid_x == 8 && l.grid_y == 32 && l.grid_z == n) << n;
  }
  EXPECT_EQ(lean(16, 8).rows, kDeferredSmallRows);   // Qwen3-Next TP4: 2048 warps
  EXPECT_EQ(lean(17, 8).rows, kDeferredLean16Rows);
  EXPECT_EQ(lean(5, 32, {}, true, 264).rows, kDeferredSmallRows);  // twice the SMs: twice the warps
  EXPECT_EQ(lean(9, 32, {}, true, 264).rows, kDeferredLean16Rows);
  const DeferredPlan l8 = lean(64, 32, {Path::kDeferredLean8});  // forced 8-row warps
  EXPECT_TRUE(l8.path == Path::kDeferredLean && l8.rows == kDeferredSmallRows && l8.grid_x == 16);
  const DeferredPlan l16 = lean(1, 32, {Path::kDeferredLean16});  // forced 16-row warps, the recurrence
  EXPECT_TRUE(l16.path == Path::kDeferredLean && l16.rows == kDeferredLean16Rows && l16.grid_x == 8 && !l16.algebra);
  EXPECT_FALSE(lean(64, 32).algebra || lean(4, 32).algebra);  // chains: the recurrence
  const DeferredPlan la = lean(1, 32, {Path::kDeferredLeanAlg});  // forced: 16-row warps, chains still the recurrence
  EXPECT_TRUE(la.path == Path::kDeferredLean && la.rows == kDeferredLean16Rows && !la.algebra);
  // trees: the lean form only through the algebra (at most kDeferredAlgebraNodes nodes), else the general kernel
  auto tree = [&](int64_t nseq, Override f = {}, int64_t nodes = kDeferredAlgebraNodes) {
    DeferredProblem p;
    p.nseq = nseq;
    p.HV = 32;
    p.V = 128;
    p.lean_ok = true;
    p.tree = true;
    p.nodes = nodes;
    return plan_deferred(p, 9, 132, f);
  };
  EXPECT_TRUE(tree(64).path == Path::kDeferredLean && tree(64).algebra && tree(64).rows == kDeferredLean16Rows);
  EXPECT_TRUE(tree(64, {}, 4).algebra);
  const DeferredPlan big = tree(64, {}, kDeferredAlgebraNodes + 1);  // more nodes: the general kernel
  EXPECT_TRUE(big.path == Path::kDeferred && !big.algebra && big.rows == kDeferredRows);
  const DeferredPlan big_forced = tree(64, {Path::kDeferredLeanAlg}, 16);  // forced: the algebra at any size
  EXPECT_TRUE(big_forced.path == Path::kDeferredLean && big_forced.algebra);
  DeferredProblem v80;  // 16-row warps, but V not a multiple of the algebra kernel's block rows
  v80.nseq = 256, v80.HV = 32, v80.V = 80, v80.lean_ok = true, v80.tree = true, v80.nodes = 4;
  const DeferredPlan p80 = plan_deferred(v80, 9, 132);
  EXPECT_TRUE(p80.path == Path::kDeferred && !p80.algebra);
  const DeferredPlan t1 = tree(1);  // 8-row warps there: the general kernel in the form it plans without lean_ok
  DeferredProblem general;
  general.nseq = 1, general.HV = 32, general.V = 128;
  const DeferredPlan g1 = plan_deferred(general, 9, 132);
  EXPECT_TRUE(t1.path == g1.path && t1.rows == g1.rows && g1.path != Path::kDeferredLean && !t1.algebra);
  EXPECT_EQ(tree(64, {Path::kDeferredLean16}).path, Path::kDeferred);  // the recurrence forced: no trees
  EXPECT_EQ(tree(1, {Path::kDeferredLeanAlg}).path, Path::kDeferredLean);
  DeferredProblem v40;  // V = 40: 8-row warps at any batch size
  v40.nseq = 400;
  v40.HV = 8;
  v40.V = 40;
  v40.lean_ok = true;
  const DeferredPlan l40 = plan_deferred(v40, 9, 132);
  EXPECT_TRUE(l40.path == Path::kDeferredLean && l40.rows == kDeferredSmallRows && l40.grid_x == 5);
  EXPECT_EQ(lean(64, 32, {Path::kDeferredLean}).path, Path::kDeferredLean);
  EXPECT_EQ(lean(64, 32, {Path::kDeferred}).path, Path::kDeferred);
  EXPECT_EQ(lean(64, 32, {Path::kDeferredSmall}).path, Path::kDeferredSmall);
  EXPECT_EQ(lean(64, 32, {Path::kDeferredLean}, false).path, Path::kDeferred);
  EXPECT_EQ(lean(1, 8, {Path::kDeferredLean}, false).path, Path::kDeferredSmall);
  EXPECT_EQ(lean(1, 8, {Path::kLean}).path, Path::kDeferredLean);  // another kernel's path: ignored
  EXPECT_FALSE(is_deferred_path(Path::kPacked) || is_step_path(Path::kDeferred) || is_chunk_path(Path::kDeferred));
  // The other planners ignore the deferred kernel's paths.
  EXPECT_EQ(plan_launch(qwen(64, 1, 4, false), 9, FakeFacts(132), {Path::kDeferred}).path,
            plan_launch(qwen(64, 1, 4, false), 9, FakeFacts(132)).path);
  EXPECT_EQ(plan_launch(step_of(qwen(6, 1, 4, false)), 9, FakeFacts(132), {Path::kDeferredSmall}).path,
            Path::kStepPipelinedPrologue);
  // (the chunk kernel's planner likewise: test_plan_chunk.cpp)
}

}  // namespace
}  // namespace gdn::cuda::plan
