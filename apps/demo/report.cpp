// Summary table, JSON and progress line of the demo.
#include "demo/report.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "demo/math.h"

namespace gdn::demo {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

double ratio(int64_t a, int64_t b) { return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 0.0; }

std::string row(const std::string& name, const std::string& a, const std::string& b) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "  %-30s %14s %14s\n", name.c_str(), a.c_str(), b.c_str());
  return buf;
}

std::string proposers_line(const DemoConfig& c) {
  const std::string draft = "draft model (target + noise " + fmt("%.3g", c.draft_noise) + ")";
  const std::string ngram = "n-gram (n = " + std::to_string(c.ngram_max) + ".." + std::to_string(c.ngram_min) + ")";
  std::string s;
  if (c.proposer == "draft") s = draft + " on every request";
  else if (c.proposer == "ngram") s = ngram + " on every request";
  else if (c.proposer == "mixed") s = draft + " on even requests, " + ngram + " on odd ones";
  else s = "none (plain decoding on both sides)";
  if (c.tree > 0 && c.proposer != "none") {
    s += "; token trees of up to " + std::to_string(c.tree) + " nodes (draft model: top-" +
         std::to_string(c.tree_branch) + " at levels 1.." + std::to_string(c.tree_levels) +
         ", top-1 below; n-gram: chains)";
  }
  if (c.corrupt > 0) s += "; drafts corrupted with p = " + fmt("%.3g", c.corrupt);
  return s + "; greedy acceptance";
}

double per_step(int64_t bytes, const EngineStats& e) {
  return static_cast<double>(bytes) / static_cast<double>(std::max<int64_t>(1, e.steps));
}

}  // namespace

double tokens_per_second(const EngineStats& s) { return s.seconds > 0 ? s.generated / s.seconds : 0.0; }
double mean_accepted_length(const EngineStats& s) { return ratio(s.decode_tokens, s.decode_request_steps); }

std::string mismatch_message(const Mismatch& m) {
  std::ostringstream s;
  s << "request " << m.request << ", step " << m.step << ", position " << m.position
    << ": speculative decoding produced token " << m.speculative << " where plain greedy decoding produced "
    << m.plain << " (plain engine step " << m.plain_step << ")";
  return s.str();
}

