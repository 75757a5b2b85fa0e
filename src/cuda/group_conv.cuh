// src/cuda/group_conv.cuh — the pipelined fused step's conv of one (sequence, key head) group for a
// sequence of at most kTok tokens (every decode and verify sequence), by the producer warp
// (recurrent_tma.cuh, kFused): channels [q0, q0 + K), [k0, k0 + K), [v0, v0 + r V) as chunks of 4
// contiguous ones, lane by lane. A chunk's inputs — its W - 1 window rows, its tokens' qkvz
// values, weights and bias — are requested together, either straight into registers
// (gc_load_global: one round trip per chunk batch) or, for 16-bit activations, a group ahead into
// a shared-memory staging area by per-thread asynchronous copies (gc_stage, then gc_load_staged once
// they landed: the round trip overlaps the previous items' copies). gc_finish then writes the conv
// output of every token into the group buffer and the chunk's conv pool rows from the same
// registers: the values, operations and order of conv_chunk and pool_update (conv_tok.cuh).
// Registers hold (window ++ tokens) right-aligned: position kM - (W - 1) + s holds element s, and
// tap j of the weights sits at j + kMaxW - W, so every register index is a constant whatever W is.
#pragma once
#include "cuda/conv_tok.cuh"
#include "cuda/tma_util.cuh"

