// src/cuda/conv/conv_channel.cuh — one (sequence, conv channel) of the causal conv (conv.cu) and the z
// copy (conv.cu and the one-launch fused step, fused_step.cuh, which follows the same pool rules
// per channel from registers).
//   y_t[c] = act(bias[c] + sum_{j<W} w[c, j] * u_{t-W+1+j}[c])
// The thread reads the window into registers before it writes any row, walks the sequence's
// tokens and writes the conv pool rows docs/contract.md §3 names (raw copies of inputs: bit-exact), and y
// for the primitive ops.
#pragma once
#include <algorithm>

#include "common/seq_rules.h"
#include "cuda/common/params.h"

namespace gdn::cuda {

constexpr int kMaxW = 5;  // widest conv supported (validated)

// The sum of one conv output, in the order of docs/contract.md §1 and the CPU backend: the bias, then
// taps j = lo .. hi - 1 oldest first, each w(j) * x(j) added in float32. Every conv kernel sums
// through it, so their outputs are the same bytes. w(j), x(j): tap j's weight and input as floats;
// kN bounds j at compile time, so that register arrays are indexed by constants (lo, hi <= kN may
// be run-time values: taps outside them are skipped).
template <int kN, typename Weight, typename Input>
__device__ __forceinline__ float conv_taps(float bias, int lo, int hi, Weight w, Input x) {
  float a = bias;
#pragma unroll
  for (int j = 0; j < kN; ++j)
    if (j >= lo && j < hi) a += w(j) * x(j);
  return a;
}

// Where a sequence's conv window (the W-1 inputs before its token 0) is read (docs/contract.md §3): verify per
// token, rows 0..W-2 of column a-1's slot (acc_slot); verify rolling, rows a-1..a+W-3 of column 0's
// slot; non-spec, rows 0..W-2 of its slot.
struct ConvWindow {
  int64_t slot, base;
};
__device__ __forceinline__ ConvWindow conv_window(bool spec, bool per_token, int64_t slot0, int64_t acc_slot,
                                                  int64_t acc) {
  if (!spec) return ConvWindow{slot0, 0};
  return per_token ? ConvWindow{acc_slot, 0} : ConvWindow{slot0, acc - 1};
}
// Per-token layout: the slot that receives rows 0..W-2 after verify token t (< cols), -1 if none.
__device__ __forceinline__ int64_t per_token_slot(const GroupMeta& g, const ConvRef& cv, int64_t i, int64_t t,
                                                  bool has_null, int64_t null_id) {
  if (t >= g.cols) return -1;
  const int64_t slot = g.slots(i, t);
  return rules::slot_valid(slot, cv.num_slots, has_null, null_id) ? slot : -1;
}

// The conv output of one channel before rounding: act(bias + sum_{j < W-1} w[j] win[j] + w[W-1] x),
// the taps of (window ++ x) summed oldest first in float32 (the CPU's order).
template <typename TAct, int W>
__device__ __forceinline__ float window_conv(const float (&w)[W], float bias, const TAct (&win)[W - 1], TAct x,
                                             bool silu_on) {
  float a = conv_taps<W - 1>(bias, 0, W - 1, [&](int j) { return w[j]; }, [&](int j) { return to_float(win[j]); });
  a = conv_taps<W>(a, W - 1, W, [&](int j) { return w[j]; }, [&](int) { return to_float(x); });
  return silu_on ? silu(a) : a;
}
// The window slides by one input: rows 0..W-3 <- rows 1..W-2, row W-2 <- x.
template <typename TAct, int W>
__device__ __forceinline__ void slide_window(TAct (&win)[W - 1], TAct x) {
#pragma unroll
  for (int j = 0; j < W - 2; ++j) win[j] = win[j + 1];
  win[W - 2] = x;
}

// What the conv needs to know about one sequence, resolved once per block.
struct ConvSeq {
  rules::TokenRange tr{};  // local tokens
  int64_t i = 0;           // sequence in its group
  int64_t slot0 = 0;       // conv pool slot of column 0 (the rolling layout's only slot)
  int64_t read_slot = 0;   // slot whose window is read
  int64_t base = 0;        // first window row read (rolling verify: a-1)
  int64_t t0 = 0;          // first token visited (fused non-spec: only the last W-1 matter)
  bool init = true, spec = false, per_token = false;
};

// state_slot: the slot of column a-1 (verify) or slot0; per_token_layout: the op's spec conv layout.
__device__ __forceinline__ ConvSeq make_conv_seq(const GroupMeta& g, int64_t i, rules::TokenRange tr, int64_t slot0,
                                                 int64_t acc, int64_t state_slot, bool per_token_layout, bool init,
                                                 bool fused, int W) {
  ConvSeq s;
  s.tr = tr;
  s.i = i;
  s.slot0 = slot0;
  s.spec = g.spec;
  s.per_token = g.spec && per_token_layout;
  const ConvWindow cw = conv_window(g.spec, per_token_layout, slot0, state_slot, acc);
  s.read_slot = cw.slot;
  s.base = cw.base;
  s.t0 = (fused && !g.spec && tr.len > W - 1) ? tr.len - (W - 1) : 0;
  s.init = init;
  return s;
}

// Input of channel `col` (the qkvz column when fused, else the x column) for local token `local`.
template <typename TAct, bool kFused>
__device__ __forceinline__ TAct conv_input(const TokenSource& src, const GroupMeta& g, int64_t local, int col) {
  if constexpr (kFused) {
    const int64_t r = g.token_indx.present() ? g.token_indx(local) : local;  // validated by the caller's scan
    return static_cast<const TAct*>(src.qkvz)[r * src.qkvz_rs + col];
  } else {
    return static_cast<const TAct*>(src.q)[local * src.q_rs + col];
  }
}

// Channel c of sequence s (not padding): conv pool rows, and y (primitive ops, y != nullptr).
template <typename TAct, int W, bool kFused>
__device__ void conv_channel(const ConvRef& cv, const TokenSource& src, const GroupMeta& g, const ConvSeq& s,
                             int64_t c, TAct* y, int64_t y_rs, bool has_null, int64_t null_id) {
  TAct* pool = static_cast<TAct*>(cv.state);
  auto at = [&](int64_t slot, int64_t row) -> TAct& { return pool[slot * cv.slot_stride + row * cv.D + c]; };
  // Window: the W-1 inputs before token 0, oldest first.
  TAct win[W - 1];
#pragma unroll
  for (int j = 0; j < W - 1; ++j) win[j] = (s.init || s.spec) ? at(s.read_slot, s.base + j) : TAct(0.f);
  if (s.spec && !s.per_token) {  // rolling: rows 0..W-3 <- old rows o+1..o+W-2
#pragma unroll
    for (int j = 0; j < W - 2; ++j) at(s.slot0, j) = win[j + 1];
  }
  float w[W];
#pragma unroll
  for (int j = 0; j < W; ++j) w[j] = to_float(static_cast<const TAct*>(cv.weight)[c * cv.weight_rs + j]);
  const int col = kFused ? src.proj.conv_col(static_cast<int>(c)) : static_cast<int>(c);
  const float bias = cv.bias ? to_float(static_cast<const TAct*>(cv.bias)[c]) : 0.f;
  for (int64_t t = s.t0; t < s.tr.len; ++t) {
    const TAct xt = conv_input<TAct, kFused>(src, g, s.tr.begin + t, col);
    if constexpr (!kFused)
      y[(s.tr.begin + t) * y_rs + c] = from_float<TAct>(window_conv<TAct, W>(w, bias, win, xt, cv.silu));
    slide_window<TAct, W>(win, xt);
    if (s.spec && t < g.cols) {
      if (!s.per_token) {
        at(s.slot0, W - 2 + t) = xt;  // rolling: row W-2+t <- u_t
      } else {
        const int64_t slot = per_token_slot(g, cv, s.i, t, has_null, null_id);
        if (slot >= 0)
#pragma unroll
          for (int j = 0; j < W - 1; ++j) at(slot, j) = win[j];
      }
    }
  }
  if (!s.spec)
#pragma unroll
    for (int j = 0; j < W - 1; ++j) at(s.slot0, j) = win[j];
}

// The grid of a conv launch whose block rows are its nseq sequences, then the z copy's rows (copy_z):
// about one wave of blocks of `threads` over `channels` (many sequences share a block row's channels,
// a thread loops over them); z_pairs (row, hv) pairs to copy, about 8 per 32-lane group, at most 1024
// rows.
inline dim3 conv_seq_grid(int64_t channels, int threads, int64_t nseq, int64_t z_pairs) {
  const int64_t gx_full = (channels + threads - 1) / threads;
  const int64_t gx = std::clamp<int64_t>((2048 + nseq - 1) / std::max<int64_t>(nseq, 1), 1, gx_full);
  const int64_t z_rows = std::min<int64_t>((z_pairs + gx * 32 - 1) / (gx * 32), 1024);
  return dim3(static_cast<unsigned>(gx), static_cast<unsigned>(nseq + z_rows));
}

// z[row, hv, :] = its qkvz columns (contiguous in both layouts), rows < num_actual_tokens: one
// (row, hv) pair per warp, pairs spread over `blocks` blocks of kThreads threads (warp: this warp's
// index among them; -1: threadIdx.x / 32).
template <typename TAct, int kThreads>
__device__ void copy_z(const TokenSource& src, void* z_ptr, int64_t z_rs, int64_t block, int64_t blocks,
                       int warp = -1) {
  const auto& L = src.proj;
  const TAct* x = static_cast<const TAct*>(src.qkvz);
  TAct* z = static_cast<TAct*>(z_ptr);
  const int64_t pairs = src.num_actual_tokens * L.HV;
  constexpr int kWarps = kThreads / 32;
  const int64_t warps = blocks * kWarps;
  for (int64_t pr = block * kWarps + (warp >= 0 ? warp : threadIdx.x / 32); pr < pairs; pr += warps) {
    const int64_t row = pr / L.HV;
    const int hv = static_cast<int>(pr - row * L.HV);
    const TAct* from = x + row * src.qkvz_rs + L.z_col(hv, 0);
    TAct* to = z + row * z_rs + static_cast<int64_t>(hv) * L.V;
    for (int v0 = 0; v0 < L.V; v0 += 128) {  // four loads in flight before the stores
      TAct x[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int vi = v0 + u * 32 + threadIdx.x % 32;
        if (vi < L.V) x[u] = from[vi];
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int vi = v0 + u * 32 + threadIdx.x % 32;
        if (vi < L.V) to[vi] = x[u];
      }
    }
  }
}

// copy_z for the conv kernels' own z blocks (conv.cu, deferred_conv.cu): where every z row starts on
// 16 bytes (copy_z_vec), 16-byte vectors, a warp taking 32 / P pairs of P = V / 8 (16-bit) vectors
// at once and kZPasses such passes with their loads in flight before the stores; else copy_z. (The
// step kernels keep copy_z inline: these registers would count against their consumers'.)
constexpr int kZPasses = 4;
template <typename TAct>
__device__ __forceinline__ bool copy_z_vec(const TokenSource& src, const void* z, int64_t z_rs) {
  constexpr int E = 16 / sizeof(TAct);
  const auto& L = src.proj;
  const int P = L.V / E;
  return L.V % E == 0 && L.K % E == 0 && src.qkvz_rs % E == 0 && z_rs % E == 0 && P > 0 &&
         (32 % P == 0 || P % 32 == 0) &&
         ((reinterpret_cast<uintptr_t>(src.qkvz) | reinterpret_cast<uintptr_t>(z)) & 15) == 0;
}
template <typename TAct, int kThreads>
__device__ void copy_z_wide(const TokenSource& src, void* z_ptr, int64_t z_rs, int64_t block, int64_t blocks) {
  if (!copy_z_vec<TAct>(src, z_ptr, z_rs)) return copy_z<TAct, kThreads>(src, z_ptr, z_rs, block, blocks);
  const auto& L = src.proj;
  const TAct* x = static_cast<const TAct*>(src.qkvz);
  TAct* z = static_cast<TAct*>(z_ptr);
  const int64_t pairs = src.num_actual_tokens * L.HV;
  constexpr int kWarps = kThreads / 32, E = 16 / sizeof(TAct);
  const int64_t warps = blocks * kWarps, w0 = block * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int P = L.V / E, per = P < 32 ? 32 / P : 1;  // vectors per pair, pairs per pass
  const int sub = P < 32 ? lane / P : 0, e0 = P < 32 ? lane % P : lane;  // the lane's pair and first vector
  const int64_t passes = (pairs + per - 1) / per;
  for (int64_t s0 = w0; s0 < passes; s0 += kZPasses * warps) {
    int64_t from[kZPasses], to[kZPasses];  // element offsets of the lane's pairs (-1: none)
#pragma unroll
    for (int u = 0; u < kZPasses; ++u) {
      const int64_t pr = (s0 + u * warps) * per + sub;
      from[u] = to[u] = -1;
      if (s0 + u * warps < passes && pr < pairs) {
        const int64_t row = pr / L.HV;
        const int hv = static_cast<int>(pr - row * L.HV);
        from[u] = row * src.qkvz_rs + L.z_col(hv, 0);
        to[u] = row * z_rs + static_cast<int64_t>(hv) * L.V;
      }
    }
    for (int e = e0; e < P; e += 32) {  // one round where P <= 32
      uint4 v[kZPasses];
#pragma unroll
      for (int u = 0; u < kZPasses; ++u)
        if (from[u] >= 0) v[u] = *reinterpret_cast<const uint4*>(x + from[u] + e * E);
#pragma unroll
      for (int u = 0; u < kZPasses; ++u)
        if (to[u] >= 0) *reinterpret_cast<uint4*>(z + to[u] + e * E) = v[u];
    }
  }
}

}  // namespace gdn::cuda
