// Token-tree templates, top-k and greedy tree acceptance (see tree.h).
#include "demo/tree.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace gdn::demo {

std::vector<int32_t> TreeShape::local_parents() const {
  std::vector<int32_t> p = {-1};
  for (int32_t q : parent) p.push_back(q + 1);
  return p;
}

int64_t TreeShape::expansion_width() const {
  if (parent.empty()) return 0;
  std::vector<char> has_kids(parent.size() + 1, 0);  // local tokens
  for (int32_t q : parent) has_kids[static_cast<size_t>(q + 1)] = 1;
  std::vector<int64_t> per_depth(static_cast<size_t>(max_depth) + 1, 0);
  per_depth[0] = has_kids[0];
  for (size_t j = 0; j < parent.size(); ++j) per_depth[static_cast<size_t>(depth[j])] += has_kids[j + 1];
  return *std::max_element(per_depth.begin(), per_depth.end());
}

TreeShape make_tree_shape(const TreeRule& rule, int max_depth) {
  TreeShape s;
  if (rule.nodes <= 0 || max_depth <= 0) return s;
  struct Cand {
    std::vector<int32_t> ranks;  // the rank path
    int32_t parent = -1, sum = 0;
  };
  auto before = [](const Cand& a, const Cand& b) {
    if (a.sum != b.sum) return a.sum < b.sum;
    if (a.ranks.size() != b.ranks.size()) return a.ranks.size() < b.ranks.size();
    return a.ranks < b.ranks;
  };
  const int branch = std::max(1, rule.branch);
  auto children_of = [&](const Cand& c, int32_t node, std::vector<Cand>* out) {
    const int d = static_cast<int>(c.ranks.size()) + 1;  // the children's depth
    if (d > max_depth) return;
    const int k = d <= rule.levels ? branch : 1;
    for (int r = 0; r < k; ++r) {
      Cand x{c.ranks, node, c.sum + r};
      x.ranks.push_back(r);
      out->push_back(std::move(x));
    }
  };
  std::vector<Cand> open;
  children_of(Cand{}, -1, &open);
  while (s.size() < rule.nodes && !open.empty()) {
    // Best first; a parent always precedes its children (smaller depth, no larger rank sum).
    const auto best = std::min_element(open.begin(), open.end(), before);
    const Cand c = *best;
    open.erase(best);
    s.parent.push_back(c.parent);
    s.rank.push_back(c.ranks.back());
    s.depth.push_back(static_cast<int32_t>(c.ranks.size()));
    s.max_depth = std::max(s.max_depth, s.depth.back());
    children_of(c, static_cast<int32_t>(s.size() - 1), &open);
  }
  return s;
}

bool top_k(const float* x, int64_t n, int k, std::vector<int32_t>* out) {
  out->clear();
  for (int64_t i = 0; i < n; ++i)
    if (std::isnan(x[i])) return false;
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  const int64_t m = std::clamp<int64_t>(k, 0, n);
  std::partial_sort(idx.begin(), idx.begin() + m, idx.end(),
                    [&](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  out->assign(idx.begin(), idx.begin() + m);
  return true;
}

std::vector<int32_t> accept_path(const std::vector<int32_t>& tokens, const std::vector<int32_t>& parents,
                                 const std::vector<int32_t>& greedy) {
  const int32_t T = static_cast<int32_t>(tokens.size());
  std::vector<int32_t> path = {0};
  for (int32_t cur = 0;;) {
    int32_t next = -1;
    for (int32_t t = cur + 1; t < T && next < 0; ++t) {
      const int32_t p = parents.empty() ? t - 1 : parents[static_cast<size_t>(t)];
      if (p == cur && tokens[static_cast<size_t>(t)] == greedy.at(static_cast<size_t>(cur))) next = t;
    }
    if (next < 0) return path;
    path.push_back(next);
    cur = next;
  }
}

}  // namespace gdn::demo
