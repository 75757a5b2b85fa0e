// The demo engine: speculative decoding through gdn_attention must give exactly the tokens of
// plain greedy decoding of the same model (the check compares tokens; on the CPU the verify and
// decode paths are also bitwise equal, which the forced-acceptance cases rely on: a draft model
// equal to the target is accepted everywhere, and a draft that is always changed never is).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>

#include "demo/batch.h"
#include "demo/drafts.h"
#include "demo/report.h"
#include "demo/run.h"
#include "demo/tree.h"

namespace gdn::demo {
namespace {

std::string describe(const DemoConfig& c) {
  return "proposer " + c.proposer + ", num_spec " + std::to_string(c.num_spec) + ", draft_noise " +
         std::to_string(c.draft_noise) + ", corrupt " + std::to_string(c.corrupt) + ", seed " + std::to_string(c.seed);
}

DemoResult run_ok(const DemoConfig& c) {
  DemoResult r;
  const Status s = run_demo(c, &r);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(r.lossless) << (r.mismatch ? mismatch_message(*r.mismatch) : std::string());
  for (size_t i = 0; i < r.requests.size() && s.ok(); ++i) {
    EXPECT_EQ(static_cast<int>(r.outputs[i].size()), r.requests[i].max_new_tokens) << "request " << i;
  }
  return r;
}

int64_t sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

TEST(Demo, ShortConfigurationIsLossless) {
  const DemoConfig c = short_demo_config();
  SCOPED_TRACE(describe(c));
  const DemoResult r = run_ok(c);
  const EngineStats& s = r.spec;
  // The batches were really mixed: chunked prefill, plain decodes, verifies, graph padding.
  EXPECT_GT(s.prefill_pieces, static_cast<int64_t>(r.requests.size()));
  EXPECT_GT(s.plain_decodes, 0);
  EXPECT_GT(s.verifies, 0);
  EXPECT_GT(s.padded_steps, 0);
  EXPECT_GT(s.pad_rows, 0);
  EXPECT_GT(s.pad_sequences, 0);
  // Every request took a block row and gave it back.
  EXPECT_EQ(r.spec_pool_allocations, static_cast<int64_t>(r.requests.size()));
  EXPECT_EQ(r.spec_pool_releases, r.spec_pool_allocations);
  EXPECT_LE(r.spec_pool_peak, r.spec_pool_slots);
  // One gdn_attention call per layer per step that had work.
  EXPECT_EQ(r.attention_calls % r.model.layers, 0);
  EXPECT_LE(r.attention_calls / r.model.layers, s.steps);
  EXPECT_EQ(s.generated, r.plain.generated);
}

// Deferred commit (docs/contract.md §7): the same tokens, the same steps, one slot per request, a
// state write per sequence per step (fewer state bytes than the per-token mode whenever a verify
// step stores more than one state), and the bookkeeping fault is still caught.
TEST(Demo, DeferredCommitIsLosslessAndWritesOneStatePerSequence) {
  DemoConfig c = short_demo_config();
  const DemoResult per_token = run_ok(c);
  c.deferred = true;
  SCOPED_TRACE(describe(c) + ", deferred");
  const DemoResult d = run_ok(c);
  EXPECT_EQ(d.outputs, per_token.outputs);
  EXPECT_EQ(d.spec.steps, per_token.spec.steps);
  EXPECT_EQ(d.spec_pool_slots, c.max_running);  // one slot per request
  EXPECT_GT(d.spec.verifies, 0);
  const ModelConfig& m = d.model;
  const int64_t state = m.layers * m.num_v_heads * m.head_v_dim * m.head_k_dim * 4;
  EXPECT_EQ(d.spec.state_bytes % state, 0);
  EXPECT_LT(d.spec.state_bytes, per_token.spec.state_bytes);
  EXPECT_GT(d.spec.log_bytes, 0);
  EXPECT_EQ(per_token.spec.log_bytes, 0);
  c.inject_fault = true;
  DemoResult bad;
  ASSERT_TRUE(run_demo(c, &bad).ok());
  EXPECT_FALSE(bad.lossless) << "a replay count one short went unnoticed";
}

// Token trees (deferred): a tree of draft-model candidates per decoding request, verified in one
// sequence with spec_token_parents; the accepted path's log rows replayed next step.
DemoConfig tree_config(int nodes) {
  DemoConfig c = short_demo_config();
  c.deferred = true;
  c.tree = nodes;
  return c;
}

TEST(Demo, TokenTreesAreLossless) {
  DemoConfig lin = short_demo_config();
  lin.deferred = true;
  const DemoResult linear = run_ok(lin);
  const DemoConfig c = tree_config(8);
  SCOPED_TRACE(describe(c) + ", deferred, tree 8");
  const DemoResult t = run_ok(c);
  EXPECT_EQ(t.outputs, linear.outputs);  // greedy tokens (run_ok: identical to the plain engine's)
  EXPECT_EQ(t.spec_pool_slots, c.max_running);
  EXPECT_GT(t.spec.verifies, 0);
  EXPECT_GT(t.spec.tree_nodes, t.spec.verifies);  // real trees, not single drafts
  const ModelConfig& m = t.model;
  const int64_t state = m.layers * m.num_v_heads * m.head_v_dim * m.head_k_dim * 4;
  EXPECT_EQ(t.spec.state_bytes % state, 0);  // still one state per sequence per step
  EXPECT_GT(t.spec.log_bytes, linear.spec.log_bytes);  // every node is logged
  const nlohmann::json j = summary_json(c, t);
  EXPECT_EQ(j["drafts"], "tree");
  EXPECT_EQ(j["tree"]["nodes"], 8);
  EXPECT_GT(j["speculative"]["log_bytes_per_step"].get<double>(), 0.0);
  EXPECT_NE(summary_table(c, t).find("tree nodes per verify"), std::string::npos);
  DemoConfig bad = c;
  bad.inject_fault = true;
  DemoResult r;
  ASSERT_TRUE(run_demo(bad, &r).ok());
  EXPECT_FALSE(r.lossless) << "a replay count one short went unnoticed";
}

// A noisy draft model: some accepted paths go through a second-best candidate, so the replay
// follows a path that is not rows 0, 1, ... of the log.
TEST(Demo, TokenTreesAcceptOffTheTopChain) {
  for (uint64_t seed : {1, 2}) {
    DemoConfig c = tree_config(8);
    c.proposer = "draft";
    c.draft_noise = 0.2;
    c.seed = seed;
    SCOPED_TRACE(describe(c) + ", deferred, tree 8");
    const DemoResult r = run_ok(c);
    EXPECT_GT(r.spec.off_chain, 0);
    EXPECT_GT(sum(r.spec.accepted_at), 0);
  }
}

TEST(Demo, TokenTreePerfectDraftAcceptsTheGreedyPath) {
  DemoConfig c = tree_config(8);
  c.proposer = "draft";
  c.draft_noise = 0.0;  // the draft's top-1 chain is the target's greedy path
  SCOPED_TRACE(describe(c) + ", deferred, tree 8");
  const DemoResult r = run_ok(c);
  ASSERT_GT(sum(r.spec.proposed_at), 0);
  for (size_t j = 0; j < r.spec.proposed_at.size(); ++j) {
    EXPECT_EQ(r.spec.accepted_at[j], r.spec.proposed_at[j]) << "tree depth " << j + 1;
  }
  EXPECT_EQ(r.spec.off_chain, 0);
  EXPECT_GT(mean_accepted_length(r.spec), 2.0);
  EXPECT_LT(r.spec.steps, r.plain.steps);
  DemoConfig lin = c;
  lin.tree = 0;
  const DemoResult l = run_ok(lin);  // the chain is never trimmed: the same steps as linear drafts
  EXPECT_EQ(r.spec.steps, l.spec.steps);
  EXPECT_EQ(r.spec.decode_tokens, l.spec.decode_tokens);
}

TEST(Demo, TokenTreeCorruptedDrafts) {
  DemoConfig c = tree_config(8);
  c.proposer = "draft";
  c.draft_noise = 0.0;
  c.corrupt = 1.0;  // every node changed: no node can match
  SCOPED_TRACE(describe(c) + ", deferred, tree 8");
  const DemoResult none = run_ok(c);
  ASSERT_GT(none.spec.tree_nodes, 0);
  EXPECT_EQ(sum(none.spec.accepted_at), 0);
  EXPECT_DOUBLE_EQ(mean_accepted_length(none.spec), 1.0);
  for (uint64_t seed : {1, 2, 3}) {
    c = tree_config(8);
    c.corrupt = 0.3;
    c.seed = seed;
    SCOPED_TRACE(describe(c) + ", deferred, tree 8");
    const DemoResult r = run_ok(c);
    EXPECT_GT(sum(r.spec.accepted_at), 0);
    EXPECT_LT(sum(r.spec.accepted_at), sum(r.spec.proposed_at));
  }
}

// branch 1: every tree is the draft's chain; with the parents and accepted paths passed it must be
// the linear deferred mode exactly (tokens, steps, accepted counts, bytes), corrupted drafts included.
TEST(Demo, ChainShapedTreeIsLinearDeferred) {
  for (int nodes : {3, 16}) {
    DemoConfig lin = short_demo_config();
    lin.deferred = true;
    lin.corrupt = 0.2;
    DemoConfig c = lin;
    c.tree = nodes;
    c.tree_branch = 1;
    SCOPED_TRACE(describe(c) + ", deferred, chain-shaped tree " + std::to_string(nodes));
    const DemoResult l = run_ok(lin), t = run_ok(c);
    EXPECT_EQ(t.outputs, l.outputs);
    EXPECT_EQ(t.spec.steps, l.spec.steps);
    EXPECT_EQ(t.spec.proposed_at, l.spec.proposed_at);
    EXPECT_EQ(t.spec.accepted_at, l.spec.accepted_at);
    EXPECT_EQ(t.spec.decode_tokens, l.spec.decode_tokens);
    EXPECT_EQ(t.spec.forward_tokens, l.spec.forward_tokens);
    EXPECT_EQ(t.spec.state_bytes, l.spec.state_bytes);
    EXPECT_EQ(t.spec.log_bytes, l.spec.log_bytes);
    EXPECT_EQ(t.finish_step, l.finish_step);
    EXPECT_EQ(t.spec.tree_trimmed, 0);
  }
}

TEST(Demo, EveryDraftRejected) {
  DemoConfig c = short_demo_config();
  c.proposer = "draft";
  c.draft_noise = 0.0;  // the draft is the target ...
  c.corrupt = 1.0;      // ... and every drafted token is changed, so none can match
  SCOPED_TRACE(describe(c));
  const DemoResult r = run_ok(c);
  ASSERT_GT(r.spec.proposed_at.at(0), 0);
  EXPECT_EQ(sum(r.spec.accepted_at), 0);
  EXPECT_DOUBLE_EQ(mean_accepted_length(r.spec), 1.0);
}

TEST(Demo, EveryDraftAccepted) {
  DemoConfig c = short_demo_config();
  c.proposer = "draft";
  c.draft_noise = 0.0;  // the draft is the target: it proposes exactly the greedy tokens
  SCOPED_TRACE(describe(c));
  const DemoResult r = run_ok(c);
  ASSERT_GT(sum(r.spec.proposed_at), 0);
  for (size_t j = 0; j < r.spec.proposed_at.size(); ++j) {
    EXPECT_EQ(r.spec.accepted_at[j], r.spec.proposed_at[j]) << "draft position " << j + 1;
  }
  EXPECT_GT(mean_accepted_length(r.spec), 2.0);
  EXPECT_LT(r.spec.steps, r.plain.steps);
}

TEST(Demo, MixedProposersRaggedDrafts) {
  for (uint64_t seed : {1, 2, 3}) {
    DemoConfig c = short_demo_config();
    c.proposer = "mixed";
    c.draft_noise = 0.05;
    c.seed = seed;
    SCOPED_TRACE(describe(c));
    const DemoResult r = run_ok(c);
    const int kd = static_cast<int>(ProposerKind::kDraftModel), kn = static_cast<int>(ProposerKind::kNgram);
    EXPECT_GT(r.spec.proposed[kd], 0);
    EXPECT_GT(r.spec.proposed[kn], 0);
    // Both outcomes happen: some drafts accepted, some rejected.
    EXPECT_GT(sum(r.spec.accepted_at), 0);
    EXPECT_LT(sum(r.spec.accepted_at), sum(r.spec.proposed_at));
  }
}

TEST(Demo, LosslessOptionsMatrix) {
  struct Case {
    const char* proposer;
    int num_spec;
    bool pad, block;
  } cases[] = {{"ngram", 1, true, false}, {"draft", 5, false, false}, {"mixed", 2, true, true}, {"none", 3, true, false}};
  for (const Case& k : cases) {
    DemoConfig c = short_demo_config();
    c.proposer = k.proposer;
    c.num_spec = k.num_spec;
    c.pad = k.pad;
    c.model.block_layout = k.block;
    c.token_budget = 48;
    SCOPED_TRACE(describe(c) + (k.block ? ", block layout" : "") + (k.pad ? ", padded" : ""));
    run_ok(c);
  }
}

TEST(Demo, CheckCatchesStateBookkeepingBug) {
  DemoConfig c = short_demo_config();
  c.proposer = "draft";
  c.draft_noise = 0.0;
  c.inject_fault = true;  // num_accepted_tokens fed back one too small
  DemoResult r;
  const Status s = run_demo(c, &r);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_FALSE(r.lossless);
  ASSERT_TRUE(r.mismatch.has_value());
  const std::string msg = mismatch_message(*r.mismatch);
  EXPECT_NE(msg.find("request"), std::string::npos);
  EXPECT_NE(msg.find("step"), std::string::npos);
  EXPECT_NE(msg.find("position"), std::string::npos);
  EXPECT_EQ(summary_json(c, r)["lossless"], "no");
}

TEST(Demo, WeightsRoundTripThroughSafetensors) {
  DemoConfig c = short_demo_config();
  const std::string path = ::testing::TempDir() + "gdn_demo_weights.safetensors";
  c.save_weights_path = path;
  const DemoResult seeded = run_ok(c);
  DemoConfig l = short_demo_config();
  l.weights_path = path;
  l.model = ModelConfig();  // the file carries the shapes
  const DemoResult loaded = run_ok(l);
  EXPECT_EQ(loaded.outputs, seeded.outputs);
  std::remove(path.c_str());
}

// The demo on CUDA, per-token and deferred commit, linear drafts and trees: lossless on that backend,
// one state slot per request in the deferred mode and fewer state bytes written.
TEST(Demo, DeferredCommitAndTreesOnCuda) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  DemoConfig c = short_demo_config();
  c.device = Device::kCUDA;
  SCOPED_TRACE(describe(c) + ", cuda");
  const DemoResult per_token = run_ok(c);
  c.deferred = true;
  const DemoResult d = run_ok(c);
  EXPECT_EQ(d.spec_pool_slots, c.max_running);
  EXPECT_GT(d.spec.verifies, 0);
  EXPECT_LT(d.spec.state_bytes, per_token.spec.state_bytes);
  c.tree = 8;
  SCOPED_TRACE("tree 8");
  const DemoResult t = run_ok(c);
  EXPECT_GT(t.spec.verifies, 0);
}

TEST(Demo, BadConfigurationsAreErrors) {
  DemoConfig c = short_demo_config();
  c.proposer = "eagle";
  DemoResult r;
  Status s = run_demo(c, &r);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("eagle"), std::string::npos);
  c = short_demo_config();
  c.token_budget = 4;
  s = run_demo(c, &r);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("token_budget"), std::string::npos);
  c = short_demo_config();
  c.tree = 8;  // trees without the deferred mode
  s = run_demo(c, &r);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--tree"), std::string::npos);
  c = short_demo_config();
  c.device = Device::kCUDA;
  if (!cuda_backend_available()) {
    s = run_demo(c, &r);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("cuda"), std::string::npos);
  }
}

