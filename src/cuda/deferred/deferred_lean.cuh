// src/cuda/deferred/deferred_lean.cuh — the deferred-commit mode's linear verify in the lean
// kernel's manner (lean/recurrent_lean.cuh): one warp owning 8 or 16 rows of a (sequence, value head), a row's K = 128 elements over 16 lanes, every input loaded by each lane into its
// registers; no shared memory, no barrier.
//   grid = (V / rows, HV, sequences), block = one warp.
// The planner takes 16-row warps for large batches (their token preparation, the loads, norms and
// gates of ~330 of a step token's ~500 instructions per warp, then serves twice the rows, or is
// done once per (token, key head) by deferred_prep_kernel) and 8-row warps for small ones (twice
// as many warps to fill the SMs, one launch).
// Per sequence: the state read once, its logged rows replayed (the recurrence's update of
// recur_rows without an output: with float32 state the bits the per-token mode stored, on this
// recurrence path), the state written once, the step's tokens through step_rows (each token's
// output from the state before its update, as the general kernel's chain_chunk: one reduction per
// token; outputs and log entries). Verify steps the
// planner gives the algebra (plan::DeferredPlan::algebra) go to deferred_mma.cuh's kernel instead,
// deferred.cuh's kernel takes what neither does (larger trees, other K, "kv" or strided state,
// unaligned q / k).
#pragma once
#include "cuda/deferred/deferred.cuh"
#include "cuda/deferred/deferred_prep.cuh"
#include "cuda/lean/recurrent_lean.cuh"

