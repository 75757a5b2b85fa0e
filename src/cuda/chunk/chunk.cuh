// src/cuda/chunk/chunk.cuh — gated_delta_rule_chunked on tensor cores (mma.sync, sm_80+): chunks of
// 64 tokens in the WY/UT form of the CPU backend (src/cpu/chunked.cpp), with S kept transposed
// (H = S^T, K x V) so that every product is a plain matrix product:
//   L[i][j] = beta_i exp(G_i - G_j) k^_i . k^_j  (j < i),  T = (I + L)^-1
//   W = T diag(beta exp(G)) k^,  U = T diag(beta) v,   delta = U - W H,
//   o = diag(exp(G)) q^ H + (q^ k^T o exp(G_i - G_j), j <= i) delta,
//   H' = exp(G_last) H + k^T diag(exp(G_last - G)) delta.
// A block is (value-column slice of VS, value head, sequence): 4 warps walk the sequence's chunks in
// order with H's slice in registers (warp w: rows 32w..32w+31, mma accumulators) and its 16-bit copy
// in shared memory as the next chunk's operand. Raw q, k, v of the next chunk load (cp.async) while
// the current one computes. The l2 norms, beta and the decays are row and column scalings in float32
// of products of the raw 16-bit inputs (no normalised copy is stored). T is never formed: warp b of
// the 4 inverts the 16 x 16 diagonal block D_b = (I + L_bb)^-1 (float32 forward substitution) and
// forms M_bm = -D_b L_bm; then every warp solves (I + L) [W | U] = diag(c) [k | v] for its own slice
// of the columns by block forward substitution, Y_b = D_b diag(c_b) X_b + sum_{m<b} M_bm Y_m: no
// warp waits for another. Products take 16-bit inputs (the activation dtype) and accumulate in
// float32, as FLA's chunk kernel does; outputs and the state are rounded once.
#pragma once
#include "cuda/chunk/chunk.h"
#include "cuda/common/mma.cuh"
#include "cuda/common/rec_common.cuh"

