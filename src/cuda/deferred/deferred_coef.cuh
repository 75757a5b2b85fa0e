// src/cuda/deferred/deferred_coef.cuh — the lean form's algebra coefficients (chunk_plan.h,
// LeanCoefs): per (sequence, value head), from the logged rows it replays and the step's prepared
// token inputs (deferred_prep.cuh), the chunk of replay and step (lean_chunk), the decay products,
// the key products, the triangular solution and the rows every state-row warp applies
// (deferred_lean.cuh, kAlg). A sequence of more than kChunk nodes, or padding, gets alg = 0.
//   grid = (sequences, HV), block = kCoefThreads threads; after deferred_prep_kernel, before the
//   lean kernel (stream order through pdl_start).
#pragma once
#include "cuda/deferred/deferred.cuh"
#include "cuda/deferred/deferred_prep.cuh"

namespace gdn::cuda {

constexpr int kCoefThreads = 128;

template <typename TAct>  // (a template for its instances per translation unit; TAct unused)
__global__ void __launch_bounds__(kCoefThreads) deferred_coef_kernel(const __grid_constant__ DeferredParams p) {
  constexpr int C = deferred::kChunk, KP = 128;
  __shared__ alignas(16) float x[2][C][KP + 4];  // k^ (0) and q^ (1) of the nodes
  __shared__ deferred::ChunkPlan pl;
  __shared__ deferred::ChunkCoefs cf;
  __shared__ int32_t rows[C + 1];
  __shared__ int s_m, s_alg;
  const int tid = threadIdx.x;
  const int64_t i = blockIdx.x;
  const int hv = blockIdx.y, h = hv / p.r;
  const GroupMeta& g = p.group[0];
  const SeqInfo si = start_seq(p, g, i, false);
  deferred::LeanCoefs& lc = p.coefs[i * p.HV + hv];
  const int64_t T = si.tr.len, slot = si.slot0, K = p.K, V = p.V;
  if (tid == 0) {  // the replayed rows: up to the first path entry outside the log
    const int64_t n_rep =
        !si.pad && si.init && g.num_accepted.present() ? rules::clamp64(g.num_accepted(i), 0, p.log_cols) : 0;
    int m = 0;
    for (int64_t j = 0; j < n_rep && m <= C; ++j) {
      const int64_t row = p.path.present() ? p.path(i, j) : j;
      if (row < 0 || row >= p.log_cols) break;
      rows[m++] = static_cast<int32_t>(row);
    }
    const int alg = !si.pad && m + T <= C;
    s_m = m;
    s_alg = alg;
    lc.n = alg ? static_cast<int>(m + T) : 0;
    lc.m = m;
    lc.alg = alg;
    if (alg) {
      auto par = [&](int64_t t) { return p.parents.present() ? token_parent(p, si.tr.begin, t) : t - 1; };
      deferred::lean_chunk(m, static_cast<int>(T), par, pl);
    }
  }
  __syncthreads();
  if (!s_alg) return;
  const int m = s_m, n = pl.n;
  // the nodes' k^ (a replayed row's from the log, a token's from the prep kernel) and the tokens' q^
  auto prep_qk = [&](int u) { return DeferredPrep::qk(p, si.tr.begin + u - m, h); };
  for (int idx = tid; idx < n * KP; idx += kCoefThreads) {
    const int u = idx / KP, c = idx % KP;
    if (u < m) {
      x[0][u][c] = log_entry(p.log_in, p.log_in_rs, p, slot, rows[u], hv)[c];
    } else {
      x[0][u][c] = prep_qk(u)[128 + c];
      x[1][u][c] = prep_qk(u)[c];
    }
  }
  if (tid < n) {
    float gu, bu;
    if (tid < m) {
      const float* e = log_entry(p.log_in, p.log_in_rs, p, slot, rows[tid], hv);
      gu = e[K + V];
      bu = e[K + V + 1];
    } else {
      const float* gt = DeferredPrep::gates(p, si.tr.begin + tid - m, hv);
      gu = gt[0];
      bu = gt[1];
    }
    cf.g[tid] = gu;
    cf.dec[tid] = expf(gu);
    cf.beta[tid] = bu;
    lc.rows[tid] = tid < m ? rows[tid] : -1;
  }
  __syncthreads();
  if (tid < n) deferred::e_row(pl, cf.dec, tid, cf.E[tid]);
  if (tid == n) deferred::gammas(pl, cf.dec, cf.gamma);
  // the key products along the paths, a thread per (i, u), i <= u; q^ only for the step's tokens
  for (int idx = tid; idx < n * n; idx += kCoefThreads) {
    const int a = idx / n, u = idx % n;
    if (a > u) continue;
    const bool anc = deferred::is_ancestor(pl, a, u);
    float gk = 0.f, gq = 0.f;
    if (anc) {
      const float4* ka = reinterpret_cast<const float4*>(x[0][a]);
      const float4* ku = reinterpret_cast<const float4*>(x[0][u]);
      const float4* qu = reinterpret_cast<const float4*>(x[1][u]);
      const bool wk = a < u, wq = u >= m;
#pragma unroll 4
      for (int c = 0; c < KP / 4; ++c) {
        const float4 k4 = ka[c];
        if (wk) {
          const float4 b = ku[c];
          gk += k4.x * b.x + k4.y * b.y + k4.z * b.z + k4.w * b.w;
        }
        if (wq) {
          const float4 b = qu[c];
          gq += k4.x * b.x + k4.y * b.y + k4.z * b.z + k4.w * b.w;
        }
      }
    }
    cf.Gk[a][u] = gk;
    cf.Gq[a][u] = gq;
  }
  __syncthreads();
  if (tid < n) deferred::chunk_column(pl, cf, tid);
  __syncthreads();
  if (tid < n) deferred::lean_row_coefs(cf, n, m, tid, lc);
}

}  // namespace gdn::cuda
