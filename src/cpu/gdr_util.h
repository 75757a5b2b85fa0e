// src/cpu/gdr_util.h — pieces shared by the CPU recurrent and chunked gated delta rule.
#pragma once
#include <cmath>

#include "common/seq_rules.h"
#include "cpu/cpu_util.h"
#include "cpu/scratch.h"
#include "gdn/ops.h"

namespace gdn::cpu {

struct GdrShape {
  int64_t H, HV, K, V, r, num_slots, cols;
  float scale;
  bool spec, has_null;
  int64_t null_id;
};

inline GdrShape gdr_shape(const GatedDeltaRuleArgs& a) {
  GdrShape s;
  s.H = a.q.shape[1];
  s.K = a.q.shape[2];
  s.HV = a.v.shape[1];
  s.V = a.v.shape[2];
  s.r = s.HV / s.H;
  s.num_slots = a.ssm_state.shape[0];
  s.spec = a.num_accepted_tokens.present();
  s.cols = a.state_indices.ndim == 2 ? a.state_indices.shape[1] : 1;
  s.scale = static_cast<float>(a.scale.value_or(1.0 / std::sqrt(static_cast<double>(s.K))));
  s.has_null = a.null_block_id.has_value();
  s.null_id = a.null_block_id.value_or(0);
  return s;
}

inline int64_t slot_of(const GatedDeltaRuleArgs& a, int64_t i, int64_t col) {
  return a.state_indices.ndim == 2 ? load_index2(a.state_indices, i, col) : load_index1(a.state_indices, i);
}

// Offset of S[v][k] of value head hv within a slot, for either layout.
inline int64_t state_offset(const GatedDeltaRuleArgs& a, const GdrShape& s, int64_t slot, int64_t hv,
                            int64_t vi, int64_t ki) {
  const int64_t base = slot * a.ssm_state.stride[0] + hv * s.V * s.K;
  return base + (a.state_layout == StateLayout::kVK ? vi * s.K + ki : ki * s.V + vi);
}

// S (V x K, row-major in float) <-> pool slot.
inline void load_state(const GatedDeltaRuleArgs& a, const GdrShape& s, int64_t slot, int64_t hv, float* S) {
  for (int64_t vi = 0; vi < s.V; ++vi)
    for (int64_t ki = 0; ki < s.K; ++ki)
      S[vi * s.K + ki] = load_f(a.ssm_state.data, a.ssm_state.dtype, state_offset(a, s, slot, hv, vi, ki));
}
inline void store_state(const GatedDeltaRuleArgs& a, const GdrShape& s, int64_t slot, int64_t hv, const float* S) {
  for (int64_t vi = 0; vi < s.V; ++vi)
    for (int64_t ki = 0; ki < s.K; ++ki)
      store_f(a.ssm_state.data, a.ssm_state.dtype, state_offset(a, s, slot, hv, vi, ki), S[vi * s.K + ki]);
}

// Per-token inputs of value head hv: q^ and k^ (l2-normalised unless qk_l2norm is off; q times
// scale), v, and the gates (computed from a, b, A_log, dt_bias, or given: ops.h). q, k, v point to
// K, K and V floats of the caller's scratch.
struct TokenInputs {
  float *q = nullptr, *k = nullptr, *v = nullptr;
  float g = 0.f, beta = 0.f;  // log-decay and write strength
};
inline TokenInputs token_inputs(Arena& ar, const GdrShape& s) {
  TokenInputs in;
  in.q = ar.take<float>(s.K);
  in.k = ar.take<float>(s.K);
  in.v = ar.take<float>(s.V);
  return in;
}
inline void load_token(const GatedDeltaRuleArgs& a, const GdrShape& s, int64_t row, int64_t hv, TokenInputs* in) {
  const int64_t h = hv / s.r;
  float qq = 0.f, kk = 0.f;
  for (int64_t i = 0; i < s.K; ++i) {
    in->q[i] = load_f(a.q.data, a.q.dtype, row * a.q.stride[0] + h * s.K + i);
    in->k[i] = load_f(a.k.data, a.k.dtype, row * a.k.stride[0] + h * s.K + i);
    qq += in->q[i] * in->q[i];
    kk += in->k[i] * in->k[i];
  }
  const bool norm = a.qk_l2norm;
  const float qn = norm ? s.scale / std::sqrt(qq + 1e-6f) : s.scale;  // q^ = q/|q| * scale
  const float kn = norm ? 1.f / std::sqrt(kk + 1e-6f) : 1.f;          // k^ = k/|k|
  for (int64_t i = 0; i < s.K; ++i) {
    in->q[i] *= qn;
    in->k[i] *= kn;
  }
  for (int64_t i = 0; i < s.V; ++i) in->v[i] = load_f(a.v.data, a.v.dtype, row * a.v.stride[0] + hv * s.V + i);
  const float av = load_f(a.a.data, a.a.dtype, row * a.a.stride[0] + hv);
  const float bv = load_f(a.b.data, a.b.dtype, row * a.b.stride[0] + hv);
  if (a.A_log.present()) {
    const float A = load_f(a.A_log.data, a.A_log.dtype, hv * a.A_log.stride[0]);
    const float dt = load_f(a.dt_bias.data, a.dt_bias.dtype, hv * a.dt_bias.stride[0]);
    in->g = -std::exp(A) * rules::softplus(av + dt);  // g = -exp(A_log) * softplus(a + dt_bias)
  } else {
    in->g = av;  // the log-space decay, given
  }
  in->beta = a.beta_sigmoid ? 1.f / (1.f + std::exp(-bv)) : bv;  // beta = sigmoid(b), or given
}

// Deferred commit's log (docs/contract.md §7): entry [slot, j, hv] = k^ (K), v (V), g, beta.
inline float* log_entry(const TensorView& log, int64_t slot, int64_t j, int64_t hv) {
  return static_cast<float*>(log.data) + slot * log.stride[0] + (j * log.shape[2] + hv) * log.shape[3];
}

// One token's state update, S (V x K) in place: S = exp(g) S; S += beta (v - S k^) k^T. Returns
// nothing of o: the recurrence and the deferred replay share it, so both give the same bits.
inline void update_state(float* S, int64_t V, int64_t K, const float* k, const float* v, float g, float beta,
                         const float* q = nullptr, float* o = nullptr) {
  const float decay = std::exp(g);
  for (int64_t vi = 0; vi < V; ++vi) {
    float* Sv = &S[vi * K];
    float sk = 0.f;
    for (int64_t ki = 0; ki < K; ++ki) {
      Sv[ki] *= decay;  // S = exp(g) S
      sk += Sv[ki] * k[ki];
    }
    const float d = beta * (v[vi] - sk);  // d = beta (v - S k)
    float ov = 0.f;
    for (int64_t ki = 0; ki < K; ++ki) {
      Sv[ki] += d * k[ki];  // S += d k^T
      if (q) ov += Sv[ki] * q[ki];  // o = S q
    }
    if (o) o[vi] = ov;
  }
}

inline void zero_output(const GatedDeltaRuleArgs& a, const GdrShape& s, int64_t row, int64_t hv) {
  for (int64_t i = 0; i < s.V; ++i) store_f(a.o.data, a.o.dtype, row * a.o.stride[0] + hv * s.V + i, 0.f);
}

}  // namespace gdn::cpu