namespace gdn::cuda::chunk {

constexpr int kC = 64, kK = 128, kThreads = 128;
constexpr int kLdK = kK + 8;  // row stride (elements) of the q, k and W tiles: conflict-free ldmatrix
constexpr int kLdL = kC + 8;  // of the 16-bit L
constexpr int kLdB = 16 + 8;  // of the 16 x 16 blocks D and M

// Shared memory: 16-bit tiles (element offsets), then floats.
template <int VS>
struct Layout {
  static constexpr int kLdV = VS + 8;
  static constexpr int kQ = 0;                     // [2][kC][kLdK] raw q, double-buffered
  static constexpr int kKr = kQ + 2 * kC * kLdK;   // [2][kC][kLdK] raw k
  static constexpr int kV = kKr + 2 * kC * kLdK;   // [2][kC][kLdV] raw v (the block's columns)
  static constexpr int kW = kV + 2 * kC * kLdV;    // [kC][kLdK] W
  static constexpr int kU = kW + kC * kLdK;        // [kC][kLdV] U, then delta
  static constexpr int kDd = kU + kC * kLdV;       // [kC][kLdV] diag(exp(G_last - G) / |k|) delta
  static constexpr int kS = kDd + kC * kLdV;       // [kK][kLdV] H, 16-bit
  static constexpr int kLb = kS + kK * kLdV;       // [kC][kLdL] L, 16-bit (blocks below the diagonal)
  static constexpr int kDk = kLb + kC * kLdL;      // [4][16][kLdB] D_b diag(beta exp(G) / |k|)
  static constexpr int kDv = kDk + 4 * 16 * kLdB;  // [4][16][kLdB] D_b diag(beta)
  static constexpr int kDn = kDv + 4 * 16 * kLdB;  // [4][16][kLdB] -D_b
  static constexpr int kM = kDn + 4 * 16 * kLdB;   // [6][16][kLdB] M_bm, index b (b - 1) / 2 + m
  static constexpr int k16 = kM + 6 * 16 * kLdB;
  static constexpr int kLd = 0;                    // [4][16][17] diagonal blocks of L, float
  static constexpr int kG = kLd + 4 * 16 * 17;     // [kC] G (cumulative log decay in the chunk)
  static constexpr int kBeta = kG + kC;            // [kC] beta
  static constexpr int kNq = kBeta + kC;           // [kC] scale / |q|
  static constexpr int kNk = kNq + kC;             // [kC] 1 / |k|
  static constexpr int kF = kNk + kC;
  static constexpr size_t kBytes = static_cast<size_t>(k16) * 2 + static_cast<size_t>(kF) * 4;
  static_assert(k16 % 8 == 0, "the float area starts 16-byte aligned");
};

// A float scalar of dtype code dt (FloatRef's codes) at element off of ptr.
__device__ __forceinline__ float load_scalar(const void* ptr, int dt, int64_t off) {
  if (dt == 1) return __bfloat162float(static_cast<const __nv_bfloat16*>(ptr)[off]);
  if (dt == 2) return __half2float(static_cast<const __half*>(ptr)[off]);
  if (dt == 3) return static_cast<float>(static_cast<const double*>(ptr)[off]);
  return static_cast<const float*>(ptr)[off];
}

template <typename T>
__device__ __forceinline__ void st2(T* dst, float lo, float hi) {
  *reinterpret_cast<uint32_t*>(dst) = mma::pack2<T>(lo, hi);
}

// The raw inputs of the n tokens of chunk rows [row, row + n) into buffer buf (zeros past n), as
// one cp.async group.
template <typename TAct, int VS>
__device__ __forceinline__ void issue_chunk(const ChunkParams& p, TAct* s16, int buf, int64_t row, int n, int h,
                                            int hv, int v0, int tid) {
  using L = Layout<VS>;
  TAct* dq = s16 + L::kQ + buf * kC * kLdK;
  TAct* dk = s16 + L::kKr + buf * kC * kLdK;
  TAct* dv = s16 + L::kV + buf * kC * L::kLdV;
  for (int e = tid; e < kC * (kK / 8); e += kThreads) {
    const int t = e / (kK / 8), s = e % (kK / 8);
    const bool ok = t < n;
    const int64_t r = row + (ok ? t : 0);
    mma::cp_async16(dq + t * kLdK + s * 8, q_row<TAct>(p, r, h) + s * 8, ok);
    mma::cp_async16(dk + t * kLdK + s * 8, k_row<TAct>(p, r, h) + s * 8, ok);
  }
  for (int e = tid; e < kC * (VS / 8); e += kThreads) {
    const int t = e / (VS / 8), s = e % (VS / 8);
    const bool ok = t < n;
    const int64_t r = row + (ok ? t : 0);
    const TAct* src = static_cast<const TAct*>(p.src.v) + r * p.src.v_rs + static_cast<int64_t>(hv) * p.V + v0 + s * 8;
    mma::cp_async16(dv + t * L::kLdV + s * 8, src, ok);
  }
  mma::cp_async_commit();
}

// Gate inputs a, b of tokens 2 lane, 2 lane + 1 of the chunk at `row` (n tokens; 0 past n).
__device__ __forceinline__ void load_gates(const ChunkParams& p, int64_t row, int n, int hv, int lane, float (&ga)[2],
                                           float (&gb)[2]) {
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int t = 2 * lane + j;
    const bool ok = t < n;
    ga[j] = ok ? load_scalar(p.src.a, p.a_dtype, (row + t) * p.src.a_rs + hv) : 0.f;
    gb[j] = ok ? load_scalar(p.src.b, p.b_dtype, (row + t) * p.src.b_rs + hv) : 0.f;
  }
}

