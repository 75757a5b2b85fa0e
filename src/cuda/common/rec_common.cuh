// src/cuda/common/rec_common.cuh — what the recurrent kernels share: tuning traits, lane-group sums,
// state row loads/stores, the per-sequence metadata and one token of the recurrence.
//
//   S = exp(g) S;  d = beta (v - S k^);  S = S + d k^T;  o = S q^       (S: V x K per value head)
//
// Rows of S are independent given k^, q^ and the gates. A row is held by kLanes lanes (a lane
// group), EPL = KP / kLanes contiguous K-elements per lane (16-byte loads at K = 128: 8 elements
// per lane for every state dtype); a warp has 32 / kLanes groups, each owning kRowsPerLane rows
// (elements past K are zero and never stored). q^ and k^ live once per thread and serve all its
// rows; dot products are lane-group reductions.
#pragma once
#include <type_traits>

#include "common/seq_rules.h"
#include "cuda/common/gates.cuh"
#include "cuda/common/params.h"

namespace gdn::cuda {

// Tuning (bench/sweep.sh, H200): warps per block, lanes per state row, rows
// per lane group and resident blocks per SM the register budget must allow, for float32 and for
// 16-bit state, and for the fused step.
constexpr int kRecWarpsF32 = 1;
constexpr int kRecLanesF32 = 16;
constexpr int kRecRowsF32 = 4;
constexpr int kRecMbF32 = 32;
constexpr int kRecWarps16 = 1;
constexpr int kRecLanes16 = 16;
constexpr int kRecRows16 = 4;
constexpr int kRecMb16 = 32;
constexpr int kFusedWarps = 16;  // warps per block, two-launch fused step (amortises the per-block conv)
constexpr int kFusedRowsF32 = 2;
constexpr int kFusedRows16 = 2;
constexpr int kFusedMb = 2;

// Small batches are latency-bound: there the plain kernel uses a shape with fewer rows per lane
// group (more, shorter blocks) when sequences x value heads <= register_small_f32 (float32 state) or
// register_small_16 (16-bit; plan/tuning.h). H200, one-warp blocks of 2 rows per 16-lane
// group, 16 resident (room for kRecTbSmall tokens' inputs in registers), beat the large-batch
// shape by 8-19% at 32 sequence-heads; above 64 they lose.
// The small-batch shape (warps per block, lanes per row, rows per lane, resident blocks per SM),
// fixed at compile time.
constexpr int kRecSmallWarps = 1;
constexpr int kRecSmallLanes = 16;
constexpr int kRecSmallRows = 2;
constexpr int kRecSmallMb = 16;

// Mid batches of 16-bit verify (register_small_16 < sequences x value heads <= register_mid_16,
// at least 2 tokens per sequence on average; K = 128): the large-batch shape with kRecTbMid
// tokens staged at once and kRecMidMb resident blocks (room for the staged tokens' registers).
constexpr int kRecMidMb = 16;

// Tokens staged at once by the primitive op's kernels (their inputs loaded together). 1: measured
// best for the large-batch shape (4: verify T = 4 3% slower);
// kRecTbSmall / kRecTbMid for the small-batch shape and the mid-batch verify form, whose
// tokens are latency-bound.
constexpr int kRecTb = 1;
constexpr int kRecTbSmall = 4;
constexpr int kRecTbMid = 4;

// The register kernels' forms of the primitive op (gdn_attention's fused forms ignore it).
enum RecForm : int { kFormLarge = 0, kFormSmall = 1, kFormMid = 2 };

template <typename TState, bool kFused, int kForm = kFormLarge>
struct RecTraits {
  static constexpr bool kWide = sizeof(TState) == 4;
  static constexpr bool kAlt = kForm == kFormSmall && !kFused;  // the small-batch shape
  static constexpr bool kMid = kForm == kFormMid && !kFused;    // the mid-batch verify form
  static constexpr int kWarps =
      kFused ? kFusedWarps : kAlt ? kRecSmallWarps : (kWide ? kRecWarpsF32 : kRecWarps16);
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kLanes =  // lanes per row
      kAlt ? kRecSmallLanes : (kWide ? kRecLanesF32 : kRecLanes16);
  static constexpr int kGroups = 32 / kLanes;                                                  // groups per warp
  static constexpr int kRowsPerLane = kFused ? (kWide ? kFusedRowsF32 : kFusedRows16)
                                      : kAlt ? kRecSmallRows
                                             : (kWide ? kRecRowsF32 : kRecRows16);
  static constexpr int kRowsPerWarp = kRowsPerLane * kGroups;
  static constexpr int kMinBlocks = kFused ? kFusedMb
                                    : kAlt  ? kRecSmallMb
                                    : kMid  ? kRecMidMb
                                            : (kWide ? kRecMbF32 : kRecMb16);
  static constexpr int kRows = kWarps * kRowsPerWarp;  // state rows per block
  static constexpr int kTokens = kFused ? 1 : kAlt ? kRecTbSmall : kMid ? kRecTbMid : kRecTb;  // staged
  static_assert(kThreads <= 1024 && kThreads % 32 == 0, "a block is whole warps, at most 1024 threads");
  static_assert(kLanes == 8 || kLanes == 16 || kLanes == 32, "a lane group is 8, 16 or 32 lanes");
  static_assert(kRowsPerLane >= 1 && kRowsPerLane <= kLanes, "lane j of a group stores o of its row j");
};

// The one-launch fused step (fused_step.cuh): blocks of kStepWarps warps with the plain kernel's
// lane mapping, kStepMB resident per SM.
constexpr int kStepWarps = 4;
constexpr int kStepMb = 8;
// kLean: the lean kernel's lane layout (recurrent_lean.cuh: 32 lanes per row, 8 rows per lane,
// reduce-scatter sums) at kStepLeanMb blocks per SM (float32 state: 80 registers, no spills;
// the plain layout spills at 64 registers).
constexpr int kStepLeanMb = 6;
template <typename TState, bool kLean = false>
struct StepTraits {
  using Rec = RecTraits<TState, false>;
  static constexpr int kWarps = kStepWarps;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kLanes = kLean ? 32 : Rec::kLanes, kGroups = 32 / kLanes;
  static constexpr int kRowsPerLane = kLean ? 8 : Rec::kRowsPerLane;
  static constexpr int kRowsPerWarp = kRowsPerLane * kGroups;
  static constexpr bool kScatter = kLean;
  static constexpr int kRows = kWarps * kRowsPerWarp;
  static constexpr int kMinBlocks = kLean ? kStepLeanMb : kStepMb;
  static_assert(kThreads <= 1024, "a block is at most 1024 threads");
};

// State rows are streamed (read once, written once): evict-first cache hints, unless 0.
template <typename V>
__device__ __forceinline__ V ld_state(const V* p) {
  return __ldcs(p);
}
template <typename V>
__device__ __forceinline__ void st_state(V* p, V v) {
  __stcs(p, v);
}

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

// The same for dense "vk" rows (K == KP), with the row stride known at compile time.
template <int KP>
__device__ __forceinline__ int64_t dense_elem(int vi, int ki) {
  return static_cast<int64_t>(vi) * KP + ki;
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

// A lane's EPL contiguous state elements (EPL * sizeof(TState) bytes, in aligned vectors of at most
// 16 bytes) in and out; kState = false: read-only inputs (activations, __ldg) instead of the state's
// streaming hints.
template <typename TState, int EPL, bool kState = true>
__device__ __forceinline__ void load_vec(const TState* src, float (&s)[EPL]) {
  constexpr int kBytes = EPL * sizeof(TState), kChunk = kBytes < 16 ? kBytes : 16, kPer = kChunk / sizeof(TState);
  using Vec = typename VecOf<kChunk>::type;
#pragma unroll
  for (int c = 0; c < kBytes / kChunk; ++c) {
    const Vec* v = reinterpret_cast<const Vec*>(src) + c;
    Vec u;
    if constexpr (kState) u = ld_state(v);
    else u = __ldg(v);
    const TState* e = reinterpret_cast<const TState*>(&u);
#pragma unroll
    for (int j = 0; j < kPer; ++j) s[c * kPer + j] = to_float(e[j]);
  }
}
template <typename TState, int EPL>
__device__ __forceinline__ void store_vec(TState* dst, const float (&s)[EPL]) {
  constexpr int kBytes = EPL * sizeof(TState), kChunk = kBytes < 16 ? kBytes : 16, kPer = kChunk / sizeof(TState);
  using Vec = typename VecOf<kChunk>::type;
#pragma unroll
  for (int c = 0; c < kBytes / kChunk; ++c) {
    Vec u;
    TState* e = reinterpret_cast<TState*>(&u);
#pragma unroll
    for (int j = 0; j < kPer; ++j) e[j] = from_float<TState>(s[c * kPer + j]);
    st_state(reinterpret_cast<Vec*>(dst) + c, u);
  }
}

// Row vi of one value head's state in slot `slot`, this lane's EPL elements: in pieces of kPiece
// contiguous elements, piece c of lane ln starting at element (c L + ln) kPiece (L = KP / EPL lanes
// per row); the default, one piece, is EPL contiguous elements from ln EPL. kDense: one vector
// load or store per piece.
template <int KP, int EPL, int kPiece>
__device__ __forceinline__ int piece_elem(int ln, int j) {
  return (j / kPiece * (KP / EPL) + ln) * kPiece + j % kPiece;
}
template <typename TState, int KP, int EPL, bool kDense, int kPiece = EPL>
__device__ __forceinline__ void load_row(const RecurrentParams& p, int64_t slot, int hv, int vi, int ln,
                                         float (&s)[EPL]) {
  static_assert(EPL % kPiece == 0, "whole pieces");
  const TState* base = static_cast<const TState*>(p.state) + slot * p.state_slot_stride +
                       static_cast<int64_t>(hv) * p.V * p.K;
  if constexpr (kDense && kHasVec<TState, kPiece>) {
#pragma unroll
    for (int c = 0; c < EPL / kPiece; ++c)
      load_vec<TState, kPiece>(base + dense_elem<KP>(vi, piece_elem<KP, EPL, kPiece>(ln, c * kPiece)),
                               *reinterpret_cast<float(*)[kPiece]>(&s[c * kPiece]));
  } else {
#pragma unroll
    for (int j = 0; j < EPL; ++j) {
      const int ki = piece_elem<KP, EPL, kPiece>(ln, j);
      s[j] = ki < p.K ? to_float(base[state_elem(p, vi, ki)]) : 0.f;
    }
  }
}

template <typename TState, int KP, int EPL, bool kDense, int kPiece = EPL>
__device__ __forceinline__ void store_row(const RecurrentParams& p, int64_t slot, int hv, int vi, int ln,
                                          const float (&s)[EPL]) {
  static_assert(EPL % kPiece == 0, "whole pieces");
  TState* base = static_cast<TState*>(p.state) + slot * p.state_slot_stride + static_cast<int64_t>(hv) * p.V * p.K;
  if constexpr (kDense && kHasVec<TState, kPiece>) {
#pragma unroll
    for (int c = 0; c < EPL / kPiece; ++c)
      store_vec<TState, kPiece>(base + dense_elem<KP>(vi, piece_elem<KP, EPL, kPiece>(ln, c * kPiece)),
                                *reinterpret_cast<const float(*)[kPiece]>(&s[c * kPiece]));
  } else {
#pragma unroll
    for (int j = 0; j < EPL; ++j) {
      const int ki = piece_elem<KP, EPL, kPiece>(ln, j);
      if (ki < p.K) base[state_elem(p, vi, ki)] = from_float<TState>(s[j]);
    }
  }
}

// Whether group g's offsets qsl[0..n] never decrease, so that its sequences' token ranges are
// disjoint (gdn_attention gives the chunk kernel its long prefills only then). Every thread of the
// block calls it.
__device__ __forceinline__ bool ordered_offsets(const GroupMeta& g) {
  bool ok = true;
  for (int64_t i = threadIdx.x; i < g.n; i += blockDim.x) ok &= g.qsl(i) <= g.qsl(i + 1);
  return __syncthreads_and(ok);
}

// Global row of local token j of a group (-1 when outside the buffer).
__device__ __forceinline__ int64_t global_row(const GroupMeta& g, int64_t j, int64_t num_rows) {
  const int64_t r = g.token_indx.present() ? g.token_indx(j) : j;
  return (r >= 0 && r < num_rows) ? r : -1;
}


// Slots of verify columns 1..kNearCols are loaded with the other metadata, so the read slot of
// a sequence that accepted up to kNearCols + 1 tokens costs no dependent load.
constexpr int kNearCols = 3;

// One sequence's metadata (docs/contract.md §3), read with independent loads (all in bounds: i < n).
struct SeqInfo {
  rules::TokenRange tr;
  int64_t slot0, read_slot, acc;
  bool init, pad;
  bool past;  // a token at or past the group's limit: padding in gdn_attention (rules::runs_past)
};
__device__ __forceinline__ SeqInfo resolve_seq(const RecurrentParams& p, const GroupMeta& g, int64_t i, bool fused) {
  SeqInfo si;
  const int64_t lo = g.qsl(i), hi = g.qsl(i + 1);
  si.slot0 = g.slots(i, 0);
  const int64_t na = g.spec ? g.num_accepted(i) : 1;
  si.init = g.has_init ? g.has_init[i * g.has_init_stride] != 0 : true;
  int64_t col_slot[kNearCols];
#pragma unroll
  for (int j = 0; j < kNearCols; ++j) col_slot[j] = (g.spec && j + 1 < g.cols) ? g.slots(i, j + 1) : si.slot0;
  si.tr = rules::token_range(lo, hi, g.limit);
  si.past = rules::runs_past(lo, hi, g.limit);
  si.acc = g.spec ? rules::accepted(na, g.cols) : 1;
  si.read_slot = si.slot0;
#pragma unroll
  for (int j = 0; j < kNearCols; ++j)
    if (si.acc == j + 2) si.read_slot = col_slot[j];
  if (si.acc > kNearCols + 1) si.read_slot = g.slots(i, si.acc - 1);
  si.pad = !rules::slot_valid(si.slot0, p.num_slots, p.has_null, p.null_id) ||
           !rules::slot_valid(si.read_slot, p.num_slots, p.has_null, p.null_id);
  if (fused) si.pad = si.pad || si.past || !rules::slot_valid(si.slot0, p.conv.num_slots, p.has_null, p.null_id);
  return si;
}
// The register kernels' start: pdl_start(), then the sequence's metadata; or, where the caller
// opted in (p.early_meta, cuda_util.cuh), the metadata first.
__device__ __forceinline__ SeqInfo start_seq(const RecurrentParams& p, const GroupMeta& g, int64_t i, bool fused) {
  if (p.early_meta) {
    const SeqInfo si = resolve_seq(p, g, i, fused);
    pdl_start();
    return si;
  }
  pdl_start();
  return resolve_seq(p, g, i, fused);
}

// A token's k^, q^ (this lane's EPL elements of each) and its decay exp(g) and beta, from raw q, k
// (KP each, zero past K) and the gate inputs a, b in form f (gates.cuh; the default form, computed
// gates and l2 norms, where the caller passes none).
struct TokenGates {
  float decay, beta, g;  // g: the log-space decay (decay = exp(g))
};
template <int L, int EPL>
__device__ __forceinline__ TokenGates prep_regs(float a, float b, float A, float dtb, float scale, float (&kr)[EPL],
                                                float (&qr)[EPL], GateForm f = {}) {
  float kn = 1.f, qn = scale;  // k^ = k, q^ = q * scale without the norms
  if (f.l2norm) {
    float kk = 0.f, qq = 0.f;
#pragma unroll
    for (int e = 0; e < EPL; ++e) {
      kk += kr[e] * kr[e];
      qq += qr[e] * qr[e];
    }
    kn = 1.f / sqrtf(group_sum<L>(kk) + 1e-6f);    // k^ = k / |k|
    qn = scale / sqrtf(group_sum<L>(qq) + 1e-6f);  // q^ = q / |q| * scale
  }
  const GateValues gv = gate_values(f, a, b, A, dtb);
  TokenGates tg;
  tg.beta = gv.beta;
  tg.g = gv.g;
  tg.decay = expf(gv.g);
#pragma unroll
  for (int e = 0; e < EPL; ++e) {
    kr[e] *= kn;
    qr[e] *= qn;
  }
  return tg;
}
// The same from raw q, k in shared memory (KP floats each, zero past K).
template <int L, int EPL>
__device__ __forceinline__ TokenGates prep_token(const float* sq, const float* sk, float a, float b, float A, float dtb,
                                                 float scale, int ln, float (&kr)[EPL], float (&qr)[EPL],
                                                 GateForm f = {}) {
#pragma unroll
  for (int e = 0; e < EPL; ++e) {
    kr[e] = sk[ln * EPL + e];
    qr[e] = sq[ln * EPL + e];
  }
  return prep_regs<L, EPL>(a, b, A, dtb, scale, kr, qr, f);
}

// Sums of R row partials over an L-lane group. With R a power of two (<= L),
// a reduce-scatter: at the level of lane mask m = L/2, L/4, ... each lane sends half of its values
// to its partner and adds the other half it receives, so after log2 R levels it holds one row's
// partial (row ln / (L / R)), finished by a plain butterfly over the remaining masks: (R - 1) +
// log2(L / R) shuffles instead of R log2 L (L = 16, R = 4: 5 instead of 16). Partners add the same
// two numbers, so every lane of a row gets the same bits.
// kWant: the caller's choice (the register kernels at 64 registers spill more with it: they keep
// the plain sums).
template <int L, int R, bool kWant>
constexpr bool kScatter = kWant && R > 1 && R <= L && (R & (R - 1)) == 0;
constexpr int log2i(int x) { return x > 1 ? 1 + log2i(x / 2) : 0; }
template <int L, int R>
__device__ __forceinline__ float scatter_sum(float (&x)[R], int ln) {
  constexpr int kLevels = log2i(R);
#pragma unroll
  for (int lv = 0; lv < kLevels; ++lv) {
    const int half = (R >> lv) / 2, m = L >> (lv + 1);
    const bool hi = (ln & m) != 0;  // keeps the upper half of its values
#pragma unroll
    for (int i = 0; i < R / 2; ++i)
      if (i < half) {
        const float send = hi ? x[i] : x[i + half], keep = hi ? x[i + half] : x[i];
        x[i] = keep + __shfl_xor_sync(0xffffffffu, send, m);
      }
  }
  float y = x[0];
#pragma unroll
  for (int m = L / (2 * R); m > 0; m >>= 1) y += __shfl_xor_sync(0xffffffffu, y, m);
  return y;
}
// Every lane gets every row's sum (the group sum of each x[j]).
template <int L, int R, bool kWant>
__device__ __forceinline__ void rows_sum(float (&x)[R], int ln) {
  if constexpr (kScatter<L, R, kWant>) {
    x[0] = scatter_sum<L, R>(x, ln);  // then gathered back: masks L/R, 2L/R, ..., L/2
    constexpr int kLevels = log2i(R);
#pragma unroll
    for (int lv = 0; lv < kLevels; ++lv) {
      const int n = 1 << lv, m = (L / R) << lv;
      const bool hi = (ln & m) != 0;  // holds the upper n rows of the 2n
#pragma unroll
      for (int i = 0; i < R / 2; ++i)
        if (i < n) {
          const float o = __shfl_xor_sync(0xffffffffu, x[i], m);
          x[i + n] = hi ? x[i] : o;
          x[i] = hi ? o : x[i];
        }
    }
  } else {
#pragma unroll
    for (int j = 0; j < R; ++j) x[j] = group_sum<L>(x[j]);
  }
}

// x[j] for an index j known only at run time, by selects (no local-memory copy of x).
template <int R>
__device__ __forceinline__ float pick(const float (&x)[R], int j) {
  float v = x[0];
#pragma unroll
  for (int i = 1; i < R; ++i) v = j == i ? x[i] : v;
  return v;
}

// The o value of row ln (lanes ln < R) among a lane group's R row outputs, after the group sums.
template <int L, int R, bool kWant = false>
__device__ __forceinline__ float pick_row(float (&ov)[R], int ln) {
  if constexpr (kScatter<L, R, kWant>) {
    const float y = scatter_sum<L, R>(ov, ln);  // row ln / (L / R)'s sum
    return __shfl_sync(0xffffffffu, y, ln * (L / R), L);  // lanes ln >= R: unused
  } else {
#pragma unroll
    for (int j = 0; j < R; ++j) ov[j] = group_sum<L>(ov[j]);
    return pick<R>(ov, ln);
  }
}

// One token for a lane group's R rows, given k^, q^ (this lane's elements) and the gates;
// v_of(j): v of row j (0 past V); kMulti: the reduce-scatter sums above. Returns o of row ln for
// lanes ln < R; kOut false: the state's update alone (qr unread, 0 returned).
template <int L, int G, int R, int EPL, bool kMulti = false, bool kOut = true, typename VOf>
__device__ __forceinline__ float recur_rows(float (&s)[R][EPL], const float (&kr)[EPL], const float (&qr)[EPL],
                                           TokenGates tg, VOf v_of, int ln) {
  float dot[R], ov[R];
#pragma unroll
  for (int j = 0; j < R; ++j) {
    dot[j] = 0.f;
#pragma unroll
    for (int e = 0; e < EPL; ++e) {
      s[j][e] *= tg.decay;  // S = exp(g) S
      dot[j] += s[j][e] * kr[e];
    }
  }
  rows_sum<L, R, kMulti>(dot, ln);
#pragma unroll
  for (int j = 0; j < R; ++j) {
    const float d = tg.beta * (v_of(j) - dot[j]);  // d = beta (v - S k^)
    ov[j] = 0.f;
#pragma unroll
    for (int e = 0; e < EPL; ++e) {
      s[j][e] += d * kr[e];                           // S += d k^T
      if constexpr (kOut) ov[j] += s[j][e] * qr[e];  // o = S q^
    }
  }
  if constexpr (kOut) return pick_row<L, R, kMulti>(ov, ln);
  return 0.f;
}

// One token for a lane group's R rows (row j at block-local index lrow0 + j G; rows with
// j G >= vlim are past V). sq, sk: raw q and k (KP each, zero past K); sv: v of the block's rows;
// a, b: the token's gate inputs, in form f. Returns o of row ln for lanes ln < R.
template <int L, int G, int R, int EPL, bool kMulti = false>
__device__ __forceinline__ float recur_token(float (&s)[R][EPL], const float* sq, const float* sk, const float* sv,
                                             int lrow0, int vlim, float a, float b, float A, float dtb, float scale,
                                             int ln, GateForm f = {}) {
  float kr[EPL], qr[EPL];
  const TokenGates tg = prep_token<L, EPL>(sq, sk, a, b, A, dtb, scale, ln, kr, qr, f);
  return recur_rows<L, G, R, EPL, kMulti>(
      s, kr, qr, tg, [&](int j) { return j * G < vlim ? sv[lrow0 + j * G] : 0.f; }, ln);
}

}  // namespace gdn::cuda

#include "cuda/common/rec_tokens.cuh"  // the token inputs' loads, staging and loop (uses the above)
