// src/cuda/packed/recurrent_packed.cuh — the plain recurrence for 16-bit state ("vk", dense rows, K = 128)
// in large decode batches.
//   grid  = (ceil(V / kRows), HV, sequences of both groups), block = PackedTraits warps
// recurrent_kernel converts every state element to float32 on load, so a register holds 2 bytes of
// state. Here a sequence of one token keeps its rows as loaded, two 16-bit elements per register,
// and recomputes exp(g) S from them in both passes of the token (recur_token's float operations,
// in its order): 12 rows per warp instead of 8 in the same registers. A longer sequence converts
// the rows in two halves and runs recur_token on each half in turn (float32 rows across tokens,
// docs/contract.md §6). The planner takes it where no verify group has more than one column: verify
// batches measured faster in recurrent_kernel.
#pragma once
#include "cuda/common/rec_common.cuh"

namespace gdn::cuda {

constexpr int kRecWarpsP = 1;
constexpr int kRecRowsP = 6;
constexpr int kRecMbP = 32;
// Rows per lane group: 6 measured best for decode (8 spills).

struct PackedTraits {
  static constexpr int kWarps = kRecWarpsP;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kLanes = 16, kGroups = 32 / kLanes;
  static constexpr int kRowsPerLane = kRecRowsP;
  static constexpr int kRowsPerWarp = kRowsPerLane * kGroups;
  static constexpr int kRows = kWarps * kRowsPerWarp;
  static constexpr int kMinBlocks = kRecMbP;
  static_assert(kRowsPerLane % 2 == 0 && kRowsPerLane <= kLanes, "rows split in two halves; lane j stores row j");
};

// Two 16-bit state elements in one 32-bit word (element 2j in the low half, as in memory).
template <typename T>
struct Pair2;
template <>
struct Pair2<__nv_bfloat16> {
  static __device__ __forceinline__ float2 unpack(uint32_t w) {  // exact: bf16 is float32's top half
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
  }
  static __device__ __forceinline__ uint32_t pack(float x, float y) {
    return static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(x))) |
           (static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(y))) << 16);
  }
};
template <>
struct Pair2<__half> {
  static __device__ __forceinline__ float2 unpack(uint32_t w) {
    return make_float2(__half2float(__ushort_as_half(static_cast<unsigned short>(w & 0xffffu))),
                       __half2float(__ushort_as_half(static_cast<unsigned short>(w >> 16))));
  }
  static __device__ __forceinline__ uint32_t pack(float x, float y) {
    return static_cast<uint32_t>(__half_as_ushort(__float2half_rn(x))) |
           (static_cast<uint32_t>(__half_as_ushort(__float2half_rn(y))) << 16);
  }
};

// A lane's EPL elements of row vi (dense "vk" rows, K == KP), as NW = EPL / 2 words.
template <typename TState, int KP, int NW, bool kStore>
__device__ __forceinline__ void move_words(const RecurrentParams& p, int64_t slot, int hv, int vi, int ln,
                                           uint32_t (&w)[NW]) {
  TState* base = static_cast<TState*>(p.state) + slot * p.state_slot_stride + static_cast<int64_t>(hv) * p.V * KP +
                 dense_elem<KP>(vi, ln * (2 * NW));
  if constexpr (NW % 4 == 0) {
    uint4* v = reinterpret_cast<uint4*>(base);
#pragma unroll
    for (int c = 0; c < NW / 4; ++c) {
      if constexpr (kStore) {
        st_state(v + c, make_uint4(w[4 * c], w[4 * c + 1], w[4 * c + 2], w[4 * c + 3]));
      } else {
        const uint4 u = ld_state(v + c);
        w[4 * c] = u.x, w[4 * c + 1] = u.y, w[4 * c + 2] = u.z, w[4 * c + 3] = u.w;
      }
    }
  } else if constexpr (NW == 2) {
    uint2* v = reinterpret_cast<uint2*>(base);
    if constexpr (kStore) st_state(v, make_uint2(w[0], w[1]));
    else {
      const uint2 u = ld_state(v);
      w[0] = u.x, w[1] = u.y;
    }
  } else {
    static_assert(NW == 1, "K = 32, 64, 128 or 256");
    unsigned int* v = reinterpret_cast<unsigned int*>(base);
    if constexpr (kStore) st_state(v, w[0]);
    else w[0] = ld_state(v);
  }
}

// One token on packed rows (recur_token's math; rows updated in place, rounded to TState).
template <typename TState, int L, int G, int R, int EPL>
__device__ __forceinline__ float recur_token_packed(uint32_t (&w)[R][EPL / 2], const float* sq, const float* sk,
                                                    const float* sv, int lrow0, int vlim, float a, float b, float A,
                                                    float dtb, float scale, int ln) {
  using P = Pair2<TState>;
  float kr[EPL], qr[EPL];
  const TokenGates tg = prep_token<L, EPL>(sq, sk, a, b, A, dtb, scale, ln, kr, qr);
  auto k2 = [&](int e) { return make_float2(kr[2 * e], kr[2 * e + 1]); };
  auto q2 = [&](int e) { return make_float2(qr[2 * e], qr[2 * e + 1]); };
  float dot[R], ov[R];
#pragma unroll
  for (int j = 0; j < R; ++j) {
    dot[j] = 0.f;
#pragma unroll
    for (int e = 0; e < EPL / 2; ++e) {
      const float2 f = P::unpack(w[j][e]), k = k2(e);
      dot[j] += (f.x * tg.decay) * k.x;
      dot[j] += (f.y * tg.decay) * k.y;
    }
  }
  rows_sum<L, R, false>(dot, ln);
#pragma unroll
  for (int j = 0; j < R; ++j) {
    const float d = tg.beta * ((j * G < vlim ? sv[lrow0 + j * G] : 0.f) - dot[j]);
    ov[j] = 0.f;
#pragma unroll
    for (int e = 0; e < EPL / 2; ++e) {
      const float2 f = P::unpack(w[j][e]), k = k2(e), q = q2(e);
      const float x = f.x * tg.decay + d * k.x, y = f.y * tg.decay + d * k.y;
      ov[j] += x * q.x;
      ov[j] += y * q.y;
      w[j][e] = P::pack(x, y);
    }
  }
  return pick_row<L, R>(ov, ln);
}

