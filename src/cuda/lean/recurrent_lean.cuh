// src/cuda/lean/recurrent_lean.cuh — the primitive recurrence for the serving engines' common decode and
// verify batches, with nothing else in its instruction stream: batches whose sequences are all
// non-spec or all verify ones, int32 query_start_loc, state indices and num_accepted, no token
// remap, dense "vk" state of K = 128, V a multiple of 8, 16-byte aligned q / k rows.
// recurrent_kernel handles every batch; this kernel runs the same recurrence (rec_common.cuh's
// prep_regs and recur_rows) for the batches it takes. Its staged form (16-bit state, large one-token
// batches) first copies the block's rows into shared memory (see kStaged below).
//   grid  = (V / 8, HV, sequences of both groups), block = one warp owning 8 rows of one
//           (sequence, value head): float32 state with 32 lanes per row (every lane holds 4
//           elements of each of the 8 rows, FLA's layout), 16-bit state with 16 lanes per row;
//           staged form: V / 32 blocks per (sequence, value head), 32 rows each.
// Each lane loads its own elements of q and k (vectors), the v values of its rows and a, b
// straight into registers: no shared memory, no barrier, no dtype or index-width branches.
// recurrent_kernel executed 1 071 instructions per warp against FLA's 631
// on the same launch shape; this kernel with 32 lanes per row, the rows' sums as reduce-scatters and
// at most 20 blocks per SM (90 registers, no spills) measured 4-19% faster than the earlier choices
// on float32 one-token batches of 32-128 and >= 512 sequence-heads; its verify
// instance and 16-bit batches (windows below).
#pragma once
#include <optional>

#include <cuda_pipeline.h>

#include "cuda/plan/plan.h"
#include "cuda/common/rec_common.cuh"