template <typename TAct, typename TState, int VS>
__global__ void __launch_bounds__(kThreads, 1) chunk_kernel(const ChunkParams p) {
  using L = Layout<VS>;
  constexpr int kLdV = L::kLdV, kNV = VS / 8;  // value n-tiles of 8 columns
  constexpr int kNT = kK / 8 + kNV, kNTW = kNT / 4;  // solve: column tiles of [W | U], per warp
  static_assert(kNT % 4 == 0 && VS % 16 == 0, "the column tiles split evenly over the 4 warps");
  extern __shared__ __align__(16) unsigned char smem[];
  TAct* s16 = reinterpret_cast<TAct*>(smem);
  float* sf = reinterpret_cast<float*>(smem + static_cast<size_t>(L::k16) * 2);
  TAct *sW = s16 + L::kW, *sU = s16 + L::kU, *sDd = s16 + L::kDd, *sS = s16 + L::kS, *sLb = s16 + L::kLb;
  TAct *sDk = s16 + L::kDk, *sDv = s16 + L::kDv, *sDn = s16 + L::kDn, *sM = s16 + L::kM;
  float *sLd = sf + L::kLd, *sG = sf + L::kG, *sBeta = sf + L::kBeta, *sNq = sf + L::kNq, *sNk = sf + L::kNk;

  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
  const int gq = lane >> 2, cq = 2 * (lane & 3);  // fragment row and column of this lane
  const int v0 = blockIdx.x * VS, hv = blockIdx.y, h = hv / p.r;
  pdl_start();
  const SeqInfo si = resolve_seq(p, p.group[0], blockIdx.z, false);
  const int64_t len = si.tr.len, row0 = si.tr.begin;
  if (len == 0) return;
  TAct* o = static_cast<TAct*>(p.o) + static_cast<int64_t>(hv) * p.V + v0;
  if (si.pad) {  // padding: zero outputs, no state read or written
    for (int64_t e = tid; e < len * (VS / 8); e += kThreads)
      *reinterpret_cast<uint4*>(o + (row0 + e / (VS / 8)) * p.o_rs + (e % (VS / 8)) * 8) = make_uint4(0, 0, 0, 0);
    return;
  }
  const float A = p.decay_given ? 0.f : -expf(p.A_log(hv)), dtb = p.decay_given ? 0.f : p.dt_bias(hv);

  // H rows kr = 32 w + 16 mt + gq (+8), columns 8 nt + cq (+1) of the slice.
  float hacc[2][kNV][4];
  TState* st = static_cast<TState*>(p.state) + si.slot0 * p.state_slot_stride + static_cast<int64_t>(hv) * p.V * p.K;
  auto state_at = [&](int kr, int vc) -> int64_t {
    return p.kv_layout ? static_cast<int64_t>(kr) * p.V + v0 + vc : static_cast<int64_t>(v0 + vc) * p.K + kr;
  };
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNV; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int kr = 32 * w + 16 * mt + gq + 8 * (e >> 1), vc = 8 * nt + cq + (e & 1);
        hacc[mt][nt][e] = si.init ? to_float(st[state_at(kr, vc)]) : 0.f;
      }
  auto store_h16 = [&]() {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNV; ++nt) {
        const int kr = 32 * w + 16 * mt + gq, vc = 8 * nt + cq;
        st2(sS + kr * kLdV + vc, hacc[mt][nt][0], hacc[mt][nt][1]);
        st2(sS + (kr + 8) * kLdV + vc, hacc[mt][nt][2], hacc[mt][nt][3]);
      }
  };
  store_h16();

  float ga[2] = {0.f, 0.f}, gb[2] = {0.f, 0.f};  // warp 0: the next chunk's gate inputs
  issue_chunk<TAct, VS>(p, s16, 0, row0, static_cast<int>(len < kC ? len : kC), h, hv, v0, tid);
  if (w == 0) load_gates(p, row0, static_cast<int>(len < kC ? len : kC), hv, lane, ga, gb);

  for (int64_t c0 = 0, ci = 0; c0 < len; c0 += kC, ++ci) {
    const int n = static_cast<int>(len - c0 < kC ? len - c0 : kC), buf = static_cast<int>(ci & 1);
    const TAct* cqp = s16 + L::kQ + buf * kC * kLdK;
    const TAct* ckp = s16 + L::kKr + buf * kC * kLdK;
    const TAct* cvp = s16 + L::kV + buf * kC * kLdV;
    mma::cp_async_wait_all();
    __syncthreads();  // this chunk's inputs and the last chunk's H copy are visible; the other buffer is free
    // Gates (warp 0: tokens 2 lane, 2 lane + 1; an inclusive scan of the log decays) and norms.
    if (w == 0) {
      float g[2], b[2];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const bool ok = 2 * lane + j < n;
        g[j] = !ok ? 0.f : p.decay_given ? ga[j] : A * rules::softplus(ga[j] + dtb);
        b[j] = !ok ? 0.f : p.beta_given ? gb[j] : 1.f / (1.f + expf(-gb[j]));
      }
      float incl = g[0] + g[1];
#pragma unroll
      for (int m = 1; m < 32; m <<= 1) {
        const float t = __shfl_up_sync(0xffffffffu, incl, m);
        if (lane >= m) incl += t;
      }
      float excl = __shfl_up_sync(0xffffffffu, incl, 1);
      if (lane == 0) excl = 0.f;
      sG[2 * lane] = excl + g[0];
      sG[2 * lane + 1] = incl;
      sBeta[2 * lane] = b[0];
      sBeta[2 * lane + 1] = b[1];
    }
    {
      const TAct* src = tid < kC ? cqp + tid * kLdK : ckp + (tid - kC) * kLdK;
      float ss = 0.f;
#pragma unroll
      for (int s = 0; s < kK / 8; ++s) {
        const uint4 u = *reinterpret_cast<const uint4*>(src + s * 8);
        const TAct* e = reinterpret_cast<const TAct*>(&u);
#pragma unroll
        for (int j = 0; j < 8; ++j) ss += to_float(e[j]) * to_float(e[j]);
      }
      if (tid < kC) sNq[tid] = p.l2norm ? p.scale / sqrtf(ss + 1e-6f) : p.scale;
      else sNk[tid - kC] = p.l2norm ? 1.f / sqrtf(ss + 1e-6f) : 1.f;
    }
    // Prefetch the next chunk into the other buffer.
    if (c0 + kC < len) {
      const int nn = static_cast<int>(len - c0 - kC < kC ? len - c0 - kC : kC);
      issue_chunk<TAct, VS>(p, s16, buf ^ 1, row0 + c0 + kC, nn, h, hv, v0, tid);
      if (w == 0) load_gates(p, row0 + c0 + kC, nn, hv, lane, ga, gb);
    }
    __syncthreads();

    // q k^T and k k^T for this warp's rows 16 w.. (token blocks up to its own).
    float accP[8][4], accL[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) accP[nt][e] = accL[nt][e] = 0.f;
