// The demo engine: admission, proposals, scheduling, one forward per step, greedy acceptance.
#include "demo/engine.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "demo/math.h"

namespace gdn::demo {
namespace {

std::string str(int64_t x) { return std::to_string(x); }
double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int64_t Engine::slots_per_request() const { return opt_.deferred ? 1 : cols_; }

const char* to_string(ProposerKind p) {
  switch (p) {
    case ProposerKind::kNone: return "none";
    case ProposerKind::kDraftModel: return "draft";
    case ProposerKind::kNgram: return "ngram";
  }
  return "?";
}

Status Engine::init(const Weights& target, const Weights* draft, const EngineOptions& opt,
                    std::vector<RequestSpec> reqs) {
  opt_ = opt;
  cols_ = opt.num_spec + 1;
  if (opt.num_spec < 0 || opt.max_running < 1 || opt.prefill_chunk < 1) {
    return Status::Error("demo engine: need num_spec >= 0, max_running >= 1 and prefill_chunk >= 1, got " +
                         str(opt.num_spec) + ", " + str(opt.max_running) + ", " + str(opt.prefill_chunk));
  }
  // Every decoding request always fits, and so does at least one prefill piece.
  const int64_t need = (opt.max_running - 1) * cols_ + std::max<int64_t>(opt.prefill_chunk, cols_);
  if (opt.token_budget < need) {
    return Status::Error("demo engine: token_budget must be >= (max_running - 1) * (num_spec + 1) + "
                         "max(prefill_chunk, num_spec + 1) = " + str(need) + ", got " + str(opt.token_budget));
  }
  target_ = &target;
  if (opt.tree.nodes < 0 || opt.tree.branch < 1 || opt.tree.levels < 0) {
    return Status::Error("demo engine: token trees need nodes >= 0, branch >= 1 and levels >= 0, got " +
                         str(opt.tree.nodes) + ", " + str(opt.tree.branch) + ", " + str(opt.tree.levels));
  }
  if (opt.tree.nodes > 0 && !opt.deferred) {
    return Status::Error("demo engine: token trees need the deferred-commit mode (docs/contract.md §7)");
  }
  // Trees: one template per draft depth; the logs hold a whole tree (or an n-gram chain).
  shapes_.clear();
  log_cols_ = cols_;
  int64_t scratch = 1;
  for (int k = 1; opt.tree.nodes > 0 && k <= opt.num_spec; ++k) {
    shapes_.push_back(make_tree_shape(opt.tree, k));
    log_cols_ = std::max(log_cols_, 1 + shapes_.back().size());
    scratch = std::max(scratch, shapes_.back().expansion_width());
  }
  RunnerOptions ro;
  ro.device = opt.device;
  ro.num_slots = opt.max_running * slots_per_request();
  ro.cols = opt.deferred ? 1 : cols_;
  ro.check_metadata = opt.check_metadata;
  ro.deferred = opt.deferred;
  ro.log_cols = log_cols_;
  GDN_RETURN_IF_ERROR(runner_.init(target, ro));
  pool_.init(ro.num_slots);
  bool need_draft = false;
  for (const RequestSpec& r : reqs) {
    if (r.prompt.empty() || r.max_new_tokens < 1) {
      return Status::Error("demo engine: request " + str(r.id) + " needs a prompt and max_new_tokens >= 1");
    }
    for (int32_t t : r.prompt) {
      if (t < 0 || t >= target.cfg.vocab) {
        return Status::Error("demo engine: request " + str(r.id) + " has token " + str(t) + " outside the vocabulary");
      }
    }
    need_draft |= r.proposer == ProposerKind::kDraftModel && opt.num_spec > 0;
  }
  draft_.reset();
  if (need_draft) {
    if (!draft) return Status::Error("demo engine: a request uses the draft model but no draft weights were given");
    draft_ = std::make_unique<DraftModel>();
    GDN_RETURN_IF_ERROR(draft_->init(*draft, opt.device, opt.max_running, cols_, opt.pad, opt.check_metadata, scratch));
  }
  reqs_.clear();
  for (RequestSpec& r : reqs) {
    Live l;
    l.spec = std::move(r);
    reqs_.push_back(std::move(l));
  }
  stats_ = EngineStats();
  stats_.proposed_at.assign(static_cast<size_t>(opt.num_spec), 0);
  stats_.accepted_at.assign(static_cast<size_t>(opt.num_spec), 0);
  rng_ = Rng(opt.seed ^ 0xD1B54A32D192ED03ull);
  return Status::Ok();
}

bool Engine::done() const {
  return std::all_of(reqs_.begin(), reqs_.end(), [](const Live& r) { return r.phase == Phase::kDone; });
}

void Engine::admit() {
  int running = 0;
  for (const Live& r : reqs_) running += r.phase == Phase::kPrefill || r.phase == Phase::kDecode;
  for (size_t i = 0; i < reqs_.size(); ++i) {
    Live& r = reqs_[i];
    if (r.phase != Phase::kWaiting) continue;
    if (r.spec.arrival_step > stats_.steps || running >= opt_.max_running) break;  // first come, first served
    const bool uses_draft = draft_ && r.spec.proposer == ProposerKind::kDraftModel;
    if (pool_.free_count() < slots_per_request() ||
        (uses_draft && draft_->pool().free_count() < draft_->slots_per_request())) {
      break;
    }
    pool_.allocate(slots_per_request(), &r.slots);
    if (uses_draft) draft_->start(static_cast<int>(i));
    r.phase = Phase::kPrefill;
    r.accepted = 1;
    r.replay = 0;
    r.path.clear();
    ++running;
  }
}

Status Engine::propose() {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<DraftRequest> model_reqs;
  std::vector<const TreeShape*> shapes;
  for (size_t i = 0; i < reqs_.size(); ++i) {
    Live& r = reqs_[i];
    r.drafts.clear();
    r.parents.clear();
    if (r.phase != Phase::kDecode || opt_.num_spec == 0) continue;
    const int remaining = r.spec.max_new_tokens - static_cast<int>(r.out.size());
    const int k = std::min(opt_.num_spec, remaining - 1);  // never commit past max_new_tokens
    if (k <= 0) continue;
    if (r.spec.proposer == ProposerKind::kNgram) {
      std::vector<int32_t> ctx = r.spec.prompt;
      ctx.insert(ctx.end(), r.out.begin(), r.out.end());
      r.drafts = ngram_propose(ctx, k, opt_.ngram_min, opt_.ngram_max);
    } else if (r.spec.proposer == ProposerKind::kDraftModel) {
      model_reqs.push_back({static_cast<int>(i), r.out.back(), r.accepted, k});
      if (tree()) shapes.push_back(&shapes_[static_cast<size_t>(k - 1)]);
    }
  }
  if (!model_reqs.empty()) {
    std::vector<std::vector<int32_t>> drafts;
    if (tree()) {
      GDN_RETURN_IF_ERROR(draft_->propose_tree(model_reqs, shapes, &drafts));
    } else {
      GDN_RETURN_IF_ERROR(draft_->propose(model_reqs, &drafts));
    }
    for (size_t j = 0; j < model_reqs.size(); ++j) {
      Live& r = reqs_[model_reqs[j].req];
      r.drafts = std::move(drafts[j]);
      if (!tree()) continue;
      r.parents.assign(shapes[j]->parent.begin(), shapes[j]->parent.end());
      for (int32_t& p : r.parents) p += 1;  // node index -> local token index (the root is 0)
    }
  }
  for (Live& r : reqs_) {  // trees: a chain where the proposer drafted one (n-gram)
    if (!tree() || r.parents.size() == r.drafts.size()) continue;
    r.parents.resize(r.drafts.size());
    std::iota(r.parents.begin(), r.parents.end(), 0);
  }
  // Tunable acceptance: replace a drafted token by a different one with probability `corrupt`.
  const int64_t vocab = target_->cfg.vocab;
  for (Live& r : reqs_) {
    for (int32_t& t : r.drafts) {
      if (opt_.corrupt > 0 && rng_.uniform() < opt_.corrupt) {
        t = static_cast<int32_t>((t + 1 + rng_.below(vocab - 1)) % vocab);
      }
    }
  }
  stats_.draft_seconds += since(t0);
  return Status::Ok();
}

std::vector<Item> Engine::schedule() {
  int64_t budget = opt_.token_budget;
  std::vector<char> chosen(reqs_.size(), 0);
  std::vector<int64_t> piece(reqs_.size(), 0);
  std::vector<int64_t> extra(reqs_.size(), 0);  // trees: nodes past the chain part
  for (size_t i = 0; i < reqs_.size(); ++i) {  // decoding requests first: they always fit
    if (reqs_[i].phase != Phase::kDecode) continue;
    chosen[i] = 1;
    const int64_t want = 1 + static_cast<int64_t>(reqs_[i].drafts.size());
    const int64_t now = tree() ? std::min(want, cols_) : want;
    extra[i] = want - now;
    budget -= now;
  }
  for (size_t i = 0; i < reqs_.size(); ++i) {  // then whole prefill pieces while they fit
    const Live& r = reqs_[i];
    if (r.phase != Phase::kPrefill) continue;
    piece[i] = std::min<int64_t>(opt_.prefill_chunk, static_cast<int64_t>(r.spec.prompt.size()) - r.prefilled);
    if (piece[i] > budget) continue;
    chosen[i] = 1;
    budget -= piece[i];
  }
  for (size_t i = 0; i < reqs_.size(); ++i) {  // trees: the other nodes with what is left
    if (extra[i] == 0) continue;
    const int64_t drop = extra[i] - std::min(extra[i], std::max<int64_t>(budget, 0));
    budget -= extra[i] - drop;
    Live& r = reqs_[i];
    r.drafts.resize(r.drafts.size() - static_cast<size_t>(drop));  // node order: a prefix is a tree
    r.parents.resize(r.drafts.size());
    stats_.tree_trimmed += drop;
  }
  std::vector<Item> items;
  for (size_t i = 0; i < reqs_.size(); ++i) {
    if (!chosen[i]) continue;
    const Live& r = reqs_[i];
    Item it;
    it.req = static_cast<int>(i);
    it.replay = r.replay;
    if (r.phase == Phase::kPrefill) {
      it.kind = ItemKind::kPrefill;
      it.tokens.assign(r.spec.prompt.begin() + r.prefilled, r.spec.prompt.begin() + r.prefilled + piece[i]);
      it.has_init = r.prefilled > 0;
      it.last_piece = r.prefilled + piece[i] == static_cast<int64_t>(r.spec.prompt.size());
    } else if (r.drafts.empty() && r.accepted == 1) {
      it.kind = ItemKind::kDecode;  // state is in column 0: a plain decode reads it there
      it.tokens = {r.out.back()};
      it.path = r.path;
    } else {
      it.kind = ItemKind::kVerify;
      it.tokens = {r.out.back()};
      it.tokens.insert(it.tokens.end(), r.drafts.begin(), r.drafts.end());
      it.accepted = r.accepted;
      it.path = r.path;
      if (tree()) {
        it.parents = {-1};
        it.parents.insert(it.parents.end(), r.parents.begin(), r.parents.end());
      }
    }
    items.push_back(std::move(it));
  }
  return items;
}

Status Engine::commit(const std::vector<Item>& items, const std::vector<std::pair<int, int>>& owner,
                      const std::vector<float>& logits) {
  const int64_t vocab = target_->cfg.vocab;
  std::vector<std::vector<int32_t>> greedy(items.size());
  for (size_t e = 0; e < owner.size(); ++e) {
    const int32_t tok = argmax(&logits[e * vocab], vocab);
    if (tok < 0) {
      return Status::Error("demo engine: NaN logits for request " + str(reqs_[items[owner[e].first].req].spec.id) +
                           " at step " + str(stats_.steps));
    }
    greedy[owner[e].first].push_back(tok);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    Live& r = reqs_[it.req];
    const std::vector<int32_t>& g = greedy[i];
    auto emit = [&](int32_t t) {
      r.out.push_back(t);
      r.out_step.push_back(stats_.steps);
      ++stats_.generated;
    };
    if (it.kind == ItemKind::kPrefill) {
      r.prefilled += static_cast<int64_t>(it.tokens.size());
      ++stats_.prefill_pieces;
      if (!it.last_piece) continue;
      emit(g.at(0));
      r.phase = Phase::kDecode;
      r.accepted = 1;  // state in column 0, window in rows 0..W-2
      r.replay = 0;    // deferred: committed, nothing logged
      r.path.clear();
    } else if (it.kind == ItemKind::kDecode) {
      emit(g.at(0));
      r.accepted = 1;
      r.replay = 0;
      r.path.clear();
      ++stats_.plain_decodes;
      ++stats_.decode_request_steps;
      ++stats_.decode_tokens;
    } else if (tree()) {
      commit_tree(it, g, r);
    } else {
      // Greedy acceptance: draft j is kept while it equals the target's choice after the tokens before it.
      const int n = static_cast<int>(it.tokens.size()) - 1;
      int m = 0;
      while (m < n && it.tokens[m + 1] == g.at(m)) ++m;
      for (int j = 0; j < m; ++j) emit(it.tokens[j + 1]);
      emit(g.at(m));  // the bonus token
      r.accepted = opt_.inject_fault && m > 0 ? m : m + 1;  // the next verify reads column a - 1
      r.replay = r.accepted;  // deferred: the tokens of this step's log to replay
      const int kind = static_cast<int>(r.spec.proposer);
      for (int j = 0; j < n; ++j) ++stats_.proposed_at[j];
      for (int j = 0; j < m; ++j) ++stats_.accepted_at[j];
      stats_.proposed[kind] += n;
      stats_.accepted[kind] += m;
      ++stats_.verifies;
      stats_.verify_tokens += n + 1;
      ++stats_.decode_request_steps;
      stats_.decode_tokens += m + 1;
    }
    if (static_cast<int>(r.out.size()) >= r.spec.max_new_tokens) finish(r);
  }
  return Status::Ok();
}

// Tree acceptance (tree.h): the longest root-to-node path of target choices, its tokens and the
// bonus token emitted, the path's log rows replayed next step. Per depth d: proposed when the tree
// reaches depth d, accepted when the path does.
void Engine::commit_tree(const Item& it, const std::vector<int32_t>& g, Live& r) {
  const int n = static_cast<int>(it.tokens.size()) - 1;
  const std::vector<int32_t> path = accept_path(it.tokens, it.parents, g);
  const int m = static_cast<int>(path.size()) - 1;
  for (int j = 1; j <= m; ++j) {
    r.out.push_back(it.tokens[static_cast<size_t>(path[j])]);
    r.out_step.push_back(stats_.steps);
  }
  r.out.push_back(g.at(static_cast<size_t>(path.back())));  // the bonus token
  r.out_step.push_back(stats_.steps);
  stats_.generated += m + 1;
  r.accepted = opt_.inject_fault && m > 0 ? m : m + 1;
  r.replay = r.accepted;
  r.path = path;
  std::vector<int32_t> depth(it.tokens.size(), 0);
  int depth_max = 0;
  for (int t = 1; t <= n; ++t) {
    depth[t] = depth[static_cast<size_t>(it.parents[t])] + 1;
    depth_max = std::max(depth_max, depth[t]);
  }
  bool off = false;  // a path node that is not its parent's first (top-1) child
  for (int j = 1; j <= m; ++j) {
    const auto first = std::find(it.parents.begin() + 1, it.parents.end(), path[j - 1]);
    off |= first - it.parents.begin() != path[j];
  }
  const int kind = static_cast<int>(r.spec.proposer);
  for (int j = 0; j < depth_max; ++j) ++stats_.proposed_at[j];
  for (int j = 0; j < m; ++j) ++stats_.accepted_at[j];
  stats_.proposed[kind] += n;
  stats_.accepted[kind] += m;
  stats_.tree_nodes += n;
  stats_.off_chain += off;
  ++stats_.verifies;
  stats_.verify_tokens += n + 1;
  ++stats_.decode_request_steps;
  stats_.decode_tokens += m + 1;
}

// The draft model keeps its state like the target's per-token mode: after a tree step it runs the
// accepted path only (as a verify of those tokens), so the state after it is in column m.
std::vector<Item> Engine::accepted_paths(const std::vector<Item>& items) const {
  std::vector<Item> out = items;
  for (Item& it : out) {
    if (it.kind != ItemKind::kVerify) continue;
    std::vector<int32_t> toks;
    for (int32_t t : reqs_[it.req].path) toks.push_back(it.tokens.at(static_cast<size_t>(t)));
    it.tokens = std::move(toks);
    it.parents.clear();
    it.path.clear();
  }
  return out;
}

// What gdn_attention writes for the items, in every layer: a state per sequence, one per stored
// verify token in the per-token mode (t < cols), and in the deferred mode each verify token's logs.
void Engine::count_writes(const std::vector<Item>& items) {
  const ModelConfig& c = target_->cfg;
  const int64_t state = c.num_v_heads * c.head_v_dim * c.head_k_dim * 4;
  const int64_t log = (c.num_v_heads * (c.head_k_dim + c.head_v_dim + 2) + c.conv_dim()) * 4;
  for (const Item& it : items) {
    const int64_t T = static_cast<int64_t>(it.tokens.size());
    const bool verify = it.kind == ItemKind::kVerify;
    stats_.state_bytes += c.layers * state * (verify && !opt_.deferred ? std::min<int64_t>(T, cols_) : 1);
    if (verify && opt_.deferred) stats_.log_bytes += c.layers * log * std::min<int64_t>(T, log_cols_);
  }
}

void Engine::finish(Live& r) {
  pool_.release(&r.slots);
  if (draft_) draft_->finish(static_cast<int>(&r - reqs_.data()));
  r.phase = Phase::kDone;
}

Status Engine::step() {
  const auto t0 = std::chrono::steady_clock::now();
  admit();
  GDN_RETURN_IF_ERROR(propose());
  const std::vector<Item> items = schedule();
  if (!items.empty()) {
    BatchLayout layout;
    const Batch b = build_batch(
        items, [this](int req) -> const std::vector<int32_t>& { return reqs_[req].slots; },
        opt_.deferred ? 1 : cols_, opt_.pad, &layout, opt_.deferred, tree() ? log_cols_ : 0);
    count_writes(items);
    std::vector<std::pair<int, int>> owner;
    const std::vector<int32_t> rows = logit_rows(items, layout, &owner);
    std::vector<float> logits;
    const auto t1 = std::chrono::steady_clock::now();
    GDN_RETURN_IF_ERROR(runner_.forward(b, rows, &logits));
    stats_.target_seconds += since(t1);
    if (draft_ && !tree()) {
      const auto t2 = std::chrono::steady_clock::now();
      GDN_RETURN_IF_ERROR(draft_->mirror(items));
      stats_.draft_seconds += since(t2);
    }
    stats_.forward_tokens += b.num_actual_tokens;
    stats_.max_batch_tokens = std::max(stats_.max_batch_tokens, b.num_actual_tokens);
    if (layout.pad_rows > 0 || layout.pad_sequences > 0) ++stats_.padded_steps;
    stats_.pad_rows += layout.pad_rows;
    stats_.pad_sequences += layout.pad_sequences;
    GDN_RETURN_IF_ERROR(commit(items, owner, logits));
    if (draft_ && tree()) {  // the accepted paths are known now
      const auto t2 = std::chrono::steady_clock::now();
      GDN_RETURN_IF_ERROR(draft_->mirror(accepted_paths(items)));
      stats_.draft_seconds += since(t2);
    }
  }
  ++stats_.steps;
  stats_.seconds += since(t0);
  return Status::Ok();
}

}  // namespace gdn::demo
