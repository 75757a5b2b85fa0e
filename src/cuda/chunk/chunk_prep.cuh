// src/cuda/chunk/chunk_prep.cuh — the chunk kernel's staging of a chunk's inputs (by the consumers)
// and its producer group (warps 0-3): everything of a chunk that does not depend on the state. For
// the chunk's n tokens into buffer buf: the raw q, k, v (cp.async), the gates and norms, P and L
// (q k^T and k k^T with decays and scalings), the diagonal blocks D_b = (I + L_bb)^-1 and
// M_bm = -D_b L_bm, and [W | U] by block forward substitution (chunk.cuh says the math).
#pragma once
#include <type_traits>

#include "cuda/chunk/chunk_smem.cuh"

namespace gdn::cuda::chunk {

// Whether layout L puts the chunk's results over its raw inputs (L::kOverlay, chunk_prep_layout.cuh):
// then prep_chunk holds the P/L pass's results in registers until every warp has read q and k, and
// stores L's blocks below the diagonal compactly (as M).
template <typename L, typename = void>
struct Overlaid : std::false_type {};
template <typename L>
struct Overlaid<L, std::void_t<decltype(L::kOverlay)>> : std::bool_constant<L::kOverlay> {};

// Fused: the global rows of buffer buf's chunk tokens, as staged (a, b and the outputs).
__device__ __forceinline__ int64_t* chunk_rows(unsigned char* smem, size_t rows_at, int buf) {
  return reinterpret_cast<int64_t*>(smem + rows_at) + buf * kC;
}

// cp.async of a chunk tile's n rows (zeros past n) of kPieces 16-byte pieces each, from src (row t
// at src + t * rs bytes) to dst (row stride ld elements), by the 128 threads gt of one group: thread
// gt copies piece gt % kPieces of rows gt / kPieces + i * (128 / kPieces), so that its addresses are
// one base and constant steps.
template <int kPieces, typename TAct>
__device__ __forceinline__ void copy_rows(TAct* dst, int ld, const char* src, int64_t rs, int n, int gt) {
  static_assert((kPieces & (kPieces - 1)) == 0 && kPieces <= kGroupThreads, "power-of-two index math");
  constexpr int kRows = kGroupThreads / kPieces;  // rows per pass
  const int t0 = gt / kPieces, s = gt % kPieces;
  const char* from = src + t0 * rs + 16 * s;
  dst += t0 * ld + 8 * s;
#pragma unroll
  for (int i = 0; i < kC / kRows; ++i) {
    const bool ok = t0 + i * kRows < n;
    mma::cp_async16(dst + i * kRows * ld, ok ? from + i * kRows * rs : src, ok);
  }
}

// cp.async of the chunk's n rows of q and k (local tokens lt0..; zeros past n) into buffer buf's raw
// q and k tiles, by the 128 threads gt of one group (stage_chunk; the split form's issue_chunk).
template <typename TAct, typename L>
__device__ __forceinline__ void stage_qk(const ChunkSrc<TAct>& src, TAct* s16, int buf, int64_t lt0, int n, int gt) {
  copy_rows<kK / 8>(s16 + L::kQ + buf * kC * kLdK, kLdK, reinterpret_cast<const char*>(src.q + lt0 * src.q_rs),
                    src.q_rs * static_cast<int64_t>(sizeof(TAct)), n, gt);
  copy_rows<kK / 8>(s16 + L::kKr + buf * kC * kLdK, kLdK, reinterpret_cast<const char*>(src.k + lt0 * src.k_rs),
                    src.k_rs * static_cast<int64_t>(sizeof(TAct)), n, gt);
}

// The inputs of the chunk's n tokens (local tokens lt0..) into buffer buf, by the 128 threads gt of
// one group (barrier `bar`): q, k, v (cp.async, zeros past n; qkv false: not these, the caller has
// issued their TMA copies) and the gate inputs a, b (as floats in the buffer's G and beta, which
// prep_chunk turns into the gates); fused, first the tokens' global rows (where a and b are read and
// the outputs written). Ends with the group's barrier.
template <typename TAct, typename L>
__device__ __forceinline__ void stage_chunk(const ChunkParams& p, const ChunkSrc<TAct>& src, unsigned char* smem,
                                            int buf, int64_t lt0, int n, int gt, int bar, bool qkv = true) {
  constexpr int VS = L::kVS;
  TAct* s16 = reinterpret_cast<TAct*>(smem);
  int64_t* crow = chunk_rows(smem, L::kRowsAt, buf);
  if (p.fused) {
    if (gt < kC) crow[gt] = gt < n ? token_row(p, lt0 + gt) : 0;
    mma::bar_sync(bar, kGroupThreads);
  }
  if (qkv) {
    stage_qk<TAct, L>(src, s16, buf, lt0, n, gt);
    if constexpr (VS > 0)  // (the prep kernel's layout has no value columns)
      copy_rows<VS / 8>(s16 + L::kV + buf * kC * L::kLdV, L::kLdV, reinterpret_cast<const char*>(src.v + lt0 * src.v_rs),
                        src.v_rs * static_cast<int64_t>(sizeof(TAct)), n, gt);
    mma::cp_async_commit();
  }
  uint32_t ra = 0u, rb = 0u;
  if (gt < kC) {
    const int64_t r = p.fused ? crow[gt] : lt0 + (gt < n ? gt : 0);
    ra = load_raw(src.a, p.a_dtype, r * src.a_rs + src.a_off, gt < n);
    rb = load_raw(src.b, p.b_dtype, r * src.b_rs + src.b_off, gt < n);
  }
  mma::cp_async_wait_all();
  if (gt < kC) {
    const ChunkVecs cvv = chunk_vecs(reinterpret_cast<float*>(smem + static_cast<size_t>(L::k16) * 2) + L::kVec, buf);
    cvv.G[gt] = raw_float(ra, p.a_dtype);
    cvv.beta[gt] = raw_float(rb, p.b_dtype);
  }
  mma::bar_sync(bar, kGroupThreads);
}

// The (row block, column block) tiles of P and L each producer warp computes: 10 tiles. The chunk
// kernel's producers: 3/3/2/2 tiles, each on its own (code 4 b + m; -1: none). The prep kernel
// (overlaid layouts): 3/3/2/2 tiles as runs of column blocks in one row block, whose tiles share
// their q and k fragments (run r of warp w: {row block b, first column block m, tiles n}, the column
// blocks m .. m + n - 1; n 0: none). Runs beside the chunk kernel's consumers lengthen their chain.
__constant__ const int8_t kTiles[4][3] = {{12, 13, 0}, {14, 15, 5}, {8, 9, -1}, {10, 4, -1}};
constexpr int kPrepRun = 3;  // tiles a run, at most
__constant__ const int8_t kRuns[4][2][3] = {{{3, 0, 3}, {0, 0, 0}}, {{2, 0, 3}, {0, 0, 0}}, {{3, 3, 1}, {0, 0, 1}},
                                            {{1, 0, 2}, {0, 0, 0}}};

// What the chunk in buffer buf needs beside the state, from its staged inputs: the gates, norms, P,
// L, T's diagonal blocks and [W | U].
template <typename TAct, typename L>
__device__ __forceinline__ void prep_chunk(const ChunkParams& p, unsigned char* smem, int buf, int n, float A,
                                           float dtb, int w, int lane, int tid) {
  constexpr int kLdV = L::kLdV, kNV = L::kVS / 8;
  constexpr int kNT = kK / 8 + kNV, kNTW = kNT / 4;  // column tiles of [W | U], per warp
  static_assert(kNT % 4 == 0, "the column tiles split evenly over the 4 producer warps");
  TAct* s16 = reinterpret_cast<TAct*>(smem);
  float* sf = reinterpret_cast<float*>(smem + static_cast<size_t>(L::k16) * 2);
  const TAct* cq = s16 + L::kQ + buf * kC * kLdK;
  const TAct* ck = s16 + L::kKr + buf * kC * kLdK;
  const TAct* cv = s16 + L::kV + buf * kC * kLdV;
  TAct* sW = s16 + L::kW + buf * kC * kLdK;
  TAct* sU = s16 + L::kU + buf * kC * kLdV;
  TAct* sP = s16 + L::kP + buf * kC * kLdL;
  TAct *sLb = s16 + L::kLb, *sDk = s16 + L::kDk, *sDv = s16 + L::kDv, *sDn = s16 + L::kDn, *sM = s16 + L::kM;
  float* sLd = sf + L::kLd;
  const ChunkVecs cvv = chunk_vecs(sf + L::kVec, buf);
  const int gq = lane >> 2, cq2 = 2 * (lane & 3);

  // Gates (warp 0: an inclusive scan of the log decays) and norms (thread t: q row t, or k row t - 64).
  if (w == 0) {
    float g[2], b[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const bool ok = 2 * lane + j < n;
      GateValues gv{0.f, 0.f};
      if (ok) gv = gate_values(p.gates, cvv.G[2 * lane + j], cvv.beta[2 * lane + j], A, dtb);
      g[j] = rules::chunk_log_decay(gv.g);  // -inf stays out of the sums (NaN in G_i - G_j)
      b[j] = gv.beta;
    }
    float incl = g[0] + g[1];
#pragma unroll
    for (int m = 1; m < 32; m <<= 1) {
      const float t = __shfl_up_sync(0xffffffffu, incl, m);
      if (lane >= m) incl += t;
    }
    float excl = __shfl_up_sync(0xffffffffu, incl, 1);
    if (lane == 0) excl = 0.f;
    // rows past n: the last token's value itself (the scan's sums over their zeros round
    // differently), as the split form's records give them (finish_chunk)
    const float last = __shfl_sync(0xffffffffu, ((n - 1) & 1) ? incl : excl + g[0], (n - 1) >> 1);
    cvv.G[2 * lane] = 2 * lane < n ? excl + g[0] : last;
    cvv.G[2 * lane + 1] = 2 * lane + 1 < n ? incl : last;
    cvv.beta[2 * lane] = b[0];
    cvv.beta[2 * lane + 1] = b[1];
  }
  {
    const TAct* src = tid < kC ? cq + tid * kLdK : ck + (tid - kC) * kLdK;
    float ss[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int s = 0; s < kK / 8; ++s) {
      const uint4 u = *reinterpret_cast<const uint4*>(src + s * 8);
      const TAct* e = reinterpret_cast<const TAct*>(&u);
#pragma unroll
      for (int j = 0; j < 8; ++j) ss[j & 3] += to_float(e[j]) * to_float(e[j]);
    }
    const float sum = (ss[0] + ss[1]) + (ss[2] + ss[3]);
    if (tid < kC) cvv.nq[tid] = p.gates.l2norm ? p.scale / sqrtf(sum + 1e-6f) : p.scale;
    else cvv.nk[tid - kC] = p.gates.l2norm ? 1.f / sqrtf(sum + 1e-6f) : 1.f;
  }
  mma::bar_sync(kProd, kGroupThreads);

  // P and L tiles (16 x 16, column block m <= row block b) of this warp. Overlaid, P and L's blocks
  // below the diagonal (over q) wait in registers (16-bit pairs, index 2 r + half) for the barrier.
  constexpr bool kOver = Overlaid<L>::value;
  constexpr int kRun = kOver ? kPrepRun : 1, kNRun = kOver ? 2 : 3;  // tiles a run, runs a warp
  uint32_t hp[kNRun][kRun][4], hl[kNRun][kRun][4];                  // (run, tile of the run)
  // Run `run` of this warp: row block b, column blocks m0 .. m0 + nt - 1 (nt 0: none).
  auto run_at = [&](int run, int& b, int& m0, int& nt) {
    if constexpr (kOver) {
      b = kRuns[w][run][0], m0 = kRuns[w][run][1], nt = kRuns[w][run][2];
    } else {
      const int code = kTiles[w][run];
      b = code >> 2, m0 = code & 3, nt = code < 0 ? 0 : 1;
    }
  };
#pragma unroll
  for (int run = 0; run < kNRun; ++run) {
    int b, m0, nt;
    run_at(run, b, m0, nt);
    if (nt == 0) break;
    float accP[kRun][2][4] = {}, accL[kRun][2][4] = {};
#pragma unroll
    for (int kt = 0; kt < kK / 16; ++kt) {
      uint32_t aq[4], ak[4];
      mma::ldsm4(aq, mma::a_tile(cq, kLdK, 16 * b, 16 * kt, lane));
      mma::ldsm4(ak, mma::a_tile(ck, kLdK, 16 * b, 16 * kt, lane));
#pragma unroll
      for (int j = 0; j < kRun; ++j)
        if (kRun == 1 || j < nt) {
          uint32_t bk[4];
          mma::ldsm4(bk, mma::bt_pair(ck, kLdK, 16 * (m0 + j), 16 * kt, lane));
          mma::mma16816<TAct>(accP[j][0], aq, bk[0], bk[1]);
          mma::mma16816<TAct>(accP[j][1], aq, bk[2], bk[3]);
          mma::mma16816<TAct>(accL[j][0], ak, bk[0], bk[1]);
          mma::mma16816<TAct>(accL[j][1], ak, bk[2], bk[3]);
        }
    }
#pragma unroll
    for (int j = 0; j < kRun; ++j)
      if (kRun == 1 || j < nt) {
        const int m = m0 + j;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int i = 16 * b + gq + 8 * r;
          const float Gi = cvv.G[i], nqi = cvv.nq[i], lki = cvv.beta[i] * cvv.nk[i];
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            float pv[2], lv[2];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int jc = 16 * m + 8 * half + cq2 + e;
              const float dec = jc <= i ? expf(Gi - cvv.G[jc]) * cvv.nk[jc] : 0.f;
              pv[e] = accP[j][half][2 * r + e] * nqi * dec;
              lv[e] = jc < i ? accL[j][half][2 * r + e] * lki * dec : 0.f;
            }
            const int j0 = 16 * m + 8 * half + cq2;
            if constexpr (kOver) hp[run][j][2 * r + half] = mma::pack2<TAct>(pv[0], pv[1]);
            else st2(sP + i * kLdL + j0, pv[0], pv[1]);
            if (m < b) {
              if constexpr (kOver) hl[run][j][2 * r + half] = mma::pack2<TAct>(lv[0], lv[1]);
              else st2(sLb + i * kLdL + j0, lv[0], lv[1]);
            } else {
              float* d = sLd + b * 16 * 17 + (i - 16 * b) * 17 + (j0 - 16 * b);
              d[0] = lv[0];
              d[1] = lv[1];
            }
          }
        }
      }
  }
  mma::bar_sync(kProd, kGroupThreads);
  if constexpr (kOver) {  // every warp's reads of q and k are done
#pragma unroll
    for (int run = 0; run < kNRun; ++run) {
      int b, m0, nt;
      run_at(run, b, m0, nt);
#pragma unroll
      for (int j = 0; j < kRun; ++j) {
        if (j >= nt) break;
        const int m = m0 + j;
        TAct* lb = sLb + (b * (b - 1) / 2 + m) * 16 * kLdB;
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int i = 16 * b + gq + 8 * r, j0 = 16 * m + 8 * half + cq2;
            *reinterpret_cast<uint32_t*>(sP + i * kLdL + j0) = hp[run][j][2 * r + half];
            if (m < b) *reinterpret_cast<uint32_t*>(lb + (gq + 8 * r) * kLdB + 8 * half + cq2) = hl[run][j][2 * r + half];
          }
      }
    }
  }

  // D_w = (I + L_ww)^-1 by forward substitution, column c per lane (lanes 16-31 repeat 0-15), and its
  // scaled forms; then M_wm = -D_w L_wm for m < w.
  {
    const int c = lane & 15, jg = 16 * w + c;
    const float* d = sLd + w * 16 * 17;
    float x[16];
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      float s0 = r == c ? 1.f : 0.f, s1 = 0.f;
#pragma unroll
      for (int m = 0; m < r; ++m) {
        if (m & 1) s1 -= d[r * 17 + m] * x[m];
        else s0 -= d[r * 17 + m] * x[m];
      }
      x[r] = s0 + s1;
    }
    const float ck_ = cvv.beta[jg] * expf(cvv.G[jg]) * cvv.nk[jg], cv_ = cvv.beta[jg];
    if (lane < 16) {
#pragma unroll
      for (int r = 0; r < 16; ++r) {
        const int at = (w * 16 + r) * kLdB + c;
        sDk[at] = from_float<TAct>(x[r] * ck_);
        sDv[at] = from_float<TAct>(x[r] * cv_);
        sDn[at] = from_float<TAct>(-x[r]);
      }
    }
  }
  if constexpr (kOver) mma::bar_sync(kProd, kGroupThreads);  // L's blocks below the diagonal
  else __syncwarp();
  if (w > 0) {
    uint32_t ad[4];
    mma::ldsm4(ad, mma::a_tile(sDn + w * 16 * kLdB, kLdB, 0, 0, lane));
#pragma unroll
    for (int m = 0; m < 3; ++m)
      if (m < w) {
        uint32_t b[4];
        if constexpr (kOver) mma::ldsm4_t(b, mma::b_pair(sLb + (w * (w - 1) / 2 + m) * 16 * kLdB, kLdB, 0, 0, lane));
        else mma::ldsm4_t(b, mma::b_pair(sLb, kLdL, 16 * w, 16 * m, lane));
        float acc[2][4] = {};
        mma::mma16816<TAct>(acc[0], ad, b[0], b[1]);
        mma::mma16816<TAct>(acc[1], ad, b[2], b[3]);
        TAct* dst = sM + (w * (w - 1) / 2 + m) * 16 * kLdB;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          st2(dst + gq * kLdB + 8 * half + cq2, acc[half][0], acc[half][1]);
          st2(dst + (gq + 8) * kLdB + 8 * half + cq2, acc[half][2], acc[half][3]);
        }
      }
  }
  mma::bar_sync(kProd, kGroupThreads);

  // (I + L) [W | U] = diag(c) [k | v]: this warp's kNTW column tiles, block row by block row
  // (overlaid, in place: the warp reads k_b, v_b of its columns before it writes W_b, U_b there).
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    uint32_t adk[4], adv[4];
    mma::ldsm4(adk, mma::a_tile(sDk + b * 16 * kLdB, kLdB, 0, 0, lane));
    mma::ldsm4(adv, mma::a_tile(sDv + b * 16 * kLdB, kLdB, 0, 0, lane));
    float acc[kNTW][4];
