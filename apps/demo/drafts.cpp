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
                        const PadOptions& pad, bool check_metadata) {
  weights_ = weights;
  cols_ = cols;
  pad_ = pad;
  RunnerOptions opt;
  opt.device = device;
  opt.num_slots = max_requests * (cols + 1);
  opt.cols = cols;
  opt.check_metadata = check_metadata;
  pool_.init(opt.num_slots);
  rows_.clear();
  return runner_.init(weights_, opt);
}

bool DraftModel::start(int req) {
  std::vector<int32_t> row;
  if (!pool_.allocate(cols_ + 1, &row)) return false;
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

}  // namespace gdn::demo
