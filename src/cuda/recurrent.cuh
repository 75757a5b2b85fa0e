// src/cuda/recurrent.cuh — gated delta rule, token by token, for decode, verify and short
// non-spec sequences; optionally fused with the conv, gates and l2 norms of gdn_attention.
//
//   S = exp(g) S;  d = beta (v - S k^);  S = S + d k^T;  o = S q^       (S: V x K per value head)
//
// Rows of S are independent given k^, q^ and the gates, so a block owns kRows rows of one
// (sequence, value head) and keeps them in registers for the whole sequence:
//   grid  = (ceil(V / kRows), HV, sequences of both groups)
//   block = kWarps warps; a row is held by kLanes lanes (a lane group), EPL = KP / kLanes
//           contiguous K-elements per lane (16-byte loads at K = 128: float32 32 lanes x 4,
//           16-bit 16 lanes x 8); a warp has 32 / kLanes groups, each owning kRowsPerLane rows
//           (elements past K are zero and never stored)
// q^ and k^ live once per thread and serve all its rows; dot products are lane-group reductions.
// The sequence's metadata is read with independent loads (token range, slot of column 0, accepted
// count, slots of the first columns) so that the state load waits on one dependent load at most.
// Per token, the block stages the token's raw q, k (K each), its kRows values of v, and a, b in
// shared memory (fused: computing the causal conv of the projections on the fly, reading the conv
// pool only), then every warp runs the recurrence for its rows.
// State is read once (column a-1 for verify), written after every verify token into column t,
// or once at the end for non-spec sequences.
// Fused step, one launch (kCluster, sm_90): the blocks of one (sequence, key head) form a
// thread-block cluster — every block that reads the key head's q/k conv window and its value
// heads' v windows — so once the last token that reads a window is staged, a cluster barrier lets
// them update that part of the conv pool themselves (while their state loads are still in
// flight); every block copies a slice of z. Otherwise a second kernel (conv.cu) does both.
#pragma once
#include <cooperative_groups.h>

#include <optional>
#include <type_traits>

#include "common/seq_rules.h"
#include "cuda/conv_channel.cuh"
#include "cuda/recurrent.h"

