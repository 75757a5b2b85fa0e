// src/cuda/chunk/chunk_prep_layout.cuh — the shared memory of the split form's prep kernel
// (chunk_split.cuh): one chunk, the key side only (no value columns: the chunk kernel's solvers
// solve U), no consumer tiles, and the chunk's results over its raw inputs once these are dead
// (kOverlay), so that 4 blocks fit per SM:
//   W over k, in place: in the W solve (prep_chunk) each producer warp owns its column tiles; for
//     block row b it reads k_b of its columns (ldmatrix into registers) before it writes W_b of the
//     same columns, and the rows of blocks m < b it reads are its own results. Nothing reads k
//     after the solve (store_records reads W, P, the floats, D_b diag(beta) and M).
//   P and L's blocks below the diagonal (compact, six 16 x 16 blocks as M) over q: every producer
//     warp reads q and k during the P/L pass, so prep_chunk holds the pass's results in registers
//     and stores them after the group's barrier; q is not read after that pass.
// The chunk kernel's producers keep Layout (chunk_smem.cuh): its consumers read the raw q and k.
#pragma once
#include "cuda/chunk/chunk_smem.cuh"

namespace gdn::cuda::chunk {

struct PrepLayout {
  static constexpr bool kOverlay = true;
  static constexpr int kVS = 0, kBufs = 1;          // no value columns
  static constexpr int kLdV = 8;
  static constexpr int kQ = 0;                      // [kC][kLdK] raw q
  static constexpr int kKr = kQ + kC * kLdK;        // [kC][kLdK] raw k
  static constexpr int kV = kKr, kU = kKr;          // (no v, no U)
  static constexpr int kW = kKr;                    // [kC][kLdK] W, over k
  static constexpr int kP = kQ;                     // [kC][kLdL] P = (q^ k^T o exp(G_i - G_j), j <= i), over q
  static constexpr int kLb = kP + kC * kLdL;        // [6][16][kLdB] L_bm (m < b), index b (b - 1) / 2 + m, over q
  static constexpr int kDk = kKr + kC * kLdK;       // [4][16][kLdB] D_b diag(beta exp(G) / |k|)
  static constexpr int kDv = kDk + 4 * 16 * kLdB;   // [4][16][kLdB] D_b diag(beta)
  static constexpr int kDn = kDv + 4 * 16 * kLdB;   // [4][16][kLdB] -D_b
  static constexpr int kM = kDn + 4 * 16 * kLdB;    // [6][16][kLdB] M_bm = -D_b L_bm, index b (b - 1) / 2 + m
  static constexpr int k16 = kM + 6 * 16 * kLdB;
  static constexpr int kLd = 0;                     // [4][16][17] diagonal blocks of L, float
  static constexpr int kVec = kLd + 4 * 16 * 17;    // [4][kC]: G (cumulative log decay), beta, scale / |q|, 1 / |k|
  static constexpr int kF = kVec + 4 * kC;
  // int64 after the floats (fused): [kC] the chunk tokens' global rows
  static constexpr size_t kRowsAt = static_cast<size_t>(k16) * 2 + static_cast<size_t>(kF) * 4;
  static constexpr size_t kBytes = kRowsAt + kC * sizeof(int64_t);
  static_assert(kLb + 6 * 16 * kLdB <= kKr, "P and L's blocks below the diagonal fit in q's tile");
  static_assert(k16 % 8 == 0 && kRowsAt % 8 == 0, "the float area starts 16-byte aligned, the rows 8-byte aligned");
};

}  // namespace gdn::cuda::chunk
