// apps/demo/model.h — the demo's language model: embedding -> L Gated DeltaNet layers -> LM head.
//
// One layer, per token (Qwen3-Next's linear-attention block, without its MLP):
//   x = rms_norm(h) * input_norm
//   qkvz = x @ in_proj_qkvz,  ba = x @ in_proj_ba        (interleaved per key head, or block)
//   core, z = gdn_attention(qkvz, ba, conv/SSM pools, ...)  (conv1d + gated delta rule, docs/contract.md §1)
//   h = h + (rms_norm(core) * norm * silu(z)) @ out_proj   (gated norm per value head)
// then logits = rms_norm(h) * final_norm @ lm_head. Activations are float32.
//
// Weights come from a seeded generator or from a safetensors file with Hugging Face Qwen3-Next
// names and torch layouts ([out, in] for linear layers, conv1d [D, 1, W]); norm weights are used
// as stored (no 1 + w offset). Internally linear weights are kept input-major ([in, out]).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "gdn/status.h"

namespace gdn::demo {

struct ModelConfig {
  int64_t vocab = 512;
  int64_t hidden = 128;
  int64_t layers = 3;
  int64_t num_k_heads = 4;   // H
  int64_t num_v_heads = 8;   // HV = r H (Qwen3-Next: r = 2)
  int64_t head_k_dim = 32;   // K
  int64_t head_v_dim = 32;   // V
  int64_t conv_width = 4;    // W
  bool block_layout = false;  // false: interleaved per key head (Qwen3-Next); true: [q|k|v|z] (Qwen3.5)
  float norm_eps = 1e-6f;

  int64_t ratio() const { return num_v_heads / num_k_heads; }
  int64_t value_dim() const { return num_v_heads * head_v_dim; }                 // HV V
  int64_t conv_dim() const { return 2 * num_k_heads * head_k_dim + value_dim(); }  // D
  int64_t qkvz_dim() const { return 2 * num_k_heads * head_k_dim + 2 * value_dim(); }
  int64_t ba_dim() const { return 2 * num_v_heads; }
  Status validate() const;
  std::string describe() const;  // one line
};

// Named configurations: "tiny" (tests), "small" (default), "qwen3-next" (real layer shapes:
// hidden 2048, H 16, HV 32, K = V = 128, W 4; the vocabulary and layer count stay small).
Status preset_config(const std::string& name, ModelConfig* out);

struct LayerWeights {
  std::vector<float> input_norm;  // [hidden]
  std::vector<float> qkvz;        // [hidden, qkvz_dim]
  std::vector<float> ba;          // [hidden, 2 HV]
  std::vector<float> conv;        // [D, W]
  std::vector<float> A_log;       // [HV]
  std::vector<float> dt_bias;     // [HV]
  std::vector<float> norm;        // [V]
  std::vector<float> out;         // [HV V, hidden]
};

struct Weights {
  ModelConfig cfg;
  std::vector<float> embed;       // [vocab, hidden]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;  // [hidden]
  std::vector<float> lm_head;     // [hidden, vocab]
};

Weights random_weights(const ModelConfig& cfg, uint64_t seed);

// A draft model: every matrix entry moves by noise * (its matrix's init scale) * N(0, 1).
// noise = 0 gives an exact copy (the draft then agrees with the target wherever the kernels do).
Weights perturbed_weights(const Weights& w, double noise, uint64_t seed);

// safetensors I/O. The head split (H, K) and the layout are stored in the file's params; when
// absent they come from `hint`, and every shape is checked against the resulting config.
Status save_weights(const std::string& path, const Weights& w);
Status load_weights(const std::string& path, const ModelConfig& hint, Weights* out);

// A small deterministic generator (splitmix64), the same on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next();
  double uniform();                     // [0, 1)
  double normal();                      // N(0, 1), Box-Muller
  int64_t below(int64_t n);             // [0, n)
  int64_t range(int64_t lo, int64_t hi);  // [lo, hi]

 private:
  uint64_t s_;
  double spare_ = 0;
  bool has_spare_ = false;
};

}  // namespace gdn::demo
