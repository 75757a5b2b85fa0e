// Gated delta rule, chunk-parallel in the WY/UT form (chunk 64), CPU reference for the CUDA chunk
// kernel. Work item: (sequence, value head). Within a chunk of C tokens, with G_i = sum_{s<=i} g_s
// (cumulative log-decay inside the chunk) and S0 the state entering the chunk:
//   A[i][j]  = beta_i exp(G_i - G_j) (k_i . k_j)              j < i (strictly lower)
//   T        = (I + A)^-1                                      (unit lower triangular)
//   U        = T (beta v),   Wk = T (beta exp(G) k)            (the WY representation)
//   delta_i  = U_i - S0 Wk_i                                    (the corrected values)
//   o_i      = exp(G_i) S0 q_i + sum_{j<=i} exp(G_i - G_j) (q_i . k_j) delta_j
//   S_end    = exp(G_C-1) S0 + sum_j exp(G_C-1 - G_j) delta_j k_j^T
// which unrolls S_t = exp(g_t) S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T exactly.
// G is summed in double from g clamped below (rules::chunk_log_decay: a decay of 0 either way): a
// difference G_i - G_j of two large sums (a strong decay early in the chunk, weak ones after it)
// keeps its digits, and a decay of -inf (or a sum past float's range) stays finite instead of
// turning -inf - -inf into NaN.
#include <algorithm>

#include "cpu/backend.h"
#include "cpu/gdr_util.h"