namespace gdn::cuda {

constexpr int kGcCH = 4;     // channels per chunk
constexpr int kGcMaxRS = 8;  // staging: weight rows of at most 8 elements (weight_rs)
constexpr int kGcM = kMaxW - 1;

// What the conv of a group needs, resolved once by the producer (warp-uniform).
struct GroupConv {
  int64_t slot0, base, begin;
  int len, nt;  // tokens (<= kTok); inputs kept in the pool (rolling verify: min(len, cols))
  bool window;  // the sequence has a window (initial state, or rolling verify)
  int q0, k0, v0, KP, chunks;
  __device__ __forceinline__ int channel(int c) const {  // conv channel of [q | k | v] index c
    return c < KP ? q0 + c : c < 2 * KP ? k0 + (c - KP) : v0 + (c - 2 * KP);
  }
};

template <typename TAct, int kTok>
struct GcChunk {
  static constexpr int kN = kGcM + kTok;
  using Vec = typename VecOf<kGcCH * static_cast<int>(sizeof(TAct))>::type;
  Vec u[kN];               // (window ++ tokens), right-aligned; zeros where absent
  TAct w[kMaxW][kGcCH];    // weights, right-aligned
  TAct b[kGcCH];           // bias (zeros when none)
};

// Staging area of one chunk (16-bit activations): kN rows of 4 values, 4 weight rows of weight_rs
// elements, 4 biases.
template <typename TAct, int kTok>
constexpr int gc_stage_elems() {
  return GcChunk<TAct, kTok>::kN * kGcCH + kGcCH * kGcMaxRS + kGcCH;
}

// Global row offsets (qkvz rows) of the group's tokens.
template <int kTok>
__device__ __forceinline__ void gc_rows(const RecurrentParams& p, const GroupMeta& g, const GroupConv& gc,
                                        int64_t (&xr)[kTok]) {
#pragma unroll
  for (int t = 0; t < kTok; ++t)
    xr[t] = t < gc.len ? global_row(g, gc.begin + t, p.src.num_actual_tokens) * p.src.qkvz_rs : 0;  // not padding
}

template <typename TAct, int kTok>
__device__ __forceinline__ void gc_load_global(const RecurrentParams& p, const GroupConv& gc,
                                               const int64_t (&xr)[kTok], int ch, GcChunk<TAct, kTok>& in) {
  using C = GcChunk<TAct, kTok>;
  using Vec = typename C::Vec;
  const int W = p.conv.W, W1 = W - 1, col = p.src.proj.conv_col(ch);
  const TAct* slot = static_cast<const TAct*>(p.conv.state) + gc.slot0 * p.conv.slot_stride;
  const TAct* qkvz = static_cast<const TAct*>(p.src.qkvz);
  const TAct* wt = static_cast<const TAct*>(p.conv.weight);
  const TAct* bias = static_cast<const TAct*>(p.conv.bias);
#pragma unroll
  for (int pos = 0; pos < C::kN; ++pos) {
    const int j = pos - (kGcM - W1);  // window row j (pos < kGcM), or token pos - kGcM
    in.u[pos] = Vec{};
    if (pos < kGcM) {
      if (gc.window && j >= 0) in.u[pos] = *reinterpret_cast<const Vec*>(slot + (gc.base + j) * p.conv.D + ch);
    } else if (pos - kGcM < gc.len) {
      in.u[pos] = *reinterpret_cast<const Vec*>(qkvz + xr[pos - kGcM] + col);
    }
  }
#pragma unroll
  for (int jj = 0; jj < kMaxW; ++jj)
#pragma unroll
    for (int e = 0; e < kGcCH; ++e)
      in.w[jj][e] = jj >= kMaxW - W ? wt[(ch + e) * p.conv.weight_rs + jj - (kMaxW - W)] : TAct(0.f);
#pragma unroll
  for (int e = 0; e < kGcCH; ++e) in.b[e] = bias ? bias[ch + e] : TAct(0.f);
}

// Whether a group can be staged: 16-bit activations, short weight rows.
template <typename TAct>
__device__ __forceinline__ bool gc_stageable(const RecurrentParams& p) {
  return sizeof(TAct) == 2 && p.conv.weight_rs <= kGcMaxRS;
}

// Requests chunk ch's inputs into its staging area (this lane's copies; gc_load_staged after
// cp_async_wait_all). 16-bit activations: 8-byte copies (4 channels; weight rows 4 weight_rs
// elements from ch weight_rs, 8-byte aligned since ch is a multiple of 4).
template <typename TAct, int kTok>
__device__ __forceinline__ void gc_stage(const RecurrentParams& p, const GroupConv& gc, const int64_t (&xr)[kTok],
                                         int ch, TAct* stg) {
  static_assert(sizeof(TAct) == 2, "staging: 16-bit activations");
  using C = GcChunk<TAct, kTok>;
  const int W1 = p.conv.W - 1, col = p.src.proj.conv_col(ch), rs = static_cast<int>(p.conv.weight_rs);
  const TAct* slot = static_cast<const TAct*>(p.conv.state) + gc.slot0 * p.conv.slot_stride;
  const TAct* qkvz = static_cast<const TAct*>(p.src.qkvz);
#pragma unroll
  for (int pos = 0; pos < C::kN; ++pos) {
    const int j = pos - (kGcM - W1);
    if (pos < kGcM) {
      if (gc.window && j >= 0) cp_async<8>(stg + pos * kGcCH, slot + (gc.base + j) * p.conv.D + ch);
    } else if (pos - kGcM < gc.len) {
      cp_async<8>(stg + pos * kGcCH, qkvz + xr[pos - kGcM] + col);
    }
  }
  const TAct* wt = static_cast<const TAct*>(p.conv.weight) + static_cast<int64_t>(ch) * rs;
  TAct* sw = stg + C::kN * kGcCH;
  for (int q = 0; q < rs; ++q) cp_async<8>(sw + 4 * q, wt + 4 * q);  // 4 rs elements
  if (p.conv.bias) cp_async<8>(sw + kGcCH * kGcMaxRS, static_cast<const TAct*>(p.conv.bias) + ch);
}

template <typename TAct, int kTok>
__device__ __forceinline__ void gc_load_staged(const RecurrentParams& p, const GroupConv& gc, const TAct* stg,
                                               GcChunk<TAct, kTok>& in) {
  using C = GcChunk<TAct, kTok>;
  using Vec = typename C::Vec;
  const int W = p.conv.W, W1 = W - 1, rs = static_cast<int>(p.conv.weight_rs);
#pragma unroll
  for (int pos = 0; pos < C::kN; ++pos) {
    const bool on = pos < kGcM ? (gc.window && pos - (kGcM - W1) >= 0) : pos - kGcM < gc.len;
    in.u[pos] = on ? *reinterpret_cast<const Vec*>(stg + pos * kGcCH) : Vec{};
  }
  const TAct* sw = stg + C::kN * kGcCH;
#pragma unroll
  for (int jj = 0; jj < kMaxW; ++jj)
#pragma unroll
    for (int e = 0; e < kGcCH; ++e) in.w[jj][e] = jj >= kMaxW - W ? sw[e * rs + jj - (kMaxW - W)] : TAct(0.f);
#pragma unroll
  for (int e = 0; e < kGcCH; ++e) in.b[e] = p.conv.bias ? sw[kGcCH * kGcMaxRS + e] : TAct(0.f);
}

// Chunk ch ([q | k | v] index c): y_t = act(bias + sum_j w_j (window ++ tokens)[t + j]) into
// buf row t (kRow elements), then its pool rows.
template <typename TAct, int kTok>
__device__ __forceinline__ void gc_finish(const RecurrentParams& p, const GroupMeta& g, const GroupConv& gc,
                                          const GcChunk<TAct, kTok>& in, int ch, int c, TAct* buf, int kRow) {
  using C = GcChunk<TAct, kTok>;
  using Vec = typename C::Vec;
  const int W = p.conv.W, W1 = W - 1;
  const TAct(&x)[C::kN][kGcCH] = *reinterpret_cast<const TAct(*)[C::kN][kGcCH]>(in.u);
  const bool has_bias = p.conv.bias != nullptr;
#pragma unroll
  for (int t = 0; t < kTok; ++t) {
    if (t >= gc.len) break;
#pragma unroll
    for (int e = 0; e < kGcCH; ++e) {
      float y = has_bias ? to_float(in.b[e]) : 0.f;
#pragma unroll
      for (int jj = 0; jj < kMaxW; ++jj)
        if (jj >= kMaxW - W && t + jj < C::kN) y += to_float(in.w[jj][e]) * to_float(x[t + jj][e]);
      buf[t * kRow + c + e] = from_float<TAct>(p.conv.silu ? silu(y) : y);
    }
  }
  TAct* col = static_cast<TAct*>(p.conv.state) + gc.slot0 * p.conv.slot_stride + ch;
  const int64_t D = p.conv.D;
  if (g.spec) {  // rows 0..W-3 <- old rows base+1..base+W-2; row W-2+t <- token t, t < nt
#pragma unroll
    for (int pos = 0; pos < kGcM; ++pos)
      if (pos - (kGcM - W1) >= 1) *reinterpret_cast<Vec*>(col + (pos - (kGcM - W1) - 1) * D) = in.u[pos];
#pragma unroll
    for (int t = 0; t < kTok; ++t)
      if (t < gc.nt) *reinterpret_cast<Vec*>(col + (W - 2 + t) * D) = in.u[kGcM + t];
  } else {  // row j <- element len + j of (window ++ tokens)
#pragma unroll
    for (int pos = 0; pos < C::kN; ++pos) {
      const int row = pos - (kGcM - W1) - gc.len;
      if (row >= 0 && row < W1) *reinterpret_cast<Vec*>(col + row * D) = in.u[pos];
    }
  }
}

}  // namespace gdn::cuda
