// src/cuda/recurrent.cuh — gated delta rule, token by token, for decode, verify and short
// non-spec sequences; optionally fused with the conv, gates and l2 norms of gdn_attention.
//
//   S = exp(g) S;  d = beta (v - S k^);  S = S + d k^T;  o = S q^       (S: V x K per value head)
//
// Rows of S are independent given k^, q^ and the gates, so a block owns kRows rows of one
// (sequence, value head) and keeps them in registers for the whole sequence:
//   grid  = (ceil(V / kRows), HV, sequences of both groups)
//   block = kRows row groups x kLanes lanes; lane l of a row group holds S[v][l*EPL .. l*EPL+EPL)
// Per token, the block stages the token's raw q, k (K each), its kRows values of v, and a, b in
// shared memory (fused: computing the causal conv of the projections on the fly, reading the conv
// pool only), then every row group runs the recurrence with 8-lane shuffle reductions.
// State is read once (column a-1 for verify), written after every verify token into column t,
// or once at the end for non-spec sequences. The conv pool is updated by a later kernel.
#pragma once
#include "common/seq_rules.h"
#include "cuda/params.h"

namespace gdn::cuda {

constexpr int kLanes = 8;
constexpr int kRows = 16;
constexpr int kRecThreads = kLanes * kRows;

__device__ __forceinline__ float lane_sum(float x) {
#pragma unroll
  for (int m = kLanes / 2; m > 0; m >>= 1) x += __shfl_xor_sync(0xffffffffu, x, m);
  return x;
}

// Element ki of row vi of one value head's state, in either layout.
__device__ __forceinline__ int64_t state_elem(const RecurrentParams& p, int vi, int ki) {
  return p.kv_layout ? static_cast<int64_t>(ki) * p.V + vi : static_cast<int64_t>(vi) * p.K + ki;
}

template <typename TState, int EPL>
__device__ __forceinline__ void load_row(const RecurrentParams& p, int64_t slot, int hv, int vi, int lane,
                                         float (&s)[EPL]) {
  const TState* base = static_cast<const TState*>(p.state) + slot * p.state_slot_stride +
                       static_cast<int64_t>(hv) * p.V * p.K;
  constexpr int kBytes = EPL * sizeof(TState);
  if constexpr (kBytes % 16 == 0) {
    if (!p.kv_layout && p.state_vec) {
      const uint4* src = reinterpret_cast<const uint4*>(base + state_elem(p, vi, lane * EPL));
      constexpr int kPer = 16 / sizeof(TState);
#pragma unroll
      for (int c = 0; c < kBytes / 16; ++c) {
        uint4 u = __ldcs(src + c);  // streamed: read once
        const TState* e = reinterpret_cast<const TState*>(&u);
#pragma unroll
        for (int j = 0; j < kPer; ++j) s[c * kPer + j] = to_float(e[j]);
      }
      return;
    }
  }
#pragma unroll
  for (int j = 0; j < EPL; ++j) s[j] = to_float(base[state_elem(p, vi, lane * EPL + j)]);
}

template <typename TState, int EPL>
__device__ __forceinline__ void store_row(const RecurrentParams& p, int64_t slot, int hv, int vi, int lane,
                                          const float (&s)[EPL]) {
  TState* base = static_cast<TState*>(p.state) + slot * p.state_slot_stride + static_cast<int64_t>(hv) * p.V * p.K;
  constexpr int kBytes = EPL * sizeof(TState);
  if constexpr (kBytes % 16 == 0) {
    if (!p.kv_layout && p.state_vec) {
      uint4* dst = reinterpret_cast<uint4*>(base + state_elem(p, vi, lane * EPL));
      constexpr int kPer = 16 / sizeof(TState);
#pragma unroll
      for (int c = 0; c < kBytes / 16; ++c) {
        uint4 u;
        TState* e = reinterpret_cast<TState*>(&u);
#pragma unroll
        for (int j = 0; j < kPer; ++j) e[j] = from_float<TState>(s[c * kPer + j]);
        __stcs(dst + c, u);
      }
      return;
    }
  }
#pragma unroll
  for (int j = 0; j < EPL; ++j) base[state_elem(p, vi, lane * EPL + j)] = from_float<TState>(s[j]);
}

// Global row of local token j of a group (-1 when outside the buffer).
__device__ __forceinline__ int64_t global_row(const GroupMeta& g, int64_t j, int64_t num_rows) {
  const int64_t r = g.token_indx.present() ? g.token_indx(j) : j;
  return (r >= 0 && r < num_rows) ? r : -1;
}

// Raw input tap idx of (window ++ tokens) for conv channel c, as float (fused path).
template <typename TAct>
__device__ __forceinline__ float conv_tap(const RecurrentParams& p, const GroupMeta& g, int64_t begin, int64_t idx,
                                          int64_t c, int64_t slot0, int64_t win_base, bool init) {
  const int W1 = p.conv.W - 1;
  if (idx < W1) {
    if (!init) return 0.f;
    const TAct* cs = static_cast<const TAct*>(p.conv.state);
    return to_float(cs[slot0 * p.conv.slot_stride + (win_base + idx) * p.conv.D + c]);
  }
  const int64_t row = global_row(g, begin + idx - W1, p.src.num_actual_tokens);
  const TAct* x = static_cast<const TAct*>(p.src.qkvz);
  return to_float(x[row * p.src.qkvz_rs + p.src.proj.conv_col(c)]);
}

template <typename TAct>
__device__ __forceinline__ float conv_channel(const RecurrentParams& p, const GroupMeta& g, int64_t begin, int64_t t,
                                              int64_t c, int64_t slot0, int64_t win_base, bool init) {
  const TAct* w = static_cast<const TAct*>(p.conv.weight) + c * p.conv.weight_rs;
  float acc = p.conv.bias ? to_float(static_cast<const TAct*>(p.conv.bias)[c]) : 0.f;
  for (int j = 0; j < p.conv.W; ++j) acc += to_float(w[j]) * conv_tap<TAct>(p, g, begin, t + j, c, slot0, win_base, init);
  if (p.conv.silu) acc = silu(acc);
  return round_to<TAct>(acc);  // the conv output is stored in the activation dtype
}

template <typename TAct, typename TState, int EPL, bool kFused>
__global__ void __launch_bounds__(kRecThreads) recurrent_kernel(const __grid_constant__ RecurrentParams p) {
  constexpr int K = EPL * kLanes;
  __shared__ float s_q[K], s_k[K], s_v[kRows], s_ab[2];
  const int tid = threadIdx.x, lane = tid % kLanes, rg = tid / kLanes;
  const int hv = blockIdx.y, h = hv / p.r;
  const int vi = blockIdx.x * kRows + rg;
  const bool row_ok = vi < p.V;
  const int gi = blockIdx.z < p.n0 ? 0 : 1;
  const GroupMeta& g = p.group[gi];
  const int64_t i = gi ? blockIdx.z - p.n0 : blockIdx.z;
  const int64_t out_rows = kFused ? p.src.num_actual_tokens : g.limit;

  const auto tr = rules::token_range(g.qsl(i), g.qsl(i + 1), g.limit);
  if (tr.len == 0) return;
  const int64_t slot0 = g.slots(i, 0);
  const int64_t acc = g.spec ? rules::accepted(g.num_accepted(i), g.cols) : 1;
  const int64_t read_slot = g.spec ? g.slots(i, acc - 1) : slot0;
  bool pad = !rules::slot_valid(slot0, p.num_slots, p.has_null, p.null_id) ||
             !rules::slot_valid(read_slot, p.num_slots, p.has_null, p.null_id);
  if (kFused) {
    pad = pad || !rules::slot_valid(slot0, p.conv.num_slots, p.has_null, p.null_id);
    bool bad_row = false;
    for (int64_t t = tid; t < tr.len; t += kRecThreads) bad_row |= global_row(g, tr.begin + t, out_rows) < 0;
    pad = __syncthreads_or(bad_row) || pad;
  }
  TAct* o = static_cast<TAct*>(p.o);
  if (pad) {
    if (lane == 0 && row_ok)
      for (int64_t t = 0; t < tr.len; ++t) {
        const int64_t row = global_row(g, tr.begin + t, out_rows);
        if (row >= 0) o[row * p.o_rs + static_cast<int64_t>(hv) * p.V + vi] = from_float<TAct>(0.f);
      }
    return;
  }
  const bool init = g.has_init ? g.has_init[i * g.has_init_stride] != 0 : true;
  float s[EPL];
#pragma unroll
  for (int j = 0; j < EPL; ++j) s[j] = 0.f;
  if (init && row_ok) load_row<TState, EPL>(p, read_slot, hv, vi, lane, s);

  const float A = -expf(p.A_log(hv)), dtb = p.dt_bias(hv);
  const int64_t win_base = g.spec ? acc - 1 : 0;  // conv window rows (fused)
  for (int64_t t = 0; t < tr.len; ++t) {
    const int64_t row = global_row(g, tr.begin + t, out_rows);
    __syncthreads();  // the previous token's shared inputs are consumed
    if constexpr (kFused) {
      const auto& L = p.src.proj;
      for (int c = tid; c < 2 * K; c += kRecThreads) {
        const int64_t ch = c < K ? static_cast<int64_t>(h) * K + c : L.H * L.K + static_cast<int64_t>(h) * K + (c - K);
        const float y = conv_channel<TAct>(p, g, tr.begin, t, ch, slot0, win_base, init);
        (c < K ? s_q[c] : s_k[c - K]) = y;
      }
      if (tid < kRows && blockIdx.x * kRows + tid < p.V) {
        const int64_t ch = 2 * L.H * L.K + static_cast<int64_t>(hv) * p.V + blockIdx.x * kRows + tid;
        s_v[tid] = conv_channel<TAct>(p, g, tr.begin, t, ch, slot0, win_base, init);
      }
      if (tid < 2) {
        const TAct* ba = static_cast<const TAct*>(p.src.ba) + row * p.src.ba_rs;
        s_ab[tid] = to_float(ba[tid == 0 ? L.a_col(hv) : L.b_col(hv)]);
      }
    } else {
      const TAct* q = static_cast<const TAct*>(p.src.q) + row * p.src.q_rs + static_cast<int64_t>(h) * K;
      const TAct* k = static_cast<const TAct*>(p.src.k) + row * p.src.k_rs + static_cast<int64_t>(h) * K;
      for (int c = tid; c < K; c += kRecThreads) {
        s_q[c] = to_float(q[c]);
        s_k[c] = to_float(k[c]);
      }
      if (tid < kRows && blockIdx.x * kRows + tid < p.V)
        s_v[tid] = to_float(static_cast<const TAct*>(p.src.v)[row * p.src.v_rs + static_cast<int64_t>(hv) * p.V +
                                                             blockIdx.x * kRows + tid]);
      if (tid < 2) {
        const TAct* src = static_cast<const TAct*>(tid == 0 ? p.src.a : p.src.b);
        s_ab[tid] = to_float(src[row * (tid == 0 ? p.src.a_rs : p.src.b_rs) + hv]);
      }
    }
    __syncthreads();
    float kr[EPL], qr[EPL], kk = 0.f, qq = 0.f;
#pragma unroll
    for (int j = 0; j < EPL; ++j) {
      kr[j] = s_k[lane * EPL + j];
      qr[j] = s_q[lane * EPL + j];
      kk += kr[j] * kr[j];
      qq += qr[j] * qr[j];
    }
    const float kn = 1.f / sqrtf(lane_sum(kk) + 1e-6f);           // k^ = k / |k|
    const float qn = p.scale / sqrtf(lane_sum(qq) + 1e-6f);       // q^ = q / |q| * scale
    const float gate = A * rules::softplus(s_ab[0] + dtb);         // g = -exp(A_log) softplus(a + dt_bias)
    const float beta = 1.f / (1.f + expf(-s_ab[1]));              // beta = sigmoid(b)
    const float decay = expf(gate);
    float sk = 0.f;
#pragma unroll
    for (int j = 0; j < EPL; ++j) {
      kr[j] *= kn;
      s[j] *= decay;  // S = exp(g) S
      sk += s[j] * kr[j];
    }
    const float d = beta * ((row_ok ? s_v[rg] : 0.f) - lane_sum(sk));  // d = beta (v - S k^)
    float ov = 0.f;
#pragma unroll
    for (int j = 0; j < EPL; ++j) {
      s[j] += d * kr[j];        // S += d k^T
      ov += s[j] * (qr[j] * qn);  // o = S q^
    }
    ov = lane_sum(ov);
    if (lane == 0 && row_ok) o[row * p.o_rs + static_cast<int64_t>(hv) * p.V + vi] = from_float<TAct>(ov);
    if (g.spec && t < g.cols && row_ok) {
      const int64_t slot = g.slots(i, t);
      if (rules::slot_valid(slot, p.num_slots, p.has_null, p.null_id)) store_row<TState, EPL>(p, slot, hv, vi, lane, s);
    }
  }
  if (!g.spec && row_ok) store_row<TState, EPL>(p, slot0, hv, vi, lane, s);
}

// Launchers, one per activation dtype (recurrent_<dtype>.cu); state dtype and K dispatched inside.
Status launch_recurrent_f32(const RecurrentParams& p, DType state, bool fused, cudaStream_t stream);
Status launch_recurrent_bf16(const RecurrentParams& p, DType state, bool fused, cudaStream_t stream);
Status launch_recurrent_f16(const RecurrentParams& p, DType state, bool fused, cudaStream_t stream);

template <typename TAct>
Status launch_recurrent(const RecurrentParams& p, DType state, bool fused, cudaStream_t stream) {
  const int64_t nseq = p.group[0].n + p.group[1].n;
  if (nseq == 0) return Status::Ok();
  const dim3 grid(static_cast<unsigned>((p.V + kRows - 1) / kRows), static_cast<unsigned>(p.HV),
                  static_cast<unsigned>(nseq));
  auto go = [&](auto state_tag, auto epl_tag) -> Status {
    using TS = decltype(state_tag);
    constexpr int EPL = decltype(epl_tag)::value;
    if (fused)
      recurrent_kernel<TAct, TS, EPL, true><<<grid, kRecThreads, 0, stream>>>(p);
    else
      recurrent_kernel<TAct, TS, EPL, false><<<grid, kRecThreads, 0, stream>>>(p);
    GDN_CUDA_CHECK(cudaGetLastError());
    return Status::Ok();
  };
  auto by_k = [&](auto state_tag) -> Status {
    switch (p.K) {
      case 16: return go(state_tag, std::integral_constant<int, 2>{});
      case 32: return go(state_tag, std::integral_constant<int, 4>{});
      case 64: return go(state_tag, std::integral_constant<int, 8>{});
      case 128: return go(state_tag, std::integral_constant<int, 16>{});
      case 256: return go(state_tag, std::integral_constant<int, 32>{});
      default: return Status::Error("unsupported head_k_dim " + std::to_string(p.K) + " on CUDA: supported {16, 32, 64, 128, 256}");
    }
  };
  switch (state) {
    case DType::kFloat32: return by_k(float{});
    case DType::kBFloat16: return by_k(__nv_bfloat16{});
    case DType::kFloat16: return by_k(__half{});
    default: return Status::Error(std::string("unsupported SSM state dtype ") + dtype_name(state));
  }
}

}  // namespace gdn::cuda
