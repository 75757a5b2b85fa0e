// src/cuda/lean_conv.cuh — the token inputs of the lean kernel's fused form (recurrent_lean.cuh,
// kFused): gdn_attention's causal conv (width 4) of the channels a lean block needs, computed from
// the conv pool, which this launch only reads, and the projections; conv.cu's kernel, launched
// after it, rolls the pool and copies z (the two-launch form of ops.cu's gdn_attention).
//   q, k: each lane its own EPL contiguous channels of the key head (the lanes' elements of q and
//         k), in vectors;
//   v:    lane l the block's row l (one channel; 8 rows, or 32 in the staged 16-bit form), handed to
//         the lanes that hold the row by a shuffle;
//   a, b: the gate inputs of the value head from the ba projection.
// Conv outputs are rounded to the activation dtype, as every fused form does (SPEC.md §6), and sum
// their taps in the order of conv_token (recurrent.cuh): bias, then taps oldest first.
#pragma once
#include <cstdint>

#include "cuda/rec_common.cuh"

namespace gdn::cuda {

constexpr int kLeanConvW = 4;  // the fused lean form's conv width (Qwen3-Next, Qwen3.5/3.6)

// Whether the fused lean form's vector loads may read the step's conv pool, weights, bias and
// projections (checked on the host by launch_lean_step): width 4, weight rows of 4 contiguous
// elements, 16-byte aligned bases and row strides.
inline bool lean_conv_applies(const RecurrentParams& p, size_t act_size) {
  const ConvRef& c = p.conv;
  auto a16 = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  return c.W == kLeanConvW && c.weight_rs == kLeanConvW && a16(c.weight) && (c.bias == nullptr || a16(c.bias)) &&
         aligned16(c.state, c.slot_stride, act_size) && aligned16(c.state, c.D, act_size) &&
         aligned16(p.src.qkvz, p.src.qkvz_rs, act_size);
}

// One sequence's conv window: the pool slot (column 0's: the rolling layout's only slot), the first
// window row read (verify: accepted - 1, else 0), whether the pool holds an initial state, and the
// global row of its first token (no row remap).
struct LeanWindow {
  int64_t slot0, win_base, begin;
  bool init;
};

// N contiguous activation elements as floats: vector loads (read-only path) where they are at least
// 4 bytes, else element by element.
template <typename TAct, int N>
__device__ __forceinline__ void lean_ld(const TAct* src, float (&u)[N]) {
  if constexpr (N * sizeof(TAct) >= 4) {
    load_vec<TAct, N, false>(src, u);
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) u[e] = to_float(src[e]);
  }
}

// The conv outputs of N contiguous channels ch0.. (qkvz columns col0..) at local token t of the
// sequence of window w: taps t + j < 3 from the pool's window rows w.win_base + t + j of slot
// w.slot0 (zero without initial state), the rest from the projections of tokens t + j - 3. Tap by tap, so that only one tap's inputs and the weights (as
// loaded, in the activation dtype) are live beside the sums.
template <typename TAct, int N>
__device__ __forceinline__ void lean_conv(const RecurrentParams& p, int ch0, int col0, const LeanWindow& w, int t,
                                          float (&y)[N]) {
  const ConvRef& cv = p.conv;
  constexpr int W = kLeanConvW;
  alignas(16) TAct wt[N][W];  // channel e's taps: one vector of W elements
#pragma unroll
  for (int e = 0; e < N; ++e) {
    using Vec = typename VecOf<W * sizeof(TAct)>::type;
    *reinterpret_cast<Vec*>(wt[e]) =
        __ldg(reinterpret_cast<const Vec*>(static_cast<const TAct*>(cv.weight) + (static_cast<int64_t>(ch0) + e) * W));
  }
#pragma unroll
  for (int e = 0; e < N; ++e) y[e] = 0.f;
  if (cv.bias) lean_ld<TAct, N>(static_cast<const TAct*>(cv.bias) + ch0, y);
#pragma unroll
  for (int j = 0; j < W; ++j) {
    const int idx = t + j;
    float u[N];
    if (idx < W - 1) {
#pragma unroll
      for (int e = 0; e < N; ++e) u[e] = 0.f;
      if (w.init)
        lean_ld<TAct, N>(
            static_cast<const TAct*>(cv.state) + w.slot0 * cv.slot_stride + (w.win_base + idx) * cv.D + ch0, u);
    } else {
      lean_ld<TAct, N>(static_cast<const TAct*>(p.src.qkvz) + (w.begin + idx - (W - 1)) * p.src.qkvz_rs + col0, u);
    }
#pragma unroll
    for (int e = 0; e < N; ++e) y[e] += to_float(wt[e][j]) * u[e];
  }
#pragma unroll
  for (int e = 0; e < N; ++e) y[e] = round_to<TAct>(cv.silu ? silu(y[e]) : y[e]);
}

