// The demo model's forward pass over one mixed batch (see runner.h and model.h).
#include "demo/runner.h"

#include <chrono>
#include <cmath>
#include <cstring>

#include "demo/math.h"

namespace gdn::demo {
namespace {

// The caller's fill of rows the op must not touch (a quiet NaN with a recognizable payload).
constexpr uint32_t kPoisonBits = 0x7FC0DEADu;

float poison() {
  float f;
  std::memcpy(&f, &kPoisonBits, 4);
  return f;
}
bool is_poison(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u == kPoisonBits;
}

std::string str(int64_t x) { return std::to_string(x); }

// A view of a host index vector, or of its copy in `dev` (uploaded here) on a GPU.
template <typename T>
Status index_view(const std::vector<T>& v, DType dtype, std::initializer_list<int64_t> shape, Device device,
                  Buffer* dev, TensorView* out) {
  if (device == Device::kCPU) {
    *out = make_view(const_cast<T*>(v.data()), dtype, shape);
    return Status::Ok();
  }
  if (dev->bytes() < v.size() * sizeof(T) || dev->device() != device) {
    GDN_RETURN_IF_ERROR(dev->allocate(device, v.size() * sizeof(T) * 2 + 64));
  }
  GDN_RETURN_IF_ERROR(dev->upload(v.data(), v.size() * sizeof(T)));
  *out = dev->view(dtype, shape);
  return Status::Ok();
}

// Host activations -> a device buffer that grows as needed.
Status stage(const std::vector<float>& v, Device device, Buffer* dev) {
  if (dev->bytes() < v.size() * 4 || dev->device() != device) {
    GDN_RETURN_IF_ERROR(dev->allocate(device, v.size() * 4 * 2 + 64));
  }
  return dev->upload(v.data(), v.size() * 4);
}

template <typename T>
TensorView host_view(const std::vector<T>& v, DType dtype, std::initializer_list<int64_t> shape) {
  return make_view(const_cast<T*>(v.data()), dtype, shape);
}

// The metadata views of one batch, on the device (`dev`) and on the host (for check_metadata).
struct MetaViews {
  TensorView ns_qsl, ns_indx, ns_slots, ns_init, sp_qsl, sp_indx, sp_slots, sp_acc;
};

void set_metadata(GdnAttentionArgs& a, const Batch& b, const MetaViews& m) {
  a.num_prefills = b.num_prefills;
  a.num_decodes = b.num_decodes;
  a.num_spec_decodes = b.num_spec();
  a.num_actual_tokens = b.num_actual_tokens;
  if (b.num_non_spec() > 0) {
    a.non_spec_query_start_loc = m.ns_qsl;
    a.non_spec_state_indices_tensor = m.ns_slots;
    a.has_initial_state = m.ns_init;
    if (!b.ns_indx.empty()) a.non_spec_token_indx = m.ns_indx;
  }
  if (b.num_spec() > 0) {
    a.spec_query_start_loc = m.sp_qsl;
    a.spec_state_indices_tensor = m.sp_slots;
    a.num_accepted_tokens = m.sp_acc;
    if (!b.sp_indx.empty()) a.spec_token_indx = m.sp_indx;
  }
}

MetaViews host_meta(const Batch& b) {
  const int64_t nn = b.num_non_spec(), ns = b.num_spec();
  MetaViews m;
  m.ns_qsl = host_view(b.ns_qsl, DType::kInt32, {nn + 1});
  m.ns_indx = host_view(b.ns_indx, DType::kInt32, {static_cast<int64_t>(b.ns_indx.size())});
  m.ns_slots = host_view(b.ns_slots, DType::kInt32, {nn});
  m.ns_init = host_view(b.ns_has_init, DType::kBool, {nn});
  m.sp_qsl = host_view(b.sp_qsl, DType::kInt32, {ns + 1});
  m.sp_indx = host_view(b.sp_indx, DType::kInt32, {static_cast<int64_t>(b.sp_indx.size())});
  m.sp_slots = host_view(b.sp_slots, DType::kInt32, {ns, b.cols});
  m.sp_acc = host_view(b.sp_accepted, DType::kInt32, {ns});
  return m;
}

}  // namespace

Status ModelRunner::init(const Weights& weights, const RunnerOptions& opt) {
  GDN_RETURN_IF_ERROR(weights.cfg.validate());
  GDN_RETURN_IF_ERROR(device_ready(opt.device));
  if (opt.num_slots <= 0 || opt.cols <= 0) {
    return Status::Error("demo runner: num_slots and cols must be > 0, got " + str(opt.num_slots) + " and " +
                         str(opt.cols));
  }
  w_ = &weights;
  opt_ = opt;
  const ModelConfig& c = weights.cfg;
  const int64_t W = c.conv_width, D = c.conv_dim();
  conv_rows_ = std::max<int64_t>(W - 1, W - 2 + opt.cols);
  conv_slot_stride_ = conv_rows_ * D + 32;  // padded slots, as engines with page-aligned pools have
  const int64_t ssm_slot = c.num_v_heads * c.head_v_dim * c.head_k_dim;
  layers_.clear();
  layers_.resize(static_cast<size_t>(c.layers));
  for (int64_t l = 0; l < c.layers; ++l) {
    Layer& L = layers_[l];
    const LayerWeights& lw = weights.layers[l];
    GDN_RETURN_IF_ERROR(to_device(opt.device, lw.conv, &L.conv_w));
    GDN_RETURN_IF_ERROR(to_device(opt.device, lw.A_log, &L.A_log));
    GDN_RETURN_IF_ERROR(to_device(opt.device, lw.dt_bias, &L.dt_bias));
    GDN_RETURN_IF_ERROR(L.conv_pool.allocate(opt.device, static_cast<size_t>(opt.num_slots * conv_slot_stride_) * 4));
    GDN_RETURN_IF_ERROR(L.ssm_pool.allocate(opt.device, static_cast<size_t>(opt.num_slots * ssm_slot) * 4));
    if (opt.deferred) {
      for (int k = 0; k < 2; ++k) {
        GDN_RETURN_IF_ERROR(L.rec_log[k].allocate(
            opt.device, static_cast<size_t>(opt.num_slots * opt.log_cols * c.num_v_heads *
                                            (c.head_k_dim + c.head_v_dim + 2)) * 4));
        GDN_RETURN_IF_ERROR(L.conv_log[k].allocate(opt.device, static_cast<size_t>(opt.num_slots * opt.log_cols * D) * 4));
      }
    }
  }
  log_cur_ = 0;
  return Status::Ok();
}

Status ModelRunner::copy_state(int64_t ssm_src, int64_t conv_src, int64_t conv_row0, int64_t dst) {
  const ModelConfig& c = w_->cfg;
  const int64_t D = c.conv_dim(), W = c.conv_width;
  const size_t ssm_slot = static_cast<size_t>(c.num_v_heads * c.head_v_dim * c.head_k_dim) * 4;
  if (conv_row0 < 0 || conv_row0 + W - 1 > conv_rows_) {
    return Status::Error("demo copy_state: conv rows [" + str(conv_row0) + ", " + str(conv_row0 + W - 1) +
                         ") are outside the " + str(conv_rows_) + " rows of a slot");
  }
  for (Layer& L : layers_) {
    GDN_RETURN_IF_ERROR(L.ssm_pool.copy_within(dst * ssm_slot, ssm_src * ssm_slot, ssm_slot));
    GDN_RETURN_IF_ERROR(L.conv_pool.copy_within(static_cast<size_t>(dst * conv_slot_stride_) * 4,
                                                static_cast<size_t>(conv_src * conv_slot_stride_ + conv_row0 * D) * 4,
                                                static_cast<size_t>((W - 1) * D) * 4));
  }
  return Status::Ok();
}

Status ModelRunner::attention(size_t l, const Batch& b) {
  const ModelConfig& c = w_->cfg;
  Layer& L = layers_[l];
  const int64_t R = b.rows, HV = c.num_v_heads, V = c.head_v_dim;
  const int64_t nn = b.num_non_spec(), ns = b.num_spec();
  const Device dev = opt_.device;
  const auto t0 = std::chrono::steady_clock::now();

  GdnAttentionArgs a;
  if (dev == Device::kCPU) {
    a.core_attn_out = make_view(core_.data(), DType::kFloat32, {R, HV, V});
    a.z = make_view(z_.data(), DType::kFloat32, {R, HV, V});
    a.projected_states_qkvz = make_view(qkvz_.data(), DType::kFloat32, {R, c.qkvz_dim()});
    a.projected_states_ba = make_view(ba_.data(), DType::kFloat32, {R, c.ba_dim()});
  } else {
    GDN_RETURN_IF_ERROR(stage(qkvz_, dev, &d_qkvz_));
    GDN_RETURN_IF_ERROR(stage(ba_, dev, &d_ba_));
    GDN_RETURN_IF_ERROR(stage(core_, dev, &d_core_));  // the poison fill travels too
    GDN_RETURN_IF_ERROR(stage(z_, dev, &d_z_));
    a.core_attn_out = d_core_.view(DType::kFloat32, {R, HV, V});
    a.z = d_z_.view(DType::kFloat32, {R, HV, V});
    a.projected_states_qkvz = d_qkvz_.view(DType::kFloat32, {R, c.qkvz_dim()});
    a.projected_states_ba = d_ba_.view(DType::kFloat32, {R, c.ba_dim()});
  }
  a.num_k_heads = c.num_k_heads;
  a.num_v_heads = c.num_v_heads;
  a.head_k_dim = c.head_k_dim;
  a.head_v_dim = c.head_v_dim;
  a.conv_state = L.conv_pool.view(DType::kFloat32, {opt_.num_slots, conv_rows_, c.conv_dim()});
  a.conv_state.stride[0] = conv_slot_stride_;
  a.ssm_state = L.ssm_pool.view(DType::kFloat32, {opt_.num_slots, HV, V, c.head_k_dim});
  a.conv_weights = L.conv_w.view(DType::kFloat32, {c.conv_dim(), c.conv_width});
  a.activation = Activation::kSilu;
  a.A_log = L.A_log.view(DType::kFloat32, {HV});
  a.dt_bias = L.dt_bias.view(DType::kFloat32, {HV});
  a.reorder_input = c.block_layout;
  a.tp_size = 1;
  a.spec_conv_layout = SpecConvLayout::kRolling;  // the demo's pools keep one rolling line per sequence

  MetaViews m;
  GDN_RETURN_IF_ERROR(index_view(b.ns_qsl, DType::kInt32, {nn + 1}, dev, &d_ns_qsl_, &m.ns_qsl));
  GDN_RETURN_IF_ERROR(index_view(b.ns_indx, DType::kInt32, {static_cast<int64_t>(b.ns_indx.size())}, dev,
                                 &d_ns_indx_, &m.ns_indx));
  GDN_RETURN_IF_ERROR(index_view(b.ns_slots, DType::kInt32, {nn}, dev, &d_ns_slots_, &m.ns_slots));
  GDN_RETURN_IF_ERROR(index_view(b.ns_has_init, DType::kBool, {nn}, dev, &d_ns_init_, &m.ns_init));
  GDN_RETURN_IF_ERROR(index_view(b.sp_qsl, DType::kInt32, {ns + 1}, dev, &d_sp_qsl_, &m.sp_qsl));
  GDN_RETURN_IF_ERROR(index_view(b.sp_indx, DType::kInt32, {static_cast<int64_t>(b.sp_indx.size())}, dev,
                                 &d_sp_indx_, &m.sp_indx));
  GDN_RETURN_IF_ERROR(index_view(b.sp_slots, DType::kInt32, {ns, b.cols}, dev, &d_sp_slots_, &m.sp_slots));
  GDN_RETURN_IF_ERROR(index_view(b.sp_accepted, DType::kInt32, {ns}, dev, &d_sp_acc_, &m.sp_acc));
  set_metadata(a, b, m);
  if (b.deferred) {
    const int64_t S = opt_.num_slots, LC = opt_.log_cols, E = c.head_k_dim + c.head_v_dim + 2;
    a.verify_log = L.rec_log[log_cur_].view(DType::kFloat32, {S, LC, HV, E});
    a.verify_log_out = L.rec_log[1 - log_cur_].view(DType::kFloat32, {S, LC, HV, E});
    a.conv_log = L.conv_log[log_cur_].view(DType::kFloat32, {S, LC, c.conv_dim()});
    a.conv_log_out = L.conv_log[1 - log_cur_].view(DType::kFloat32, {S, LC, c.conv_dim()});
    if (nn > 0) {
      GDN_RETURN_IF_ERROR(index_view(b.ns_replay, DType::kInt32, {nn}, dev, &d_ns_replay_, &a.non_spec_num_accepted_tokens));
    }
    if (b.path_cols > 0) {  // token trees: parents of the spec tokens, accepted paths of both groups
      if (b.path_cols != LC) {
        return Status::Error("demo runner: accepted paths of " + str(b.path_cols) + " columns, the logs have " +
                             str(LC));
      }
      if (nn > 0) {
        GDN_RETURN_IF_ERROR(
            index_view(b.ns_path, DType::kInt32, {nn, LC}, dev, &d_ns_path_, &a.non_spec_accepted_path));
      }
      if (ns > 0) {
        GDN_RETURN_IF_ERROR(index_view(b.sp_path, DType::kInt32, {ns, LC}, dev, &d_sp_path_, &a.spec_accepted_path));
        if (!b.sp_parents.empty()) {
          GDN_RETURN_IF_ERROR(index_view(b.sp_parents, DType::kInt32, {static_cast<int64_t>(b.sp_parents.size())}, dev,
                                         &d_sp_parents_, &a.spec_token_parents));
        }
      }
    }
  }

  if (opt_.check_metadata) {
    GdnAttentionArgs h = a;
    set_metadata(h, b, host_meta(b));
    // the deferred mode's replay counts too (check_metadata reads them; paths and parents it does not)
    if (a.non_spec_num_accepted_tokens.present())
      h.non_spec_num_accepted_tokens = host_view(b.ns_replay, DType::kInt32, {nn});
    const Status s = check_metadata(h);
    if (!s.ok()) return Status::Error("demo engine sent invalid metadata (layer " + str(l) + "): " + s.message());
  }
  GDN_RETURN_IF_ERROR(gdn_attention(a));
  if (dev != Device::kCPU) {
    GDN_RETURN_IF_ERROR(d_core_.download(core_.data(), core_.size() * 4));
    GDN_RETURN_IF_ERROR(d_z_.download(z_.data(), z_.size() * 4));
  }
  stats_.attention_calls += 1;
  stats_.attention_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return check_pad_rows(l, b);
}

Status ModelRunner::check_pad_rows(size_t l, const Batch& b) const {
  const int64_t width = w_->cfg.value_dim();
  for (int64_t r = 0; r < b.rows; ++r) {
    const bool pad = r >= b.num_actual_tokens;
    for (int64_t e = 0; e < width; ++e) {
      const float c = core_[r * width + e], z = z_[r * width + e];
      if (pad && (!is_poison(c) || !is_poison(z))) {
        return Status::Error("gdn_attention wrote padded row " + str(r) + " (num_actual_tokens " +
                             str(b.num_actual_tokens) + ", layer " + str(l) + ")");
      }
      if (!pad && (std::isnan(c) || std::isnan(z))) {
        return Status::Error("gdn_attention left row " + str(r) + " of core_attn_out/z unwritten or NaN (layer " +
                             str(l) + ")");
      }
    }
  }
  return Status::Ok();
}

Status ModelRunner::forward(const Batch& b, const std::vector<int32_t>& logit_rows, std::vector<float>* logits) {
  const ModelConfig& c = w_->cfg;
  const int64_t n = b.num_actual_tokens, R = b.rows, d = c.hidden;
  if (n <= 0 || R < n || static_cast<int64_t>(b.tokens.size()) != n) {
    return Status::Error("demo forward: need 0 < num_actual_tokens <= rows and one token per row, got " + str(n) +
                         " tokens, " + str(R) + " rows, " + str(static_cast<int64_t>(b.tokens.size())) + " ids");
  }
  h_.assign(static_cast<size_t>(n * d), 0.0f);
  for (int64_t r = 0; r < n; ++r) {
    const int32_t t = b.tokens[r];
    if (t < 0 || t >= c.vocab) return Status::Error("demo forward: token " + str(t) + " outside the vocabulary");
    std::memcpy(&h_[r * d], &w_->embed[static_cast<size_t>(t) * d], static_cast<size_t>(d) * 4);
  }
  const int64_t HV = c.num_v_heads, V = c.head_v_dim, VD = c.value_dim();
  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerWeights& lw = w_->layers[l];
    x_.resize(static_cast<size_t>(n * d));
    rms_norm(h_.data(), lw.input_norm.data(), n, d, c.norm_eps, x_.data());
    // Projections of the real rows; graph-padded rows hold NaN so that reading them shows.
    qkvz_.assign(static_cast<size_t>(R * c.qkvz_dim()), poison());
    ba_.assign(static_cast<size_t>(R * c.ba_dim()), poison());
    matmul(x_.data(), n, d, lw.qkvz.data(), c.qkvz_dim(), qkvz_.data());
    matmul(x_.data(), n, d, lw.ba.data(), c.ba_dim(), ba_.data());
    core_.assign(static_cast<size_t>(R * VD), poison());
    z_.assign(static_cast<size_t>(R * VD), poison());
    GDN_RETURN_IF_ERROR(attention(l, b));
    // Gated norm per value head, output projection, residual.
    g_.resize(static_cast<size_t>(n * VD));
    gated_rms_norm(core_.data(), z_.data(), lw.norm.data(), n * HV, V, c.norm_eps, g_.data());
    o_.resize(static_cast<size_t>(n * d));
    matmul(g_.data(), n, VD, lw.out.data(), d, o_.data());
    add_inplace(h_.data(), o_.data(), n * d);
  }
  if (b.deferred) log_cur_ = 1 - log_cur_;  // every layer wrote the other log: the next step reads it
  if (logit_rows.empty()) return Status::Ok();
  const int64_t m = static_cast<int64_t>(logit_rows.size());
  x_.resize(static_cast<size_t>(m * d));
  for (int64_t j = 0; j < m; ++j) {
    const int32_t r = logit_rows[j];
    if (r < 0 || r >= n) return Status::Error("demo forward: logit row " + str(r) + " is not a token row");
    rms_norm(&h_[static_cast<size_t>(r) * d], w_->final_norm.data(), 1, d, c.norm_eps, &x_[j * d]);
  }
  logits->resize(static_cast<size_t>(m * c.vocab));
  matmul(x_.data(), m, d, w_->lm_head.data(), c.vocab, logits->data());
  return Status::Ok();
}

}  // namespace gdn::demo
