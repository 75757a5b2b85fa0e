// src/cuda/conv/group_conv.cuh — the pipelined fused step's conv of one (sequence, key head) group for a
// sequence of at most kTok tokens (every decode and verify sequence), by its conv warp
// (recurrent_tma.cuh, kFused): channels [q0, q0 + K), [k0, k0 + K), [v0, v0 + r V) as chunks of
// gc_ch<TAct>() contiguous ones (one 16-byte vector), lane by lane. Every input of a chunk — its
// W - 1 window rows, its tokens' qkvz values, weights and bias — is requested at once
// (gc_load_global: one round trip, few requests: whole vectors, the weights of W = 4 as four), then
// gc_finish writes the conv output of every token into the group buffer and the chunk's new pool rows
// from the same registers: the values, operations and order of conv_chunk and pool_update
// (conv_tok.cuh). Registers hold (window ++ tokens) right-aligned: position kM - (W - 1) + s holds
// element s, and tap j of the weights sits at j + kMaxW - W, so every register index is a constant
// whatever W is.
#pragma once
#include "cuda/conv/conv_tok.cuh"

namespace gdn::cuda {

template <typename TAct>
constexpr int gc_ch() {  // channels per chunk: one 16-byte vector
  return 16 / static_cast<int>(sizeof(TAct));
}
constexpr int kGcM = kMaxW - 1;

// What the conv of a group needs (warp-uniform).
struct GroupConv {
  int64_t slot0, base, begin;  // the conv window's slot (per-token verify: column a-1's) and first row
  int len, nt;  // tokens (<= kTok); inputs kept in the pool (verify: min(len, cols))
  int i;        // sequence in its group
  bool window;  // the sequence has a window (initial state, or verify)
  bool per_token;  // verify, per-token conv layout: after token t rows 0..W-2 of column t's slot
  int q0, k0, v0, KP, chunks;
  __device__ __forceinline__ int channel(int c) const {  // conv channel of [q | k | v] index c
    return c < KP ? q0 + c : c < 2 * KP ? k0 + (c - KP) : v0 + (c - 2 * KP);
  }
};

// A chunk's inputs in registers.
template <typename TAct, int kTok>
struct GcChunk {
  static constexpr int kN = kGcM + kTok, kCH = gc_ch<TAct>();
  using Vec = uint4;
  Vec u[kN];             // (window ++ tokens), right-aligned; zeros where absent
  TAct w[kMaxW][kCH];    // weights, right-aligned
  alignas(16) TAct b[kCH];  // bias (zeros when none)
};

// Global row offsets (qkvz rows) of the group's tokens.
template <int kTok>
__device__ __forceinline__ void gc_rows(const RecurrentParams& p, const GroupMeta& g, const GroupConv& gc,
                                        int64_t (&xr)[kTok]) {
#pragma unroll
  for (int t = 0; t < kTok; ++t)
    xr[t] = t < gc.len ? global_row(g, gc.begin + t, p.src.num_actual_tokens) * p.src.qkvz_rs : 0;  // not padding
}

// The inputs of the chunk from conv channel ch, from global memory (zeros where the sequence has none).
// kW = 4: the conv is 4 wide, its weights [D, 4] contiguous and 16-byte aligned, the bias aligned or
// absent (host-checked, TmaGrid::conv_w4); 0: any width and layout.
template <typename TAct, int kTok, int kW = 0>
__device__ __forceinline__ void gc_load_global(const RecurrentParams& p, const GroupConv& gc,
                                               const int64_t (&xr)[kTok], int ch, GcChunk<TAct, kTok>& in) {
  using C = GcChunk<TAct, kTok>;
  using Vec = typename C::Vec;
  const int W = kW ? kW : p.conv.W, W1 = W - 1, col = p.src.proj.conv_col(ch);
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
  constexpr int CH = C::kCH;
  const TAct* wc = wt + static_cast<int64_t>(ch) * p.conv.weight_rs;
  if (kW == 4 || (W == 4 && p.conv.weight_rs == 4 && (reinterpret_cast<uintptr_t>(wc) & 15) == 0)) {
    // the chunk's CH x 4 weights are contiguous: four vectors; tap j of channel e is element 4 e + j
    Vec wv[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) wv[q] = reinterpret_cast<const Vec*>(wc)[q];
    const TAct* we = reinterpret_cast<const TAct*>(wv);
#pragma unroll
    for (int e = 0; e < CH; ++e) {
      in.w[0][e] = TAct(0.f);
#pragma unroll
      for (int j = 0; j < 4; ++j) in.w[j + kMaxW - 4][e] = we[4 * e + j];
    }
  } else {
#pragma unroll
    for (int jj = 0; jj < kMaxW; ++jj)
#pragma unroll
      for (int e = 0; e < CH; ++e)
        in.w[jj][e] = jj >= kMaxW - W ? wc[e * p.conv.weight_rs + jj - (kMaxW - W)] : TAct(0.f);
  }
  if (bias && (kW == 4 || (reinterpret_cast<uintptr_t>(bias + ch) & 15) == 0)) {
    *reinterpret_cast<Vec*>(in.b) = *reinterpret_cast<const Vec*>(bias + ch);
  } else {
#pragma unroll
    for (int e = 0; e < CH; ++e) in.b[e] = bias ? bias[ch + e] : TAct(0.f);
  }
}

// A per-token verify group's window slots (kPT): after token t < nt, rows 0..W-2 of s[t] (-1: none);
// one entry otherwise, unused. Resolved once per group, before its chunks.
template <int kTok, bool kPT>
struct GcSlots {
  int64_t s[kPT ? kTok : 1];
};
template <int kTok, bool kPT>
__device__ __forceinline__ GcSlots<kTok, kPT> gc_token_slots(const RecurrentParams& p, const GroupMeta& g,
                                                             const GroupConv& gc) {
  GcSlots<kTok, kPT> ts{};
  if constexpr (kPT)
#pragma unroll
    for (int t = 0; t < kTok; ++t) ts.s[t] = t < gc.nt ? per_token_slot(g, p.conv, gc.i, t, p.has_null, p.null_id) : -1;
  return ts;
}

// A chunk ([q | k | v] index c): y_t = act(bias + sum_j w_j (window ++ tokens)[t + j]) into
// buf row t (kRow elements), then its new pool rows (the same CH channels) through put(row, vec)
// in slot0, or (kPT: a per-token verify group, an instance of its own) put_slot(slot, row, vec).
// tslot (kPT): gc_token_slots of the group.
template <typename TAct, int kTok, int kW, bool kPT, typename Put, typename PutSlot>
__device__ __forceinline__ void gc_finish(const RecurrentParams& p, const GroupMeta& g, const GroupConv& gc,
                                          const GcChunk<TAct, kTok>& in, int c, TAct* buf, int kRow,
                                          const GcSlots<kTok, kPT>& tslot, Put put, PutSlot put_slot) {
  using C = GcChunk<TAct, kTok>;
  constexpr int CH = C::kCH;
  const int W = kW ? kW : p.conv.W, W1 = W - 1;
  const TAct(&x)[C::kN][CH] = *reinterpret_cast<const TAct(*)[C::kN][CH]>(in.u);
  const bool has_bias = p.conv.bias != nullptr;
#pragma unroll
  for (int t = 0; t < kTok; ++t) {
    if (t >= gc.len) break;
#pragma unroll
    for (int e = 0; e < CH; ++e) {
      // taps right-aligned: tap jj of kMaxW at position t + jj (< kN: t < kTok, jj < kMaxW)
      const float y = conv_taps<kMaxW>(has_bias ? to_float(in.b[e]) : 0.f, kMaxW - W, kMaxW,
                                       [&](int jj) { return to_float(in.w[jj][e]); },
                                       [&](int jj) { return to_float(x[t + jj][e]); });
      buf[t * kRow + c + e] = from_float<TAct>(p.conv.silu ? silu(y) : y);
    }
  }
  if constexpr (kPT) {  // after token t < nt: rows 0..W-2 of column t's slot <- elements t+1..t+W-1
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
      const int64_t slot = tslot.s[t];
      if (slot < 0) continue;
#pragma unroll
      for (int pos = 0; pos < C::kN; ++pos) {  // element s sits at kGcM - W1 + s: row pos - (kGcM - W1) - t - 1
        const int row = pos - (kGcM - W1) - t - 1;
        if (row >= 0 && row < W1) put_slot(slot, row, in.u[pos]);
      }
    }
    (void)put;
  } else if (g.spec) {  // rows 0..W-3 <- old rows base+1..base+W-2; row W-2+t <- token t, t < nt
#pragma unroll
    for (int pos = 0; pos < kGcM; ++pos)
      if (pos - (kGcM - W1) >= 1) put(pos - (kGcM - W1) - 1, in.u[pos]);
#pragma unroll
    for (int t = 0; t < kTok; ++t)
      if (t < gc.nt) put(W - 2 + t, in.u[kGcM + t]);
  } else {  // row j <- element len + j of (window ++ tokens)
#pragma unroll
    for (int pos = 0; pos < C::kN; ++pos) {
      const int row = pos - (kGcM - W1) - gc.len;
      if (row >= 0 && row < W1) put(row, in.u[pos]);
    }
  }
}

}  // namespace gdn::cuda
