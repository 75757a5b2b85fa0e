// src/cuda/deferred/deferred_mma.cuh — the deferred-commit mode's token-tree verify steps through
// the chunk algebra (chunk_plan.h: LeanCoefs) on tensor cores. A block of kAlgWarps warps owns
// kAlgRows state rows of a (sequence, value head); it takes the sequence's replay and step tokens
// as one chunk of n = m + T <= kChunk nodes from the committed state W, with no chain from node to
// node:
//   1. the block's threads: the chunk (its m replayed log rows, lean_chunk), the nodes' k^ and the
//      tokens' q^ staged in shared memory, their gates, and the row-independent coefficients (E,
//      gamma, the k^ and q^ products, T by column, Z by entry);
//   2. each warp, 16 rows held as mma.sync accumulators (deferred_mma::algebra):
//        X = W [k_0 .. k_15]   R = W [q_0 .. q_15]          (16 rows x 16 nodes, K = 128)
//        y = beta v - (beta gamma) X,  Zy = y Z^T,  o_u = gamma_u R_u + (Zy)_u   (u >= m)
//        S_m = gamma_{m-1} W + c K_rep,  c = (Zy)_{i < m}
//      then S_m stored: the state read once and written once.
// The planner gives it token trees (plan::DeferredPlan::algebra); a tree that does not fit the chunk
// is left to the general kernel (deferred.cuh), launched after this one, which skips the sequences
// taken here (alg_fits). Grid = (V / kAlgRows, HV, sequences).
//
// Products in float32 accuracy from tf32 tensor cores: each float32 operand is a pair big + small
// of tf32 values, and big big + big small + small big is summed (16-bit state is exact in tf32: its
// small part is zero and skipped).
// Fragments (mma.m16n8k8 tf32, lane l, g = l / 4, c = l % 4): A 16 x 8 a0 (g, c), a1 (g + 8, c),
// a2 (g, c + 4), a3 (g + 8, c + 4); B 8 x 8 b0 (k = c, n = g), b1 (k = c + 4, n = g); C 16 x 8
// c0 c1 (g, 2c .. 2c + 1), c2 c3 (g + 8, ..). The contraction index is any bijection both operands
// agree on, so:
//   - the state: lane l holds, of rows g and g + 8, elements 16 kp + 4c .. + 3 (kp = 0..7): one
//     16-byte load per row and kp. As A of k-step 2 kp + h, col c is element 16 kp + 4c + 2h and col
//     c + 4 the next; as C of n-tile 2 kp + h, cols 2c, 2c + 1 are the same two elements, so the
//     registers serve both the products and the commit;
//   - a C tile of nodes (columns 8t + 2c, + 1) is the A operand of a product over those nodes
//     (col c: node 8t + 2c, col c + 4: 8t + 2c + 1), as y and c are for Zy and the commit.
// A non-finite y_j (a draft with NaN or inf) would reach every o_u through 0 * y_j; it enters the
// products as 0, and the row's outputs at and below node j (LeanCoefs::anc) and, for a replayed
// node, the committed row are NaN, as the recurrence makes them.
#pragma once
#include "cuda/common/mma.cuh"
#include "cuda/deferred/chunk_plan.h"
#include "cuda/deferred/deferred.cuh"
#include "cuda/deferred/deferred_prep.cuh"

