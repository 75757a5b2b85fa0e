// src/cuda/chunk/chunk_smem.cuh — the chunk kernel's shared memory, constants and small helpers.
#pragma once
#include "cuda/chunk/chunk.h"
#include "cuda/common/mma.cuh"
#include "cuda/common/rec_common.cuh"
#include "cuda/common/tma.cuh"

namespace gdn::cuda::chunk {

constexpr int kC = 64, kK = 128;
constexpr int kGroupThreads = 128, kThreads = 2 * kGroupThreads;  // producer warps 0-3, consumer warps 4-7
constexpr int kSplitThreads = 3 * kGroupThreads;                     // the split form: solver warps 8-11
// Consumer warps of a block of VS value columns: four, each 16 token rows and 32 rows of H over
// all the columns; eight where VS = 128 (warps 4-7 the columns 0-63, warps 8-11 the columns 64-127).
constexpr int cons_warps(int vs) { return vs > 64 ? 8 : 4; }
// A block's threads: the split form's instance has the solvers too.
constexpr int block_threads(bool split, int vs) { return split ? kSplitThreads : kGroupThreads + 32 * cons_warps(vs); }
constexpr int kLdK = kK + 8;  // row stride (elements) of the q, k and W tiles: conflict-free ldmatrix
constexpr int kLdL = kC + 8;  // of the 16-bit L and P
constexpr int kLdB = 16 + 8;  // of the 16 x 16 blocks D and M
// Named barriers: a buffer's inputs are ready (kFull + buf: producers, or the split form's solvers,
// and consumers) / consumed (kEmpty + buf: consumers and producers), up to three buffers; within the
// producer group, within the consumer group; the split form's loads of a buffer landed (kLanded +
// buf: producers and solvers). The 128-column form (no solvers): its staging consumers (warps 4-7)
// among themselves at kStage, and the two consumer warps of token rows 16 w at kPair + w.
constexpr int kFull = 1, kEmpty = 4, kProd = 7, kCons = 8, kLanded = 9, kStage = 9, kPair = 12;

// Shared memory of the chunk kernel whose producers compute (chunk_prep.cuh): 16-bit tiles (element
// offsets), then floats. kBufs: one buffer per chunk in flight (two; one in the small form, for
// devices of less shared memory, where producers and consumers take turns), and the consumers'
// tiles. The split form's: SplitLayout below; the prep kernel's: PrepLayout (chunk_prep_layout.cuh).
// The 128-column form (kWide) keeps its tiles in place to fit: U over v (the producers solve in
// place), delta over U and diag(exp(G_last - G) / |k|) delta over W (the consumers, once the rows
// they overwrite are read), so no tiles of delta.
template <int VS, int B = 2>
struct Layout {
  static constexpr int kVS = VS, kBufs = B;
  static constexpr bool kWide = VS > 64;
  static constexpr int kLdV = VS + 8;
  static constexpr int kQ = 0;                            // [kBufs][kC][kLdK] raw q
  static constexpr int kKr = kQ + kBufs * kC * kLdK;      // [kBufs][kC][kLdK] raw k
  static constexpr int kV = kKr + kBufs * kC * kLdK;      // [kBufs][kC][kLdV] raw v (the block's columns)
  static constexpr int kVEnd = kV + kBufs * kC * kLdV;
  static constexpr int kW = kVEnd;                        // [kBufs][kC][kLdK] W
  static constexpr int kU = kWide ? kV : kW + kBufs * kC * kLdK;  // [kBufs][kC][kLdV] U
  static constexpr int kP = kW + kBufs * kC * kLdK + (kWide ? 0 : kBufs * kC * kLdV);  // [kBufs][kC][kLdL] P = (q^ k^T o exp(G_i - G_j), j <= i)
  static constexpr int kDel = kP + kBufs * kC * kLdL;     // [kC][kLdV] delta (consumers; kWide: none)
  static constexpr int kDd = kDel + (kWide ? 0 : kC * kLdV);  // [kC][kLdV] diag(exp(G_last - G) / |k|) delta (consumers; kWide: none)
  static constexpr int kS = kDd + (kWide ? 0 : kC * kLdV);    // [kK][kLdV] H, 16-bit (consumers)
  static constexpr int kLb = kS + kK * kLdV;              // [kC][kLdL] L below the diagonal blocks, 16-bit (producers)
  static constexpr int kDk = kLb + kC * kLdL;             // [4][16][kLdB] D_b diag(beta exp(G) / |k|)
  static constexpr int kDv = kDk + 4 * 16 * kLdB;         // [4][16][kLdB] D_b diag(beta)
  static constexpr int kDn = kDv + 4 * 16 * kLdB;         // [4][16][kLdB] -D_b
  static constexpr int kM = kDn + 4 * 16 * kLdB;          // [6][16][kLdB] M_bm = -D_b L_bm, index b (b - 1) / 2 + m
  static constexpr int k16 = kM + 6 * 16 * kLdB;
  static constexpr int kLd = 0;                           // [4][16][17] diagonal blocks of L, float (producers)
  static constexpr int kVec = kLd + 4 * 16 * 17;          // [kBufs][4][kC]: G (cumulative log decay), beta, scale / |q|, 1 / |k|
  static constexpr int kF = kVec + kBufs * 4 * kC;
  // int64 after the floats (fused): [kBufs][kC] the chunk tokens' global rows
  static constexpr size_t kRowsAt = static_cast<size_t>(k16) * 2 + static_cast<size_t>(kF) * 4;
  static constexpr size_t kBarAt = kRowsAt + kBufs * kC * sizeof(int64_t);  // [kBufs] mbarriers (TMA)
  static constexpr size_t kBytes = kBarAt + kBufs * sizeof(uint64_t);
  static_assert(kBytes <= 232448, "fits the opt-in shared memory of sm_90");
  static_assert(k16 % 8 == 0 && kRowsAt % 8 == 0, "the float area starts 16-byte aligned, the rows 8-byte aligned");
  static_assert((kQ * 2) % 128 == 0 && (kKr * 2) % 128 == 0 && (kV * 2) % 128 == 0 && (kC * kLdK * 2) % 128 == 0 &&
                    (kC * kLdV * 2) % 128 == 0,
                "TMA destinations 128-byte aligned");
};

// The producers' forms' tensor maps (chunk_maps, chunk_launch.cuh): q and k as [rows][heads][K], v as
// [rows][value heads][V], boxes of 64 rows and (kLdK, resp. kLdV) columns; ok false: none (a form
// the launcher gives none, a device or layout TMA does not take), every chunk staged by cp.async.
struct ChunkMaps {
  CUtensorMap q, k, v;
  bool ok = false;
};

// The split form's (chunk_split.cuh): three buffers (two in the small form) of what the producers
// load (raw q and k, the records' W and P, and v's columns of the block, which the solvers turn into
// U in place) and the consumers' tiles; the producers compute nothing, so no tiles of theirs. Same
// member names as Layout for the code both forms share.
template <int VS, int B = 3>
struct SplitLayout {
  static constexpr int kVS = VS, kBufs = B;
  static constexpr bool kWide = false;
  static constexpr int kLdV = VS + 8;
  static constexpr int kQ = 0;                            // [kBufs][kC][kLdK] raw q
  static constexpr int kKr = kQ + kBufs * kC * kLdK;      // [kBufs][kC][kLdK] raw k
  static constexpr int kW = kKr + kBufs * kC * kLdK;      // [kBufs][kC][kLdK] W
  static constexpr int kU = kW + kBufs * kC * kLdK;       // [kBufs][kC][kLdV] v as loaded, then U
  static constexpr int kP = kU + kBufs * kC * kLdV;       // [kBufs][kC][kLdL] P
  static constexpr int kDel = kP + kBufs * kC * kLdL;     // [kC][kLdV] delta
  static constexpr int kDd = kDel + kC * kLdV;            // [kC][kLdV] diag(exp(G_last - G) / |k|) delta
  static constexpr int kS = kDd + kC * kLdV;              // [kK][kLdV] H, 16-bit
  static constexpr int k16 = kS + kK * kLdV;
  static constexpr int kVec = 0;                          // [kBufs][4][kC]: G, beta, scale / |q|, 1 / |k|
  static constexpr int kRecF = kVec + kBufs * 4 * kC;     // [kBufs][kC][4] the records' floats, as loaded
  static constexpr int kF = kRecF + kBufs * kC * 4;
  static constexpr size_t kRowsAt = static_cast<size_t>(k16) * 2 + static_cast<size_t>(kF) * 4;
  static constexpr size_t kBytes = kRowsAt + kBufs * kC * sizeof(int64_t);
  static_assert(kBytes <= 232448, "fits the opt-in shared memory of sm_90");
  static_assert(k16 % 8 == 0 && kRowsAt % 8 == 0, "the float area starts 16-byte aligned, the rows 8-byte aligned");
};

// Where a block's inputs are: q and k of its key head, v of its value columns (local token t:
// base + t * rs), a and b of its value head (element r * rs + off at row r). Primitive op: the
// q/k/v/a/b tensors; fused: q, k, v in the conv's buffer (src.q, [local tokens, D] in the conv
// channel order, conv_rows.cu), a and b in the projections' columns (global rows).
template <typename TAct>
struct ChunkSrc {
  const TAct *q, *k, *v;
  int64_t q_rs, k_rs, v_rs;
  const void *a, *b;
  int64_t a_rs, b_rs, a_off, b_off;
};
// (Host too: chunk_maps takes its tensors' bases from it.)
template <typename TAct>
__host__ __device__ __forceinline__ ChunkSrc<TAct> chunk_src(const ChunkParams& p, int h, int hv, int v0) {
  ChunkSrc<TAct> s;
  if (p.fused) {
    const rules::ProjLayout& L = p.src.proj;
    const TAct* x = static_cast<const TAct*>(p.src.q);
    s.q = x + static_cast<int64_t>(h) * p.K;
    s.k = x + (L.H + h) * p.K;
    s.v = x + 2 * L.H * p.K + static_cast<int64_t>(hv) * p.V + v0;
    s.q_rs = s.k_rs = s.v_rs = p.src.q_rs;
    s.a = s.b = p.src.ba;
    s.a_rs = s.b_rs = p.src.ba_rs;
    s.a_off = L.a_col(hv);
    s.b_off = L.b_col(hv);
  } else {
    s.q = static_cast<const TAct*>(p.src.q) + static_cast<int64_t>(h) * p.K;
    s.k = static_cast<const TAct*>(p.src.k) + static_cast<int64_t>(h) * p.K;
    s.v = static_cast<const TAct*>(p.src.v) + static_cast<int64_t>(hv) * p.V + v0;
    s.q_rs = p.src.q_rs;
    s.k_rs = p.src.k_rs;
    s.v_rs = p.src.v_rs;
    s.a = p.src.a;
    s.b = p.src.b;
    s.a_rs = p.src.a_rs;
    s.b_rs = p.src.b_rs;
    s.a_off = s.b_off = hv;
  }
  return s;
}

// The row of group 0's local token j (fused: through token_indx).
__device__ __forceinline__ int64_t token_row(const ChunkParams& p, int64_t j) {
  return p.fused && p.group[0].token_indx.present() ? p.group[0].token_indx(j) : j;
}

// The per-chunk vectors of buffer buf.
struct ChunkVecs {
  float *G, *beta, *nq, *nk;
};
__device__ __forceinline__ ChunkVecs chunk_vecs(float* vec, int buf) {
  float* b = vec + buf * 4 * kC;
  return ChunkVecs{b, b + kC, b + 2 * kC, b + 3 * kC};
}

template <typename T>
__device__ __forceinline__ void st2(T* dst, float lo, float hi) {
  *reinterpret_cast<uint32_t*>(dst) = mma::pack2<T>(lo, hi);
}

}  // namespace gdn::cuda::chunk
