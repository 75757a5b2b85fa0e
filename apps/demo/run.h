// apps/demo/run.h — the whole demo: a speculative engine and a plain greedy engine run side by side on
// the same requests and the same target model; every generated token is compared as soon as both
// engines have it. Any difference is a lossless failure, reported with the request, the step and
// the position.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "demo/engine.h"

namespace gdn::demo {

struct DemoConfig {
  // Model.
  std::string preset = "small";
  ModelConfig model;                // filled from the preset, then overridden by flags
  std::string weights_path;         // safetensors; empty: seeded weights
  std::string save_weights_path;    // write the target weights here (safetensors)
  uint64_t seed = 1;
  // Workload.
  int requests = 16;
  int prompt_min = 6, prompt_max = 72;
  int gen_min = 16, gen_max = 48;
  int arrival_gap = 2;              // mean steps between arrivals
  // Speculation.
  int num_spec = 3;
  std::string proposer = "mixed";   // draft | ngram | mixed (alternating per request) | none
  double draft_noise = 0.05;        // draft = target + noise (relative to each matrix's scale)
  double corrupt = 0.0;             // probability that a drafted token is replaced
  int ngram_min = 1, ngram_max = 4;
  // Engine.
  int max_running = 8;
  int token_budget = 64;
  int prefill_chunk = 16;
  bool pad = true;
  bool check_metadata = true;
  Device device = Device::kCPU;
  int threads = 0;                  // matmul threads; 0: the machine's cores (at most 8)
  bool inject_fault = false;        // a deliberate state-bookkeeping bug (tests of the check)
  bool deferred = false;            // deferred commit: one slot per request and logs
  int tree = 0;                     // deferred: token-tree drafts of this many nodes (0: chains)
  int tree_branch = 2;              // candidates per node at the branching levels (1: a chain)
  int tree_levels = 2;              // levels that branch; below them the draft's top-1
};

// The configuration of `make test` (and `gdn demo --short`): a tiny model, a few seconds at most.
DemoConfig short_demo_config();

// Applies the preset named in cfg->preset to cfg->model.
Status apply_preset(DemoConfig* cfg);

struct Mismatch {
  int request = 0;
  int64_t step = 0;        // speculative engine step that committed the token
  int64_t plain_step = 0;  // plain engine step that produced it
  int64_t position = 0;    // index among the request's generated tokens
  int32_t speculative = 0, plain = 0;
};

struct DemoProgress {
  int64_t spec_tokens = 0, plain_tokens = 0, total_tokens = 0;  // per engine; total = sum of max_new_tokens
  int64_t spec_steps = 0, plain_steps = 0;
  int finished = 0, requests = 0;
};

struct DemoResult {
  ModelConfig model;
  std::vector<RequestSpec> requests;
  EngineStats spec, plain;
  int64_t spec_pool_slots = 0, spec_pool_peak = 0, spec_pool_allocations = 0, spec_pool_releases = 0;
  int64_t attention_calls = 0;
  bool lossless = true;
  std::optional<Mismatch> mismatch;
  std::vector<std::vector<int32_t>> outputs;  // speculative engine, per request
  std::vector<int64_t> finish_step, plain_finish_step;  // step of each request's last token
};

using ProgressFn = std::function<void(const DemoProgress&)>;

// A non-ok status is an error of the run itself (bad configuration, a failed op call); a lossless
// failure is reported in result->lossless / result->mismatch with an ok status.
Status run_demo(const DemoConfig& cfg, DemoResult* result, const ProgressFn& progress = {});

}  // namespace gdn::demo
