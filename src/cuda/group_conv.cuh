// src/cuda/group_conv.cuh — the pipelined fused step's conv of one (sequence, key head) group for a
// sequence of at most kTok tokens (every decode and verify sequence), by the producer warp
// (recurrent_tma.cuh, kFused): channels [q0, q0 + K), [k0, k0 + K), [v0, v0 + r V) as chunks of 4
// contiguous ones, lane by lane. The SM's load/store path is saturated by the state stream (a
// global load or store of the producer then takes hundreds of cycles: bench/RESULTS.md step 37), so
// where it can the group's inputs — its W - 1 window rows, its tokens' q/k/v values, weights and bias,
// 3 contiguous ranges each — arrive by bulk copies into a staging area (gc_stage_bulk, a group
// ahead), the conv is computed from shared memory, and the new pool rows leave by bulk stores
// (gc_store_bulk). Otherwise (gc_load_global) every input of a chunk batch is requested at once and
// the pool rows are stored by the lanes. gc_finish writes the conv output of every token into the
// group buffer and the chunk's pool rows: the values, operations and order of conv_chunk and
// pool_update (conv_tok.cuh). Registers hold (window ++ tokens) right-aligned: position
// kM - (W - 1) + s holds element s, and tap j of the weights sits at j + kMaxW - W, so every register
// index is a constant whatever W is.
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

// Fused step groups: r V <= kGcMaxRV (host).
constexpr int kGcMaxRV = 512;

// The staging area (TAct elements; group channel index c = [q | k | v] index): kGcM window rows
// (right-aligned: row j at position kGcM - (W - 1) + j), kTok token rows, weights (c W + j), bias,
// and the kOut new pool rows; every row kC elements.
template <int KP, int kTok>
struct GcStage {
  static constexpr int kC = 2 * KP + kGcMaxRV, kOut = kMaxW - 2 + kTok;
  static constexpr int kWin = 0, kX = kWin + kGcM * kC, kW = kX + kTok * kC, kB = kW + kC * kMaxW;
  static constexpr int kO = kB + kC, kElems = kO + kOut * kC;
};

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

// Whether a group's conv inputs can arrive by bulk copies: contiguous weight rows and 16-byte
// aligned weights and bias (the pool slots and qkvz rows are checked on the host).
template <typename TAct>
__device__ __forceinline__ bool gc_bulk_ok(const RecurrentParams& p) {
  return p.conv.weight_rs == p.conv.W && reinterpret_cast<uintptr_t>(p.conv.weight) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(p.conv.bias) % 16 == 0;
}

// Range r (0 q, 1 k, 2 v) of a group: first conv channel, first group index, channels.
struct GcRange {
  int ch0, c0, n;
};
__device__ __forceinline__ GcRange gc_range(const GroupConv& gc, int r) {
  return r == 0 ? GcRange{gc.q0, 0, gc.KP} : r == 1 ? GcRange{gc.k0, gc.KP, gc.KP}
                                                    : GcRange{gc.v0, 2 * gc.KP, gc.chunks * kGcCH - 2 * gc.KP};
}

// The warp requests the group's inputs into stg, completion counted on bar (lane i: copy i; lane
// 0 posts the bytes first).
template <typename TAct, int KP, int kTok>
__device__ __forceinline__ void gc_stage_bulk(const RecurrentParams& p, const GroupMeta& g, const GroupConv& gc,
                                              TAct* stg, uint64_t* bar, int lane) {
  using S = GcStage<KP, kTok>;
  constexpr int kWinCopies = 3 * kGcM, kXCopies = 3 * kTok;
  static_assert(kWinCopies + kXCopies + 6 <= 32, "a copy per lane");
  const int W = p.conv.W, W1 = W - 1;
  const TAct* src = nullptr;
  TAct* dst = nullptr;
  int n = 0;
  if (lane < kWinCopies) {  // window row j of range r
    const int j = lane / 3;
    const GcRange rg = gc_range(gc, lane % 3);
    if (gc.window && j < W1) {
      src = static_cast<const TAct*>(p.conv.state) + gc.slot0 * p.conv.slot_stride + (gc.base + j) * p.conv.D + rg.ch0;
      dst = stg + S::kWin + (kGcM - W1 + j) * S::kC + rg.c0;
      n = rg.n;
    }
  } else if (lane < kWinCopies + kXCopies) {  // token t's values of range r
    const int t = (lane - kWinCopies) / 3;
    const GcRange rg = gc_range(gc, (lane - kWinCopies) % 3);
    if (t < gc.len) {
      const int64_t row = global_row(g, gc.begin + t, p.src.num_actual_tokens);  // not padding
      src = static_cast<const TAct*>(p.src.qkvz) + row * p.src.qkvz_rs + p.src.proj.conv_col(rg.ch0);
      dst = stg + S::kX + t * S::kC + rg.c0;
      n = rg.n;
    }
  } else if (lane < kWinCopies + kXCopies + 3) {  // weights of range r
    const GcRange rg = gc_range(gc, lane - kWinCopies - kXCopies);
    src = static_cast<const TAct*>(p.conv.weight) + static_cast<int64_t>(rg.ch0) * W;
    dst = stg + S::kW + rg.c0 * W;
    n = rg.n * W;
  } else if (lane < kWinCopies + kXCopies + 6 && p.conv.bias) {  // bias of range r
    const GcRange rg = gc_range(gc, lane - kWinCopies - kXCopies - 3);
    src = static_cast<const TAct*>(p.conv.bias) + rg.ch0;
    dst = stg + S::kB + rg.c0;
    n = rg.n;
  }
  const uint32_t bytes = static_cast<uint32_t>(n) * sizeof(TAct);
  const uint32_t total = __reduce_add_sync(0xffffffffu, bytes);
  fence_proxy_async();  // the previous group's reads of the area come first
  if (lane == 0) mbar_arrive_tx(bar, total);
  __syncwarp();
  if (n > 0) bulk_load(dst, src, bytes, bar);
}

