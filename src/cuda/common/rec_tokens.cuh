// src/cuda/common/rec_tokens.cuh — the recurrent kernels' token inputs (primitive op): where they are,
// their loads into registers and shared memory, padding outputs, a token's o and verify state,
// and the token loop. Included at the end of rec_common.cuh (uses its lane-group math).
#pragma once
#include <type_traits>

#include "cuda/common/rec_common.cuh"

namespace gdn::cuda {

// Where the primitive op's inputs of one token (global row `row`) are: q and k of key head h, v of
// row v0 + tid of value head hv, and gate input a (which = 0) or b (1) of value head hv.
template <typename TAct>
__device__ __forceinline__ const TAct* q_row(const RecurrentParams& p, int64_t row, int h) {
  return static_cast<const TAct*>(p.src.q) + row * p.src.q_rs + static_cast<int64_t>(h) * p.K;
}
template <typename TAct>
__device__ __forceinline__ const TAct* k_row(const RecurrentParams& p, int64_t row, int h) {
  return static_cast<const TAct*>(p.src.k) + row * p.src.k_rs + static_cast<int64_t>(h) * p.K;
}
template <typename TAct>
__device__ __forceinline__ TAct v_elem(const RecurrentParams& p, int64_t row, int hv, int v0, int tid) {
  return static_cast<const TAct*>(p.src.v)[row * p.src.v_rs + static_cast<int64_t>(hv) * p.V + v0 + tid];
}
template <typename TAct>
__device__ __forceinline__ TAct gate_elem(const RecurrentParams& p, int64_t row, int hv, int which) {
  const TAct* src = static_cast<const TAct*>(which == 0 ? p.src.a : p.src.b);
  return src[row * (which == 0 ? p.src.a_rs : p.src.b_rs) + hv];
}

// The primitive op's inputs of one token (global row `row`) into shared memory: raw q and k of key
// head h (zero past K), the v values of the block's kRows rows from v0, and a, b (kForms: each in its
// own dtype, p.a_dtype and p.b_dtype; else in TAct).
template <typename TAct, int KP, int kRows, int kThreads, bool kForms = false>
__device__ __forceinline__ void stage_inputs(const RecurrentParams& p, int64_t row, int h, int hv, int v0, int tid,
                                             float* s_q, float* s_k, float* s_v, float* s_ab) {
  const TAct* q = q_row<TAct>(p, row, h);
  const TAct* k = k_row<TAct>(p, row, h);
  for (int c = tid; c < KP; c += kThreads) {
    s_q[c] = c < p.K ? to_float(q[c]) : 0.f;
    s_k[c] = c < p.K ? to_float(k[c]) : 0.f;
  }
  if (tid < kRows && v0 + tid < p.V) s_v[tid] = to_float(v_elem<TAct>(p, row, hv, v0, tid));
  if constexpr (kForms) {
    if (tid < 2) s_ab[tid] = raw_float(gate_word(p, row, hv, tid), tid == 0 ? p.a_dtype : p.b_dtype);
  } else {
    if (tid < 2) s_ab[tid] = to_float(gate_elem<TAct>(p, row, hv, tid));
  }
}

// A padding sequence: zeros in o for the lane's row (lanes ln < R), every token whose row exists.
template <typename TAct, int R, int G>
__device__ __forceinline__ void zero_outputs(const RecurrentParams& p, const GroupMeta& g, rules::TokenRange tr,
                                             int64_t out_rows, int hv, int row0, int ln) {
  const int vi = row0 + ln * G;
  if (ln < R && vi < p.V)
    for (int64_t t = 0; t < tr.len; ++t) {
      const int64_t row = global_row(g, tr.begin + t, out_rows);
      if (row >= 0) static_cast<TAct*>(p.o)[row * p.o_rs + static_cast<int64_t>(hv) * p.V + vi] = from_float<TAct>(0.f);
    }
}

// The slot that receives a verify sequence's state after its token t: column t's slot when the
// sequence is a verify one, t < cols and the slot is usable; -1 otherwise (nothing stored).
__device__ __forceinline__ int64_t verify_slot(const RecurrentParams& p, const GroupMeta& g, int64_t i, int64_t t) {
  if (!g.spec || t >= g.cols) return -1;
  const int64_t slot = g.slots(i, t);
  return rules::slot_valid(slot, p.num_slots, p.has_null, p.null_id) ? slot : -1;
}

// After token t of sequence i: o of the lane's row (lanes ln < R, value `mine`), and for verify
// sequences the state into column t's slot (when usable).
template <typename TAct, typename TState, int KP, int R, int EPL, int G, bool kDense>
__device__ __forceinline__ void emit_token(const RecurrentParams& p, const GroupMeta& g, int64_t i, int64_t t,
                                           int64_t row, int hv, int row0, int ln, float mine,
                                           const float (&s)[R][EPL]) {
  if (ln < R && row0 + ln * G < p.V)
    static_cast<TAct*>(p.o)[row * p.o_rs + static_cast<int64_t>(hv) * p.V + row0 + ln * G] = from_float<TAct>(mine);
  if (g.spec && t < g.cols) {
    const int64_t slot = g.slots(i, t);
    if (rules::slot_valid(slot, p.num_slots, p.has_null, p.null_id))
#pragma unroll
      for (int j = 0; j < R; ++j)
        if (row0 + j * G < p.V) store_row<TState, KP, EPL, kDense>(p, slot, hv, row0 + j * G, ln, s[j]);
  }
}

template <int KP, int kRows, int kTB>
struct TokenStage {
  float q[kTB][KP], k[kTB][KP], v[kTB][kRows], ab[kTB][2];
};

// The primitive op's inputs of nt <= kTB tokens (local tokens t0.., global rows from global_row),
// as loaded (load_tokens: every load of every token issued into registers, so that the tokens
// cost one round trip), then converted into shared memory (store_tokens). With `gates`, the last
// four threads also load the words of A_log and dt_bias (stored to a gw[4] in shared memory), so
// that they share that round trip instead of two of their own. kForms: a and b each in its own
// dtype (p.a_dtype, p.b_dtype), held as raw words (ab_dt: the code of this thread's, threads 0 and 1).
template <typename TAct, int KP, int kThreads, int kTB, bool kForms = false>
struct TokenRegs {
  static constexpr int kE = (KP + kThreads - 1) / kThreads;  // q and k elements per thread and token
  using AB = std::conditional_t<kForms, uint32_t, TAct>;
  TAct q[kTB][kE], k[kTB][kE], v[kTB];
  AB ab[kTB];
  int ab_dt;
  uint32_t gw;
};
template <typename TAct, int KP, int kRows, int kThreads, int kTB, bool kForms = false>
__device__ __forceinline__ TokenRegs<TAct, KP, kThreads, kTB, kForms> load_tokens(
    const RecurrentParams& p, const GroupMeta& g, rules::TokenRange tr, int64_t t0, int nt, int h, int hv, int v0,
    int tid, bool gates) {
  static_assert(kThreads >= 4, "four threads load the gate words");
  using Regs = TokenRegs<TAct, KP, kThreads, kTB, kForms>;
  Regs r;
#pragma unroll
  for (int u = 0; u < kTB; ++u) {
    if (u >= nt) break;
    const int64_t row = global_row(g, tr.begin + t0 + u, g.limit);
    const TAct* q = q_row<TAct>(p, row, h);
    const TAct* k = k_row<TAct>(p, row, h);
#pragma unroll
    for (int e = 0; e < Regs::kE; ++e) {
      const int c = tid + e * kThreads;
      r.q[u][e] = c < p.K ? q[c] : from_float<TAct>(0.f);
      r.k[u][e] = c < p.K ? k[c] : from_float<TAct>(0.f);
    }
    r.v[u] = (tid < kRows && v0 + tid < p.V) ? v_elem<TAct>(p, row, hv, v0, tid) : from_float<TAct>(0.f);
    if constexpr (kForms) {
      if (tid < 2) r.ab[u] = gate_word(p, row, hv, tid);
    } else {
      if (tid < 2) r.ab[u] = gate_elem<TAct>(p, row, hv, tid);
    }
  }
  if constexpr (kForms) r.ab_dt = tid == 0 ? p.a_dtype : p.b_dtype;
  const int gt = tid - (kThreads - 4);  // 0, 1: A_log's words; 2, 3: dt_bias's
  r.gw = 0u;
  if (gates && gt >= 0) r.gw = load_param_word(gt < 2 ? p.A_log : p.dt_bias, hv, gt & 1);
  return r;
}
template <typename TAct, int KP, int kRows, int kThreads, int kTB, bool kForms = false>
__device__ __forceinline__ void store_tokens(const TokenRegs<TAct, KP, kThreads, kTB, kForms>& r, int nt, int tid,
                                             TokenStage<KP, kRows, kTB>& st, uint32_t* gw = nullptr) {
#pragma unroll
  for (int u = 0; u < kTB; ++u) {
    if (u >= nt) break;
#pragma unroll
    for (int e = 0; e < r.kE; ++e) {
      const int c = tid + e * kThreads;
      if (c < KP) {
        st.q[u][c] = to_float(r.q[u][e]);
        st.k[u][c] = to_float(r.k[u][e]);
      }
    }
    if (tid < kRows) st.v[u][tid] = to_float(r.v[u]);
    if constexpr (kForms) {
      if (tid < 2) st.ab[u][tid] = raw_float(r.ab[u], r.ab_dt);
    } else {
      if (tid < 2) st.ab[u][tid] = to_float(r.ab[u]);
    }
  }
  const int gt = tid - (kThreads - 4);
  if (gw && gt >= 0) gw[gt] = r.gw;
}
template <typename TAct, int KP, int kRows, int kThreads, int kTB, bool kForms = false>
__device__ __forceinline__ void stage_tokens(const RecurrentParams& p, const GroupMeta& g, rules::TokenRange tr,
                                             int64_t t0, int nt, int h, int hv, int v0, int tid,
                                             TokenStage<KP, kRows, kTB>& st) {
  store_tokens<TAct, KP, kRows, kThreads, kTB, kForms>(
      load_tokens<TAct, KP, kRows, kThreads, kTB, kForms>(p, g, tr, t0, nt, h, hv, v0, tid, false), nt, tid, st);
}
// A = -exp(A_log) and dt_bias from the staged gate words (after the barrier that follows store_tokens).
__device__ __forceinline__ void staged_gates(const RecurrentParams& p, const uint32_t (&gw)[4], float& A, float& dtb) {
  A = -expf(p.A_log.from_bits(make_uint2(gw[0], gw[1])));
  dtb = p.dt_bias.from_bits(make_uint2(gw[2], gw[3]));
}

// The primitive op's token loop for a lane group's R float32 rows s (rows row0 + j G, block-local
// lrow0 + j G): stages kTB tokens' inputs, runs recur_token on each and emits its o and verify
// state. The caller stores the final state of a non-spec sequence. kForms: the gate and norm forms
// of p.gates, a and b in their own dtypes; else the default form, a and b in TAct.
template <typename TAct, typename TState, int KP, int kRows, int kThreads, int L, int G, int R, int EPL, bool kDense,
          int kTB, bool kForms = false>
__device__ __forceinline__ void run_tokens(const RecurrentParams& p, const GroupMeta& g, int64_t i,
                                           rules::TokenRange tr, float (&s)[R][EPL], int row0, int lrow0, int h,
                                           int hv, float A, float dtb, int tid, int ln,
                                           TokenStage<KP, kRows, kTB>& st) {
  const GateForm f = kForms ? p.gates : GateForm{};
  for (int64_t t0 = 0; t0 < tr.len; t0 += kTB) {
    const int nt = static_cast<int>(tr.len - t0 < kTB ? tr.len - t0 : kTB);
    __syncthreads();  // the previous batch's shared inputs are consumed
    if constexpr (kTB == 1)
      stage_inputs<TAct, KP, kRows, kThreads, kForms>(p, global_row(g, tr.begin + t0, g.limit), h, hv, row0 - lrow0,
                                                      tid, st.q[0], st.k[0], st.v[0], st.ab[0]);
    else
      stage_tokens<TAct, KP, kRows, kThreads, kTB, kForms>(p, g, tr, t0, nt, h, hv, row0 - lrow0, tid, st);
    __syncthreads();
    for (int u = 0; u < nt; ++u) {
      const float mine = recur_token<L, G, R, EPL>(s, st.q[u], st.k[u], st.v[u], lrow0, p.V - row0, st.ab[u][0],
                                                   st.ab[u][1], A, dtb, p.scale, ln, f);
      emit_token<TAct, TState, KP, R, EPL, G, kDense>(p, g, i, t0 + u, global_row(g, tr.begin + t0 + u, g.limit), hv,
                                                  row0, ln, mine, s);
    }
  }
}

}  // namespace gdn::cuda