namespace gdn::cuda {

// 16 lanes per row: G = 2 rows at once, R = 4 rows per lane, EPL = 8 elements of each per lane,
// whatever the state's dtype (against 32 lanes for float32 state, as the lean kernel streams it,
// and 8: see docs/performance.md).
template <int kWarpRows = 8>
struct DeferredLeanTraits {
  static constexpr int kLanes = 16, kGroups = 32 / kLanes, kRowsPerLane = kWarpRows / kGroups, kEPL = 128 / kLanes;
  static constexpr int kRows = kGroups * kRowsPerLane;  // plan::kDeferredSmallRows or kDeferredLean16Rows
  static constexpr int kMinBlocks = kWarpRows == 8 ? 20 : 16;
};

// Tokens whose inputs the lean form prefetches at its start (replayed and step tokens each).
constexpr int kLeanPrefetch = 16;

// The 128-byte line at p towards the SM's L1.
__device__ __forceinline__ void prefetch_l1(const void* p) { asm volatile("prefetch.global.L1 [%0];" ::"l"(p)); }

// One step token for a lane group's R rows, its output from the state before the update: per row
// p = S k^ and r = S q^ (the 2R sums reduce-scattered together over the row's L lanes), then
//     y = beta (v - dec p),  o = dec r + y (k^ . q^),  S <- dec S + y k^
// with y from the lane holding the row's p, sent to the row's other lanes: one reduction per
// token, not one before the update and one after it. Returns o of row *orow_j on the lanes
// holding an r (*orow_j = -1 on the others).
template <int L, int R, int EPL>
__device__ __forceinline__ float step_rows(float (&s)[R][EPL], const float (&kr)[EPL], const float (&qr)[EPL],
                                           TokenGates tg, float kq, const float (&vr)[R], int ln, int* orow_j) {
  constexpr int kSums = 2 * R, kSpan = L / kSums;  // lanes holding each sum
  static_assert(kSums <= L && (kSums & (kSums - 1)) == 0, "one reduce-scatter over the row's lanes");
  float x[kSums];
#pragma unroll
  for (int j = 0; j < R; ++j) {
    x[j] = 0.f;
    x[R + j] = 0.f;
#pragma unroll
    for (int e = 0; e < EPL; ++e) {
      x[j] += s[j][e] * kr[e];
      x[R + j] += s[j][e] * qr[e];
    }
  }
  const float sum = scatter_sum<L, kSums>(x, ln);  // S k^ of row jm (mine < R), else S q^
  const int mine = ln / kSpan, jm = mine % R;
  const float ym = tg.beta * (pick<R>(vr, jm) - tg.decay * sum);
  float y[R];
#pragma unroll
  for (int j = 0; j < R; ++j) y[j] = __shfl_sync(0xffffffffu, ym, j * kSpan, L);
#pragma unroll
  for (int j = 0; j < R; ++j)
#pragma unroll
    for (int e = 0; e < EPL; ++e) s[j][e] = fmaf(y[j], kr[e], tg.decay * s[j][e]);
  *orow_j = mine >= R && ln % kSpan == 0 ? jm : -1;
  return tg.decay * sum + pick<R>(y, jm) * kq;
}

// kPrepped: the step's token inputs from deferred_prep_kernel's workspace (p.prep).
template <typename TAct, typename TState, int kWarpRows = 8, bool kPrepped = false>
__global__ void __launch_bounds__(32, DeferredLeanTraits<kWarpRows>::kMinBlocks)
    deferred_lean_kernel(const __grid_constant__ DeferredParams p) {
  using Tr = DeferredLeanTraits<kWarpRows>;
  constexpr int L = Tr::kLanes, G = Tr::kGroups, R = Tr::kRowsPerLane, EPL = Tr::kEPL, KP = L * EPL;
  static_assert(KP == 128 && (Tr::kRows == plan::kDeferredSmallRows || Tr::kRows == plan::kDeferredLean16Rows),
                "K = 128, the planner's block rows");
  const int lane = threadIdx.x, ln = lane % L;
  const int hv = blockIdx.y, h = hv / p.r;
  const int row0 = blockIdx.x * Tr::kRows + lane / L;  // this lane group's row j: row0 + j G
  const GroupMeta& g = p.group[0];
  const int64_t i = blockIdx.z;
  const SeqInfo si = start_seq(p, g, i, false);  // slot0: the sequence's slot; pad: unusable
  const rules::TokenRange tr = si.tr;
  const int64_t slot = si.slot0;
  const int64_t K = p.K, V = p.V;
  bool pad = si.pad;
  if (p.out_rows >= 0) {  // gdn_attention: a token outside the buffers makes its sequence padding
    bool bad = si.past;
    for (int64_t t = lane; t < tr.len; t += 32) bad |= out_row(p, tr.begin + t) < 0;
    pad = __any_sync(0xffffffffu, bad) || pad;
  }
  TState* const sp = static_cast<TState*>(p.state) + slot * p.state_slot_stride +
                     (static_cast<int64_t>(hv) * V + row0) * KP + ln * EPL;  // row j at sp + j G K
  float s[R][EPL];
#pragma unroll
  for (int j = 0; j < R; ++j) {
#pragma unroll
    for (int e = 0; e < EPL; ++e) s[j][e] = 0.f;
    if (!pad && si.init) load_vec<TState, EPL>(sp + j * G * KP, s[j]);
  }
  TAct* const o = static_cast<TAct*>(p.o) + static_cast<int64_t>(hv) * V + row0;  // row j at o + j G
  if (pad) {  // nothing read or written but zero outputs (at the rows that exist)
    for (int64_t t = 0; t < tr.len; ++t) {
      const int64_t orow = out_row(p, tr.begin + t);
      if (orow >= 0 && ln < R) o[orow * p.o_rs + ln * G] = from_float<TAct>(0.f);
    }
    return;
  }
  // v of batch row `row` at this lane group's rows (row j at + j G)
  auto v_rows = [&](int64_t row) {
    return static_cast<const TAct*>(p.src.v) + row * p.src.v_rs + static_cast<int64_t>(hv) * V + row0;
  };
  // Every token input of the step towards this SM's L1 first (the lane's lines of the step's first
  // kLeanPrefetch tokens, then of the replayed log entries), so that the token loops below, whose
  // loads cannot pass the previous token's stores, wait for them once rather than once per token.
  for (int64_t t = 0; t < tr.len && t < kLeanPrefetch; ++t) {
    const int64_t row = tr.begin + t;
    const TAct* vp = v_rows(row);
    prefetch_l1(vp);
    prefetch_l1(vp + (R - 1) * G);
    if constexpr (kPrepped) {
      const float* qk = DeferredPrep::qk(p, row, h) + ln * EPL;
      prefetch_l1(qk);
      prefetch_l1(qk + 128);
      prefetch_l1(DeferredPrep::gates(p, row, hv));
    } else {
      prefetch_l1(q_row<TAct>(p, row, h) + ln * EPL);
      prefetch_l1(k_row<TAct>(p, row, h) + ln * EPL);
    }
  }
  const int64_t n_rep =
      si.init && g.num_accepted.present() ? rules::clamp64(g.num_accepted(i), 0, p.log_cols) : 0;
  for (int64_t j = 0; j < n_rep && j < kLeanPrefetch; ++j) {
    const int64_t row = p.path.present() ? p.path(i, j) : j;
    if (row < 0 || row >= p.log_cols) break;
    const float* e = log_entry(p.log_in, p.log_in_rs, p, slot, row, hv);
    prefetch_l1(e + ln * EPL);
    prefetch_l1(e + K + row0);
    prefetch_l1(e + K + row0 + (R - 1) * G);
    prefetch_l1(e + K + V);
  }
  auto store = [&]() {
#pragma unroll
    for (int j = 0; j < R; ++j) store_vec<TState, EPL>(sp + j * G * KP, s[j]);
  };

  // 1. the replay: logged k^, v, g, beta as consumed, until a path entry outside the log
  for (int64_t j = 0; j < n_rep; ++j) {
    const int64_t row = p.path.present() ? p.path(i, j) : j;
    if (row < 0 || row >= p.log_cols) break;
    const float* e = log_entry(p.log_in, p.log_in_rs, p, slot, row, hv);
    float kr[EPL], vr[R];
#pragma unroll
    for (int c = 0; c < EPL; ++c) kr[c] = e[ln * EPL + c];
#pragma unroll
    for (int r = 0; r < R; ++r) vr[r] = e[K + row0 + r * G];
    TokenGates tg;
    tg.g = e[K + V];
    tg.decay = expf(tg.g);
    tg.beta = e[K + V + 1];
    recur_rows<L, G, R, EPL, true, false>(s, kr, kr, tg, [&](int r) { return vr[r]; }, ln);
  }

  // 2. the one state write: the replayed state, before a verify step's tokens (or a sequence of none)
  const bool commit_before = p.log_tokens || tr.len == 0;
  if (commit_before) store();

  // 3. the step's tokens: outputs; a verify step's first log_cols tokens logged (k^, g and beta by
  //    the first row block, v by each block for its rows)
  float A, dtb;
  head_decay(p, p.gates, hv, A, dtb);
  for (int64_t t = 0; t < tr.len; ++t) {
    const int64_t row = tr.begin + t;
    float qr[EPL], kr[EPL], vr[R];
    const TAct* vp = v_rows(row);
#pragma unroll
    for (int r = 0; r < R; ++r) vr[r] = to_float(vp[r * G]);
    const int64_t orow = out_row(p, row);
    TokenGates tg;
    float kq;  // k^ . q^
    if constexpr (kPrepped) {
      const float* qk = DeferredPrep::qk(p, row, h) + ln * EPL;
      load_vec<float, EPL, false>(qk, qr);
      load_vec<float, EPL, false>(qk + 128, kr);
      const float4 gt = __ldg(reinterpret_cast<const float4*>(DeferredPrep::gates(p, row, hv)));
      tg.g = gt.x;
      tg.beta = gt.y;
      tg.decay = gt.z;
      kq = gt.w;
    } else {
      load_vec<TAct, EPL, false>(q_row<TAct>(p, row, h) + ln * EPL, qr);
      load_vec<TAct, EPL, false>(k_row<TAct>(p, row, h) + ln * EPL, kr);
      const float av = p.a(row * p.src.a_rs + hv), bv = p.b(row * p.src.b_rs + hv);
      tg = prep_regs<L, EPL>(av, bv, A, dtb, p.scale, kr, qr, p.gates);
      kq = lane_dot<L, EPL>(kr, qr);
    }
    if (p.log_tokens && t < p.log_cols) {
      float* e = log_entry(p.log_out, p.log_out_rs, p, slot, t, hv);
      if (blockIdx.x == 0 && lane < L) {
#pragma unroll
        for (int c = 0; c < EPL; ++c) e[ln * EPL + c] = kr[c];
        if (ln == 0) e[K + V] = tg.g, e[K + V + 1] = tg.beta;
      }
      if (ln < R) e[K + row0 + ln * G] = pick<R>(vr, ln);
    }
    int orow_j;  // the row whose o this lane holds (-1: none)
    const float ov = step_rows<L, R, EPL>(s, kr, qr, tg, kq, vr, ln, &orow_j);
    if (orow_j >= 0) o[orow * p.o_rs + orow_j * G] = from_float<TAct>(ov);
  }

  // 2'. the one state write of a step whose tokens are all accepted (log_tokens false): after them
  if (!commit_before) store();
}

// Whether the lean form can take the batch's shape: K = 128, dense "vk" state with 16-byte rows, V
// a multiple of the block's rows, 16-byte aligned q and k rows (a tree only through the algebra:
// plan::plan_deferred).
template <typename TAct, typename TS>
bool deferred_lean_applies(const DeferredParams& p) {
  return p.K == 128 && !p.kv_layout && p.state_vec && p.V % 8 == 0 &&
         aligned16(p.src.q, p.src.q_rs, sizeof(TAct)) && aligned16(p.src.k, p.src.k_rs, sizeof(TAct));
}

}  // namespace gdn::cuda
