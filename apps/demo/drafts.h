// apps/demo/drafts.h — the two draft proposers: an n-gram (prompt-lookup) proposer and a draft model.
//
// The draft model is the target with perturbed weights and its own pools. It keeps its state the
// way the target does: every engine step it runs the same items as the target (prefill pieces,
// plain decodes, verify sequences with the same num_accepted_tokens) on its own block-table rows,
// so after acceptance its committed state sits in the same column as the target's. To propose k
// tokens it copies that committed state into a private scratch slot (rolling window rows
// a-1..a+W-3 -> rows 0..W-2) and decodes k tokens there greedily, leaving the block row intact.
// For a token tree (tree.h) it expands the tree level by level the same way: every node that has
// children is decoded in a scratch slot holding its parent's state (a copy per extra branch), and
// its children get its top candidates by rank. The engine then mirrors only the accepted path.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "demo/batch.h"
#include "demo/tree.h"

namespace gdn::demo {

// The tokens that followed the most recent earlier occurrence of the longest suffix of `ctx`
// (length nmax down to nmin) that occurred before; at most k, possibly none.
std::vector<int32_t> ngram_propose(const std::vector<int32_t>& ctx, int k, int nmin, int nmax);

struct DraftRequest {
  int req = 0;
  int32_t last_token = 0;  // the last committed token, not yet run through the models
  int32_t accepted = 1;    // where the committed state sits (num_accepted_tokens of the next verify)
  int k = 0;               // tokens to propose
};

struct DraftStats {
  int64_t forward_calls = 0;
  double seconds = 0;
};

class DraftModel {
 public:
  // `scratch`: scratch slots per request (1 for linear drafts; a tree's expansion width).
  Status init(const Weights& weights, Device device, int64_t max_requests, int64_t cols, const PadOptions& pad,
              bool check_metadata, int64_t scratch = 1);
  bool start(int req);  // a block row + the scratch slots; false when the pool is full
  int64_t slots_per_request() const { return cols_ + scratch_; }
  void finish(int req);
  bool tracks(int req) const { return rows_.count(req) != 0; }

  // Runs the items of tracked requests exactly as the target runs them (no logits).
  Status mirror(const std::vector<Item>& items);
  // Greedy proposals: (*out)[i] gets reqs[i].k tokens.
  Status propose(const std::vector<DraftRequest>& reqs, std::vector<std::vector<int32_t>>* out);
  // Token trees: (*out)[i][j] = the token of node j of *shapes[i] (its depth <= reqs[i].k).
  Status propose_tree(const std::vector<DraftRequest>& reqs, const std::vector<const TreeShape*>& shapes,
                      std::vector<std::vector<int32_t>>* out);

  const DraftStats& stats() const { return stats_; }
  const SlotPool& pool() const { return pool_; }
  const ModelRunner& runner() const { return runner_; }

 private:
  Weights weights_;
  ModelRunner runner_;
  SlotPool pool_;
  int64_t cols_ = 1, scratch_ = 1;
  PadOptions pad_;
  std::map<int, std::vector<int32_t>> rows_;  // req -> block row (cols) + scratch slots
  DraftStats stats_;
};

}  // namespace gdn::demo