namespace gdn::cuda {

// Tuning (bench/sweep.sh, H200, see bench/RESULTS.md): warps per block, lanes per state row, rows
// per lane group and resident blocks per SM the register budget must allow, for float32 and for
// 16-bit state, and for the fused step.
#ifndef GDN_REC_WARPS_F32
#define GDN_REC_WARPS_F32 1
#endif
#ifndef GDN_REC_LANES_F32
#define GDN_REC_LANES_F32 16
#endif
#ifndef GDN_REC_ROWS_F32
#define GDN_REC_ROWS_F32 4
#endif
#ifndef GDN_REC_MB_F32
#define GDN_REC_MB_F32 32
#endif
#ifndef GDN_REC_WARPS_16
#define GDN_REC_WARPS_16 1
#endif
#ifndef GDN_REC_LANES_16
#define GDN_REC_LANES_16 16
#endif
#ifndef GDN_REC_ROWS_16
#define GDN_REC_ROWS_16 4
#endif
#ifndef GDN_REC_MB_16
#define GDN_REC_MB_16 32
#endif
#ifndef GDN_FUSED_WARPS
#define GDN_FUSED_WARPS 8  // warps per block, fused gdn_attention (amortises the per-block conv)
#endif
#ifndef GDN_FUSED_ROWS_F32
#define GDN_FUSED_ROWS_F32 2
#endif
#ifndef GDN_FUSED_ROWS_16
#define GDN_FUSED_ROWS_16 2
#endif
#ifndef GDN_FUSED_MB
#define GDN_FUSED_MB 4
#endif

template <typename TState, bool kFused>
struct RecTraits {
  static constexpr bool kWide = sizeof(TState) == 4;
  static constexpr int kWarps = kFused ? GDN_FUSED_WARPS : (kWide ? GDN_REC_WARPS_F32 : GDN_REC_WARPS_16);
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kLanes = kWide ? GDN_REC_LANES_F32 : GDN_REC_LANES_16;  // lanes per state row
  static constexpr int kGroups = 32 / kLanes;                                   // lane groups per warp
  static constexpr int kRowsPerLane =
      kFused ? (kWide ? GDN_FUSED_ROWS_F32 : GDN_FUSED_ROWS_16) : (kWide ? GDN_REC_ROWS_F32 : GDN_REC_ROWS_16);
  static constexpr int kRowsPerWarp = kRowsPerLane * kGroups;
  static constexpr int kMinBlocks = kFused ? GDN_FUSED_MB : (kWide ? GDN_REC_MB_F32 : GDN_REC_MB_16);
  static constexpr int kRows = kWarps * kRowsPerWarp;  // state rows per block
  static_assert(kThreads <= 1024 && kThreads % 32 == 0, "a block is whole warps, at most 1024 threads");
  static_assert(kLanes == 8 || kLanes == 16 || kLanes == 32, "a lane group is 8, 16 or 32 lanes");
  static_assert(kRowsPerLane >= 1 && kRowsPerLane <= kLanes, "lane j of a group stores o of its row j");
};

// Sum over the kLanes lanes of a lane group (every lane of the group gets it).
template <int kLanes>
__device__ __forceinline__ float group_sum(float x) {
#pragma unroll
  for (int m = kLanes / 2; m > 0; m >>= 1) x += __shfl_xor_sync(0xffffffffu, x, m);
  return x;
}

// Element ki of row vi of one value head's state, in either layout.
__device__ __forceinline__ int64_t state_elem(const RecurrentParams& p, int vi, int ki) {
  return p.kv_layout ? static_cast<int64_t>(ki) * p.V + vi : static_cast<int64_t>(vi) * p.K + ki;
}

// A lane's EPL contiguous elements moved as one vector when the row is dense and aligned.
template <int kBytes>
struct VecOf { using type = void; };
template <> struct VecOf<16> { using type = uint4; };
template <> struct VecOf<8> { using type = uint2; };
template <> struct VecOf<4> { using type = uint32_t; };

// kDense: "vk" layout, K == 32 EPL, 16-byte aligned slots (decided on the host).
template <typename TState, int EPL>
constexpr bool kHasVec = !std::is_void_v<typename VecOf<(EPL * sizeof(TState) < 16 ? EPL * sizeof(TState) : 16)>::type>;

template <typename TState, int EPL, bool kDense>
__device__ __forceinline__ void load_row(const RecurrentParams& p, int64_t slot, int hv, int vi, int ln,
                                         float (&s)[EPL]) {
  const TState* base = static_cast<const TState*>(p.state) + slot * p.state_slot_stride +
                       static_cast<int64_t>(hv) * p.V * p.K;
  constexpr int kBytes = EPL * sizeof(TState);
  constexpr int kChunk = kBytes < 16 ? kBytes : 16;
  using Vec = typename VecOf<kChunk>::type;
  if constexpr (kDense && !std::is_void_v<Vec>) {
    {
      const Vec* src = reinterpret_cast<const Vec*>(base + state_elem(p, vi, ln * EPL));
      constexpr int kPer = kChunk / sizeof(TState);
#pragma unroll
      for (int c = 0; c < kBytes / kChunk; ++c) {
        Vec u = __ldcs(src + c);  // streamed: read once
        const TState* e = reinterpret_cast<const TState*>(&u);
#pragma unroll
        for (int j = 0; j < kPer; ++j) s[c * kPer + j] = to_float(e[j]);
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < EPL; ++j) {
      const int ki = ln * EPL + j;
      s[j] = ki < p.K ? to_float(base[state_elem(p, vi, ki)]) : 0.f;
    }
  }
}

template <typename TState, int EPL, bool kDense>
__device__ __forceinline__ void store_row(const RecurrentParams& p, int64_t slot, int hv, int vi, int ln,
                                          const float (&s)[EPL]) {
  TState* base = static_cast<TState*>(p.state) + slot * p.state_slot_stride + static_cast<int64_t>(hv) * p.V * p.K;
  constexpr int kBytes = EPL * sizeof(TState);
  constexpr int kChunk = kBytes < 16 ? kBytes : 16;
  using Vec = typename VecOf<kChunk>::type;
  if constexpr (kDense && !std::is_void_v<Vec>) {
    {
      Vec* dst = reinterpret_cast<Vec*>(base + state_elem(p, vi, ln * EPL));
      constexpr int kPer = kChunk / sizeof(TState);
#pragma unroll
      for (int c = 0; c < kBytes / kChunk; ++c) {
        Vec u;
        TState* e = reinterpret_cast<TState*>(&u);
#pragma unroll
        for (int j = 0; j < kPer; ++j) e[j] = from_float<TState>(s[c * kPer + j]);
        __stcs(dst + c, u);
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < EPL; ++j) {
      const int ki = ln * EPL + j;
      if (ki < p.K) base[state_elem(p, vi, ki)] = from_float<TState>(s[j]);
    }
  }
}

// Global row of local token j of a group (-1 when outside the buffer).
__device__ __forceinline__ int64_t global_row(const GroupMeta& g, int64_t j, int64_t num_rows) {
  const int64_t r = g.token_indx.present() ? g.token_indx(j) : j;
  return (r >= 0 && r < num_rows) ? r : -1;
}

// Fused conv, per block: the conv channels a block needs (q and k of its key head, v of its rows)
// with their weights, bias and qkvz column, staged once in shared memory.
constexpr int kMaxW = 5;

template <typename TAct>
struct ConvChannel {
  float w[kMaxW];
  float bias;
  int ch;   // conv channel, -1 when padding (past K or V)
  int col;  // qkvz column
};

// y = act(bias + sum_j w[j] * tap_j), tap_j = input t+j of (window ++ tokens), rounded to TAct.
// The taps are loaded together (unrolled to kMaxW, predicated on W), then summed in tap order.
template <typename TAct>
__device__ __forceinline__ float conv_token(const RecurrentParams& p, const GroupMeta& g, const ConvChannel<TAct>& c,
                                            int64_t begin, int64_t t, int64_t slot0, int64_t win_base, bool init) {
  const int W1 = p.conv.W - 1;
  const TAct* cs = static_cast<const TAct*>(p.conv.state) + slot0 * p.conv.slot_stride + c.ch;
  const TAct* x = static_cast<const TAct*>(p.src.qkvz) + c.col;
  float u[kMaxW];
#pragma unroll
  for (int j = 0; j < kMaxW; ++j) {
    u[j] = 0.f;
    if (j < p.conv.W) {
      const int64_t idx = t + j;
      if (idx < W1) {
        if (init) u[j] = to_float(cs[(win_base + idx) * p.conv.D]);
      } else {
        const int64_t row = global_row(g, begin + idx - W1, p.src.num_actual_tokens);
        u[j] = to_float(x[row * p.src.qkvz_rs]);
      }
    }
  }
  float acc = c.bias;
#pragma unroll
  for (int j = 0; j < kMaxW; ++j)
    if (j < p.conv.W) acc += c.w[j] * u[j];
  if (p.conv.silu) acc = silu(acc);
  return round_to<TAct>(acc);  // the conv output is stored in the activation dtype
}

// One-launch fused step: once every block of the cluster — all blocks of one (sequence, key
// head) — has read the conv windows, they write that part of the conv pool (q and k channels of
// key head h, v channels of value heads h*r .. h*r+r-1), spread over the cluster's threads.
template <typename TAct, int kThreads>
__device__ __forceinline__ void cluster_conv_update(const RecurrentParams& p, const GroupMeta& g, const ConvSeq& cs,
                                                    int h) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  auto cluster = cooperative_groups::this_cluster();
  cluster.sync();
  const auto& PL = p.src.proj;
  const int nch = 2 * p.K + p.r * p.V;
  const int stride = static_cast<int>(cluster.num_blocks()) * kThreads;
  for (int c = static_cast<int>(cluster.block_rank()) * kThreads + threadIdx.x; c < nch; c += stride) {
    const int ch = c < p.K       ? h * p.K + c
                   : c < 2 * p.K ? PL.H * PL.K + h * p.K + (c - p.K)
                                 : 2 * PL.H * PL.K + h * p.r * p.V + (c - 2 * p.K);
    conv_channel_w<TAct, true>(p.conv.W, p.conv, p.src, g, cs, ch, nullptr, 0, p.has_null, p.null_id);
  }
#else
  __trap();  // the host launches the cluster form on sm_90 and later only
#endif
}

// Slots of verify columns 1..kNearCols are loaded with the other metadata, so the read slot of
// a sequence that accepted up to kNearCols + 1 tokens costs no dependent load.
#ifndef GDN_REC_NEAR_COLS
#define GDN_REC_NEAR_COLS 3
#endif
constexpr int kNearCols = GDN_REC_NEAR_COLS;

template <typename TAct, typename TState, int KP, bool kFused, bool kDense, bool kCluster>
__global__ void __launch_bounds__(RecTraits<TState, kFused>::kThreads, RecTraits<TState, kFused>::kMinBlocks)
    recurrent_kernel(const __grid_constant__ RecurrentParams p) {
  using Tr = RecTraits<TState, kFused>;
  constexpr int L = Tr::kLanes, G = Tr::kGroups, R = Tr::kRowsPerLane, EPL = KP / L;
  constexpr int kRows = Tr::kRows, kThreads = Tr::kThreads;
  static_assert(KP % L == 0, "K padded to whole lane groups");
  __shared__ float s_q[KP], s_k[KP], s_v[kRows], s_ab[2];
  constexpr int kCh = kFused ? 2 * KP + kRows : 1;  // fused: [q channels | k channels | v rows]
  __shared__ ConvChannel<TAct> s_ch[kCh];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, ln = lane % L;
  const int hv = blockIdx.y, h = hv / p.r;
  // Row of this lane group's step j: row0 + j * G; its block-local index: lrow0 + j * G.
  const int lrow0 = warp * Tr::kRowsPerWarp + lane / L;
  const int row0 = blockIdx.x * kRows + lrow0;
  const int gi = blockIdx.z < p.n0 ? 0 : 1;
  const GroupMeta& g = p.group[gi];
  const int64_t i = gi ? blockIdx.z - p.n0 : blockIdx.z;
  const int64_t out_rows = kFused ? p.src.num_actual_tokens : g.limit;

  // Metadata: independent loads first (all in bounds: i < n).
  const int64_t lo = g.qsl(i), hi = g.qsl(i + 1), slot0 = g.slots(i, 0);
  const int64_t na = g.spec ? g.num_accepted(i) : 1;
  const bool init = g.has_init ? g.has_init[i * g.has_init_stride] != 0 : true;
  int64_t col_slot[kNearCols];
#pragma unroll
  for (int j = 0; j < kNearCols; ++j) col_slot[j] = (g.spec && j + 1 < g.cols) ? g.slots(i, j + 1) : slot0;
  const auto tr = rules::token_range(lo, hi, g.limit);
  const int64_t acc = g.spec ? rules::accepted(na, g.cols) : 1;
  int64_t read_slot = slot0;
#pragma unroll
  for (int j = 0; j < kNearCols; ++j)
    if (acc == j + 2) read_slot = col_slot[j];
  if (acc > kNearCols + 1) read_slot = g.slots(i, acc - 1);
  bool pad = !rules::slot_valid(slot0, p.num_slots, p.has_null, p.null_id) ||
             !rules::slot_valid(read_slot, p.num_slots, p.has_null, p.null_id);
  if (kFused) pad = pad || !rules::slot_valid(slot0, p.conv.num_slots, p.has_null, p.null_id);

  // The state rows, requested as early as possible (both slots are in the pool, so the loads are
  // safe even if a token row later makes the sequence padding).
  float s[R][EPL];
#pragma unroll
  for (int j = 0; j < R; ++j) {
#pragma unroll
    for (int e = 0; e < EPL; ++e) s[j][e] = 0.f;
    if (tr.len > 0 && !pad && init && row0 + j * G < p.V)
      load_row<TState, EPL, kDense>(p, read_slot, hv, row0 + j * G, ln, s[j]);
  }
  if constexpr (kCluster)  // every block copies its slice of z, whatever its sequence
    copy_z<TAct, kThreads>(p.src, p.z, p.z_rs, blockIdx.x + gridDim.x * (blockIdx.y + int64_t{gridDim.y} * blockIdx.z),
                           int64_t{gridDim.x} * gridDim.y * gridDim.z);
  if (tr.len == 0) return;
  if (kFused) {  // a token outside the buffer makes its sequence padding
    bool bad_row = false;
    for (int64_t t = tid; t < tr.len; t += kThreads) bad_row |= global_row(g, tr.begin + t, out_rows) < 0;
    pad = __syncthreads_or(bad_row) || pad;
  }
  TAct* o = static_cast<TAct*>(p.o);
  if (pad) {
    const int vi = row0 + ln * G;
    if (ln < R && vi < p.V)
      for (int64_t t = 0; t < tr.len; ++t) {
        const int64_t row = global_row(g, tr.begin + t, out_rows);
        if (row >= 0) o[row * p.o_rs + static_cast<int64_t>(hv) * p.V + vi] = from_float<TAct>(0.f);
      }
    return;
  }

  const float A = -expf(p.A_log(hv)), dtb = p.dt_bias(hv);
  const int64_t win_base = g.spec ? acc - 1 : 0;  // conv window rows (fused)
  if constexpr (kFused) {
    const auto& PL = p.src.proj;
    for (int c = tid; c < kCh; c += kThreads) {
      ConvChannel<TAct> ch;
      if (c < 2 * KP) {  // q (c < KP) or k channel kc of key head h
        const int kc = c < KP ? c : c - KP;
        ch.ch = kc < p.K ? (c < KP ? 0 : PL.H * PL.K) + h * p.K + kc : -1;
      } else {
        const int vi = blockIdx.x * kRows + (c - 2 * KP);
        ch.ch = vi < p.V ? 2 * PL.H * PL.K + hv * p.V + vi : -1;
      }
      ch.col = ch.ch >= 0 ? PL.conv_col(ch.ch) : 0;
      const TAct* w = static_cast<const TAct*>(p.conv.weight) + static_cast<int64_t>(ch.ch) * p.conv.weight_rs;
#pragma unroll
      for (int j = 0; j < kMaxW; ++j) ch.w[j] = (ch.ch >= 0 && j < p.conv.W) ? to_float(w[j]) : 0.f;
      ch.bias = (ch.ch >= 0 && p.conv.bias) ? to_float(static_cast<const TAct*>(p.conv.bias)[ch.ch]) : 0.f;
      s_ch[c] = ch;
    }
  }
  for (int64_t t = 0; t < tr.len; ++t) {
    const int64_t row = global_row(g, tr.begin + t, out_rows);
    __syncthreads();  // the previous token's shared inputs are consumed
    if constexpr (kFused) {
      for (int c = tid; c < kCh; c += kThreads) {
        const ConvChannel<TAct>& ch = s_ch[c];
        const float y = ch.ch >= 0 ? conv_token<TAct>(p, g, ch, tr.begin, t, slot0, win_base, init) : 0.f;
        if (c < KP) s_q[c] = y;
        else if (c < 2 * KP) s_k[c - KP] = y;
        else s_v[c - 2 * KP] = y;
      }
      if (tid < 2) {
        const TAct* ba = static_cast<const TAct*>(p.src.ba) + row * p.src.ba_rs;
        s_ab[tid] = to_float(ba[tid == 0 ? p.src.proj.a_col(hv) : p.src.proj.b_col(hv)]);
      }
    } else {
      const TAct* q = static_cast<const TAct*>(p.src.q) + row * p.src.q_rs + static_cast<int64_t>(h) * p.K;
      const TAct* k = static_cast<const TAct*>(p.src.k) + row * p.src.k_rs + static_cast<int64_t>(h) * p.K;
      for (int c = tid; c < KP; c += kThreads) {
        s_q[c] = c < p.K ? to_float(q[c]) : 0.f;
        s_k[c] = c < p.K ? to_float(k[c]) : 0.f;
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
    if constexpr (kCluster)  // the last token that reads a conv window has been staged
      if (t == (tr.len < p.conv.W - 1 ? tr.len : p.conv.W - 1) - 1)
        cluster_conv_update<TAct, kThreads>(
            p, g, make_conv_seq(g, i, tr, slot0, acc, read_slot, false, init, true, p.conv.W), h);
    float kr[EPL], qr[EPL], kk = 0.f, qq = 0.f;
#pragma unroll
    for (int e = 0; e < EPL; ++e) {
      kr[e] = s_k[ln * EPL + e];
      qr[e] = s_q[ln * EPL + e];
      kk += kr[e] * kr[e];
      qq += qr[e] * qr[e];
    }
    const float kn = 1.f / sqrtf(group_sum<L>(kk) + 1e-6f);      // k^ = k / |k|
    const float qn = p.scale / sqrtf(group_sum<L>(qq) + 1e-6f);  // q^ = q / |q| * scale
    const float gate = A * rules::softplus(s_ab[0] + dtb);        // g = -exp(A_log) softplus(a + dt_bias)
    const float beta = 1.f / (1.f + expf(-s_ab[1]));             // beta = sigmoid(b)
    const float decay = expf(gate);
#pragma unroll
    for (int e = 0; e < EPL; ++e) {
      kr[e] *= kn;
      qr[e] *= qn;
    }
    float sk[R], ov[R];
#pragma unroll
    for (int j = 0; j < R; ++j) {
      sk[j] = 0.f;
#pragma unroll
      for (int e = 0; e < EPL; ++e) {
        s[j][e] *= decay;  // S = exp(g) S
        sk[j] += s[j][e] * kr[e];
      }
    }
#pragma unroll
    for (int j = 0; j < R; ++j) sk[j] = group_sum<L>(sk[j]);
#pragma unroll
    for (int j = 0; j < R; ++j) {
      const float d = beta * ((row0 + j * G < p.V ? s_v[lrow0 + j * G] : 0.f) - sk[j]);  // d = beta (v - S k^)
      ov[j] = 0.f;
#pragma unroll
      for (int e = 0; e < EPL; ++e) {
        s[j][e] += d * kr[e];      // S += d k^T
        ov[j] += s[j][e] * qr[e];  // o = S q^
      }
    }
#pragma unroll
    for (int j = 0; j < R; ++j) ov[j] = group_sum<L>(ov[j]);
    float mine = ov[0];
#pragma unroll
    for (int j = 1; j < R; ++j) mine = ln == j ? ov[j] : mine;
    if (ln < R && row0 + ln * G < p.V)
      o[row * p.o_rs + static_cast<int64_t>(hv) * p.V + row0 + ln * G] = from_float<TAct>(mine);
    if (g.spec && t < g.cols) {
      const int64_t slot = g.slots(i, t);
      if (rules::slot_valid(slot, p.num_slots, p.has_null, p.null_id))
#pragma unroll
        for (int j = 0; j < R; ++j)
          if (row0 + j * G < p.V) store_row<TState, EPL, kDense>(p, slot, hv, row0 + j * G, ln, s[j]);
    }
  }
  if (!g.spec)
#pragma unroll
    for (int j = 0; j < R; ++j)
      if (row0 + j * G < p.V) store_row<TState, EPL, kDense>(p, slot0, hv, row0 + j * G, ln, s[j]);
}

// Fused step as one launch: clusters of (ceil(V / kRows), r) blocks on sm_90+, when that cluster
// size can be resident; nullopt (nothing launched) otherwise.
template <typename Kernel>
std::optional<Status> try_cluster_launch(Kernel kernel, dim3 grid, int threads, const RecurrentParams& p,
                                         cudaStream_t stream) {
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess || major < 9)
    return std::nullopt;
  const unsigned csize = grid.x * static_cast<unsigned>(p.r);
  if (csize > 16 || p.HV % p.r != 0) return std::nullopt;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(threads);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = grid.x;
  attr[0].val.clusterDim.y = static_cast<unsigned>(p.r);
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  if (csize > 8) {  // non-portable sizes: allowed on H100/H200, if such a cluster fits
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {
      (void)cudaGetLastError();  // clear the attribute query's error
      return std::nullopt;
    }
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess || clusters < 1) {
      (void)cudaGetLastError();  // clear the attribute query's error
      return std::nullopt;
    }
  }
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, p);
  if (e != cudaSuccess) return Status::Error(std::string("cudaLaunchKernelEx: ") + cudaGetErrorString(e));
  return Status::Ok();
}

template <typename TAct, typename TS>
Status launch_recurrent(const RecurrentParams& p, bool fused, bool allow_one_launch, cudaStream_t stream,
                        bool* one_launch) {
  *one_launch = false;
  const int64_t nseq = p.group[0].n + p.group[1].n;
  if (nseq == 0) return Status::Ok();  // (fused: the caller's conv kernel copies z)
  auto go = [&](auto kp_tag) -> Status {
    constexpr int KP = decltype(kp_tag)::value;
    auto launch = [&](auto dense_tag, auto fused_tag) -> Status {
      constexpr bool kDense = decltype(dense_tag)::value, kF = decltype(fused_tag)::value;
      using Tr = RecTraits<TS, kF>;
      const dim3 grid(static_cast<unsigned>((p.V + Tr::kRows - 1) / Tr::kRows), static_cast<unsigned>(p.HV),
                      static_cast<unsigned>(nseq));
      if constexpr (kF) {
        if (allow_one_launch) {
          std::optional<Status> st =
              try_cluster_launch(recurrent_kernel<TAct, TS, KP, true, kDense, true>, grid, Tr::kThreads, p, stream);
          if (st) {
            *one_launch = st->ok();
            return *st;
          }
        }
      }
      recurrent_kernel<TAct, TS, KP, kF, kDense, false><<<grid, Tr::kThreads, 0, stream>>>(p);
      GDN_CUDA_CHECK(cudaGetLastError());
      return Status::Ok();
    };
    constexpr int EPL = KP / RecTraits<TS, false>::kLanes;  // the fused kernel's lanes are the same
    const bool dense = kHasVec<TS, EPL> && !p.kv_layout && p.state_vec && p.K == KP;
    using T = std::true_type;
    using F = std::false_type;
    if (fused) return dense ? launch(T{}, T{}) : launch(F{}, T{});
    return dense ? launch(T{}, F{}) : launch(F{}, F{});
  };
  if (p.K <= 32) return go(std::integral_constant<int, 32>{});
  if (p.K <= 64) return go(std::integral_constant<int, 64>{});
  if (p.K <= 128) return go(std::integral_constant<int, 128>{});
  if (p.K <= 256) return go(std::integral_constant<int, 256>{});
  return Status::Error("unsupported head_k_dim " + std::to_string(p.K) + " on CUDA: at most 256");
}

}  // namespace gdn::cuda