namespace gdn::cuda {

constexpr int kAlgWarps = 4, kAlgThreads = 32 * kAlgWarps, kAlgRows = 16 * kAlgWarps;
static_assert(kAlgRows == plan::kDeferredAlgRows, "the planner's rows per block");

namespace deferred_mma {

constexpr int C = deferred::kChunk, KP = 128;
constexpr int kLdX = KP + 16;  // row stride (floats) of the staged vectors: conflict-free float4 reads
constexpr int kLdC = KP + 4;   // of the commit's copy

// The commit's copy of node i's k^: lane group g's 16 elements (those of column g in the 16
// n-tiles of the state: element 16 kp + 4 (g / 2) + (g % 2) + 2h at 16 g + 2 kp + h), contiguous.
__device__ __forceinline__ int commit_at(int el) {
  return 16 * (2 * ((el & 15) >> 2) + (el & 1)) + 2 * (el >> 4) + ((el >> 1) & 1);
}

struct Smem {
  float k[C][kLdX];   // node u's k^ (zeros past n)
  float q[C][kLdX];   // step token u's q^ (zeros elsewhere)
  float kc[C][kLdC];  // k^ in the commit's order (commit_at)
  deferred::ChunkPlan pl;
  deferred::ChunkCoefs cf;
  deferred::LeanCoefs lc;
  int32_t rows[C + 1];
};

// D += A B for float32 operands split into tf32 pairs (kSmallA false: A's small part is zero).
template <bool kSmallA = true>
__device__ __forceinline__ void mma3(float (&d)[4], const uint32_t (&ab)[4], const uint32_t (&as)[4], uint32_t bb0,
                                     uint32_t bb1, uint32_t bs0, uint32_t bs1) {
  mma::mma1688_tf32(d, ab, bs0, bs1);
  if constexpr (kSmallA) mma::mma1688_tf32(d, as, bb0, bb1);
  mma::mma1688_tf32(d, ab, bb0, bb1);
}
// The fragment (big and small) of four floats in fragment order.
__device__ __forceinline__ void split4(float x0, float x1, float x2, float x3, uint32_t (&b)[4], uint32_t (&s)[4]) {
  mma::split_tf32(x0, b[0], s[0]);
  mma::split_tf32(x1, b[1], s[1]);
  mma::split_tf32(x2, b[2], s[2]);
  mma::split_tf32(x3, b[3], s[3]);
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// The warp's rows through the algebra (the chunk's coefficients in sm.lc, vectors in sm.k, sm.q):
// outputs and log values of the step's tokens, then S_m into s.
template <typename TAct, bool kSmallA>
__device__ __forceinline__ void algebra(const DeferredParams& p, const Smem& sm, float (&s)[8][2][4],
                                        rules::TokenRange tr, int64_t slot, int hv, int row0, int lane) {
  const deferred::LeanCoefs& lc = sm.lc;
  const int g = lane >> 2, c = lane & 3;
  const int n = lc.n, m = lc.m, nt_n = (n + 7) / 8;  // node tiles in use
  const int64_t K = p.K, V = p.V;
  // v of the lane's nodes and rows (element 2r + e of tile j: row g + 8r, node 8j + 2c + e)
  float vv[2][4];
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int u = 8 * j + 2 * c + e, v = row0 + g + 8 * r;
        float vu = 0.f;
        if (u < m) vu = log_entry(p.log_in, p.log_in_rs, p, slot, sm.rows[u], hv)[K + v];
        else if (u < n) vu = to_float(static_cast<const TAct*>(p.src.v)[(tr.begin + u - m) * p.src.v_rs + hv * V + v]);
        vv[j][2 * r + e] = vu;
      }
  // X and R: tile j = nodes 8j ..; R's tiles only where the step has tokens
  float X[2][4] = {}, R[2][4] = {};
#pragma unroll
  for (int kp = 0; kp < 8; ++kp) {
    uint32_t ab[2][4], as[2][4];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
      split4(s[kp][0][2 * hh], s[kp][1][2 * hh], s[kp][0][2 * hh + 1], s[kp][1][2 * hh + 1], ab[hh], as[hh]);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      if (j >= nt_n) break;
      uint32_t xb[4], xs[4];
      const float4 kx = *reinterpret_cast<const float4*>(&sm.k[8 * j + g][16 * kp + 4 * c]);
      split4(kx.x, kx.y, kx.z, kx.w, xb, xs);
      mma3<kSmallA>(X[j], ab[0], as[0], xb[0], xb[1], xs[0], xs[1]);
      mma3<kSmallA>(X[j], ab[1], as[1], xb[2], xb[3], xs[2], xs[3]);
      if (8 * j + 8 <= m) continue;  // no step token in the tile
      const float4 qx = *reinterpret_cast<const float4*>(&sm.q[8 * j + g][16 * kp + 4 * c]);
      split4(qx.x, qx.y, qx.z, qx.w, xb, xs);
      mma3<kSmallA>(R[j], ab[0], as[0], xb[0], xb[1], xs[0], xs[1]);
      mma3<kSmallA>(R[j], ab[1], as[1], xb[2], xb[3], xs[2], xs[3]);
    }
  }
  // y, and the nodes whose y is not finite, per row (the quad's flags together)
  float y[2][4];
  uint32_t bad[2] = {0u, 0u};
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int u = 8 * j + 2 * c + e;
        float yu = u < n ? lc.beta[u] * vv[j][2 * r + e] - lc.bgam[u] * X[j][2 * r + e] : 0.f;
        if (!isfinite(yu)) {
          bad[r] |= 1u << u;
          yu = 0.f;
        }
        y[j][2 * r + e] = yu;
      }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    bad[r] |= __shfl_xor_sync(0xffffffffu, bad[r], 1);
    bad[r] |= __shfl_xor_sync(0xffffffffu, bad[r], 2);
  }
  // Zy = y Z^T (Z lower triangular: tile t of y feeds output tiles nt >= t)
  float Zy[2][4] = {};
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    if (t >= nt_n) break;
    uint32_t yb[4], ys[4];
    split4(y[t][0], y[t][2], y[t][1], y[t][3], yb, ys);