#pragma unroll
    for (int jj = 0; jj < kNTW; ++jj) {
      const int t = w * kNTW + jj;
      const bool isk = t < kK / 8;
      const TAct* src = isk ? ck + 8 * t : cv + 8 * (t - kK / 8);
      uint32_t bx[2];
      mma::ldsm2_t(bx, mma::b_single(src, isk ? kLdK : kLdV, 16 * b, 0, lane));
      uint32_t a[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        a[e] = isk ? adk[e] : adv[e];
        acc[jj][e] = 0.f;
      }
      mma::mma16816<TAct>(acc[jj], a, bx[0], bx[1]);
    }
#pragma unroll
    for (int m = 0; m < 3; ++m)
      if (m < b) {
        uint32_t am[4];
        mma::ldsm4(am, mma::a_tile(sM + (b * (b - 1) / 2 + m) * 16 * kLdB, kLdB, 0, 0, lane));
#pragma unroll
        for (int jj = 0; jj < kNTW; ++jj) {
          const int t = w * kNTW + jj;
          const bool isk = t < kK / 8;
          const TAct* y = isk ? sW + 8 * t : sU + 8 * (t - kK / 8);
          uint32_t by[2];
          mma::ldsm2_t(by, mma::b_single(y, isk ? kLdK : kLdV, 16 * m, 0, lane));
          mma::mma16816<TAct>(acc[jj], am, by[0], by[1]);
        }
      }
    // Overlaid (or U over v), Y_b goes where the warp's lanes read X_b: every lane's reads are done
    // first (the mma results already depend on them; the warp barrier says so to the race checker).
    if constexpr (kOver || L::kU == L::kV) __syncwarp();
#pragma unroll
    for (int jj = 0; jj < kNTW; ++jj) {
      const int t = w * kNTW + jj;
      const bool isk = t < kK / 8;
      TAct* y = isk ? sW + 8 * t : sU + 8 * (t - kK / 8);
      const int ld = isk ? kLdK : kLdV;
      st2(y + (16 * b + gq) * ld + cq2, acc[jj][0], acc[jj][1]);
      st2(y + (16 * b + gq + 8) * ld + cq2, acc[jj][2], acc[jj][3]);
    }
    __syncwarp();
  }
}

}  // namespace gdn::cuda::chunk
