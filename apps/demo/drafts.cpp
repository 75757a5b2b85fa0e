// The n-gram proposer and the draft model (see drafts.h).
#include "demo/drafts.h"

#include <algorithm>
#include <chrono>

#include "demo/math.h"

namespace gdn::demo {

std::vector<int32_t> ngram_propose(const std::vector<int32_t>& ctx, int k, int nmin, int nmax) {
  const int64_t L = static_cast<int64_t>(ctx.size());
  if (k <= 0) return {};
  for (int64_t n = std::min<int64_t>(nmax, L - 1); n >= std::max(1, nmin); --n) {
    // Most recent earlier occurrence of the last n tokens.
    for (int64_t p = L - n - 1; p >= 0; --p) {
      if (!std::equal(ctx.begin() + p, ctx.begin() + p + n, ctx.end() - n)) continue;
      const int64_t from = p + n, to = std::min<int64_t>(from + k, L);
      return std::vector<int32_t>(ctx.begin() + from, ctx.begin() + to);
    }
  }
  return {};
}

Status DraftModel::init(const Weights& weights, Device device, int64_t max_requests, int64_t cols,
                        const PadOptions& pad, bool check_metadata, int64_t scratch) {
  weights_ = weights;
  cols_ = cols;
  scratch_ = std::max<int64_t>(1, scratch);
  pad_ = pad;
  RunnerOptions opt;
  opt.device = device;
  opt.num_slots = max_requests * (cols + scratch_);
  opt.cols = cols;
  opt.check_metadata = check_metadata;
  pool_.init(opt.num_slots);
  rows_.clear();
  return runner_.init(weights_, opt);
}

bool DraftModel::start(int req) {
  std::vector<int32_t> row;
  if (!pool_.allocate(cols_ + scratch_, &row)) return false;
  rows_[req] = std::move(row);
  return true;
}

void DraftModel::finish(int req) {
  auto it = rows_.find(req);
  if (it == rows_.end()) return;
  pool_.release(&it->second);
  rows_.erase(it);
}

Status DraftModel::mirror(const std::vector<Item>& items) {
  std::vector<Item> mine;
  for (const Item& it : items)
    if (tracks(it.req)) mine.push_back(it);
  if (mine.empty()) return Status::Ok();
  const auto t0 = std::chrono::steady_clock::now();
  BatchLayout layout;
  const Batch b = build_batch(
      mine, [this](int req) -> const std::vector<int32_t>& { return rows_.at(req); }, cols_, pad_, &layout);
  GDN_RETURN_IF_ERROR(runner_.forward(b, {}, nullptr));
  stats_.forward_calls += 1;
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return Status::Ok();
}

Status DraftModel::propose(const std::vector<DraftRequest>& reqs, std::vector<std::vector<int32_t>>* out) {
  const auto t0 = std::chrono::steady_clock::now();
  out->assign(reqs.size(), {});
  std::map<int, std::vector<int32_t>> scratch;  // req -> {scratch slot}
  std::vector<int32_t> cur(reqs.size());
  int kmax = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const DraftRequest& r = reqs[i];
    if (r.k <= 0) continue;
    const std::vector<int32_t>& row = rows_.at(r.req);
    const int32_t a = std::clamp<int32_t>(r.accepted, 1, static_cast<int32_t>(cols_));
    // Committed state: SSM column a-1, conv window rows a-1..a+W-3 of the rolling line.
    GDN_RETURN_IF_ERROR(runner_.copy_state(row[a - 1], row[0], a - 1, row[cols_]));
    scratch[r.req] = {row[cols_]};
    cur[i] = r.last_token;
    kmax = std::max(kmax, r.k);
  }
  const int64_t vocab = weights_.cfg.vocab;
  for (int j = 0; j < kmax; ++j) {
    std::vector<Item> items;
    std::vector<size_t> which;
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (reqs[i].k <= j) continue;
      Item it;
      it.req = reqs[i].req;
      it.kind = ItemKind::kDecode;
      it.tokens = {cur[i]};
      items.push_back(it);
      which.push_back(i);
    }
    BatchLayout layout;
    const Batch b = build_batch(
        items, [&](int req) -> const std::vector<int32_t>& { return scratch.at(req); }, 1, pad_, &layout);
    std::vector<std::pair<int, int>> owner;
    const std::vector<int32_t> rows = logit_rows(items, layout, &owner);
    std::vector<float> logits;
    GDN_RETURN_IF_ERROR(runner_.forward(b, rows, &logits));
    stats_.forward_calls += 1;
    for (size_t e = 0; e < rows.size(); ++e) {
      const size_t i = which[owner[e].first];
      const int32_t tok = argmax(&logits[e * vocab], vocab);
      if (tok < 0) return Status::Error("draft model produced NaN logits for request " + std::to_string(reqs[i].req));
      (*out)[i].push_back(tok);
      cur[i] = tok;
    }
  }
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return Status::Ok();
}