#pragma unroll
    for (int nt = t; nt < 2; ++nt) {
      if (nt >= nt_n) break;
      const float2 z = *reinterpret_cast<const float2*>(&lc.Z[8 * nt + g][8 * t + 2 * c]);
      uint32_t zb[2], zs[2];
      mma::split_tf32(z.x, zb[0], zs[0]);
      mma::split_tf32(z.y, zb[1], zs[1]);
      mma3(Zy[nt], yb, ys, zb[0], zb[1], zs[0], zs[1]);
    }
  }
  // the step's tokens: outputs, v of their log entries (k^, g and beta: deferred_alg_kernel)
  TAct* const o = static_cast<TAct*>(p.o) + static_cast<int64_t>(hv) * V + row0 + g;
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int u = 8 * j + 2 * c + e;
      if (u < m || u >= n) continue;
      const int64_t t = u - m, orow = out_row(p, tr.begin + t);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float ou = (bad[r] & lc.anc[u]) ? __int_as_float(0x7fffffff)
                                               : lc.gamma[u] * R[j][2 * r + e] + Zy[j][2 * r + e];
        o[orow * p.o_rs + 8 * r] = from_float<TAct>(ou);
      }
      if (t < p.log_cols) {
        float* le = log_entry(p.log_out, p.log_out_rs, p, slot, t, hv);
        le[K + row0 + g] = vv[j][e];
        le[K + row0 + g + 8] = vv[j][2 + e];
      }
    }
  // S_m = gamma_{m-1} W + c K_rep; c: Zy of the replayed nodes (a row with a non-finite one: NaN)
  const float gc = m > 0 ? lc.gamma[m - 1] : 1.f;
#pragma unroll
  for (int kp = 0; kp < 8; ++kp)
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[kp][r][e] *= gc;
  const uint32_t rep = (1u << m) - 1u;
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    if (8 * t >= m) break;
    float cm[4];
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        cm[2 * r + e] = (bad[r] & rep) ? __int_as_float(0x7fffffff) : 8 * t + 2 * c + e < m ? Zy[t][2 * r + e] : 0.f;
    uint32_t cb[4], cs[4];
    split4(cm[0], cm[2], cm[1], cm[3], cb, cs);
    const float* k0 = sm.kc[8 * t + 2 * c] + 16 * g;  // rows past m: c is 0 there
    const float* k1 = k0 + kLdC;
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // n-tiles 8 half .. 8 half + 7
      float b0[8], b1[8];
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        const float4 u0 = *reinterpret_cast<const float4*>(k0 + 8 * half + 4 * x);
        const float4 u1 = *reinterpret_cast<const float4*>(k1 + 8 * half + 4 * x);
        b0[4 * x] = u0.x, b0[4 * x + 1] = u0.y, b0[4 * x + 2] = u0.z, b0[4 * x + 3] = u0.w;
        b1[4 * x] = u1.x, b1[4 * x + 1] = u1.y, b1[4 * x + 2] = u1.z, b1[4 * x + 3] = u1.w;
      }