std::string summary_table(const DemoConfig& c, const DemoResult& r) {
  std::ostringstream s;
  const EngineStats& a = r.spec;
  const EngineStats& b = r.plain;
  int pmin = 1 << 30, pmax = 0, gmin = 1 << 30, gmax = 0;
  int64_t last_arrival = 0;
  for (const auto& q : r.requests) {
    pmin = std::min(pmin, static_cast<int>(q.prompt.size()));
    pmax = std::max(pmax, static_cast<int>(q.prompt.size()));
    gmin = std::min(gmin, q.max_new_tokens);
    gmax = std::max(gmax, q.max_new_tokens);
    last_arrival = std::max(last_arrival, q.arrival_step);
  }
  s << "gdn demo: speculative decoding through gdn_attention (" << (c.device == Device::kCUDA ? "cuda" : "cpu")
    << ", " << math_threads() << " matmul thread" << (math_threads() > 1 ? "s" : "") << ")\n";
  s << "  model      " << r.model.describe() << (c.weights_path.empty() ? ", seeded" : ", from " + c.weights_path)
    << "\n";
  s << "  requests   " << r.requests.size() << " (prompts " << pmin << ".." << pmax << " tokens, " << gmin << ".."
    << gmax << " new tokens, arriving over steps 0.." << last_arrival << ")\n";
  s << "  engine     up to " << c.max_running << " running, " << c.token_budget << "-token steps, prefill chunks of "
    << c.prefill_chunk << ", "
    << (c.deferred ? std::string(c.tree > 0 ? "1 slot (deferred commit, token trees)" : "1 slot (deferred commit)")
                   : "1 + " + std::to_string(c.num_spec) + " slots")
    << " per request (pool " << r.spec_pool_slots << ", peak "
    << r.spec_pool_peak << ", " << r.spec_pool_allocations << " rows allocated, " << r.spec_pool_releases
    << " freed)\n";
  s << "  proposers  " << proposers_line(c) << "\n\n";

  s << row("", "speculative", "plain");
  s << row("engine steps", std::to_string(a.steps), std::to_string(b.steps));
  s << row("tokens generated", std::to_string(a.generated), std::to_string(b.generated));
  s << row("tokens through the model", std::to_string(a.forward_tokens), std::to_string(b.forward_tokens));
  s << row("tokens/s", fmt("%.1f", tokens_per_second(a)), fmt("%.1f", tokens_per_second(b)));
  s << row("seconds (target / drafting)", fmt("%.3f", a.target_seconds) + " / " + fmt("%.3f", a.draft_seconds),
           fmt("%.3f", b.target_seconds));
  s << row("mean accepted length", fmt("%.2f", mean_accepted_length(a)), fmt("%.2f", mean_accepted_length(b)));
  auto kb = [](int64_t bytes, const EngineStats& e) { return fmt("%.1f KB", per_step(bytes, e) / 1024.0); };
  s << row(c.deferred ? "state + log written per step" : "state written per step",
           kb(a.state_bytes, a) + (c.deferred ? " + " + kb(a.log_bytes, a) : std::string()), kb(b.state_bytes, b));
  if (c.tree > 0) {
    s << row("tree nodes per verify", fmt("%.2f", ratio(a.tree_nodes, a.verifies)), "-");
    s << row("paths off the top-1 chain", std::to_string(a.off_chain) + " of " + std::to_string(a.verifies), "-");
    s << row("nodes trimmed (token budget)", std::to_string(a.tree_trimmed), "-");
  }
  if (c.device == Device::kCPU && tokens_per_second(a) < tokens_per_second(b)) {
    s << "  (on the CPU a step costs in proportion to its tokens and the draft model is as large as the\n"
         "   target, so speculation saves engine steps here, not time; on a GPU a decode step costs about\n"
         "   the same for 1 or 1 + num_spec tokens)\n";
  }
  s << "\n  batches (speculative engine; " << r.attention_calls << " gdn_attention calls, one per layer per step)\n";
  s << "    prefill pieces " << a.prefill_pieces << ", plain decodes " << a.plain_decodes << ", verify sequences "
    << a.verifies << " (" << a.verify_tokens << " tokens), largest batch " << a.max_batch_tokens << " tokens\n";
  s << "    padded like CUDA-graph replays: " << a.padded_steps << " steps, " << a.pad_rows << " pad rows, "
    << a.pad_sequences << " pad sequences (slot -1)\n";
  s << (c.tree > 0 ? "\n  acceptance per tree depth:    " : "\n  acceptance per draft position:");
  if (a.proposed_at.empty()) s << " (no speculation)";
  for (size_t j = 0; j < a.proposed_at.size(); ++j) {
    s << "  " << j + 1 << ": " << fmt("%.2f", ratio(a.accepted_at[j], a.proposed_at[j])) << " ("
      << a.accepted_at[j] << "/" << a.proposed_at[j] << ")";
  }
  s << "\n";
  const int kd = static_cast<int>(ProposerKind::kDraftModel), kn = static_cast<int>(ProposerKind::kNgram);
  s << "  acceptance per proposer:       draft model " << a.accepted[kd] << "/" << a.proposed[kd] << ", n-gram "
    << a.accepted[kn] << "/" << a.proposed[kn] << "\n\n";
  if (r.lossless) {
    s << "lossless: yes (" << a.generated << " tokens of " << r.requests.size()
      << " requests equal plain greedy decoding)\n";
  } else {
    s << "lossless: NO (" << mismatch_message(*r.mismatch) << ")\n";
  }
  return s.str();
}