// Token t's conv outputs of the block's rows v0 + lrow + j * G (j < R; lrow: the block-local row of
// this lane's first one in the pass): lane l < kRows computes row v0 + l (one channel), and every
// lane takes its rows' values by shuffles.
template <typename TAct, int R, int G, int kRows>
__device__ __forceinline__ void lean_step_v(const RecurrentParams& p, int hv, int v0, int lrow, const LeanWindow& w,
                                            int t, float (&vr)[R]) {
  static_assert(kRows <= 32, "one row per lane");
  const rules::ProjLayout& PL = p.src.proj;
  const int lane = threadIdx.x % 32;
  float yv[1] = {0.f};
  if (lane < kRows) {
    const int chv = 2 * PL.H * PL.K + hv * p.V + v0 + lane;
    lean_conv<TAct, 1>(p, chv, PL.conv_col(chv), w, t, yv);
  }
#pragma unroll
  for (int j = 0; j < R; ++j) vr[j] = __shfl_sync(0xffffffffu, yv[0], lrow + j * G);
}

// Token t's conv outputs of this lane's EPL q and k elements (key head h, from element
// e0 = ln * EPL; G lane groups per warp).
template <typename TAct, int EPL, int G>
__device__ __forceinline__ void lean_step_qk(const RecurrentParams& p, int h, int e0, const LeanWindow& w, int t,
                                             float (&qr)[EPL], float (&kr)[EPL]) {
  const rules::ProjLayout& PL = p.src.proj;
  const int lane = threadIdx.x % 32;
  const int chq = h * p.K + e0, chk = PL.H * PL.K + chq;
  if constexpr (G == 2) {  // lane groups 0 and 1 hold the same elements: group 0 computes q, group 1
                           // k, and each hands its outputs to its partner lane (lane ^ 16)
    const bool is_k = lane >= 16;
    float y[EPL];
    lean_conv<TAct, EPL>(p, is_k ? chk : chq, PL.conv_col(is_k ? chk : chq), w, t, y);
#pragma unroll
    for (int e = 0; e < EPL; ++e) {
      const float other = __shfl_xor_sync(0xffffffffu, y[e], 16);
      qr[e] = is_k ? other : y[e];
      kr[e] = is_k ? y[e] : other;
    }
  } else {
    static_assert(G == 1, "one or two lane groups per warp");
    lean_conv<TAct, EPL>(p, chq, PL.conv_col(chq), w, t, qr);
    lean_conv<TAct, EPL>(p, chk, PL.conv_col(chk), w, t, kr);
  }
}

// Token t's raw gate inputs a, b of value head hv, from the ba projection.
template <typename TAct>
__device__ __forceinline__ void lean_step_ab(const RecurrentParams& p, int hv, const LeanWindow& w, int t, float& av,
                                             float& bv) {
  const TAct* ba = static_cast<const TAct*>(p.src.ba) + (w.begin + t) * p.src.ba_rs;
  av = to_float(ba[p.src.proj.a_col(hv)]);
  bv = to_float(ba[p.src.proj.b_col(hv)]);
}

}  // namespace gdn::cuda
