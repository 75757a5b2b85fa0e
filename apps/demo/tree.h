// apps/demo/tree.h — token-tree drafts for the deferred-commit mode (docs/contract.md §7, "Token trees").
//
// A tree's root is the request's last committed token (not yet run through the models); its nodes
// are drafted tokens. The shape is a static template, like the "choices" of Medusa / EAGLE trees:
// each node is named by its rank path (r1, ..., rd), r_i = which of the draft model's candidates at
// level i (0 = its best token). At the first `levels` levels a node has up to `branch` children (the
// draft's top-`branch` tokens after it), below that one (its top-1). The template keeps the `nodes`
// best rank paths of depth <= the request's draft depth, best first by (rank sum, depth, the rank
// path in lexicographic order): the draft's greedy chain (rank sum 0) always comes first, then its
// one-change alternatives, and so on. That order lists every parent before its children, so node
// order is a valid local token order for spec_token_parents, and any prefix of it is a tree too (the
// engine trims trees from the back when a step's token budget is short). branch 1 is a chain.
#pragma once
#include <cstdint>
#include <vector>

namespace gdn::demo {

struct TreeRule {
  int nodes = 0;   // drafted nodes per tree (the root not counted); 0: no trees (linear drafts)
  int branch = 2;  // children per node at the branching levels (1: a chain)
  int levels = 2;  // how many levels (from the root) branch; below them one child per node
};

struct TreeShape {
  std::vector<int32_t> parent;  // per node: its parent node, -1 = the root
  std::vector<int32_t> rank;    // per node: which of its parent's candidates it is (0 = the best)
  std::vector<int32_t> depth;   // per node: 1 for the root's children
  int32_t max_depth = 0;
  int64_t size() const { return static_cast<int64_t>(parent.size()); }
  // Local token t of the verify sequence (0 = the root, node j = token j + 1): its parent's local
  // index, -1 for the root.
  std::vector<int32_t> local_parents() const;
  // The most scratch states a level-by-level expansion holds at once: the largest number of
  // tokens at one depth (the root's depth 0 included) that have children.
  int64_t expansion_width() const;
};

// The template of `rule` for trees of depth <= max_depth (empty when max_depth or rule.nodes <= 0).
TreeShape make_tree_shape(const TreeRule& rule, int max_depth);

// The indices of the k largest values of x[0..n), largest first, the lower index first on ties
// (so out[0] is argmax's choice); false when any value is NaN.
bool top_k(const float* x, int64_t n, int k, std::vector<int32_t>* out);

// Greedy acceptance over one verify sequence: `tokens` [T] (token 0 the root), `parents` [T] local
// parents (empty: a chain), `greedy` [T] the target's choice after each token. From the root, step
// to the first child whose token is the target's choice after the current token, while there is
// one. Returns that root-to-node path as local token indices, starting with 0.
std::vector<int32_t> accept_path(const std::vector<int32_t>& tokens, const std::vector<int32_t>& parents,
                                 const std::vector<int32_t>& greedy);

}  // namespace gdn::demo