Status DraftModel::propose_tree(const std::vector<DraftRequest>& reqs, const std::vector<const TreeShape*>& shapes,
                                std::vector<std::vector<int32_t>>* out) {
  const auto t0 = std::chrono::steady_clock::now();
  out->assign(reqs.size(), {});
  // Per request, by local token (0 = the root, node j = j + 1): its children in rank order, its
  // depth, its token, and the scratch slot holding the state before it (while it is to be decoded).
  struct Work {
    std::vector<std::vector<int32_t>> kids;
    std::vector<int32_t> depth, token, slot, free;
  };
  std::vector<Work> w(reqs.size());
  int32_t dmax = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const DraftRequest& r = reqs[i];
    const TreeShape& sh = *shapes[i];
    if (r.k <= 0 || sh.size() == 0) continue;
    if (sh.max_depth > r.k || sh.expansion_width() > scratch_) {
      return Status::Error("draft model: a tree of depth " + std::to_string(sh.max_depth) + " and width " +
                           std::to_string(sh.expansion_width()) + " for " + std::to_string(r.k) + " drafts and " +
                           std::to_string(scratch_) + " scratch slots");
    }
    const std::vector<int32_t>& row = rows_.at(r.req);
    const int32_t a = std::clamp<int32_t>(r.accepted, 1, static_cast<int32_t>(cols_));
    // Committed state: SSM column a-1, conv window rows a-1..a+W-3 of the rolling line.
    GDN_RETURN_IF_ERROR(runner_.copy_state(row[a - 1], row[0], a - 1, row[cols_]));
    Work& x = w[i];
    const size_t T = static_cast<size_t>(sh.size()) + 1;
    x.kids.assign(T, {});
    x.depth.assign(T, 0);
    x.token.assign(T, r.last_token);
    x.slot.assign(T, -1);
    for (size_t j = 0; j < T - 1; ++j) {
      x.kids[static_cast<size_t>(sh.parent[j] + 1)].push_back(static_cast<int32_t>(j + 1));
      x.depth[j + 1] = sh.depth[j];
    }
    x.slot[0] = row[cols_];
    x.free.assign(row.begin() + cols_ + 1, row.end());
    (*out)[i].assign(T - 1, 0);
    dmax = std::max(dmax, sh.max_depth);
  }
  const int64_t vocab = weights_.cfg.vocab;
  for (int32_t d = 0; d < dmax; ++d) {
    // One plain decode per node of depth d that has children, all requests in one batch.
    std::vector<Item> items;
    std::vector<std::vector<int32_t>> item_slot;
    std::vector<std::pair<size_t, int32_t>> which;  // (request, local token)
    for (size_t i = 0; i < reqs.size(); ++i) {
      for (size_t u = 0; u < w[i].kids.size(); ++u) {
        if (w[i].depth[u] != d || w[i].kids[u].empty()) continue;
        Item it;
        it.req = static_cast<int>(items.size());  // build_batch looks the slot up by item
        it.kind = ItemKind::kDecode;
        it.tokens = {w[i].token[u]};
        items.push_back(it);
        item_slot.push_back({w[i].slot[u]});
        which.emplace_back(i, static_cast<int32_t>(u));
      }
    }
    if (items.empty()) break;
    BatchLayout layout;
    auto slot_of = [&](int j) -> const std::vector<int32_t>& { return item_slot[static_cast<size_t>(j)]; };
    const Batch b = build_batch(items, slot_of, 1, pad_, &layout);
    std::vector<std::pair<int, int>> owner;
    const std::vector<int32_t> rows = logit_rows(items, layout, &owner);
    std::vector<float> logits;
    GDN_RETURN_IF_ERROR(runner_.forward(b, rows, &logits));
    stats_.forward_calls += 1;
    // Children's tokens: the node's top candidates by rank. Then the scratch slots of the children
    // that are decoded next: the first takes the node's slot, the others copies of it (slots of
    // nodes without such children are freed first, so a level never holds more than its width).
    std::vector<int32_t> cand;
    for (size_t e = 0; e < rows.size(); ++e) {
      const auto [i, u] = which[static_cast<size_t>(owner[e].first)];
      const std::vector<int32_t>& kids = w[i].kids[static_cast<size_t>(u)];
      if (!top_k(&logits[e * vocab], vocab, static_cast<int>(kids.size()), &cand)) {
        return Status::Error("draft model produced NaN logits for request " + std::to_string(reqs[i].req));
      }
      for (size_t r = 0; r < kids.size(); ++r) {
        const int32_t tok = cand[std::min(r, cand.size() - 1)];
        w[i].token[static_cast<size_t>(kids[r])] = tok;
        (*out)[i][static_cast<size_t>(kids[r] - 1)] = tok;
      }
    }
    for (const auto& [i, u] : which) {
      const auto& kids = w[i].kids[static_cast<size_t>(u)];
      if (std::none_of(kids.begin(), kids.end(), [&](int32_t c) { return !w[i].kids[static_cast<size_t>(c)].empty(); }))
        w[i].free.push_back(w[i].slot[static_cast<size_t>(u)]);
    }
    for (const auto& [i, u] : which) {
      const int32_t src = w[i].slot[static_cast<size_t>(u)];
      bool given = false;
      for (int32_t c : w[i].kids[static_cast<size_t>(u)]) {
        if (w[i].kids[static_cast<size_t>(c)].empty()) continue;
        if (!given) {
          w[i].slot[static_cast<size_t>(c)] = src;
          given = true;
          continue;
        }
        const int32_t dst = w[i].free.back();
        w[i].free.pop_back();
        GDN_RETURN_IF_ERROR(runner_.copy_state(src, src, 0, dst));
        w[i].slot[static_cast<size_t>(c)] = dst;
      }
    }
  }
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return Status::Ok();
}

}  // namespace gdn::demo