template <typename TAct, typename TState, int KP>
__global__ void __launch_bounds__(PackedTraits::kThreads, PackedTraits::kMinBlocks)
    recurrent_packed_kernel(const __grid_constant__ RecurrentParams p) {
  using Tr = PackedTraits;
  constexpr int L = Tr::kLanes, G = Tr::kGroups, R = Tr::kRowsPerLane, EPL = KP / L, NW = EPL / 2, RH = R / 2;
  constexpr int kRows = Tr::kRows, kThreads = Tr::kThreads;
  static_assert(EPL % 2 == 0, "whole 32-bit words per lane");
  __shared__ TokenStage<KP, kRows, kRecTb> s_stage;  // s_stage.x[0]: the one-token path's inputs
  __shared__ uint32_t s_gw[4];                            // its gate words (load_tokens)
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, ln = lane % L;
  const int hv = blockIdx.y, h = hv / p.r;
  const int lrow0 = warp * Tr::kRowsPerWarp + lane / L;
  const int row0 = blockIdx.x * kRows + lrow0;
  const SeqRef sq = seq_ref(p, blockIdx.z);
  const GroupMeta& g = p.group[sq.gi];
  const int64_t i = sq.i;
  const SeqInfo si = start_seq(p, g, i, false);  // pdl_start() here
  const auto tr = si.tr;
  if (tr.len == 0) return;
  const bool load = !si.pad && si.init;

  if (tr.len == 1) {  // block-uniform
    uint32_t w[R][NW];
#pragma unroll
    for (int j = 0; j < R; ++j) {
#pragma unroll
      for (int e = 0; e < NW; ++e) w[j][e] = 0u;
      if (load && row0 + j * G < p.V) move_words<TState, KP, NW, false>(p, si.read_slot, hv, row0 + j * G, ln, w[j]);
    }
    const int64_t row = global_row(g, tr.begin, g.limit);
    // The token's inputs and the gate words requested beside the rows (rec_tokens.cuh; one round
    // trip instead of A_log, dt_bias, then the inputs).
    const auto tok =
        load_tokens<TAct, KP, kRows, kThreads, kRecTb>(p, g, tr, 0, 1, h, hv, blockIdx.x * kRows, tid, true);
    if (si.pad) {
      zero_outputs<TAct, R, G>(p, g, tr, g.limit, hv, row0, ln);
      return;
    }
    store_tokens<TAct, KP, kRows, kThreads, kRecTb>(tok, 1, tid, s_stage, s_gw);
    __syncthreads();
    float A, dtb;
    staged_gates(p, s_gw, A, dtb);
    const float mine = recur_token_packed<TState, L, G, R, EPL>(w, s_stage.q[0], s_stage.k[0], s_stage.v[0], lrow0,
                                                                p.V - row0, s_stage.ab[0][0], s_stage.ab[0][1], A, dtb,
                                                                p.scale, ln);
    if (ln < R && row0 + ln * G < p.V)
      static_cast<TAct*>(p.o)[row * p.o_rs + static_cast<int64_t>(hv) * p.V + row0 + ln * G] = from_float<TAct>(mine);
    // Non-spec: the sequence's slot; verify: column 0's slot, which is slot0 (valid: not padding).
#pragma unroll
    for (int j = 0; j < R; ++j)
      if (row0 + j * G < p.V) move_words<TState, KP, NW, true>(p, si.slot0, hv, row0 + j * G, ln, w[j]);
    return;
  }

  if (si.pad) {
    zero_outputs<TAct, R, G>(p, g, tr, g.limit, hv, row0, ln);
    return;
  }
  const float A = -expf(p.A_log(hv)), dtb = p.dt_bias(hv);
  // Two halves of RH rows each, in float32 across the tokens (each half's rows are read and
  // written by this lane group only, so the halves cannot disturb each other).
#pragma unroll 1
  for (int hf = 0; hf < 2; ++hf) {
    const int r0 = row0 + hf * RH * G, l0 = lrow0 + hf * RH * G;
    float s[RH][EPL];
#pragma unroll
    for (int j = 0; j < RH; ++j) {
#pragma unroll
      for (int e = 0; e < EPL; ++e) s[j][e] = 0.f;
      if (load && r0 + j * G < p.V) load_row<TState, KP, EPL, true>(p, si.read_slot, hv, r0 + j * G, ln, s[j]);
    }
    run_tokens<TAct, TState, KP, kRows, kThreads, L, G, RH, EPL, true, kRecTb>(p, g, i, tr, s, r0, l0, h, hv, A,
                                                                                   dtb, tid, ln, s_stage);
    if (!g.spec)
#pragma unroll
      for (int j = 0; j < RH; ++j)
        if (r0 + j * G < p.V) store_row<TState, KP, EPL, true>(p, si.slot0, hv, r0 + j * G, ln, s[j]);
  }
}

}  // namespace gdn::cuda