// A chunk's inputs from the staging area (zeros where the sequence has none).
template <typename TAct, int KP, int kTok>
__device__ __forceinline__ void gc_load_staged(const RecurrentParams& p, const GroupConv& gc, const TAct* stg, int c,
                                               GcChunk<TAct, kTok>& in) {
  using S = GcStage<KP, kTok>;
  using C = GcChunk<TAct, kTok>;
  using Vec = typename C::Vec;
  const int W = p.conv.W, W1 = W - 1;
#pragma unroll
  for (int pos = 0; pos < C::kN; ++pos) {
    const bool on = pos < kGcM ? (gc.window && pos - (kGcM - W1) >= 0) : pos - kGcM < gc.len;
    const TAct* a = stg + (pos < kGcM ? S::kWin + pos * S::kC : S::kX + (pos - kGcM) * S::kC) + c;
    in.u[pos] = on ? *reinterpret_cast<const Vec*>(a) : Vec{};
  }
#pragma unroll
  for (int jj = 0; jj < kMaxW; ++jj)
#pragma unroll
    for (int e = 0; e < kGcCH; ++e) in.w[jj][e] = jj >= kMaxW - W ? stg[S::kW + (c + e) * W + jj - (kMaxW - W)] : TAct(0.f);
#pragma unroll
  for (int e = 0; e < kGcCH; ++e) in.b[e] = p.conv.bias ? stg[S::kB + c + e] : TAct(0.f);
}

// The pool rows gc_finish put in the staging area, to the pool by bulk stores (lane i: store i),
// once every lane's writes are visible to the copy engine.
template <typename TAct, int KP, int kTok>
__device__ __forceinline__ void gc_store_bulk(const RecurrentParams& p, const GroupMeta& g, const GroupConv& gc,
                                              const TAct* stg, int lane) {
  using S = GcStage<KP, kTok>;
  static_assert(3 * S::kOut <= 32, "a store per lane");
  fence_proxy_async();
  __syncwarp();
  const int rows = g.spec ? p.conv.W - 2 + gc.nt : p.conv.W - 1, row = lane / 3;
  if (row < rows) {
    const GcRange rg = gc_range(gc, lane % 3);
    bulk_store(static_cast<TAct*>(p.conv.state) + gc.slot0 * p.conv.slot_stride + row * p.conv.D + rg.ch0,
               stg + S::kO + row * S::kC + rg.c0, static_cast<uint32_t>(rg.n) * sizeof(TAct));
  }
}

// Chunk ch ([q | k | v] index c): y_t = act(bias + sum_j w_j (window ++ tokens)[t + j]) into
// buf row t (kRow elements), then its pool rows.
// put(row, vec): the chunk's new pool row (to the pool, or to the staging area's out rows).
template <typename TAct, int kTok, typename Put>
__device__ __forceinline__ void gc_finish(const RecurrentParams& p, const GroupMeta& g, const GroupConv& gc,
                                          const GcChunk<TAct, kTok>& in, int c, TAct* buf, int kRow, Put put) {
  using C = GcChunk<TAct, kTok>;
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
  if (g.spec) {  // rows 0..W-3 <- old rows base+1..base+W-2; row W-2+t <- token t, t < nt
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
