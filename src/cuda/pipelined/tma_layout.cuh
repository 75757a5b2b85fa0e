// src/cuda/pipelined/tma_layout.cuh — what the pipelined sm_90 kernels (recurrent_tma.cuh) and their host
// side (tma_launch.cuh) share: tuning knobs, the shared-memory layout of a stage and of the fused
// step's group buffers, the metadata the producer hands to a consumer, and the consumers' chunked
// row loads and stores.
#pragma once
#include "cuda/conv/group_conv.cuh"
#include "cuda/common/rec_common.cuh"

namespace gdn::cuda {

constexpr int kTmaConsumers = 7;  // with the producer, 8 warps (fused: 7 - conv warps + producer + conv warps): 128 registers at 2 blocks per SM
constexpr int kTmaSmemKb = 108;  // dynamic shared memory per block: the stages and their barriers
// The same for the fused step (group buffers + stages): a shallower ring than the primitive op's
// measured 3-6% faster.
constexpr int kTmaSmemKbFused = 80;
constexpr int kTmaMb = 2;  // resident blocks per SM the register budget must allow
// Where the planner takes these kernels (plan/tuning.h, pipelined_* and step_pipelined_*): smaller
// batches (sequences x value heads) keep the latency-bound kernels. H200:
// float32 state gains from 128 on; 16-bit state lost at 128 and 192 (6.8 vs 7.8 µs, 8.0 vs 8.9) and
// gained at 512 (17.1 vs 15.4).
// Float32 verify batches (2 or more tokens per sequence on average) from 512 up to (not including)
// 4096 sequence-heads stay on the register kernel, which measured 1.6-5% faster there.
// gdn_attention's step: from how many (sequence, key head) groups the pipelined step runs instead of
// the cluster kernel (fused_step.cuh). H200 (both forced at
// 64-128 groups and 256): one-token batches from 96 groups (float32 -6 to -16%, 16-bit -4 to -37%;
// at 80: +1 to +32% for float32, 16-bit +4 to +5% but -26% for Qwen3.6-27B's 12-block clusters);
// 16-bit verify batches from 128 (-5 to -15%; at 112: -3% to +25%); float32 verify batches from 192
// (-11 to -14% at 192 and 224; at 160: +12 to +14% for the Qwen3-Next shapes, -14% for Qwen3.6-27B).
// Verify tokens' states of float32 state leave through a bulk store of the stage's tile (instead of
// the lanes' stores; H200: float32 verify T = 4 N = 256 -4%; for the final state float32 decode
// measured +2%, 16-bit state slower in every case).
template <typename TS>
constexpr bool kTmaBulkTok = sizeof(TS) == 4;
constexpr int kTmaGroupBufs = 4;  // fused: group buffers in the ring
constexpr int kTmaConvWarps = 1;  // fused: conv warps per block (the consumers are kTmaConsumers minus these)
constexpr int kTmaPassesF32 = 1;  // passes of 8 rows per item: item rows = 8 x passes
constexpr int kTmaPasses16 = 2;
// Rows per lane of a pass in the primitive op's multi-token (verify) items, 16-bit and float32
// state (else 4): 8 holds a 16-bit item's 16 rows in one pass, twice the independent work per
// token. H200: 16-bit verify T = 3 and 4 -3 to -10%; decode (+35%)
// and the fused step's decode (+2 to +4%) were slower with it, so they keep 4; float32 verify at 8:
// -1.6% at N = 64, +0.5 to +1.5% at N = 256 (kept at 4).
constexpr int kTmaRplVerify16 = 8;
constexpr int kTmaRplVerifyF32 = 4;

// A lane's EPL elements of a K-row in NC = EPL / CH chunks of CH contiguous elements: chunk c holds
// elements c L CH + ln CH + [0, CH). With CH elements = one 16-byte vector of state, one instruction
// of a lane group moves 16 L contiguous bytes (whole 32-byte sectors; the plain ln EPL mapping
// leaves each float32 store instruction half of every sector).
template <int L, int CH, typename T, int EPL>
__device__ __forceinline__ void load_chunks(const T* row, int ln, float (&out)[EPL]) {
  constexpr int kBytes = CH * static_cast<int>(sizeof(T)), kVecB = kBytes < 16 ? kBytes : 16;
  constexpr int kPer = kVecB / static_cast<int>(sizeof(T));
  using Vec = typename VecOf<kVecB>::type;
#pragma unroll
  for (int c = 0; c < EPL / CH; ++c)
#pragma unroll
    for (int u = 0; u < CH / kPer; ++u) {
      const Vec w = *reinterpret_cast<const Vec*>(row + c * L * CH + ln * CH + u * kPer);
      const T* e = reinterpret_cast<const T*>(&w);
#pragma unroll
      for (int j = 0; j < kPer; ++j) out[c * CH + u * kPer + j] = to_float(e[j]);
    }
}
// kShared: into shared memory (plain stores), else global memory with the state cache hints.
template <int L, int CH, typename T, int EPL, bool kShared = false>
__device__ __forceinline__ void store_chunks(T* row, int ln, const float (&in)[EPL]) {
  static_assert(CH * sizeof(T) == 16, "state chunks are 16-byte vectors");
#pragma unroll
  for (int c = 0; c < EPL / CH; ++c) {
    uint4 w;
    T* e = reinterpret_cast<T*>(&w);
#pragma unroll
    for (int j = 0; j < CH; ++j) e[j] = from_float<T>(in[c * CH + j]);
    uint4* dst = reinterpret_cast<uint4*>(row + c * L * CH + ln * CH);
    if constexpr (kShared) *dst = w;
    else st_state(dst, w);
  }
}

// Where token `row`'s inputs are for key head h and the value rows from v0 (= hv V + first row),
// and its gate inputs a, b (kForms: each in its own dtype, p.a_dtype and p.b_dtype; else in TAct).
template <typename TAct>
struct TokenSrc {
  const TAct *q, *k, *v;
  float a, b;
};
template <typename TAct, int KP, bool kForms = false>
__device__ __forceinline__ TokenSrc<TAct> token_src(const RecurrentParams& p, int64_t row, int h, int hv,
                                                    int64_t v0) {
  TokenSrc<TAct> x;
  // q_row / k_row's rule with the head stride KP (the pipelined kernels take dense K == KP only)
  x.q = static_cast<const TAct*>(p.src.q) + row * p.src.q_rs + static_cast<int64_t>(h) * KP;
  x.k = static_cast<const TAct*>(p.src.k) + row * p.src.k_rs + static_cast<int64_t>(h) * KP;
  x.v = static_cast<const TAct*>(p.src.v) + row * p.src.v_rs + v0;
  if constexpr (kForms) {
    x.a = raw_float(gate_word(p, row, hv, 0), p.a_dtype);
    x.b = raw_float(gate_word(p, row, hv, 1), p.b_dtype);
  } else {
    x.a = to_float(gate_elem<TAct>(p, row, hv, 0));
    x.b = to_float(gate_elem<TAct>(p, row, hv, 1));
  }
  return x;
}

// What the producer resolved for an item, read by its consumer from the stage.
enum : int { kTmaSkip = 1, kTmaPad = 2, kTmaInit = 4 };
template <int kTok>
struct TmaMeta {
  int64_t begin, len;
  int64_t slot0;            // column 0's slot; fused per-token verify: the conv window's (column a - 1's)
  int64_t row[kTok];       // global rows of the staged tokens
  int64_t col_slot[kTok];  // verify: the slot that receives the state after token t (-1: none)
  float a[kTok], b[kTok];
  float A, dtb;            // -exp(A_log), dt_bias of the value head
  int flags, gi, i, hv, x;  // group, sequence in it, value head, row tile
  int base;                 // fused: first conv window row (rolling verify: a - 1, else 0)
};

constexpr int round_up(int x, int m) { return (x + m - 1) / m * m; }

// Fused: a group buffer's token row is [q | k | v of the key head's r value heads], r V at most
// kTmaMaxRV (checked on the host).
constexpr int kTmaMaxRV = 512;
constexpr int tma_group_row(int KP) { return 2 * KP + kTmaMaxRV; }
// Fused: token row tt of group buffer `slot` in the ring (kTok token rows each; TmaLayout::
// kGroupElems): the one address rule of its writers (the conv warp, the prologue) and its readers
// (the consumers).
template <int KP, int kTok, typename T>
__device__ __forceinline__ T* tma_group_buf(T* gbuf, int slot, int tt = 0) {
  return gbuf + (slot * (kTok * tma_group_row(KP)) + tt * tma_group_row(KP));
}

template <typename TAct, typename TS, int KP, int kTok, bool kFused = false>
struct TmaLayout {
  static constexpr bool kVerifyRows = kTok > 1 && !kFused;  // kTmaRplVerify*
  static constexpr int kLanes = 16, kGroups = 2, EPL = KP / kLanes;
  static constexpr int kRowsPerLane =
      !kVerifyRows ? 4 : sizeof(TS) == 4 ? kTmaRplVerifyF32 : kTmaRplVerify16;
  static constexpr int kChunk = 16 / static_cast<int>(sizeof(TS));  // elements per 16-byte state vector
  static_assert(EPL % kChunk == 0, "whole state vectors per lane");
  static_assert(kRowsPerLane == 4 || kRowsPerLane == 8, "rows per lane: 4 or 8");
  static constexpr int kPassRows = kGroups * kRowsPerLane;  // rows a consumer warp holds at once
  // 16-bit items: 16 rows (2 passes of 4 rows per lane, or 1 of 8)
  static constexpr int kPasses = sizeof(TS) == 4 ? kTmaPassesF32 : kTmaPasses16 * 4 / kRowsPerLane;
  static constexpr int kItemRows = kPassRows * kPasses;
  // warps: consumers, the producer, and (fused) the conv warps
  static constexpr int kConvWarps = kFused ? kTmaConvWarps : 0;
  static constexpr int kConsumers = kTmaConsumers - kConvWarps;
  static constexpr int kThreads = (kConsumers + 1 + kConvWarps) * 32;
  static constexpr int kTile = kItemRows * KP * static_cast<int>(sizeof(TS));
  static constexpr int kQK = KP * static_cast<int>(sizeof(TAct));
  static constexpr int kV = kItemRows * static_cast<int>(sizeof(TAct));
  static constexpr int kStaged = kFused ? 0 : kTok;  // tokens whose q, k, v the stage holds
  static constexpr int kOffQ = kTile, kOffK = kOffQ + kStaged * kQK, kOffV = kOffK + kStaged * kQK;
  static constexpr int kOffMeta = kOffV + kStaged * kV;
  static constexpr int kStage = round_up(kOffMeta + static_cast<int>(sizeof(TmaMeta<kTok>)), 128);
  static constexpr int kMaxStages = 64;
  // fused: group buffers (conv outputs [q | k | v] of kTok tokens, activation dtype)
  static constexpr int kGroupRow = tma_group_row(KP);
  static constexpr int kGroupBufs = kFused ? kTmaGroupBufs : 0, kGroupElems = kTok * kGroupRow;
  // barriers: full and empty per stage, gdone and gready per group buffer
  static constexpr int kBarBytes = round_up((2 * kMaxStages + 2 * kGroupBufs) * 8, 16);
  static constexpr int kHead =  // bytes before the stages
      kBarBytes + round_up(kGroupBufs * kGroupElems * static_cast<int>(sizeof(TAct)), 16);
  static_assert(kTile % 16 == 0 && kQK % 16 == 0 && kV % 16 == 0, "bulk copies move whole 16-byte units");
};

struct TmaGrid {
  int tiles, stages;
  int group_items;  // fused: items of one (sequence, key head) group (r x tiles)
  int conv_w4 = 0;  // fused: the conv is 4 wide with [D, 4] 16-byte aligned weights, bias aligned or absent
  int pre = 0;      // fused: at most this many of the block's first groups convolved before the copies start
  int early = 0;    // fused prologue: items the producer issues before waiting for it (stages below the last)
  int zc = 0;       // fused: z copied by the conv warp after its groups (else by the consumers first)
};

}  // namespace gdn::cuda