#pragma unroll
    for (int kt = 0; kt < kK / 16; ++kt) {
      uint32_t aq[4], ak[4];
      mma::ldsm4(aq, mma::a_tile(cqp, kLdK, 16 * w, 16 * kt, lane));
      mma::ldsm4(ak, mma::a_tile(ckp, kLdK, 16 * w, 16 * kt, lane));
#pragma unroll
      for (int np = 0; np < 4; ++np)
        if (np <= w) {
          uint32_t b[4];
          mma::ldsm4(b, mma::bt_pair(ckp, kLdK, 16 * np, 16 * kt, lane));
          mma::mma16816<TAct>(accP[2 * np], aq, b[0], b[1]);
          mma::mma16816<TAct>(accP[2 * np + 1], aq, b[2], b[3]);
          mma::mma16816<TAct>(accL[2 * np], ak, b[0], b[1]);
          mma::mma16816<TAct>(accL[2 * np + 1], ak, b[2], b[3]);
        }
    }
    const int ri = 16 * w + gq;  // rows ri and ri + 8
    const float Gi[2] = {sG[ri], sG[ri + 8]}, nqi[2] = {sNq[ri], sNq[ri + 8]};
    const float lki[2] = {sBeta[ri] * sNk[ri], sBeta[ri + 8] * sNk[ri + 8]};
    uint32_t pf[4][4];  // P (q k^T with decays, j <= i) as A fragments, per token block
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      if (np <= w) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int nt = 2 * np + half;
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int r = e >> 1, i = ri + 8 * r, j = 8 * nt + cq + (e & 1);
            const float dec = j <= i ? expf(Gi[r] - sG[j]) * sNk[j] : 0.f;
            accP[nt][e] *= nqi[r] * dec;
            accL[nt][e] = j < i ? accL[nt][e] * lki[r] * dec : 0.f;
          }
          if (np < w) {  // L below the diagonal blocks, 16-bit
            st2(sLb + ri * kLdL + 8 * nt + cq, accL[nt][0], accL[nt][1]);
            st2(sLb + (ri + 8) * kLdL + 8 * nt + cq, accL[nt][2], accL[nt][3]);
          } else {  // the diagonal block, float
            float* d = sLd + w * 16 * 17;
            const int c = 8 * half + cq;
            d[gq * 17 + c] = accL[nt][0];
            d[gq * 17 + c + 1] = accL[nt][1];
            d[(gq + 8) * 17 + c] = accL[nt][2];
            d[(gq + 8) * 17 + c + 1] = accL[nt][3];
          }
        }
        pf[np][0] = mma::pack2<TAct>(accP[2 * np][0], accP[2 * np][1]);
        pf[np][1] = mma::pack2<TAct>(accP[2 * np][2], accP[2 * np][3]);
        pf[np][2] = mma::pack2<TAct>(accP[2 * np + 1][0], accP[2 * np + 1][1]);
        pf[np][3] = mma::pack2<TAct>(accP[2 * np + 1][2], accP[2 * np + 1][3]);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) pf[np][e] = 0u;
      }
    }
    __syncwarp();
    // D_w = (I + L_ww)^-1, column c per lane (lanes 16-31 repeat lanes 0-15), and its scaled forms.
    {
      const int c = lane & 15, jg = 16 * w + c;
      const float* d = sLd + w * 16 * 17;
      float x[16];
#pragma unroll
      for (int r = 0; r < 16; ++r) {
        float s = r == c ? 1.f : 0.f;
#pragma unroll
        for (int m = 0; m < r; ++m) s -= d[r * 17 + m] * x[m];
        x[r] = s;
      }
      const float ck = sBeta[jg] * expf(sG[jg]) * sNk[jg], cv = sBeta[jg];
      if (lane < 16) {
#pragma unroll
        for (int r = 0; r < 16; ++r) {
          const int at = (w * 16 + r) * kLdB + c;
          sDk[at] = from_float<TAct>(x[r] * ck);
          sDv[at] = from_float<TAct>(x[r] * cv);
          sDn[at] = from_float<TAct>(-x[r]);
        }
      }
    }
    __syncwarp();
    // M_wm = -D_w L_wm for the blocks m < w of this warp's rows.
    if (w > 0) {
      uint32_t ad[4];
      mma::ldsm4(ad, mma::a_tile(sDn + w * 16 * kLdB, kLdB, 0, 0, lane));
#pragma unroll
      for (int m = 0; m < 3; ++m)
        if (m < w) {
          uint32_t b[4];
          mma::ldsm4_t(b, mma::b_pair(sLb, kLdL, 16 * w, 16 * m, lane));
          float acc[2][4] = {};
          mma::mma16816<TAct>(acc[0], ad, b[0], b[1]);
          mma::mma16816<TAct>(acc[1], ad, b[2], b[3]);
          TAct* dst = sM + (w * (w - 1) / 2 + m) * 16 * kLdB;
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            st2(dst + gq * kLdB + 8 * half + cq, acc[half][0], acc[half][1]);
            st2(dst + (gq + 8) * kLdB + 8 * half + cq, acc[half][2], acc[half][3]);
          }
        }
    }
    __syncthreads();

    // (I + L) [W | U] = diag(c) [k | v]: this warp's kNTW column tiles, block row by block row.
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
        const TAct* src = isk ? ckp + 8 * t : cvp + 8 * (t - kK / 8);
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
#pragma unroll
      for (int jj = 0; jj < kNTW; ++jj) {
        const int t = w * kNTW + jj;
        const bool isk = t < kK / 8;
        TAct* y = isk ? sW + 8 * t : sU + 8 * (t - kK / 8);
        const int ld = isk ? kLdK : kLdV;
        st2(y + (16 * b + gq) * ld + cq, acc[jj][0], acc[jj][1]);
        st2(y + (16 * b + gq + 8) * ld + cq, acc[jj][2], acc[jj][3]);
      }
      __syncwarp();
    }
    __syncthreads();

    // delta = U - W H and the inter-chunk output diag(exp(G)) q^ H, this warp's rows.
    float accd[kNV][4], acco[kNV][4];