namespace gdn::cpu {
namespace {

constexpr int64_t kChunk = 64;

// One work item's buffers: its state and a chunk's inputs, matrices and outputs (up to kChunk tokens).
struct ChunkBufs {
  float *S, *q, *k, *v, *beta, *A, *T, *U, *Wk, *delta, *o;
  double* G;
  TokenInputs in;
};
ChunkBufs chunk_bufs(Arena& ar, const GdrShape& s) {
  const int64_t C = kChunk, K = s.K, V = s.V;
  ChunkBufs b;
  b.S = ar.take<float>(elems(V, K));
  b.q = ar.take<float>(elems(C, K));
  b.k = ar.take<float>(elems(C, K));
  b.v = ar.take<float>(elems(C, V));
  b.G = ar.take<double>(C);
  b.beta = ar.take<float>(C);
  b.A = ar.take<float>(C * C);
  b.T = ar.take<float>(C * C);
  b.U = ar.take<float>(elems(C, V));
  b.Wk = ar.take<float>(elems(C, K));
  b.delta = ar.take<float>(elems(C, V));
  b.o = ar.take<float>(V);
  b.in = token_inputs(ar, s);
  return b;
}

// One chunk of C tokens starting at `row`; the state b.S (V x K) is advanced in place.
void chunk_step(const GatedDeltaRuleArgs& a, const GdrShape& s, int64_t row, int64_t C, int64_t hv,
                const ChunkBufs& b) {
  const int64_t K = s.K, V = s.V;
  float *const S = b.S, *const q = b.q, *const k = b.k, *const v = b.v, *const beta = b.beta;
  double* const G = b.G;
  TokenInputs in = b.in;
  double cum = 0.0;
  for (int64_t i = 0; i < C; ++i) {
    load_token(a, s, row + i, hv, &in);
    std::copy(in.q, in.q + K, &q[i * K]);
    std::copy(in.k, in.k + K, &k[i * K]);
    std::copy(in.v, in.v + V, &v[i * V]);
    cum += rules::chunk_log_decay(in.g);
    G[i] = cum;
    beta[i] = in.beta;
  }
  auto ex = [](double x) { return static_cast<float>(std::exp(x)); };
  auto dot = [](const float* x, const float* y, int64_t n) {
    float acc = 0.f;
    for (int64_t i = 0; i < n; ++i) acc += x[i] * y[i];
    return acc;
  };
  // T = (I + A)^-1 by forward substitution, row by row: T_i = e_i - sum_{j<i} A_ij T_j.
  float *const A = b.A, *const T = b.T;
  std::fill(A, A + C * C, 0.f);
  std::fill(T, T + C * C, 0.f);
  for (int64_t i = 0; i < C; ++i)
    for (int64_t j = 0; j < i; ++j) A[i * C + j] = beta[i] * ex(G[i] - G[j]) * dot(&k[i * K], &k[j * K], K);
  for (int64_t i = 0; i < C; ++i) {
    T[i * C + i] = 1.f;
    for (int64_t j = 0; j < i; ++j) {
      const float aij = A[i * C + j];
      if (aij == 0.f) continue;
      for (int64_t m = 0; m <= j; ++m) T[i * C + m] -= aij * T[j * C + m];
    }
  }
  // U = T (beta v), Wk = T (beta exp(G) k)
  float *const U = b.U, *const Wk = b.Wk;
  std::fill(U, U + C * V, 0.f);
  std::fill(Wk, Wk + C * K, 0.f);
  for (int64_t i = 0; i < C; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      const float tij = T[i * C + j];
      const float tb = tij * beta[j], tbg = tb * ex(G[j]);
      for (int64_t x = 0; x < V; ++x) U[i * V + x] += tb * v[j * V + x];
      for (int64_t x = 0; x < K; ++x) Wk[i * K + x] += tbg * k[j * K + x];
    }
  // delta = U - S0 Wk (S0 is V x K: (S0 w)[vi] = S0[vi] . w)
  float* const delta = b.delta;
  for (int64_t i = 0; i < C; ++i)
    for (int64_t vi = 0; vi < V; ++vi) delta[i * V + vi] = U[i * V + vi] - dot(&S[vi * K], &Wk[i * K], K);
  // o_i = exp(G_i) S0 q_i + sum_{j<=i} exp(G_i - G_j) (q_i . k_j) delta_j
  float* const o = b.o;
  for (int64_t i = 0; i < C; ++i) {
    const float eg = ex(G[i]);
    for (int64_t vi = 0; vi < V; ++vi) o[vi] = eg * dot(&S[vi * K], &q[i * K], K);
    for (int64_t j = 0; j <= i; ++j) {
      const float w = ex(G[i] - G[j]) * dot(&q[i * K], &k[j * K], K);
      for (int64_t vi = 0; vi < V; ++vi) o[vi] += w * delta[j * V + vi];
    }
    for (int64_t vi = 0; vi < V; ++vi) store_f(a.o.data, a.o.dtype, (row + i) * a.o.stride[0] + hv * V + vi, o[vi]);
  }
  // S_end = exp(G_last) S0 + sum_j exp(G_last - G_j) delta_j k_j^T
  const double glast = G[C - 1];
  for (int64_t vi = 0; vi < V; ++vi) {
    float* Sv = &S[vi * K];
    const float e = ex(glast);
    for (int64_t x = 0; x < K; ++x) Sv[x] *= e;
    for (int64_t j = 0; j < C; ++j) {
      const float w = ex(glast - G[j]) * delta[j * V + vi];
      for (int64_t x = 0; x < K; ++x) Sv[x] += w * k[j * K + x];
    }
  }
}

ScratchNeed chunked_need(const GatedDeltaRuleArgs& a) {
  const GdrShape s = gdr_shape(a);
  Arena m;
  chunk_bufs(m, s);
  return {elems(a.state_indices.shape[0], s.HV), m.used()};
}

}  // namespace

Status gated_delta_rule_chunked(const GatedDeltaRuleArgs& a) {
  Scratch sc(chunked_need(a));
  const GdrShape s = gdr_shape(a);
  const int64_t n = a.state_indices.shape[0];
  parallel_for(n * s.HV, sc, [&](int64_t item, Arena& ar) {
    const int64_t i = item / s.HV, hv = item % s.HV;
    const auto tr = sequence_tokens(a.query_start_loc, i, a.q.shape[0]);
    if (tr.len == 0) return;
    const int64_t slot = slot_of(a, i, 0);
    if (!rules::slot_valid(slot, s.num_slots, s.has_null, s.null_id)) {
      for (int64_t t = 0; t < tr.len; ++t) zero_output(a, s, tr.begin + t, hv);
      return;
    }
    const ChunkBufs b = chunk_bufs(ar, s);
    if (load_bool(a.has_initial_state, i, true)) load_state(a, s, slot, hv, b.S);
    else std::fill(b.S, b.S + s.V * s.K, 0.f);
    for (int64_t c0 = 0; c0 < tr.len; c0 += kChunk)
      chunk_step(a, s, tr.begin + c0, std::min(kChunk, tr.len - c0), hv, b);
    store_state(a, s, slot, hv, b.S);
  });
  return Status::Ok();
}

}  // namespace gdn::cpu
