// src/cuda/conv/conv_tok.cuh — the causal conv of gdn_attention's projections for one token, as the
// pipelined fused step (recurrent_tma.cuh, kFused) needs it: chunks of contiguous conv channels
// computed straight from the conv pool window and the qkvz rows (docs/contract.md §3; the same operations,
// in the same order, as conv_token in recurrent.cuh and the owner threads of fused_step.cuh) — by
// the conv warp for a long sequence's first tokens, by consumer lanes for later ones (conv_qk,
// conv_v) — and the pool rows of a sequence's channels written once every reader of the window is
// done.
#pragma once
#include "cuda/conv/conv_channel.cuh"
#include "cuda/common/rec_common.cuh"

namespace gdn::cuda {

// Where local token t's conv taps are: the window (W-1 rows of the pool slot from row `base`; null
// when the sequence has no initial window: zeros) and the sequence's tokens.
template <typename TAct>
struct ConvPos {
  const TAct* win;  // pool + slot0 * slot_stride + base * D, or nullptr
  int64_t begin, t, out_rows;
};

template <typename TAct>
__device__ __forceinline__ ConvPos<TAct> conv_pos(const RecurrentParams& p, int64_t slot0, int64_t base, bool window,
                                                  int64_t begin, int64_t t) {
  const TAct* win =
      window ? static_cast<const TAct*>(p.conv.state) + slot0 * p.conv.slot_stride + base * p.conv.D : nullptr;
  return ConvPos<TAct>{win, begin, t, p.src.num_actual_tokens};
}

// y[c] = round_TAct(act(bias + sum_j w[ch + c, j] * tap_j[ch + c])), c < CH contiguous conv channels
// from ch (their qkvz columns contiguous too), taps t .. t + W - 1 of (window ++ tokens). Every tap
// and weight is requested first (unrolled to kMaxW, predicated on W), then summed in tap order.
// CH > 1: vector loads (alignment checked on the host).
template <typename TAct, int CH>
__device__ __forceinline__ void conv_chunk(const RecurrentParams& p, const GroupMeta& g, const ConvPos<TAct>& cp,
                                           int ch, float (&y)[CH]) {
  constexpr int kBytes = CH * static_cast<int>(sizeof(TAct)), kVecB = kBytes < 16 ? kBytes : 16;
  constexpr int kPer = kVecB / static_cast<int>(sizeof(TAct));  // elements per vector load
  using Vec = typename VecOf<kVecB>::type;
  const int W = p.conv.W, col = p.src.proj.conv_col(ch);
  const TAct* w = static_cast<const TAct*>(p.conv.weight) + static_cast<int64_t>(ch) * p.conv.weight_rs;
  alignas(16) TAct u[kMaxW][CH];
  TAct wt[kMaxW][CH];
#pragma unroll
  for (int j = 0; j < kMaxW; ++j) {
    const int64_t idx = cp.t + j;
    const TAct* src = nullptr;
    if (j < W) {
      if (idx >= W - 1) {
        const int64_t row = global_row(g, cp.begin + idx - (W - 1), cp.out_rows);  // >= 0: checked (padding)
        src = static_cast<const TAct*>(p.src.qkvz) + row * p.src.qkvz_rs + col;
      } else if (cp.win) {
        src = cp.win + idx * p.conv.D + ch;
      }
    }
    if (src) {
      if constexpr (CH == 1) u[j][0] = *src;
      else
#pragma unroll
        for (int v = 0; v < CH / kPer; ++v) reinterpret_cast<Vec*>(u[j])[v] = reinterpret_cast<const Vec*>(src)[v];
    } else {
#pragma unroll
      for (int c = 0; c < CH; ++c) u[j][c] = TAct(0.f);
    }
#pragma unroll
    for (int c = 0; c < CH; ++c) wt[j][c] = j < W ? w[c * p.conv.weight_rs + j] : TAct(0.f);
  }
#pragma unroll
  for (int c = 0; c < CH; ++c)
    y[c] = conv_taps<kMaxW>(p.conv.bias ? to_float(static_cast<const TAct*>(p.conv.bias)[ch + c]) : 0.f, 0, W,
                            [&](int j) { return to_float(wt[j][c]); }, [&](int j) { return to_float(u[j][c]); });
#pragma unroll
  for (int c = 0; c < CH; ++c) y[c] = round_to<TAct>(p.conv.silu ? silu(y[c]) : y[c]);
}

// The lane's q and k elements of key head h (element e of chunk c: K-index c L CH + ln CH + e),
// computed 4 channels at a time.
template <typename TAct, int L, int CH, int EPL>
__device__ __forceinline__ void conv_qk(const RecurrentParams& p, const GroupMeta& g, const ConvPos<TAct>& cp, int h,
                                        int ln, float (&kr)[EPL], float (&qr)[EPL]) {
  const auto& PL = p.src.proj;
  constexpr int SC = CH < 4 ? CH : 4;
#pragma unroll
  for (int c = 0; c < EPL / CH; ++c)
#pragma unroll
    for (int sc = 0; sc < CH / SC; ++sc) {
      const int kc = c * L * CH + ln * CH + sc * SC;
      float yq[SC], yk[SC];
      conv_chunk<TAct, SC>(p, g, cp, h * PL.K + kc, yq);
      conv_chunk<TAct, SC>(p, g, cp, PL.H * PL.K + h * PL.K + kc, yk);
#pragma unroll
      for (int e = 0; e < SC; ++e) qr[c * CH + sc * SC + e] = yq[e], kr[c * CH + sc * SC + e] = yk[e];
    }
}

// v of value head hv, rows row0 + j G (j < R), for every lane of an L-lane group: lane ln computes
// row ln mod R, then the group exchanges them.
template <typename TAct, int L, int R, int G>
__device__ __forceinline__ void conv_v(const RecurrentParams& p, const GroupMeta& g, const ConvPos<TAct>& cp, int hv,
                                       int row0, int lane, float (&vv)[R]) {
  const auto& PL = p.src.proj;
  const int ln = lane % L;
  float y[1];
  conv_chunk<TAct, 1>(p, g, cp, 2 * PL.H * PL.K + hv * PL.V + row0 + (ln % R) * G, y);
#pragma unroll
  for (int j = 0; j < R; ++j) vv[j] = __shfl_sync(0xffffffffu, y[0], lane - ln + j);
}

// Pool rows of conv channels [c0, c0 + n) of one sequence, lanes of a warp taking every 32nd one,
// as conv_channel writes them for the fused step (rolling verify: rows 0..W-3 <- old rows
// base+1..base+W-2, row W-2+t <- u_t for t < min(len, cols); else the last W-1 inputs of
// (window ++ tokens)). Up to kB channels per lane at once, all loads before the stores; sequences
// that store more than kMaxW - 1 tokens, and per-token verify ones, go through conv_channel.
template <typename TAct>
__device__ __forceinline__ void pool_update(const RecurrentParams& p, const GroupMeta& g, const ConvSeq& cs, int c0,
                                            int n, int lane) {
  constexpr int kB = 4, kM = kMaxW - 1;
  const int W = p.conv.W;
  const int64_t nt = cs.spec ? (cs.tr.len < g.cols ? cs.tr.len : g.cols) : cs.tr.len - cs.t0;  // tokens kept
  TAct* pool = static_cast<TAct*>(p.conv.state);
  const int64_t D = p.conv.D;
  if (nt > kM || cs.per_token) {
    for (int c = c0 + lane; c < c0 + n; c += 32) {
      switch (W) {
        case 2: conv_channel<TAct, 2, true>(p.conv, p.src, g, cs, c, nullptr, 0, p.has_null, p.null_id); break;
        case 3: conv_channel<TAct, 3, true>(p.conv, p.src, g, cs, c, nullptr, 0, p.has_null, p.null_id); break;
        case 4: conv_channel<TAct, 4, true>(p.conv, p.src, g, cs, c, nullptr, 0, p.has_null, p.null_id); break;
        default: conv_channel<TAct, 5, true>(p.conv, p.src, g, cs, c, nullptr, 0, p.has_null, p.null_id); break;
      }
    }
    return;
  }
  const bool window = cs.init || cs.spec;
  TAct* slot = pool + cs.slot0 * p.conv.slot_stride;  // rolling: read and written in place
  for (int cb = c0; cb < c0 + n; cb += 32 * kB) {
    TAct win[kB][kM], x[kB][kM];
#pragma unroll
    for (int b = 0; b < kB; ++b) {
      const int c = cb + lane + 32 * b;
      const bool on = c < c0 + n;
      const int col = p.src.proj.conv_col(on ? c : c0);
#pragma unroll
      for (int j = 0; j < kM; ++j) {
        win[b][j] = (on && window && j < W - 1) ? slot[(cs.base + j) * D + c] : TAct(0.f);
        x[b][j] = (on && j < nt) ? conv_input<TAct, true>(p.src, g, cs.tr.begin + cs.t0 + j, col) : TAct(0.f);
      }
    }
#pragma unroll
    for (int b = 0; b < kB; ++b) {
      const int c = cb + lane + 32 * b;
      if (c >= c0 + n) continue;
      if (cs.spec) {
#pragma unroll
        for (int j = 0; j < kM - 1; ++j)
          if (j < W - 2) slot[j * D + c] = win[b][j + 1];
#pragma unroll
        for (int j = 0; j < kM; ++j)
          if (j < nt) slot[(W - 2 + j) * D + c] = x[b][j];
      } else {
#pragma unroll
        for (int j = 0; j < kM; ++j) {  // row j <- input nt + j of (window ++ tokens)
          if (j >= W - 1) break;
          TAct v = x[b][0];
#pragma unroll
          for (int u = 0; u < kM; ++u) v = (j + nt < W - 1) ? (u == j + nt ? win[b][u] : v) : (u == j + nt - (W - 1) ? x[b][u] : v);
          slot[j * D + c] = v;
        }
      }
    }
  }
}

// Every token of local range [begin, begin + len) has a row below out_rows (else: padding).
__device__ __forceinline__ bool rows_in_buffer(const GroupMeta& g, int64_t begin, int64_t len, int64_t out_rows) {
  if (!g.token_indx.present()) return begin >= 0 && begin + len <= out_rows;
  for (int64_t t = 0; t < len; ++t)
    if (global_row(g, begin + t, out_rows) < 0) return false;
  return true;
}

}  // namespace gdn::cuda
