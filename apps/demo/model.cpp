// Demo model configuration, seeded weights, draft perturbation and safetensors I/O.
#include "demo/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "capture/safetensors.h"

namespace gdn::demo {
namespace {

using capture::HostTensor;
using capture::SafetensorsFile;

std::string str(int64_t x) { return std::to_string(x); }

std::vector<float> normal_vec(Rng& rng, int64_t n, double scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<float>(rng.normal() * scale);
  return v;
}

// The init scale of each perturbed matrix, so that `noise` is relative.
double linear_scale(int64_t fan_in) { return 1.0 / std::sqrt(static_cast<double>(fan_in)); }

void perturb(std::vector<float>& v, double scale, Rng& rng) {
  for (auto& x : v) x = static_cast<float>(x + scale * rng.normal());
}

// torch [out, in] <-> input-major [in, out].
std::vector<float> transpose(const std::vector<float>& a, int64_t rows, int64_t cols) {
  std::vector<float> t(a.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = a[r * cols + c];
  return t;
}

float bf16_to_f32(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float f16_to_f32(uint16_t h) {
  const int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  const float sign = (h & 0x8000) ? -1.0f : 1.0f;
  if (exp == 0) return sign * std::ldexp(static_cast<float>(man), -24);
  if (exp == 31) return man ? NAN : sign * INFINITY;
  return sign * std::ldexp(static_cast<float>(man | 0x400), exp - 25);
}

void put(SafetensorsFile& f, const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
  HostTensor t = capture::make_host_tensor(DType::kFloat32, std::move(shape));
  std::memcpy(t.bytes.data(), v.data(), v.size() * sizeof(float));
  f.tensors[name] = std::move(t);
}

// Reads `name` as float32 with exactly `shape`.
Status get(const SafetensorsFile& f, const std::string& path, const std::string& name,
           const std::vector<int64_t>& shape, std::vector<float>* out) {
  const HostTensor* t = f.find(name);
  std::ostringstream want;
  for (size_t d = 0; d < shape.size(); ++d) want << (d ? ", " : "") << shape[d];
  if (!t) return Status::Error("demo weights " + path + ": missing tensor " + name + " [" + want.str() + "]");
  if (t->shape != shape) {
    return Status::Error("demo weights " + path + ": " + name + " must be [" + want.str() + "], got " + t->describe());
  }
  const int64_t n = t->numel();
  out->resize(static_cast<size_t>(n));
  switch (t->dtype) {
    case DType::kFloat32: std::memcpy(out->data(), t->bytes.data(), static_cast<size_t>(n) * 4); break;
    case DType::kBFloat16:
    case DType::kFloat16:
      for (int64_t e = 0; e < n; ++e) {
        uint16_t h;
        std::memcpy(&h, t->bytes.data() + 2 * e, 2);
        (*out)[e] = t->dtype == DType::kBFloat16 ? bf16_to_f32(h) : f16_to_f32(h);
      }
      break;
    default:
      return Status::Error("demo weights " + path + ": " + name + " must be F32, BF16 or F16, got " + t->describe());
  }
  return Status::Ok();
}

std::string layer_prefix(int64_t l) { return "model.layers." + str(l) + "."; }

}  // namespace

uint64_t Rng::next() {
  uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
double Rng::uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
double Rng::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  const double u1 = 1.0 - uniform(), u2 = uniform();
  const double r = std::sqrt(-2.0 * std::log(u1));
  spare_ = r * std::sin(6.283185307179586 * u2);
  has_spare_ = true;
  return r * std::cos(6.283185307179586 * u2);
}
int64_t Rng::below(int64_t n) { return n <= 0 ? 0 : static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
int64_t Rng::range(int64_t lo, int64_t hi) { return hi <= lo ? lo : lo + below(hi - lo + 1); }

Status ModelConfig::validate() const {
  const struct {
    const char* name;
    int64_t v;
  } pos[] = {{"vocab", vocab},           {"hidden", hidden},         {"layers", layers},
             {"num_k_heads", num_k_heads}, {"num_v_heads", num_v_heads}, {"head_k_dim", head_k_dim},
             {"head_v_dim", head_v_dim}};
  for (const auto& p : pos) {
    if (p.v <= 0) return Status::Error(std::string("demo model: ") + p.name + " must be > 0, got " + str(p.v));
  }
  if (num_v_heads % num_k_heads != 0) {
    return Status::Error("demo model: num_v_heads must be a multiple of num_k_heads = " + str(num_k_heads) +
                         ", got " + str(num_v_heads));
  }
  if (conv_width < 2 || conv_width > 5) {
    return Status::Error("demo model: conv_width must be in [2, 5], got " + str(conv_width));
  }
  if (vocab > (int64_t{1} << 30)) return Status::Error("demo model: vocab must be < 2^30, got " + str(vocab));
  // Bounded, so that a typo is an error instead of an allocation that fails: each size but the
  // vocabulary, and the weights (float32) at most 2^31 values.
  for (const auto& p : pos) {
    if (p.v > (int64_t{1} << 16) && std::strcmp(p.name, "vocab") != 0)
      return Status::Error(std::string("demo model: ") + p.name + " must be <= 65536, got " + str(p.v));
  }
  const double per_layer = static_cast<double>(hidden) * static_cast<double>(qkvz_dim() + ba_dim() + value_dim()) +
                           static_cast<double>(conv_dim()) * static_cast<double>(conv_width);
  const double params =
      2.0 * static_cast<double>(vocab) * static_cast<double>(hidden) + static_cast<double>(layers) * per_layer;
  if (params > 2147483648.0) {
    return Status::Error("demo model: at most 2^31 weights (vocab, hidden, layers, heads), got about " +
                         str(static_cast<int64_t>(std::min(params, 9e18) / 1e6)) + " million");
  }
  return Status::Ok();
}

std::string ModelConfig::describe() const {
  std::ostringstream s;
  s << "vocab " << vocab << ", hidden " << hidden << ", " << layers << " GDN layers, heads " << num_k_heads << "/"
    << num_v_heads << " (r = " << ratio() << "), K " << head_k_dim << ", V " << head_v_dim << ", conv W "
    << conv_width << ", " << (block_layout ? "block" : "interleaved") << " projections";
  return s.str();
}

Status preset_config(const std::string& name, ModelConfig* out) {
  ModelConfig c;
  if (name == "tiny") {
    c.vocab = 96; c.hidden = 48; c.layers = 2; c.num_k_heads = 2; c.num_v_heads = 4;
    c.head_k_dim = 16; c.head_v_dim = 16;
  } else if (name == "small") {
    // the defaults above
  } else if (name == "qwen3-next") {
    c.vocab = 4096; c.hidden = 2048; c.layers = 2; c.num_k_heads = 16; c.num_v_heads = 32;
    c.head_k_dim = 128; c.head_v_dim = 128;
  } else {
    return Status::Error("--preset must be tiny, small or qwen3-next, got '" + name + "'");
  }
  *out = c;
  return Status::Ok();
}

Weights random_weights(const ModelConfig& cfg, uint64_t seed) {
  Rng rng(seed);
  Weights w;
  w.cfg = cfg;
  const int64_t d = cfg.hidden, HV = cfg.num_v_heads;
  w.embed = normal_vec(rng, cfg.vocab * d, 1.0);
  for (int64_t l = 0; l < cfg.layers; ++l) {
    LayerWeights L;
    L.input_norm.assign(static_cast<size_t>(d), 1.0f);
    L.qkvz = normal_vec(rng, d * cfg.qkvz_dim(), linear_scale(d));
    L.ba = normal_vec(rng, d * cfg.ba_dim(), linear_scale(d));
    L.conv = normal_vec(rng, cfg.conv_dim() * cfg.conv_width, linear_scale(cfg.conv_width));
    L.A_log.resize(static_cast<size_t>(HV));
    L.dt_bias.resize(static_cast<size_t>(HV));
    for (int64_t h = 0; h < HV; ++h) {
      L.A_log[h] = static_cast<float>(std::log(1.0 + 15.0 * rng.uniform()));          // A in [1, 16)
      const double dt = std::exp(std::log(1e-3) + rng.uniform() * (std::log(0.1) - std::log(1e-3)));
      L.dt_bias[h] = static_cast<float>(dt + std::log(-std::expm1(-dt)));  // softplus^-1(dt)
    }
    L.norm.assign(static_cast<size_t>(cfg.head_v_dim), 1.0f);
    L.out = normal_vec(rng, cfg.value_dim() * d, linear_scale(cfg.value_dim()));
    w.layers.push_back(std::move(L));
  }
  w.final_norm.assign(static_cast<size_t>(d), 1.0f);
  w.lm_head = normal_vec(rng, d * cfg.vocab, 4.0 * linear_scale(d));  // sharp logits: stable greedy choices
  return w;
}

Weights perturbed_weights(const Weights& src, double noise, uint64_t seed) {
  Weights w = src;
  if (noise == 0.0) return w;
  Rng rng(seed);
  const ModelConfig& c = w.cfg;
  perturb(w.embed, noise, rng);
  for (auto& L : w.layers) {
    perturb(L.qkvz, noise * linear_scale(c.hidden), rng);
    perturb(L.ba, noise * linear_scale(c.hidden), rng);
    perturb(L.conv, noise * linear_scale(c.conv_width), rng);
    perturb(L.out, noise * linear_scale(c.value_dim()), rng);
  }
  perturb(w.lm_head, noise * 4.0 * linear_scale(c.hidden), rng);
  return w;
}

Status save_weights(const std::string& path, const Weights& w) {
  const ModelConfig& c = w.cfg;
  SafetensorsFile f;
  f.params = {{"model", "gdn-demo"},           {"num_k_heads", c.num_k_heads}, {"num_v_heads", c.num_v_heads},
              {"head_k_dim", c.head_k_dim},    {"head_v_dim", c.head_v_dim},   {"conv_width", c.conv_width},
              {"layers", c.layers},            {"reorder_input", c.block_layout}, {"norm_eps", c.norm_eps}};
  put(f, "model.embed_tokens.weight", {c.vocab, c.hidden}, w.embed);
  for (int64_t l = 0; l < c.layers; ++l) {
    const LayerWeights& L = w.layers[l];
    const std::string p = layer_prefix(l), a = p + "linear_attn.";
    put(f, p + "input_layernorm.weight", {c.hidden}, L.input_norm);
    put(f, a + "in_proj_qkvz.weight", {c.qkvz_dim(), c.hidden}, transpose(L.qkvz, c.hidden, c.qkvz_dim()));
    put(f, a + "in_proj_ba.weight", {c.ba_dim(), c.hidden}, transpose(L.ba, c.hidden, c.ba_dim()));
    put(f, a + "conv1d.weight", {c.conv_dim(), 1, c.conv_width}, L.conv);
    put(f, a + "A_log", {c.num_v_heads}, L.A_log);
    put(f, a + "dt_bias", {c.num_v_heads}, L.dt_bias);
    put(f, a + "norm.weight", {c.head_v_dim}, L.norm);
    put(f, a + "out_proj.weight", {c.hidden, c.value_dim()}, transpose(L.out, c.value_dim(), c.hidden));
  }
  put(f, "model.norm.weight", {c.hidden}, w.final_norm);
  put(f, "lm_head.weight", {c.vocab, c.hidden}, transpose(w.lm_head, c.hidden, c.vocab));
  return capture::write_safetensors(path, f);
}

Status load_weights(const std::string& path, const ModelConfig& hint, Weights* out) {
  SafetensorsFile f;
  GDN_RETURN_IF_ERROR(capture::read_safetensors(path, &f));
  ModelConfig c = hint;
  auto param = [&](const char* key, int64_t* v) {
    if (f.params.contains(key) && f.params[key].is_number_integer()) *v = f.params[key].get<int64_t>();
  };
  param("num_k_heads", &c.num_k_heads);
  param("num_v_heads", &c.num_v_heads);
  param("head_k_dim", &c.head_k_dim);
  param("head_v_dim", &c.head_v_dim);
  param("conv_width", &c.conv_width);
  if (f.params.contains("reorder_input") && f.params["reorder_input"].is_boolean()) {
    c.block_layout = f.params["reorder_input"].get<bool>();
  }
  // Sizes that the shapes carry.
  if (const HostTensor* e = f.find("model.embed_tokens.weight"); e && e->shape.size() == 2) {
    c.vocab = e->shape[0];
    c.hidden = e->shape[1];
  }
  c.layers = 0;
  while (f.find(layer_prefix(c.layers) + "linear_attn.in_proj_qkvz.weight")) ++c.layers;
  if (c.layers == 0) {
    return Status::Error("demo weights " + path + ": no layer found (expected model.layers.0.linear_attn.*)");
  }
  GDN_RETURN_IF_ERROR(c.validate());
  Weights w;
  w.cfg = c;
  std::vector<float> tmp;
  GDN_RETURN_IF_ERROR(get(f, path, "model.embed_tokens.weight", {c.vocab, c.hidden}, &w.embed));
  for (int64_t l = 0; l < c.layers; ++l) {
    LayerWeights L;
    const std::string p = layer_prefix(l), a = p + "linear_attn.";
    GDN_RETURN_IF_ERROR(get(f, path, p + "input_layernorm.weight", {c.hidden}, &L.input_norm));
    GDN_RETURN_IF_ERROR(get(f, path, a + "in_proj_qkvz.weight", {c.qkvz_dim(), c.hidden}, &tmp));
    L.qkvz = transpose(tmp, c.qkvz_dim(), c.hidden);
    GDN_RETURN_IF_ERROR(get(f, path, a + "in_proj_ba.weight", {c.ba_dim(), c.hidden}, &tmp));
    L.ba = transpose(tmp, c.ba_dim(), c.hidden);
    GDN_RETURN_IF_ERROR(get(f, path, a + "conv1d.weight", {c.conv_dim(), 1, c.conv_width}, &L.conv));
    GDN_RETURN_IF_ERROR(get(f, path, a + "A_log", {c.num_v_heads}, &L.A_log));
    GDN_RETURN_IF_ERROR(get(f, path, a + "dt_bias", {c.num_v_heads}, &L.dt_bias));
    GDN_RETURN_IF_ERROR(get(f, path, a + "norm.weight", {c.head_v_dim}, &L.norm));
    GDN_RETURN_IF_ERROR(get(f, path, a + "out_proj.weight", {c.hidden, c.value_dim()}, &tmp));
    L.out = transpose(tmp, c.hidden, c.value_dim());
    w.layers.push_back(std::move(L));
  }
  GDN_RETURN_IF_ERROR(get(f, path, "model.norm.weight", {c.hidden}, &w.final_norm));
  GDN_RETURN_IF_ERROR(get(f, path, "lm_head.weight", {c.vocab, c.hidden}, &tmp));
  w.lm_head = transpose(tmp, c.vocab, c.hidden);
  *out = std::move(w);
  return Status::Ok();
}

}  // namespace gdn::demo