#pragma unroll
      for (int x = 0; x < 8; ++x) {
        const int nt = 8 * half + x, kp = nt / 2, hh = nt % 2;
        uint32_t bb0, bs0, bb1, bs1;
        mma::split_tf32(b0[x], bb0, bs0);
        mma::split_tf32(b1[x], bb1, bs1);
        float d[4] = {s[kp][0][2 * hh], s[kp][0][2 * hh + 1], s[kp][1][2 * hh], s[kp][1][2 * hh + 1]};
        mma3(d, cb, cs, bb0, bb1, bs0, bs1);
        s[kp][0][2 * hh] = d[0];
        s[kp][0][2 * hh + 1] = d[1];
        s[kp][1][2 * hh] = d[2];
        s[kp][1][2 * hh + 1] = d[3];
      }
    }
  }
}

}  // namespace deferred_mma

// The algebra kernel (above). Launched for token-tree verify steps (log_tokens) after
// deferred_prep_kernel.
template <typename TAct, typename TState>
__global__ void __launch_bounds__(kAlgThreads, 4) deferred_alg_kernel(const __grid_constant__ DeferredParams p) {
  using namespace deferred_mma;
  constexpr bool kSmallA = sizeof(TState) == 4;  // 16-bit state is exact in tf32
  __shared__ __align__(16) Smem sm;
  __shared__ int s_m;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
  const int hv = blockIdx.y, h = hv / p.r, row0 = blockIdx.x * kAlgRows + 16 * warp;
  const GroupMeta& gm = p.group[0];
  const int64_t i = blockIdx.z;
  pdl_start();
  const SeqInfo si = start_seq(p, gm, i, false);
  const rules::TokenRange tr = si.tr;
  const int64_t slot = si.slot0, K = p.K, V = p.V, T = tr.len;
  bool pad = si.pad;
  if (p.out_rows >= 0) {  // gdn_attention: a token outside the buffers makes its sequence padding
    bool bad = si.past;
    for (int64_t t = tid; t < T; t += kAlgThreads) bad |= out_row(p, tr.begin + t) < 0;
    pad = __syncthreads_or(bad) || pad;
  }
  TAct* const o = static_cast<TAct*>(p.o) + static_cast<int64_t>(hv) * V + blockIdx.x * kAlgRows;
  if (pad) {  // nothing read or written but zero outputs (at the rows that exist)
    for (int64_t idx = tid; idx < T * kAlgRows; idx += kAlgThreads) {
      const int64_t row = out_row(p, tr.begin + idx / kAlgRows);
      if (row >= 0) o[row * p.o_rs + idx % kAlgRows] = from_float<TAct>(0.f);
    }
    return;
  }
  if (tid == 0) s_m = alg_replay(p, gm, si, i, sm.rows);
  __syncthreads();
  const int m = s_m;
  if (m + T > C) return;  // a tree larger than the chunk: the general kernel's
  // the warp's rows of W
  TState* const st = static_cast<TState*>(p.state) + slot * p.state_slot_stride +
                     (static_cast<int64_t>(hv) * V + row0 + g) * KP + 4 * c;
  float s[8][2][4];
#pragma unroll
  for (int kp = 0; kp < 8; ++kp)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[kp][r][e] = 0.f;
      if (si.init) load_vec<TState, 4>(st + 8 * r * KP + 16 * kp, s[kp][r]);
    }

  // 1. the chunk, its vectors (zeros past n; q^ only for the step's tokens) and gates
  const int n = m + static_cast<int>(T);
  deferred::ChunkCoefs& cf = sm.cf;
  for (int idx = tid; idx < C * (KP / 4); idx += kAlgThreads) {
    const int u = idx / (KP / 4), e4 = 4 * (idx % (KP / 4));
    float4 kx = make_float4(0.f, 0.f, 0.f, 0.f), qx = kx;
    if (u < m) {
      const float* e = log_entry(p.log_in, p.log_in_rs, p, slot, sm.rows[u], hv) + e4;
      kx = make_float4(e[0], e[1], e[2], e[3]);
    } else if (u < n) {
      const float* qk = DeferredPrep::qk(p, tr.begin + (u - m), h);
      qx = *reinterpret_cast<const float4*>(qk + e4);
      kx = *reinterpret_cast<const float4*>(qk + 128 + e4);
    }
    *reinterpret_cast<float4*>(&sm.k[u][e4]) = kx;
    *reinterpret_cast<float4*>(&sm.q[u][e4]) = qx;
    sm.kc[u][commit_at(e4)] = kx.x;
    sm.kc[u][commit_at(e4 + 1)] = kx.y;
    sm.kc[u][commit_at(e4 + 2)] = kx.z;
    sm.kc[u][commit_at(e4 + 3)] = kx.w;
  }
  if (tid < n) {
    float gu, bu;
    if (tid < m) {
      const float* e = log_entry(p.log_in, p.log_in_rs, p, slot, sm.rows[tid], hv);
      gu = e[K + V];
      bu = e[K + V + 1];
    } else {
      const float* gt = DeferredPrep::gates(p, tr.begin + tid - m, hv);
      gu = gt[0];
      bu = gt[1];
    }
    cf.g[tid] = gu;
    cf.dec[tid] = expf(gu);
    cf.beta[tid] = bu;
  }
  if (tid == 32) {
    auto par = [&](int64_t t) { return p.parents.present() ? token_parent(p, tr.begin, t) : t - 1; };
    deferred::lean_chunk(m, static_cast<int>(T), par, sm.pl);
    sm.lc.n = n;
    sm.lc.m = m;
  }
  __syncthreads();
  // 2. the coefficients: E and gamma; the key products along the paths, a quad per (i, u), i <= u
  if (tid < n) deferred::e_row(sm.pl, cf.dec, tid, cf.E[tid]);
  if (tid == 32) deferred::gammas(sm.pl, cf.dec, cf.gamma);
  for (int pass = 0; pass < (n * n + 31) / 32; ++pass) {  // (uniform: every lane shuffles)
    const int pair = 32 * pass + (tid >> 2), a = pair / n, u = pair % n, t4 = tid & 3;
    const bool on = pair < n * n && a <= u;
    float gk = 0.f, gq = 0.f;
    if (on && deferred::is_ancestor(sm.pl, a, u)) {
#pragma unroll
      for (int e = 0; e < KP / 16; ++e) {
        const int x = 16 * e + 4 * t4;
        const float4 k4 = *reinterpret_cast<const float4*>(&sm.k[a][x]);
        const float4 b = *reinterpret_cast<const float4*>(&sm.k[u][x]);
        const float4 q4 = *reinterpret_cast<const float4*>(&sm.q[u][x]);
        gk += k4.x * b.x + k4.y * b.y + k4.z * b.z + k4.w * b.w;
        gq += k4.x * q4.x + k4.y * q4.y + k4.z * q4.z + k4.w * q4.w;
      }
    }
    gk = quad_sum(gk);
    gq = quad_sum(gq);
    if (on && t4 == 0) {
      cf.Gk[a][u] = a < u ? gk : 0.f;
      cf.Gq[a][u] = u >= m ? gq : 0.f;
    }
  }
  __syncthreads();
  // T by column; the rows' scalars
  if (tid < n) deferred::t_column(sm.pl, cf, tid);
  if (tid >= 32 && tid < 32 + n) deferred::lean_row_scalars(sm.pl, cf, tid - 32, sm.lc);
  __syncthreads();
  // Z by entry (zeros past n)
  for (int idx = tid; idx < C * C; idx += kAlgThreads) {
    const int u = idx / C, j = idx % C;
    sm.lc.Z[u][j] = u < n ? deferred::lean_z(cf, n, m, u, j) : 0.f;
  }
  __syncthreads();
  // 3. the warp's rows
  algebra<TAct, kSmallA>(p, sm, s, tr, slot, hv, row0, lane);
#pragma unroll
  for (int kp = 0; kp < 8; ++kp)
#pragma unroll
    for (int r = 0; r < 2; ++r) store_vec<TState, 4>(st + 8 * r * KP + 16 * kp, s[kp][r]);
  // the step tokens' log entries: k^, g and beta by the first row block's first warp (v: algebra)
  if (blockIdx.x == 0 && warp == 0)
    for (int u = m; u < n && u - m < p.log_cols; ++u) {
      float* le = log_entry(p.log_out, p.log_out_rs, p, slot, u - m, hv);
#pragma unroll
      for (int e = 0; e < KP / 32; ++e) le[lane + 32 * e] = sm.k[u][lane + 32 * e];
      if (lane == 0) le[K + V] = cf.g[u], le[K + V + 1] = cf.beta[u];
    }
}

}  // namespace gdn::cuda
