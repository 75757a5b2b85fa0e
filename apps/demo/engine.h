// apps/demo/engine.h — a continuous-batching engine in miniature, driving gdn_attention the way a
// serving engine does.
//
// Each step: requests that have arrived are admitted while the slot pool has a block-table row
// (1 + num_spec slots) for them; the proposers draft tokens for every decoding request; the step's
// batch is scheduled under a token budget — every decoding request (a verify of 1 + drafts tokens,
// or a plain decode), then prefill pieces of at most `prefill_chunk` tokens (chunked prefill);
// the target model runs the whole mixed batch, one gdn_attention call per layer; greedy
// acceptance commits the accepted drafts and the bonus token and feeds num_accepted_tokens to the
// next step; finished requests give their slots back. With num_spec = 0 it is a plain greedy
// engine (the lossless reference).
//
// Token trees (deferred only, tree.h): a decoding request drafts a tree instead of a chain (the
// draft model's top candidates; the n-gram proposer still drafts a chain), verified as one spec
// sequence with spec_token_parents: the target's greedy token at every node, the longest
// root-to-node path whose tokens are those choices accepted (plus the bonus token), and exactly
// that path's log rows replayed at the next step (spec / non_spec_accepted_path). The chain part
// of a tree (its first num_spec nodes) always fits the token budget; nodes past it are scheduled
// after the prefill pieces with what is left, trimmed from the back of the node order otherwise.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "demo/drafts.h"

namespace gdn::demo {

enum class ProposerKind { kNone, kDraftModel, kNgram };
const char* to_string(ProposerKind p);

struct RequestSpec {
  int id = 0;
  std::vector<int32_t> prompt;
  int max_new_tokens = 1;
  int64_t arrival_step = 0;
  ProposerKind proposer = ProposerKind::kNone;
};

struct EngineOptions {
  int num_spec = 0;             // drafts per step at most; block-table width cols = num_spec + 1
  int max_running = 8;          // requests holding slots at once
  int token_budget = 64;        // tokens per step (at least max_running * cols)
  int prefill_chunk = 16;       // tokens per prefill piece
  PadOptions pad;               // CUDA-graph-style padding of decode-only steps
  bool check_metadata = false;  // gdn::check_metadata before every call
  Device device = Device::kCPU;
  int ngram_min = 1, ngram_max = 4;
  double corrupt = 0.0;         // probability that a drafted token is replaced by another one
  uint64_t seed = 1;            // for corruption
  bool inject_fault = false;    // tests of the checker: after accepting m >= 1 drafts, feed back
                                // num_accepted_tokens = m instead of m + 1 (a bookkeeping bug)
  bool deferred = false;        // deferred commit (docs/contract.md §7): one slot per request
                                // and logs instead of a slot per draft column
  TreeRule tree;                // deferred: token-tree drafts when tree.nodes > 0 (depth <= num_spec)
};

struct EngineStats {
  int64_t steps = 0, forward_tokens = 0;
  int64_t prefill_pieces = 0, plain_decodes = 0, verifies = 0, verify_tokens = 0;
  int64_t padded_steps = 0, pad_rows = 0, pad_sequences = 0, max_batch_tokens = 0;
  int64_t decode_request_steps = 0, decode_tokens = 0;  // mean accepted length = tokens / request-steps
  std::vector<int64_t> proposed_at, accepted_at;        // per draft position 1..num_spec
  int64_t proposed[3] = {0, 0, 0}, accepted[3] = {0, 0, 0};  // per ProposerKind
  int64_t generated = 0;
  double seconds = 0, target_seconds = 0, draft_seconds = 0;
  // Target model, all layers: SSM state bytes gdn_attention wrote (a state per sequence, and per
  // verify token below the block-table width in the per-token mode) and log bytes (deferred).
  int64_t state_bytes = 0, log_bytes = 0;
  // Token trees: drafted nodes verified, nodes trimmed for the token budget, verify steps whose
  // accepted path left the draft's top-1 chain (a token only the tree had).
  int64_t tree_nodes = 0, tree_trimmed = 0, off_chain = 0;
};

class Engine {
 public:
  // `draft` (may be null) is needed when a request uses ProposerKind::kDraftModel.
  Status init(const Weights& target, const Weights* draft, const EngineOptions& opt, std::vector<RequestSpec> reqs);
  bool done() const;
  Status step();

  int64_t steps() const { return stats_.steps; }
  int num_requests() const { return static_cast<int>(reqs_.size()); }
  const std::vector<int32_t>& output(int r) const { return reqs_[r].out; }
  int64_t output_step(int r, size_t pos) const { return reqs_[r].out_step[pos]; }
  const RequestSpec& request(int r) const { return reqs_[r].spec; }
  const EngineStats& stats() const { return stats_; }
  const SlotPool& pool() const { return pool_; }
  const DraftModel* draft_model() const { return draft_.get(); }
  const ModelRunner& runner() const { return runner_; }
  const EngineOptions& options() const { return opt_; }

 private:
  enum class Phase { kWaiting, kPrefill, kDecode, kDone };
  struct Live {
    RequestSpec spec;
    Phase phase = Phase::kWaiting;
    int64_t prefilled = 0;
    std::vector<int32_t> out;
    std::vector<int64_t> out_step;
    std::vector<int32_t> slots;   // block-table row
    int32_t accepted = 1;         // num_accepted_tokens for the next verify
    int32_t replay = 0;           // deferred: logged tokens the next step replays
    std::vector<int32_t> drafts;  // this step's proposals
    std::vector<int32_t> parents; // trees: per draft its parent's local index (0 = the root token)
    std::vector<int32_t> path;    // trees: the log rows the next step replays (the accepted path)
  };
  void admit();
  Status propose();
  std::vector<Item> schedule();
  Status commit(const std::vector<Item>& items, const std::vector<std::pair<int, int>>& owner,
                const std::vector<float>& logits);
  void finish(Live& r);
  void count_writes(const std::vector<Item>& items);
  int64_t slots_per_request() const;
  bool tree() const { return opt_.tree.nodes > 0; }
  void commit_tree(const Item& it, const std::vector<int32_t>& g, Live& r);
  std::vector<Item> accepted_paths(const std::vector<Item>& items) const;

  EngineOptions opt_;
  int64_t cols_ = 1, log_cols_ = 1;
  std::vector<TreeShape> shapes_;  // trees: the template for k drafts at shapes_[k - 1]
  const Weights* target_ = nullptr;
  ModelRunner runner_;
  SlotPool pool_;
  std::unique_ptr<DraftModel> draft_;
  std::vector<Live> reqs_;
  EngineStats stats_;
  Rng rng_{1};
};

}  // namespace gdn::demo
