// apps/demo/runner.h — runs the demo model over one mixed batch: one gdn_attention call per layer.
//
// A Batch is exactly the metadata a serving engine hands to gdn_attention (vLLM's GDN attention
// metadata): global token rows, the non-speculative group (prefills, chunked-prefill pieces, plain
// decodes) and the speculative group (verify sequences with [n, cols] block-table rows and
// num_accepted_tokens), each with a token remap into the global rows; `rows` may exceed
// num_actual_tokens (CUDA-graph padding) and padded sequences carry slot -1.
//
// The runner owns the model's conv and SSM pools (one per layer) and checks, around every call,
// what the contract promises the engine: padded rows of core_attn_out/z keep the caller's fill,
// every real row is written, and (optionally) check_metadata accepts the batch.
#pragma once
#include <cstdint>
#include <vector>

#include "demo/device.h"
#include "demo/model.h"

namespace gdn::demo {

struct Batch {
  int64_t num_actual_tokens = 0;
  int64_t rows = 0;              // buffer rows, >= num_actual_tokens
  std::vector<int32_t> tokens;   // [num_actual_tokens] input token of each global row
  // Non-speculative group: num_prefills + num_decodes sequences (padding counts as decodes).
  int64_t num_prefills = 0, num_decodes = 0;
  std::vector<int32_t> ns_qsl{0};      // [n + 1]
  std::vector<int32_t> ns_indx;        // [tokens] global row of each local token
  std::vector<int32_t> ns_slots;       // [n]
  std::vector<uint8_t> ns_has_init;    // [n]
  // Speculative group: verify sequences (padding included).
  int64_t cols = 1;
  std::vector<int32_t> sp_qsl{0};      // [n + 1]
  std::vector<int32_t> sp_indx;        // [tokens]
  std::vector<int32_t> sp_slots;       // [n * cols]
  std::vector<int32_t> sp_accepted;    // [n] (deferred: replay counts)
  // Deferred commit (docs/contract.md §7): one slot per sequence, replay counts of the non-spec group.
  bool deferred = false;
  std::vector<int32_t> ns_replay;      // [n]
  // Token trees (deferred): path_cols > 0 passes spec_token_parents and the accepted paths.
  int64_t path_cols = 0;
  std::vector<int32_t> sp_parents;     // [spec tokens] local parent within the sequence, -1 = root
  std::vector<int32_t> sp_path, ns_path;  // [n, path_cols] log rows to replay, in order

  int64_t num_non_spec() const { return static_cast<int64_t>(ns_slots.size()); }
  int64_t num_spec() const { return static_cast<int64_t>(sp_accepted.size()); }
};

struct RunnerOptions {
  Device device = Device::kCPU;
  int64_t num_slots = 0;
  int64_t cols = 1;              // block-table width: conv rows = W - 2 + cols (at least W - 1)
  bool check_metadata = false;   // call gdn::check_metadata before every gdn_attention
  bool deferred = false;         // deferred commit: the logs below, one slot per sequence (cols 1)
  int64_t log_cols = 1;          // deferred: tokens a step may log (1 + drafts, or a tree's 1 + nodes)
};

struct RunnerStats {
  int64_t attention_calls = 0;
  double attention_seconds = 0;  // inside gdn_attention (and its copies on a GPU)
};

class ModelRunner {
 public:
  Status init(const Weights& weights, const RunnerOptions& opt);

  // Runs every layer over the batch. When `logit_rows` is not empty, `logits` receives
  // [logit_rows.size(), vocab] for those global rows (each < num_actual_tokens).
  Status forward(const Batch& b, const std::vector<int32_t>& logit_rows, std::vector<float>* logits);

  // Copies the state of one sequence into plain slot `dst` of every layer: the SSM state of slot
  // `ssm_src`, and rows [conv_row0, conv_row0 + W - 1) of conv slot `conv_src` to rows 0..W-2.
  Status copy_state(int64_t ssm_src, int64_t conv_src, int64_t conv_row0, int64_t dst);

  const ModelConfig& config() const { return w_->cfg; }
  const RunnerStats& stats() const { return stats_; }
  int64_t conv_rows() const { return conv_rows_; }

 private:
  struct Layer {
    Buffer conv_w, A_log, dt_bias, conv_pool, ssm_pool;
    Buffer rec_log[2], conv_log[2];  // deferred: the logs, alternating step by step (log_cur_ is read)
  };
  Status attention(size_t l, const Batch& b);
  Status check_pad_rows(size_t l, const Batch& b) const;

  const Weights* w_ = nullptr;
  RunnerOptions opt_;
  int64_t conv_rows_ = 0, conv_slot_stride_ = 0;
  int log_cur_ = 0;
  std::vector<Layer> layers_;
  RunnerStats stats_;
  // Host activations.
  std::vector<float> h_, x_, qkvz_, ba_, core_, z_, g_, o_;
  // Device copies (CUDA only): projections, outputs and metadata.
  Buffer d_qkvz_, d_ba_, d_core_, d_z_;
  Buffer d_ns_qsl_, d_ns_indx_, d_ns_slots_, d_ns_init_, d_sp_qsl_, d_sp_indx_, d_sp_slots_, d_sp_acc_, d_ns_replay_;
  Buffer d_sp_parents_, d_sp_path_, d_ns_path_;
};

}  // namespace gdn::demo