#pragma unroll
    for (int nt = 0; nt < kNV; ++nt) {
      const int c = 8 * nt + cq;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        accd[nt][2 * r] = to_float(sU[(ri + 8 * r) * kLdV + c]);
        accd[nt][2 * r + 1] = to_float(sU[(ri + 8 * r) * kLdV + c + 1]);
        acco[nt][2 * r] = acco[nt][2 * r + 1] = 0.f;
      }
    }
#pragma unroll
    for (int kt = 0; kt < kK / 16; ++kt) {
      uint32_t aw[4], aq[4];
      mma::ldsm4(aw, mma::a_tile(sW, kLdK, 16 * w, 16 * kt, lane));
      mma::negate(aw);
      mma::ldsm4(aq, mma::a_tile(cqp, kLdK, 16 * w, 16 * kt, lane));
#pragma unroll
      for (int np = 0; np < kNV / 2; ++np) {
        uint32_t b[4];
        mma::ldsm4_t(b, mma::b_pair(sS, kLdV, 16 * kt, 16 * np, lane));
        mma::mma16816<TAct>(accd[2 * np], aw, b[0], b[1]);
        mma::mma16816<TAct>(accd[2 * np + 1], aw, b[2], b[3]);
        mma::mma16816<TAct>(acco[2 * np], aq, b[0], b[1]);
        mma::mma16816<TAct>(acco[2 * np + 1], aq, b[2], b[3]);
      }
    }
    const float Gl = sG[kC - 1];
    {
      const float oi[2] = {expf(Gi[0]) * nqi[0], expf(Gi[1]) * nqi[1]};
      const float di[2] = {expf(Gl - Gi[0]) * sNk[ri], expf(Gl - Gi[1]) * sNk[ri + 8]};
#pragma unroll
      for (int nt = 0; nt < kNV; ++nt) {
        const int c = 8 * nt + cq;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          acco[nt][2 * r] *= oi[r];
          acco[nt][2 * r + 1] *= oi[r];
          st2(sU + (ri + 8 * r) * kLdV + c, accd[nt][2 * r], accd[nt][2 * r + 1]);
          st2(sDd + (ri + 8 * r) * kLdV + c, accd[nt][2 * r] * di[r], accd[nt][2 * r + 1] * di[r]);
        }
      }
    }
    __syncthreads();

    // o += P delta (token blocks up to this warp's), stored.