namespace gdn::cuda {

// Where the planner takes this kernel (plan/tuning.h, lean_*; H200, the kernel forced against the
// other choices over the three model shapes):
//   float32 state: verify batches of 2 or more tokens per sequence on average, at every size (-4 to
//   -27%); one-token batches of <= lean_f32_mid_lo or >= lean_f32_mid_hi sequence-heads
//   (between them the pipelined kernel measured faster);
//   16-bit state: one-token batches of <= lean_16_max or lean_16_band_lo..hi
//   sequence-heads (256: -13 to -22%, Qwen3-Next TP1 N = 8 and TP4 N = 32, where the other kernels
//   change shape; 192 and 384, Qwen3.6-27B N = 4 and 8: +15%), verify batches of <=
//   lean_16_verify_max (larger ones: +3 to +11%; one-token ones from 512: +8 to +36%), and
//   in the staged form (below) one-token batches of >= lean_staged_min sequence-heads.
constexpr int kRecLeanLanes = 32;
constexpr int kRecLeanMb = 20;
// The rows' sums as reduce-scatters (rec_common.cuh, rows_sum / pick_row) for float32 state: 0 to -1.9%.

// 16-bit state: 16 lanes per row, plain sums.
constexpr int kRecLeanLanes16 = 16;
// Resident blocks per SM (__launch_bounds__) of each instance: one-token (MB, MB_16) and verify
// (MB_SPEC, MB_16_SPEC) instances, each in a base and a "more" form (more blocks, fewer registers).
// H200, the 16-bit instances at 20 blocks instead of 32 (64
// registers and 80-96 B of spills): -9 to -20% up to 128 sequence-heads (TP1 N = 1 bf16 decode
// 3.6 -> 3.2 µs, verify T = 4 7.7 -> 6.2); the more form (24 blocks, 80 registers) against the base
// form, both forced, per batch size in blocks (a wave: 20 blocks per SM times the SMs, 2640):
//   <= 1024 blocks  verify -4 to -6% (float32), one-token +3 to +12%
//   1536 (96 sequence-heads, all three models)  -12 to -19% verify and float32 one-token,
//                                               -2 to -4% 16-bit one-token
//   2048-2304 (128-144 sequence-heads, under one wave)  +8 to +14%
//   1-10 waves (more than one, at most ten)  verify -1 to -22% (27B N = 4 T = 4 f32 23.0 -> 18.5),
//                                            float32 one-token -1 to -5%, 16-bit one-token +5%
//   > 10 waves  +0.3 to +1.8%
// 28 blocks (72 registers, spills) measured slower everywhere.
constexpr int kRecLeanMb16 = 20;
constexpr int kRecLeanMbSpec = kRecLeanMb;
constexpr int kRecLeanMb16Spec = kRecLeanMb16;
constexpr int kRecLeanMbMore = 24;  // every more form (ptxas sm_90: 80 registers)
// Where the planner takes the more form (from the table above; plan/tuning.h, lean_more_*): verify
// batches of at most lean_more_hi blocks; one-token batches of lean_more_lo + 1 to _hi blocks;
// verify and float32 one-token batches of more than one and at most lean_more_waves waves.

// kStaged (16-bit state): the block's kRecStageRows rows of state copied into shared memory
// with cp.async at its start (the bytes in flight held by no register), then kRecStageR rows
// per lane at a time from there (32 rows, 4 per lane, 20 blocks per SM: 96 registers, 24 B of
// spills, 8 KB in flight per block). H200 (against the pipelined kernel
// that took these batches): one-token batches of >= 2048 sequence-heads -1.4 to -4.4%
// (bf16 decode TP1 N = 64 43.2 -> 42.3 µs); 512-1536 sequence-heads +1.7 to +6.9%, verify batches
// +0.3 to +140%. 16 rows per block at 32 blocks (4 KB each, 40 B of spills) measured -0.3 to +3.1%
// from 2048, 32 rows of 2 per lane at 24 blocks -0.3 to -5.1% (+19% at 512).
constexpr int kRecStageRows = 32;
constexpr int kRecStageR = 4;
constexpr int kRecStageMb = 20;

template <typename TState, bool kStaged = false>
struct LeanTraits {
  static constexpr bool kWide = sizeof(TState) == 4;
  static constexpr int kLanes = kWide ? kRecLeanLanes : kRecLeanLanes16, kGroups = 32 / kLanes;
  static constexpr int kRows = kStaged ? kRecStageRows : 8;  // a block's rows
  // resident blocks per SM of the one-token and verify instances (kMore: kRecLeanMbMore)
  static constexpr int kMinBlocks = kStaged ? kRecStageMb : kWide ? kRecLeanMb : kRecLeanMb16;
  static constexpr int kMinBlocksSpec = kStaged ? kRecStageMb
                                       : kWide  ? kRecLeanMbSpec
                                                : kRecLeanMb16Spec;
  static constexpr int min_blocks(bool spec, bool more) {
    return more ? kRecLeanMbMore : spec ? kMinBlocksSpec : kMinBlocks;
  }
  static constexpr bool kScatter = kWide;
  static constexpr int kRowsPerLane = kStaged ? kRecStageR : kRows / kGroups;  // per pass
  static constexpr int kPasses = kRows / (kRowsPerLane * kGroups);
  static constexpr int kEPL = 128 / kLanes;  // K = 128
  static_assert(kLanes == 16 || kLanes == 32, "16 or 32 lanes per row");
  static_assert(!kStaged || (!kWide && kPasses * kRowsPerLane * kGroups == kRows), "staged: 16-bit, whole passes");
};

// kSpec: every sequence of the launch is a verify one (docs/contract.md §3: the state read from column
// acc - 1's slot, stored after token t into column t's slot when t < cols and the slot is usable;
// columns below kLeanCols come with the metadata, later ones are loaded when used: column 0 and
// the kNearCols after it, as resolve_seq does for the general kernels).
constexpr int kLeanCols = 1 + kNearCols;
// kMore: the instance with more resident blocks per SM (kRecLeanMbMore; lean_more chooses).
// kForms: the gate-form instance, which also takes the other gate and norm forms of ops.h
// (RecurrentParams::gates, by the math of gates.cuh: a and b loaded in their own dtypes, runtime
// switches for the gates and the l2 norms), as recurrent_kernel's; the other instances take the
// default form only.
template <typename TAct, typename TState, bool kSpec = false, bool kStaged = false, bool kMore = false,
          bool kForms = false>
__global__ void __launch_bounds__(32, LeanTraits<TState, kStaged>::min_blocks(kSpec, kMore))
    recurrent_lean_kernel(const __grid_constant__ RecurrentParams p) {
  using Tr = LeanTraits<TState, kStaged>;
  const GateForm f = kForms ? p.gates : GateForm{};
  constexpr int L = Tr::kLanes, G = Tr::kGroups, R = Tr::kRowsPerLane;
  constexpr int EPL = Tr::kEPL, KP = L * EPL;
  const int lane = threadIdx.x, ln = lane % L;
  const int hv = blockIdx.y, h = hv / p.r;
  const int v0 = blockIdx.x * Tr::kRows;  // the block's first row
  const int row0 = v0 + lane / L;         // this lane group's row j (of pass 0): row0 + j G
  const SeqRef sq = seq_ref(p, blockIdx.z);
  const GroupMeta& g = p.group[sq.gi];
  const int64_t i = sq.i;
  const int32_t* slots = static_cast<const int32_t*>(g.slots.ptr) + i * g.slots.row_stride;
  int32_t col[kSpec ? kLeanCols : 1];  // verify: the slots of columns 0 .. kLeanCols - 1
  int32_t lo, hi, na = 1;
  bool init;
  auto meta = [&]() {
    const int32_t* qsl = static_cast<const int32_t*>(g.qsl.ptr);
    lo = qsl[i * g.qsl.row_stride];
    hi = qsl[(i + 1) * g.qsl.row_stride];
    col[0] = slots[0];
    if constexpr (kSpec) {
      na = static_cast<const int32_t*>(g.num_accepted.ptr)[i * g.num_accepted.row_stride];
#pragma unroll
      for (int c = 1; c < kLeanCols; ++c) col[c] = c < g.cols ? slots[c] : col[0];
    }
    init = g.has_init ? g.has_init[i * g.has_init_stride] != 0 : true;
  };
  if (p.early_meta) {  // as start_seq (rec_common.cuh)
    meta();
    pdl_start();
  } else {
    pdl_start();
    meta();
  }
  const rules::TokenRange tr = rules::token_range(lo, hi, g.limit);
  if (tr.len == 0) return;
  // the slot of column c (c < cols), from the registers where c < kLeanCols
  auto col_slot = [&](int c) -> int32_t {
    int32_t r = col[0];
#pragma unroll
    for (int k = 1; k < (kSpec ? kLeanCols : 1); ++k) r = c == k ? col[k] : r;
    return kSpec && c >= kLeanCols ? slots[c] : r;
  };
  const int acc = kSpec ? static_cast<int>(rules::accepted(na, g.cols)) : 1;
  const int32_t slot = kSpec ? col_slot(acc - 1) : col[0];  // read
  auto usable = [&](int32_t sl) { return rules::slot_valid(sl, p.num_slots, p.has_null, p.null_id); };
  const bool pad = !usable(col[0]) || (kSpec && !usable(slot));  // as resolve_seq

  // this lane's elements of row j (of pass 0) of the state in slot `sl`: at(sl) + j G K
  auto at = [&](int32_t sl) {
    return static_cast<TState*>(p.state) + static_cast<int64_t>(sl) * p.state_slot_stride +
           (static_cast<int64_t>(hv) * p.V + row0) * KP + ln * EPL;
  };
  TState* const sp = at(slot);
  float s[R][EPL];
  __shared__ alignas(16) TState s_tile[kStaged ? Tr::kRows * KP : 1];  // staged: the block's rows
  if constexpr (kStaged) {  // copied into shared memory, 16 bytes per lane and copy
    static_assert(EPL * sizeof(TState) == 16, "a lane's part of a row is one 16-byte vector");
    if (!pad && init) {
      const TState* src = sp - (row0 - v0) * KP - ln * EPL;  // row v0, element 0
      constexpr int kVecs = Tr::kRows * KP * static_cast<int>(sizeof(TState)) / 16;
#pragma unroll
      for (int c = lane; c < kVecs; c += 32)
        __pipeline_memcpy_async(reinterpret_cast<uint4*>(s_tile) + c, reinterpret_cast<const uint4*>(src) + c, 16);
      __pipeline_commit();
    }
  } else {
#pragma unroll
    for (int j = 0; j < R; ++j) {
#pragma unroll
      for (int e = 0; e < EPL; ++e) s[j][e] = 0.f;
      if (!pad && init) load_vec<TState, EPL>(sp + j * G * KP, s[j]);
    }
  }
  if (pad) {
#pragma unroll
    for (int c = 0; c < Tr::kPasses; ++c) zero_outputs<TAct, R, G>(p, g, tr, g.limit, hv, row0 + c * R * G, ln);
    return;
  }
  // A_log's and dt_bias's words (branch-free loads, in flight beside the state; none where the decay
  // is given: both are absent then, and gate_values does not read A or dtb)
  auto word = [&](const FloatRef& r, int w) { return f.decay_given ? 0u : load_param_word(r, hv, w); };
  const uint32_t aw0 = word(p.A_log, 0), aw1 = word(p.A_log, 1);
  const uint32_t dw0 = word(p.dt_bias, 0), dw1 = word(p.dt_bias, 1);
  const float A = -expf(p.A_log.from_bits(make_uint2(aw0, aw1))), dtb = p.dt_bias.from_bits(make_uint2(dw0, dw1));
  const int qo = h * KP + ln * EPL, vo = hv * p.V + row0, oo = vo + ln * G;  // offsets within a token's row
  // v of this lane's rows of pass c; token t's k^, q^ and gates (with v of pass c's rows)
  auto load_v = [&](int64_t row, int c, float (&vr)[R]) {
    const TAct* v = static_cast<const TAct*>(p.src.v) + row * p.src.v_rs + vo + c * R * G;
#pragma unroll
    for (int j = 0; j < R; ++j) vr[j] = to_float(v[j * G]);
  };
  auto inputs = [&](int64_t row, int c, float (&qr)[EPL], float (&kr)[EPL], float (&vr)[R]) {
    load_vec<TAct, EPL, false>(static_cast<const TAct*>(p.src.q) + row * p.src.q_rs + qo, qr);
    load_vec<TAct, EPL, false>(static_cast<const TAct*>(p.src.k) + row * p.src.k_rs + qo, kr);
    load_v(row, c, vr);
    float av, bv;
    if constexpr (kForms) {  // a and b each in its own dtype
      const uint32_t ra = gate_word(p, row, hv, 0), rb = gate_word(p, row, hv, 1);
      av = select_float(ra, p.a_dtype);
      bv = select_float(rb, p.b_dtype);
    } else {
      av = to_float(static_cast<const TAct*>(p.src.a)[row * p.src.a_rs + hv]);
      bv = to_float(static_cast<const TAct*>(p.src.b)[row * p.src.b_rs + hv]);
    }
    return prep_regs<L, EPL>(av, bv, A, dtb, p.scale, kr, qr, f);
  };
  // token t on pass c's rows: o, and a verify sequence's state into column t's slot
  auto step = [&](int t, int c, const float (&qr)[EPL], const float (&kr)[EPL], const float (&vr)[R], TokenGates tg) {
    const int64_t row = tr.begin + t;
    const float mine = recur_rows<L, G, R, EPL, Tr::kScatter>(s, kr, qr, tg, [&](int j) { return vr[j]; }, ln);
    if (ln < R) static_cast<TAct*>(p.o)[row * p.o_rs + oo + c * R * G] = from_float<TAct>(mine);
    if constexpr (kSpec) {
      if (t < g.cols) {
        const int32_t dst = col_slot(t);
        if (usable(dst)) {
          TState* const dp = at(dst) + c * R * G * KP;
#pragma unroll
          for (int j = 0; j < R; ++j) store_vec<TState, EPL>(dp + j * G * KP, s[j]);
        }
      }
    }
  };
  if constexpr (kStaged) {
    float q0[EPL], k0[EPL], v0r[R];
    const TokenGates tg0 = inputs(tr.begin, 0, q0, k0, v0r);  // token 0's, while the copies land
    __pipeline_wait_prior(0);
    __syncwarp();
    for (int c = 0; c < Tr::kPasses; ++c) {
#pragma unroll
      for (int j = 0; j < R; ++j) {
        const int lrow = lane / L + (c * R + j) * G;  // the row within the block
        uint4 u = make_uint4(0u, 0u, 0u, 0u);         // (zero bits: 0.f)
        if (init) u = *reinterpret_cast<const uint4*>(s_tile + lrow * KP + ln * EPL);
        const TState* e = reinterpret_cast<const TState*>(&u);
#pragma unroll
        for (int i = 0; i < EPL; ++i) s[j][i] = to_float(e[i]);
      }
      for (int t = 0; t < static_cast<int>(tr.len); ++t) {
        float qr[EPL], kr[EPL], vr[R];
        if (t > 0) {
          const TokenGates tg = inputs(tr.begin + t, c, qr, kr, vr);
          step(t, c, qr, kr, vr, tg);
        } else if (c > 0) {
          load_v(tr.begin, c, vr);
          step(0, c, q0, k0, vr, tg0);
        } else {
          step(0, 0, q0, k0, v0r, tg0);
        }
      }
      if constexpr (!kSpec) {
#pragma unroll
        for (int j = 0; j < R; ++j) store_vec<TState, EPL>(sp + (c * R + j) * G * KP, s[j]);
      }
    }
  } else {
    for (int t = 0; t < static_cast<int>(tr.len); ++t) {
      float qr[EPL], kr[EPL], vr[R];
      const TokenGates tg = inputs(tr.begin + t, 0, qr, kr, vr);
      step(t, 0, qr, kr, vr, tg);
    }
    if constexpr (!kSpec) {
#pragma unroll
      for (int j = 0; j < R; ++j) store_vec<TState, EPL>(sp + j * G * KP, s[j]);
    }
  }
}

// Whether the lean kernel can take the batch (spec: as its verify instance, every sequence a
// verify one): see the file's head.
template <typename TAct, typename TS>
bool lean_applies(const RecurrentParams& p, bool spec) {
  if (p.K != 128 || p.kv_layout || !p.state_vec || p.V % LeanTraits<TS>::kRows != 0) return false;
  if (!aligned16(p.src.q, p.src.q_rs, sizeof(TAct)) || !aligned16(p.src.k, p.src.k_rs, sizeof(TAct))) return false;
  for (const GroupMeta& g : p.group)
    if (g.n > 0 && (g.spec != spec || g.token_indx.ptr != nullptr || g.qsl.is64 || g.slots.is64 ||
                    (spec && (g.num_accepted.ptr == nullptr || g.num_accepted.is64))))
      return false;
  return true;
}

// One launch of the lean kernel: its verify or non-spec instance (spec), in the staged form (16-bit
// state) or with more resident blocks, as planned; forms: the gate-form instances.
template <typename TAct, typename TS, bool kForms>
Status launch_lean_as(const RecurrentParams& p, int64_t nseq, bool spec, plan::Path path, cudaStream_t stream) {
  if constexpr (sizeof(TS) == 2) {
    if (path == plan::Path::kLeanStaged) {
      const dim3 grid(static_cast<unsigned>(p.V / LeanTraits<TS, true>::kRows), static_cast<unsigned>(p.HV),
                      static_cast<unsigned>(nseq));
      return Launch(grid, 32, 0, stream)(spec ? recurrent_lean_kernel<TAct, TS, true, true, false, kForms>
                                              : recurrent_lean_kernel<TAct, TS, false, true, false, kForms>,
                                         p);
    }
  }
  const dim3 grid(static_cast<unsigned>(p.V / LeanTraits<TS>::kRows), static_cast<unsigned>(p.HV),
                  static_cast<unsigned>(nseq));
  const bool more = path == plan::Path::kLeanMore;
  return Launch(grid, 32, 0, stream)(spec ? (more ? recurrent_lean_kernel<TAct, TS, true, false, true, kForms>
                                                  : recurrent_lean_kernel<TAct, TS, true, false, false, kForms>)
                                          : (more ? recurrent_lean_kernel<TAct, TS, false, false, true, kForms>
                                                  : recurrent_lean_kernel<TAct, TS, false, false, false, kForms>),
                                     p);
}
template <typename TAct, typename TS>
Status launch_lean(const RecurrentParams& p, int64_t nseq, bool spec, plan::Path path, bool forms,
                   cudaStream_t stream) {
  return forms ? launch_lean_as<TAct, TS, true>(p, nseq, spec, path, stream)
               : launch_lean_as<TAct, TS, false>(p, nseq, spec, path, stream);
}

// The lean kernel's part of the planner's problem (spec: the batch's group kind).
template <typename TAct, typename TS>
void lean_problem(const RecurrentParams& p, int64_t nseq, bool spec, plan::Problem& pb) {
  pb.lean_ok = lean_applies<TAct, TS>(p, spec);
  if (!pb.lean_ok) return;
  pb.lean_blocks = int64_t{p.V / LeanTraits<TS>::kRows} * p.HV * nseq;
  if constexpr (sizeof(TS) == 2) pb.lean_staged_ok = p.V % LeanTraits<TS, true>::kRows == 0;
}
template <typename TS>
int lean_blocks_per_sm(bool spec) {
  return LeanTraits<TS>::min_blocks(spec, false);
}

}  // namespace gdn::cuda
