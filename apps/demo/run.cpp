// The demo driver: requests, the two engines in lockstep, the token-by-token comparison.
#include "demo/run.h"

#include <algorithm>
#include <thread>
#include <tuple>

#include "demo/math.h"

namespace gdn::demo {
namespace {

std::string str(int64_t x) { return std::to_string(x); }

// Prompts built from a small bank of phrases and random tokens, so that prompt lookup (n-gram)
// has something to find, with different lengths; arrivals spread over the first steps.
std::vector<RequestSpec> make_requests(const DemoConfig& c, int64_t vocab) {
  Rng rng(c.seed * 0x9E3779B97F4A7C15ull + 17);
  std::vector<std::vector<int32_t>> phrases(8);
  for (auto& p : phrases) {
    p.resize(static_cast<size_t>(rng.range(3, 6)));
    for (auto& t : p) t = static_cast<int32_t>(rng.below(vocab));
  }
  std::vector<RequestSpec> reqs;
  int64_t arrival = 0;
  for (int i = 0; i < c.requests; ++i) {
    RequestSpec r;
    r.id = i;
    const int64_t len = rng.range(c.prompt_min, c.prompt_max);
    while (static_cast<int64_t>(r.prompt.size()) < len) {
      if (rng.uniform() < 0.5) {
        const auto& p = phrases[static_cast<size_t>(rng.below(static_cast<int64_t>(phrases.size())))];
        r.prompt.insert(r.prompt.end(), p.begin(), p.end());
      } else {
        r.prompt.push_back(static_cast<int32_t>(rng.below(vocab)));
      }
    }
    r.prompt.resize(static_cast<size_t>(len));
    r.max_new_tokens = static_cast<int>(rng.range(c.gen_min, c.gen_max));
    r.arrival_step = arrival;
    arrival += rng.range(0, 2 * c.arrival_gap);
    if (c.proposer == "draft") r.proposer = ProposerKind::kDraftModel;
    else if (c.proposer == "ngram") r.proposer = ProposerKind::kNgram;
    else if (c.proposer == "mixed") r.proposer = i % 2 == 0 ? ProposerKind::kDraftModel : ProposerKind::kNgram;
    reqs.push_back(std::move(r));
  }
  return reqs;
}

Status check_config(const DemoConfig& c) {
  if (c.proposer != "draft" && c.proposer != "ngram" && c.proposer != "mixed" && c.proposer != "none") {
    return Status::Error("--proposer must be draft, ngram, mixed or none, got '" + c.proposer + "'");
  }
  if (c.prompt_min < 1 || c.prompt_max < c.prompt_min) {
    return Status::Error("--prompt-len needs 1 <= min <= max, got " + str(c.prompt_min) + ".." + str(c.prompt_max));
  }
  if (c.gen_min < 1 || c.gen_max < c.gen_min) {
    return Status::Error("--gen-len needs 1 <= min <= max, got " + str(c.gen_min) + ".." + str(c.gen_max));
  }
  if (c.num_spec < 0 || c.num_spec > 16) return Status::Error("--num-spec must be in [0, 16], got " + str(c.num_spec));
  if (c.corrupt < 0 || c.corrupt > 1) return Status::Error("--corrupt must be in [0, 1], got " + std::to_string(c.corrupt));
  if (c.draft_noise < 0) return Status::Error("--draft-noise must be >= 0, got " + std::to_string(c.draft_noise));
  if (c.tree < 0 || c.tree > 64) return Status::Error("--tree must be in [0, 64], got " + str(c.tree));
  if (c.tree_branch < 1 || c.tree_branch > 8) {
    return Status::Error("--tree-branch must be in [1, 8], got " + str(c.tree_branch));
  }
  if (c.tree_levels < 0 || c.tree_levels > 16) {
    return Status::Error("--tree-levels must be in [0, 16], got " + str(c.tree_levels));
  }
  // Sizes the engine allocates by (requests, pools, batches, threads): bounded, so that a typo
  // is an error instead of an allocation that fails.
  for (const auto& [name, v, lo, hi] : {std::tuple<const char*, int, int, int>{"--requests", c.requests, 1, 1 << 20},
                                        {"--max-running", c.max_running, 1, 1 << 12},
                                        {"--token-budget", c.token_budget, 1, 1 << 20},
                                        {"--prefill-chunk", c.prefill_chunk, 1, 1 << 20},
                                        {"--prompt-len max", c.prompt_max, 1, 1 << 20},
                                        {"--gen-len max", c.gen_max, 1, 1 << 20},
                                        {"--arrival-gap", c.arrival_gap, 0, 1 << 20},
                                        {"--threads", c.threads, 0, 256}}) {
    if (v < lo || v > hi) {
      return Status::Error(std::string(name) + " must be in [" + str(lo) + ", " + str(hi) + "], got " + str(v));
    }
  }
  if (c.tree > 0 && !c.deferred) {
    return Status::Error("--tree needs --deferred (token trees are a deferred-commit mode)");
  }
  return Status::Ok();
}

}  // namespace

DemoConfig short_demo_config() {
  DemoConfig c;
  c.preset = "tiny";
  (void)preset_config(c.preset, &c.model);
  c.requests = 6;
  c.prompt_min = 3;
  c.prompt_max = 40;
  c.gen_min = 8;
  c.gen_max = 20;
  c.max_running = 4;
  c.token_budget = 32;
  c.prefill_chunk = 12;
  c.num_spec = 3;
  c.threads = 1;
  return c;
}

Status apply_preset(DemoConfig* cfg) { return preset_config(cfg->preset, &cfg->model); }

Status run_demo(const DemoConfig& cfg, DemoResult* res, const ProgressFn& progress) {
  GDN_RETURN_IF_ERROR(check_config(cfg));
  GDN_RETURN_IF_ERROR(cfg.model.validate());
  GDN_RETURN_IF_ERROR(device_ready(cfg.device));
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  set_math_threads(cfg.threads > 0 ? cfg.threads : std::min(hw, 8));

  Weights target;
  if (!cfg.weights_path.empty()) {
    GDN_RETURN_IF_ERROR(load_weights(cfg.weights_path, cfg.model, &target));
  } else {
    target = random_weights(cfg.model, cfg.seed);
  }
  if (!cfg.save_weights_path.empty()) GDN_RETURN_IF_ERROR(save_weights(cfg.save_weights_path, target));
  const Weights draft = perturbed_weights(target, cfg.draft_noise, cfg.seed + 1000003);

  *res = DemoResult();
  res->model = target.cfg;
  res->requests = make_requests(cfg, target.cfg.vocab);

  EngineOptions so;
  so.num_spec = cfg.proposer == "none" ? 0 : cfg.num_spec;
  so.max_running = cfg.max_running;
  so.token_budget = cfg.token_budget;
  so.prefill_chunk = cfg.prefill_chunk;
  so.pad.enabled = cfg.pad;
  so.check_metadata = cfg.check_metadata;
  so.device = cfg.device;
  so.ngram_min = cfg.ngram_min;
  so.ngram_max = cfg.ngram_max;
  so.corrupt = cfg.corrupt;
  so.seed = cfg.seed;
  so.inject_fault = cfg.inject_fault;
  so.deferred = cfg.deferred;
  so.tree = TreeRule{cfg.tree, cfg.tree_branch, cfg.tree_levels};
  EngineOptions po = so;  // the reference: plain greedy decoding, same scheduler and chunks
  po.num_spec = 0;
  po.deferred = false;
  po.tree = TreeRule();
  std::vector<RequestSpec> plain_reqs = res->requests;
  for (auto& r : plain_reqs) r.proposer = ProposerKind::kNone;

  Engine spec, plain;
  GDN_RETURN_IF_ERROR(spec.init(target, &draft, so, res->requests));
  GDN_RETURN_IF_ERROR(plain.init(target, nullptr, po, plain_reqs));

  DemoProgress pr;
  pr.requests = cfg.requests;
  for (const auto& r : res->requests) pr.total_tokens += r.max_new_tokens;
  std::vector<size_t> checked(res->requests.size(), 0);
  const int64_t step_limit = 64 + 4 * (pr.total_tokens + cfg.requests * (cfg.prompt_max + 2 * cfg.arrival_gap + 1));
  while (!spec.done() || !plain.done()) {
    if (!spec.done()) GDN_RETURN_IF_ERROR(spec.step());
    if (!plain.done()) GDN_RETURN_IF_ERROR(plain.step());
    if (spec.steps() > step_limit || plain.steps() > step_limit) {
      return Status::Error("demo: no progress after " + str(step_limit) + " steps (scheduler stuck)");
    }
    pr.spec_tokens = pr.plain_tokens = 0;
    pr.finished = 0;
    for (int r = 0; r < spec.num_requests(); ++r) {
      const auto& a = spec.output(r);
      const auto& b = plain.output(r);
      pr.spec_tokens += static_cast<int64_t>(a.size());
      pr.plain_tokens += static_cast<int64_t>(b.size());
      pr.finished += static_cast<int>(a.size()) >= res->requests[r].max_new_tokens;
      const size_t upto = std::min(a.size(), b.size());
      for (size_t p = checked[r]; p < upto && res->lossless; ++p) {
        if (a[p] == b[p]) continue;
        res->lossless = false;
        res->mismatch = Mismatch{r, spec.output_step(r, p), plain.output_step(r, p), static_cast<int64_t>(p), a[p], b[p]};
      }
      checked[r] = upto;
    }
    pr.spec_steps = spec.steps();
    pr.plain_steps = plain.steps();
    if (progress) progress(pr);
    if (!res->lossless) break;  // fail at the first difference
  }
  res->spec = spec.stats();
  res->plain = plain.stats();
  res->spec_pool_slots = spec.pool().num_slots();
  res->spec_pool_peak = spec.pool().peak();
  res->spec_pool_allocations = spec.pool().allocations();
  res->spec_pool_releases = spec.pool().releases();
  res->attention_calls = spec.runner().stats().attention_calls;
  for (int r = 0; r < spec.num_requests(); ++r) {
    res->outputs.push_back(spec.output(r));
    const size_t ns = spec.output(r).size(), np = plain.output(r).size();
    res->finish_step.push_back(ns ? spec.output_step(r, ns - 1) : -1);
    res->plain_finish_step.push_back(np ? plain.output_step(r, np - 1) : -1);
  }
  if (res->lossless) {
    for (int r = 0; r < spec.num_requests(); ++r) {
      if (static_cast<int>(spec.output(r).size()) != res->requests[r].max_new_tokens ||
          spec.output(r).size() != plain.output(r).size()) {
        return Status::Error("demo: request " + str(r) + " ended with " + str(spec.output(r).size()) +
                             " tokens (plain: " + str(plain.output(r).size()) + "), expected " +
                             str(res->requests[r].max_new_tokens));
      }
    }
  }
  return Status::Ok();
}

}  // namespace gdn::demo