nlohmann::json summary_json(const DemoConfig& c, const DemoResult& r) {
  using nlohmann::json;
  auto engine = [](const EngineStats& s) {
    return json{{"steps", s.steps},
                {"tokens_generated", s.generated},
                {"forward_tokens", s.forward_tokens},
                {"tokens_per_s", tokens_per_second(s)},
                {"seconds", s.seconds},
                {"target_seconds", s.target_seconds},
                {"draft_seconds", s.draft_seconds},
                {"mean_accepted_length", mean_accepted_length(s)},
                {"prefill_pieces", s.prefill_pieces},
                {"plain_decodes", s.plain_decodes},
                {"verify_sequences", s.verifies},
                {"verify_tokens", s.verify_tokens},
                {"padded_steps", s.padded_steps},
                {"pad_rows", s.pad_rows},
                {"pad_sequences", s.pad_sequences},
                {"state_bytes_written", s.state_bytes},
                {"log_bytes_written", s.log_bytes},
                {"state_bytes_per_step", per_step(s.state_bytes, s)},
                {"log_bytes_per_step", per_step(s.log_bytes, s)},
                {"tree_nodes", s.tree_nodes},
                {"tree_nodes_trimmed", s.tree_trimmed},
                {"off_chain_paths", s.off_chain}};
  };
  const EngineStats& a = r.spec;
  json per_pos = json::array();
  for (size_t j = 0; j < a.proposed_at.size(); ++j) {
    per_pos.push_back({{"position", j + 1},
                       {"proposed", a.proposed_at[j]},
                       {"accepted", a.accepted_at[j]},
                       {"rate", ratio(a.accepted_at[j], a.proposed_at[j])}});
  }
  const int kd = static_cast<int>(ProposerKind::kDraftModel), kn = static_cast<int>(ProposerKind::kNgram);
  json j{{"device", c.device == Device::kCUDA ? "cuda" : "cpu"},
         {"model", r.model.describe()},
         {"seed", c.seed},
         {"requests", r.requests.size()},
         {"num_spec", c.num_spec},
         {"verify_commit", c.deferred ? "deferred" : "per_token"},
         {"drafts", c.tree > 0 ? "tree" : "chain"},
         {"tree",
          {{"nodes", c.tree},
           {"branch", c.tree_branch},
           {"levels", c.tree_levels},
           {"nodes_per_verify", ratio(a.tree_nodes, a.verifies)},
           {"off_chain_paths", a.off_chain},
           {"nodes_trimmed", a.tree_trimmed}}},
         {"proposer", c.proposer},
         {"draft_noise", c.draft_noise},
         {"corrupt", c.corrupt},
         {"steps", a.steps},
         {"mean_accepted_length", mean_accepted_length(a)},
         {"per_position_acceptance", per_pos},
         {"acceptance_by_proposer",
          {{"draft", {{"proposed", a.proposed[kd]}, {"accepted", a.accepted[kd]}}},
           {"ngram", {{"proposed", a.proposed[kn]}, {"accepted", a.accepted[kn]}}}}},
         {"tokens_per_s", {{"speculative", tokens_per_second(a)}, {"plain", tokens_per_second(r.plain)}}},
         {"speculative", engine(a)},
         {"plain", engine(r.plain)},
         {"slot_pool",
          {{"slots", r.spec_pool_slots},
           {"peak", r.spec_pool_peak},
           {"allocations", r.spec_pool_allocations},
           {"releases", r.spec_pool_releases}}},
         {"gdn_attention_calls", r.attention_calls},
         {"lossless", r.lossless ? "yes" : "no"}};
  json reqs = json::array();
  for (size_t i = 0; i < r.requests.size(); ++i) {
    const RequestSpec& q = r.requests[i];
    reqs.push_back({{"id", q.id},
                    {"prompt_tokens", q.prompt.size()},
                    {"new_tokens", q.max_new_tokens},
                    {"arrival_step", q.arrival_step},
                    {"proposer", to_string(q.proposer)},
                    {"last_token_step", i < r.finish_step.size() ? r.finish_step[i] : -1},
                    {"plain_last_token_step", i < r.plain_finish_step.size() ? r.plain_finish_step[i] : -1}});
  }
  j["per_request"] = reqs;
  if (r.mismatch) {
    const Mismatch& m = *r.mismatch;
    j["mismatch"] = {{"request", m.request},         {"step", m.step},
                     {"plain_step", m.plain_step},   {"position", m.position},
                     {"speculative_token", m.speculative}, {"plain_token", m.plain}};
  }
  return j;
}

std::string progress_line(const DemoProgress& p, int width) {
  const int64_t total = std::max<int64_t>(1, 2 * p.total_tokens);
  const int64_t done = p.spec_tokens + p.plain_tokens;
  const int bar = std::max(10, width - 50);
  const int fill = static_cast<int>(bar * std::min<int64_t>(done, total) / total);
  std::string s = "[" + std::string(static_cast<size_t>(fill), '#') + std::string(static_cast<size_t>(bar - fill), '.') +
                  "]";
  char buf[128];
  std::snprintf(buf, sizeof buf, " spec %lld/%lld plain %lld/%lld tokens, step %lld", static_cast<long long>(p.spec_tokens),
                static_cast<long long>(p.total_tokens), static_cast<long long>(p.plain_tokens),
                static_cast<long long>(p.total_tokens), static_cast<long long>(p.spec_steps));
  return s + buf;
}

}  // namespace gdn::demo