#pragma unroll
    for (int kt = 0; kt < 4; ++kt)
      if (kt <= w) {
#pragma unroll
        for (int np = 0; np < kNV / 2; ++np) {
          uint32_t b[4];
          mma::ldsm4_t(b, mma::b_pair(sU, kLdV, 16 * kt, 16 * np, lane));
          mma::mma16816<TAct>(acco[2 * np], pf[kt], b[0], b[1]);
          mma::mma16816<TAct>(acco[2 * np + 1], pf[kt], b[2], b[3]);
        }
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int t = ri + 8 * r;
      if (t < n) {
        TAct* orow = o + (row0 + c0 + t) * p.o_rs;
#pragma unroll
        for (int nt = 0; nt < kNV; ++nt) st2(orow + 8 * nt + cq, acco[nt][2 * r], acco[nt][2 * r + 1]);
      }
    }
    // H = exp(G_last) H + k^T (diag(exp(G_last - G) / |k|) delta), this warp's rows; then its 16-bit copy
    // (every read of the old copy was before the last barrier).
    const float eg = expf(Gl);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNV; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) hacc[mt][nt][e] *= eg;
#pragma unroll
    for (int kt = 0; kt < 4; ++kt) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        uint32_t a[4];
        mma::ldsm4_t(a, mma::at_tile(ckp, kLdK, 16 * kt, 32 * w + 16 * mt, lane));
#pragma unroll
        for (int np = 0; np < kNV / 2; ++np) {
          uint32_t b[4];
          mma::ldsm4_t(b, mma::b_pair(sDd, kLdV, 16 * kt, 16 * np, lane));
          mma::mma16816<TAct>(hacc[mt][2 * np], a, b[0], b[1]);
          mma::mma16816<TAct>(hacc[mt][2 * np + 1], a, b[2], b[3]);
        }
      }
    }
    store_h16();
  }

  // The final state, rounded once.
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNV; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int kr = 32 * w + 16 * mt + gq + 8 * (e >> 1), vc = 8 * nt + cq + (e & 1);
        st[state_at(kr, vc)] = from_float<TState>(hacc[mt][nt][e]);
      }
}

}  // namespace gdn::cuda::chunk