TEST(DemoParts, NgramProposer) {
  const std::vector<int32_t> ctx = {5, 6, 7, 8, 1, 5, 6, 7};
  EXPECT_EQ(ngram_propose(ctx, 3, 1, 4), (std::vector<int32_t>{8, 1, 5}));
  EXPECT_EQ(ngram_propose(ctx, 1, 1, 4), (std::vector<int32_t>{8}));
  EXPECT_TRUE(ngram_propose({1, 2, 3}, 3, 1, 4).empty());
  EXPECT_TRUE(ngram_propose(ctx, 0, 1, 4).empty());
}

TEST(DemoParts, BatchLayoutAndPadding) {
  // Request 0 verifies 3 tokens, request 1 decodes, request 2 verifies 1 token (no drafts, a = 2).
  std::vector<std::vector<int32_t>> rows = {{4, 9, 2}, {7, 1, 3}, {0, 5, 6}};
  std::vector<Item> items(3);
  items[0] = {0, ItemKind::kVerify, {10, 11, 12}, true, 1, false};
  items[1] = {1, ItemKind::kDecode, {20}, true, 1, false};
  items[2] = {2, ItemKind::kVerify, {30}, true, 2, false};
  PadOptions pad;
  pad.enabled = true;
  BatchLayout layout;
  const Batch b = build_batch(items, [&](int r) -> const std::vector<int32_t>& { return rows[r]; }, 3, pad, &layout);
  EXPECT_EQ(b.num_actual_tokens, 5);
  EXPECT_EQ(b.rows, 8);
  EXPECT_EQ(layout.pad_rows, 3);
  EXPECT_EQ(b.tokens, (std::vector<int32_t>{10, 11, 12, 20, 30}));
  EXPECT_EQ(b.ns_indx, (std::vector<int32_t>{3}));
  EXPECT_EQ(b.ns_slots, (std::vector<int32_t>{7}));
  EXPECT_EQ(b.num_decodes, 1);
  EXPECT_EQ(b.sp_indx, (std::vector<int32_t>{0, 1, 2, 4}));
  EXPECT_EQ(b.sp_qsl, (std::vector<int32_t>{0, 3, 4}));
  EXPECT_EQ(b.sp_slots, (std::vector<int32_t>{4, 9, 2, 0, 5, 6}));
  EXPECT_EQ(b.sp_accepted, (std::vector<int32_t>{1, 2}));
  std::vector<std::pair<int, int>> owner;
  EXPECT_EQ(logit_rows(items, layout, &owner), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  // Three spec sequences pad to four with an empty sequence on slot -1.
  items.push_back({0, ItemKind::kVerify, {40, 41}, true, 3, false});
  rows[0] = {8, 10, 11};
  const Batch p = build_batch(items, [&](int r) -> const std::vector<int32_t>& { return rows[r]; }, 3, pad, &layout);
  EXPECT_EQ(p.num_spec(), 4);
  EXPECT_EQ(p.sp_qsl.back(), p.sp_qsl[3]);
  EXPECT_EQ(p.sp_slots.back(), -1);
  EXPECT_EQ(layout.pad_sequences, 1);
}

TEST(DemoParts, TreeShapes) {
  // Top-2 at levels 1..2, top-1 below, 8 nodes of depth <= 3, best (rank sum, depth, ranks) first:
  // (0) (0,0) (0,0,0) (1) (0,1) (1,0) (0,1,0) (1,0,0).
  const TreeShape s = make_tree_shape(TreeRule{8, 2, 2}, 3);
  EXPECT_EQ(s.parent, (std::vector<int32_t>{-1, 0, 1, -1, 0, 3, 4, 5}));
  EXPECT_EQ(s.rank, (std::vector<int32_t>{0, 0, 0, 1, 1, 0, 0, 0}));
  EXPECT_EQ(s.depth, (std::vector<int32_t>{1, 2, 3, 1, 2, 2, 3, 3}));
  EXPECT_EQ(s.max_depth, 3);
  EXPECT_EQ(s.expansion_width(), 3);  // depth 2: three nodes with children
  EXPECT_EQ(s.local_parents(), (std::vector<int32_t>{-1, 0, 1, 2, 0, 1, 4, 5, 6}));
  // Branch 1 is a chain, however many nodes are allowed; depth 1 is the root's candidates.
  EXPECT_EQ(make_tree_shape(TreeRule{16, 1, 2}, 3).parent, (std::vector<int32_t>{-1, 0, 1}));
  EXPECT_EQ(make_tree_shape(TreeRule{8, 3, 2}, 1).rank, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(make_tree_shape(TreeRule{0, 2, 2}, 3).size(), 0);
  std::vector<int32_t> top;
  const float x[] = {0.5f, 2.0f, 1.0f, 2.0f};
  ASSERT_TRUE(top_k(x, 4, 3, &top));
  EXPECT_EQ(top, (std::vector<int32_t>{1, 3, 2}));  // ties: the lower index first, like argmax
  const float nan[] = {0.f, std::nanf("")};
  EXPECT_FALSE(top_k(nan, 2, 1, &top));
}

TEST(DemoParts, TreeAcceptance) {
  // root 10; children 11 (t1), 12 (t2); 13 under t1 (t3), 14 under t2 (t4).
  const std::vector<int32_t> tokens = {10, 11, 12, 13, 14}, parents = {-1, 0, 0, 1, 2};
  // The target's choices: after 10 -> 12 (the second child), after 12 -> 14, after 14 -> 7.
  EXPECT_EQ(accept_path(tokens, parents, {12, 0, 14, 0, 7}), (std::vector<int32_t>{0, 2, 4}));
  EXPECT_EQ(accept_path(tokens, parents, {11, 13, 0, 5, 0}), (std::vector<int32_t>{0, 1, 3}));
  EXPECT_EQ(accept_path(tokens, parents, {9, 0, 0, 0, 0}), (std::vector<int32_t>{0}));
  EXPECT_EQ(accept_path({10, 11, 12}, {}, {11, 12, 3}), (std::vector<int32_t>{0, 1, 2}));  // a chain
}

TEST(DemoParts, TreeBatchMetadata) {
  std::vector<std::vector<int32_t>> rows = {{4}, {7}};
  std::vector<Item> items(2);
  items[0].req = 0;
  items[0].kind = ItemKind::kVerify;
  items[0].tokens = {10, 11, 12, 13};
  items[0].parents = {-1, 0, 0, 1};
  items[0].replay = 3;
  items[0].path = {0, 2, 3};
  items[1].req = 1;
  items[1].kind = ItemKind::kDecode;
  items[1].tokens = {20};
  items[1].replay = 1;
  BatchLayout layout;
  const Batch b = build_batch(items, [&](int r) -> const std::vector<int32_t>& { return rows[r]; }, 1, PadOptions(),
                              &layout, true, 5);
  EXPECT_EQ(b.path_cols, 5);
  EXPECT_EQ(b.sp_parents, (std::vector<int32_t>{-1, 0, 0, 1}));
  EXPECT_EQ(b.sp_path, (std::vector<int32_t>{0, 2, 3, -1, -1}));  // -1 past the path ends a replay
  EXPECT_EQ(b.ns_path, (std::vector<int32_t>{0, 1, 2, 3, 4}));    // no path: rows 0, 1, ...
  EXPECT_EQ(b.sp_accepted, (std::vector<int32_t>{3}));
  EXPECT_EQ(b.ns_replay, (std::vector<int32_t>{1}));
  const Batch lin = build_batch(items, [&](int r) -> const std::vector<int32_t>& { return rows[r]; }, 1, PadOptions(),
                                &layout, true);
  EXPECT_EQ(lin.path_cols, 0);
  EXPECT_TRUE(lin.sp_parents.empty() && lin.sp_path.empty() && lin.ns_path.empty());
}

TEST(DemoParts, SlotPoolReusesFreedRows) {
  SlotPool pool;
  pool.init(8);
  std::vector<int32_t> a, b, c;
  ASSERT_TRUE(pool.allocate(4, &a));
  ASSERT_TRUE(pool.allocate(4, &b));
  EXPECT_FALSE(pool.allocate(1, &c));
  pool.release(&a);
  EXPECT_TRUE(a.empty());
  ASSERT_TRUE(pool.allocate(4, &c));
  EXPECT_EQ(pool.peak(), 8);
  EXPECT_EQ(pool.allocations(), 3);
  EXPECT_EQ(pool.releases(), 1);
}

}  // namespace
}  // namespace gdn::demo
