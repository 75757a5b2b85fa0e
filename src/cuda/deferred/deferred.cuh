// src/cuda/deferred/deferred.cuh — gated_delta_rule_recurrent's deferred-commit mode and token trees
// (docs/contract.md §7): per sequence, the slot's state, the replay of its logged tokens, the state
// committed once, and this step's tokens (a chain or a tree) from registers.
//   grid  = (ceil(V / kRows), HV, sequences), block = kWarps warps (plan::plan_deferred: four or one);
//           the block owns kRows rows of one (sequence, value head) in registers, W, from the one
//           state read to the one state write.
// Tokens go through W in chunks of up to deferred::kChunk nodes (chunk_plan.h: the planning and the
// algebra, unit-tested on the CPU): the block stages a chunk's k^, q^ (normalised once per token, a
// warp per token, with k^ . q^), its gates and the v of its rows in shared memory. A chunk that is
// a path along which W may move (the replay, linear verify, a tree's path chunks) is the plain
// recurrence on W's registers, token by token (chain_chunk): per row W k^ and W q^ (the lanes'
// partial sums of both reduce-scattered together), the output, the rank-one update; no barrier.
// A chunk with branches goes through the algebra (tree_chunk): the row-independent coefficients
// (decay products along the paths and the nodes' key products, a thread each; the triangular T
// and P, a thread per column), then per row W k_u and W q_u for each node and two small
// matrix-vector products. Node states are never formed and W stays.
// Lanes: 8 per row, each with EPL = KP / 8 elements of 2 rows, in pieces of 16 bytes of state
// (the 8 lanes of a row read 128 contiguous bytes per load, and their pieces of a staged vector
// without bank conflicts).
#pragma once
#include "cuda/common/rec_common.cuh"
#include "cuda/deferred/chunk_plan.h"
#include "cuda/deferred/deferred.h"

namespace gdn::cuda {

// Resident blocks per SM of the four-warp form the register budget must allow (K <= 128; half as
// many above; the one-warp form four times as many).
constexpr int kDeferredMinBlocks = 4;

template <typename TState, int KP, bool kSmall>
struct DeferredTraits {
  static constexpr int kLanes = 8, kGroups = 32 / kLanes, kRowsPerLane = 2;
  static constexpr int kWarps = kSmall ? 1 : 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRowsPerWarp = kGroups * kRowsPerLane;
  static constexpr int kRows = kWarps * kRowsPerWarp;
  static constexpr int kEPL = KP / kLanes;
  static constexpr int kVecElems = 16 / static_cast<int>(sizeof(TState));
  static constexpr int kPiece = kVecElems < kEPL ? kVecElems : kEPL;  // contiguous elements of a lane
  static constexpr int kBatch = kLanes / kRowsPerLane;                // vectors per reduce-scatter: kLanes sums
  static constexpr int kMinBlocks = (kSmall ? 4 * kDeferredMinBlocks : kDeferredMinBlocks) / (KP > 128 ? 2 : 1);
  static_assert(kRows == (kSmall ? plan::kDeferredSmallRows : plan::kDeferredRows), "the planner's block rows");
  static_assert(kEPL % kPiece == 0 && kPiece % 4 == 0, "pieces of whole float4s");
  static_assert(deferred::kChunk < kThreads, "a thread per chunk node, and one more");
};

constexpr int kParCache = 64;  // parents of a tree's first tokens, staged at once

template <int KP, int kRows>
struct DeferredSmem {
  static constexpr int C = deferred::kChunk;
  float x[2][C][KP + 4];         // the chunk's k^ (0) and q^ (1), zero past K; rows offset by 4 banks
  float v[C][kRows];             // v of the block's rows
  float dots[kRows][2 * C + 4];  // tree chunks, per row: W k_u (then y_u), then W q_u
  float kq[C];                   // the step's tokens: k^ . q^
  deferred::ChunkCoefs cf;
  deferred::ChunkPlan plan;
  int64_t rows[C];         // replay: the log rows of the next entries (-1: the replay ends)
  int64_t orow[C];         // the step's tokens: each node's row of o
  int32_t par[kParCache];  // tree: the first tokens' parents (outside [0, t): -1)
  bool more, chain;        // tokens follow the chunk; it runs as a chain (chain_chunk)
};

// kPiece staged floats (16-byte aligned) into registers.
template <int kPiece>
__device__ __forceinline__ void load_piece(const float* src, float (&x)[kPiece]) {
#pragma unroll
  for (int q = 0; q < kPiece; q += 4) {
    const float4 f = *reinterpret_cast<const float4*>(src + q);
    x[q] = f.x, x[q + 1] = f.y, x[q + 2] = f.z, x[q + 3] = f.w;
  }
}

// Two staged vectors' dot product, in a fixed order (every caller gets the same bits).
template <int KP>
__device__ __forceinline__ float staged_dot(const float* a, const float* b) {
  float s[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 4
  for (int c = 0; c < KP; c += 4) {
    const float4 x = *reinterpret_cast<const float4*>(a + c), y = *reinterpret_cast<const float4*>(b + c);
    s[0] += x.x * y.x;
    s[1] += x.y * y.y;
    s[2] += x.z * y.z;
    s[3] += x.w * y.w;
  }
  return (s[0] + s[1]) + (s[2] + s[3]);
}

// The 128-byte lines of [p, p + bytes) towards the L2, lines lane, lane + step, ...
__device__ __forceinline__ void prefetch_l2(const void* p, int64_t bytes, int lane, int step) {
  const char* c = static_cast<const char*>(p);
  for (int64_t off = static_cast<int64_t>(lane) * 128; off < bytes; off += static_cast<int64_t>(step) * 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(c + off));
}

// The row of o of the group's local token j: j (the primitive op) or its row in gdn_attention's
// buffers (-1 outside [0, out_rows): only in padding sequences).
__device__ __forceinline__ int64_t out_row(const DeferredParams& p, int64_t j) {
  return p.out_rows < 0 ? j : global_row(p.group[0], j, p.out_rows);
}

// Token t's parent within its sequence (of tokens from `begin`): in [0, t), else -1 (a root).
__device__ __forceinline__ int64_t token_parent(const DeferredParams& p, int64_t begin, int64_t t) {
  const int64_t par = p.parents(begin + t);
  return par >= 0 && par < t ? par : -1;
}

// Entry [slot, row, hv] of a log with slot stride rs.
template <typename F>
__device__ __forceinline__ F* log_entry(F* log, int64_t rs, const DeferredParams& p, int64_t slot, int64_t row,
                                        int hv) {
  return log + slot * rs + (row * p.HV + hv) * static_cast<int64_t>(p.K + p.V + 2);
}

// The replayed log rows of sequence i (into rows, when given: at most kChunk + 1), up to the first
// path entry outside the log; m + T <= kChunk: the chunk fits (deferred_mma.cuh's algebra kernel
// takes the sequence).
__device__ __forceinline__ int alg_replay(const DeferredParams& p, const GroupMeta& g, const SeqInfo& si, int64_t i,
                                          int32_t* rows) {
  constexpr int C = deferred::kChunk;
  const int64_t n_rep = !si.pad && si.init && g.num_accepted.present() ? rules::clamp64(g.num_accepted(i), 0, p.log_cols) : 0;
  int m = 0;
  for (int64_t j = 0; j < n_rep && m <= C; ++j) {
    const int64_t row = p.path.present() ? p.path(i, j) : j;
    if (row < 0 || row >= p.log_cols) break;
    if (rows != nullptr) rows[m] = static_cast<int32_t>(row);
    ++m;
  }
  return m;
}
__device__ __forceinline__ bool alg_fits(const DeferredParams& p, const GroupMeta& g, const SeqInfo& si, int64_t i) {
  return !si.pad && alg_replay(p, g, si, i, nullptr) + si.tr.len <= deferred::kChunk;
}

// One staged chain through W, a token at a time (node u's parent is node u - 1, node 0's is W's
// node): per row, the lane's partial sums of W k^ and (kOut) W q^ reduce-scattered together over
// the row's lanes, then
//     y = beta (v - dec W k^),  o = dec W q^ + y (k^ . q^),  W <- dec W + y k^
// with y from the lane holding the row's W k^, sent to the row's other lanes, and o written for
// emitted nodes (rows sm.orow) by the lane holding W q^. Starts after the barrier that
// follows the staging; warp-local (the caller's next barrier guards the shared memory).
template <bool kOut, typename TAct, typename Tr, int KP>
__device__ __forceinline__ void chain_chunk(const DeferredParams& p, const DeferredSmem<KP, Tr::kRows>& sm,
                                            float (&w)[Tr::kRowsPerLane][Tr::kEPL], int hv, int v0) {
  constexpr int L = Tr::kLanes, G = Tr::kGroups, R = Tr::kRowsPerLane, EPL = Tr::kEPL, kPiece = Tr::kPiece;
  constexpr int kSums = kOut ? 2 * R : R, kSpan = L / kSums;  // sums of a lane group, lanes holding each
  static_assert(kSums <= L && (kSums & (kSums - 1)) == 0, "one reduce-scatter over the row's lanes");
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, ln = lane % L;
  const int lrow0 = warp * Tr::kRowsPerWarp + lane / L;
  const int mine = ln / kSpan, jm = mine % R, lr = lrow0 + jm * G;  // the sum this lane holds, its row
  const bool writes = kOut && mine >= R && ln % kSpan == 0 && v0 + lr < p.V;
  TAct* const o = static_cast<TAct*>(p.o) + static_cast<int64_t>(hv) * p.V + v0 + lr;
  const deferred::ChunkPlan& pl = sm.plan;
  for (int u = 0; u < pl.n; ++u) {
    float k[EPL], x[kSums];
#pragma unroll
    for (int q = 0; q < kSums; ++q) x[q] = 0.f;
#pragma unroll
    for (int c = 0; c < EPL / kPiece; ++c) {
      const int e0 = piece_elem<KP, EPL, kPiece>(ln, c * kPiece);
      float(&kc)[kPiece] = *reinterpret_cast<float(*)[kPiece]>(&k[c * kPiece]);
      float qc[kPiece];
      load_piece<kPiece>(sm.x[0][u] + e0, kc);
      if constexpr (kOut) load_piece<kPiece>(sm.x[1][u] + e0, qc);
#pragma unroll
      for (int q = 0; q < kPiece; ++q)
#pragma unroll
        for (int j = 0; j < R; ++j) {
          x[j] += w[j][c * kPiece + q] * kc[q];
          if constexpr (kOut) x[R + j] += w[j][c * kPiece + q] * qc[q];
        }
    }
    const float sum = scatter_sum<L, kSums>(x, ln);  // W k^ of row jm (mine < R), else W q^
    const float dec = sm.cf.dec[u];
    const float ym = sm.cf.beta[u] * (sm.v[u][lr] - dec * sum);
    float y[R];
#pragma unroll
    for (int j = 0; j < R; ++j) y[j] = __shfl_sync(0xffffffffu, ym, j * kSpan, L);
    if (writes && pl.emit[u]) {
      o[sm.orow[u] * p.o_rs] = from_float<TAct>(dec * sum + pick<R>(y, jm) * sm.kq[u]);
    }
#pragma unroll
    for (int j = 0; j < R; ++j)
#pragma unroll
      for (int e = 0; e < EPL; ++e) w[j][e] = fmaf(y[j], k[e], dec * w[j][e]);
  }
}

// One staged chunk with branches (or a path after which W must stay) through the algebra of
// chunk_plan.h: the coefficients, W k_u and W q_u per row, the rows' solution (outputs of emitted
// nodes at rows sm.orow). W does not move. Starts after the barrier that follows the
// staging; ends with warp-local work (the caller's next barrier guards the shared memory).
template <typename TAct, typename Tr, int KP>
__device__ __forceinline__ void tree_chunk(const DeferredParams& p, DeferredSmem<KP, Tr::kRows>& sm,
                                           const float (&w)[Tr::kRowsPerLane][Tr::kEPL], int hv, int v0) {
  constexpr int L = Tr::kLanes, G = Tr::kGroups, R = Tr::kRowsPerLane, EPL = Tr::kEPL, kPiece = Tr::kPiece;
  constexpr int kB = Tr::kBatch, C = deferred::kChunk, kSub = 32 / Tr::kRowsPerWarp;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, ln = lane % L;
  const int lrow0 = warp * Tr::kRowsPerWarp + lane / L;  // this lane's row j: lrow0 + j G
  const deferred::ChunkPlan& pl = sm.plan;
  deferred::ChunkCoefs& cf = sm.cf;
  const int n = pl.n;
  // E, gamma (a thread each) and the key products, a thread each: Gk of the pairs a < u (the
  // first n (n - 1) / 2 threads), Gq of the pairs a <= u (the next n (n + 1) / 2), n * n in all
  if (tid < n) deferred::e_row(pl, cf.dec, tid, cf.E[tid]);
  if (tid == C) deferred::gammas(pl, cf.dec, cf.gamma);
  const int nk = n * (n - 1) / 2;
  for (int pi = tid; pi < n * n; pi += Tr::kThreads) {
    const bool gk = pi < nk;
    int a = gk ? pi : pi - nk, u = 0;
    while (a > u) a -= ++u;  // pair index -> (a, u), a <= u: (0, 0), (0, 1), (1, 1), (0, 2), ...
    if (gk) ++u;             // Gk: (0, 1), (0, 2), (1, 2), ...
    const bool anc = deferred::is_ancestor(pl, a, u);
    if (gk) cf.Gk[a][u] = anc ? staged_dot<KP>(sm.x[0][a], sm.x[0][u]) : 0.f;
    else cf.Gq[a][u] = anc ? staged_dot<KP>(sm.x[0][a], sm.x[1][u]) : 0.f;
  }
  __syncthreads();

  // T and P (a thread per column), beside W k_u (vectors 0..n-1) and W q_u (n..2n-1), kB at a time
  if (tid < n) deferred::chunk_column(pl, cf, tid);
  const int nv = 2 * n;
  for (int b0 = 0; b0 < nv; b0 += kB) {
    float x[kB * R];
#pragma unroll
    for (int q = 0; q < kB * R; ++q) x[q] = 0.f;
#pragma unroll
    for (int vb = 0; vb < kB; ++vb) {
      const int vec = b0 + vb < nv ? b0 + vb : 0;  // past the list: a vector whose sums are not kept
      const float* src = vec < n ? sm.x[0][vec] : sm.x[1][vec - n];
#pragma unroll
      for (int c = 0; c < EPL / kPiece; ++c) {
        float xe[kPiece];
        load_piece<kPiece>(src + piece_elem<KP, EPL, kPiece>(ln, c * kPiece), xe);
#pragma unroll
        for (int q = 0; q < kPiece; ++q)
#pragma unroll
          for (int j = 0; j < R; ++j) x[vb * R + j] += w[j][c * kPiece + q] * xe[q];
      }
    }
    const float sum = scatter_sum<L, kB * R>(x, ln);  // lane ln: value ln = vector ln / R, row ln % R
    if (b0 + ln / R < nv) sm.dots[lrow0 + (ln % R) * G][b0 + ln / R] = sum;
  }
  __syncthreads();

  // the rows' solution: kSub lanes per row of the warp, nodes u = sub, sub + kSub, ...
  const int lr = warp * Tr::kRowsPerWarp + lane / kSub, sub = lane % kSub, vi = v0 + lr;
  float* const dots = sm.dots[lr];
  for (int u = sub; u < n; u += kSub) dots[u] = deferred::row_y(cf, u, sm.v[u][lr], dots[u]);
  __syncwarp();
  TAct* const o = static_cast<TAct*>(p.o) + static_cast<int64_t>(hv) * p.V + vi;
  auto y = [&](int i) { return dots[i]; };
  for (int u = sub; u < n; u += kSub)
    if (pl.emit[u] && vi < p.V)
      o[sm.orow[u] * p.o_rs] = from_float<TAct>(deferred::row_o(cf, u, dots[n + u], y));
}

template <typename TAct, typename TState, int KP, bool kDense, bool kSmall>
__global__ void __launch_bounds__(DeferredTraits<TState, KP, kSmall>::kThreads,
                                  DeferredTraits<TState, KP, kSmall>::kMinBlocks)
    deferred_kernel(const __grid_constant__ DeferredParams p) {
  using Tr = DeferredTraits<TState, KP, kSmall>;
  constexpr int L = Tr::kLanes, G = Tr::kGroups, R = Tr::kRowsPerLane, EPL = Tr::kEPL, kPiece = Tr::kPiece;
  constexpr int kRows = Tr::kRows, kThreads = Tr::kThreads, C = deferred::kChunk;
  static_assert(sizeof(DeferredSmem<KP, kRows>) <= 48 * 1024, "static shared memory");
  __shared__ __align__(16) DeferredSmem<KP, kRows> sm;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, ln = lane % L;
  const int hv = blockIdx.y, h = hv / p.r, v0 = blockIdx.x * kRows;
  const int lrow0 = warp * Tr::kRowsPerWarp + lane / L;
  const GroupMeta& g = p.group[0];
  const int64_t i = blockIdx.z;
  const SeqInfo si = start_seq(p, g, i, false);  // slot0: the sequence's slot; pad: unusable
  if (p.alg_before && (si.pad || alg_fits(p, g, si, i))) return;  // the algebra kernel took it
  const rules::TokenRange tr = si.tr;
  const int64_t slot = si.slot0;
  float w[R][EPL];
  auto load_w = [&](bool from_slot) {
#pragma unroll
    for (int j = 0; j < R; ++j) {
#pragma unroll
      for (int e = 0; e < EPL; ++e) w[j][e] = 0.f;
      if (from_slot && v0 + lrow0 + j * G < p.V)
        load_row<TState, KP, EPL, kDense, kPiece>(p, slot, hv, v0 + lrow0 + j * G, ln, w[j]);
    }
  };
  auto store_w = [&]() {
#pragma unroll
    for (int j = 0; j < R; ++j)
      if (v0 + lrow0 + j * G < p.V)
        store_row<TState, KP, EPL, kDense, kPiece>(p, slot, hv, v0 + lrow0 + j * G, ln, w[j]);
  };
  bool pad = si.pad;
  if (p.out_rows >= 0) {  // gdn_attention: a token outside the buffers makes its sequence padding
    bool bad = si.past;
    for (int64_t t = tid; t < tr.len; t += kThreads) bad |= out_row(p, tr.begin + t) < 0;
    pad = __syncthreads_or(bad) || pad;
  }
  load_w(!pad && si.init);
  TAct* const o = static_cast<TAct*>(p.o) + static_cast<int64_t>(hv) * p.V + v0;
  if (pad) {  // nothing read or written but zero outputs (at the rows that exist)
    for (int64_t idx = tid; idx < tr.len * kRows; idx += kThreads) {
      const int64_t row = out_row(p, tr.begin + idx / kRows);
      if (row >= 0 && v0 + idx % kRows < p.V) o[row * p.o_rs + idx % kRows] = from_float<TAct>(0.f);
    }
    return;
  }
  const int64_t n_rep =
      si.init && g.num_accepted.present() ? rules::clamp64(g.num_accepted(i), 0, p.log_cols) : 0;
  const int64_t K = p.K, V = p.V;
  {  // the first chunk's token inputs towards the L2 (a warp per token), read after the replay
    const int64_t first = tr.len < C ? tr.len : C;
    for (int64_t t = warp; t < first; t += Tr::kWarps) {
      const int64_t row = tr.begin + t;
      prefetch_l2(q_row<TAct>(p, row, h), K * static_cast<int64_t>(sizeof(TAct)), lane, 32);
      prefetch_l2(k_row<TAct>(p, row, h), K * static_cast<int64_t>(sizeof(TAct)), lane, 32);
      const TAct* v = static_cast<const TAct*>(p.src.v) + row * p.src.v_rs + hv * V + v0;
      prefetch_l2(v, (V - v0 < kRows ? V - v0 : kRows) * static_cast<int64_t>(sizeof(TAct)), lane, 32);
    }
  }

  // 1. the replay: chains of logged rows (k^, v, g, beta as consumed) through W (chain_chunk)
  int64_t j0 = 0;
  for (bool more = n_rep > 0; more;) {
    if (tid < C) {
      const int64_t j = j0 + tid;
      int64_t row = -1;
      if (j < n_rep) {
        row = p.path.present() ? p.path(i, j) : j;
        if (row < 0 || row >= p.log_cols) row = -1;
      }
      sm.rows[tid] = row;
    }
    __syncthreads();  // the rows staged; the previous chunk consumed
    if (tid == 0) {
      int64_t jj = j0;
      sm.more = deferred::plan_replay_chunk([&](int64_t j) { return sm.rows[j - j0]; }, n_rep, &jj, sm.plan);
    }
    __syncthreads();
    const int n = sm.plan.n;
    more = sm.more;
    j0 += n;
    for (int idx = tid; idx < n * KP; idx += kThreads) {
      const float* e = log_entry(p.log_in, p.log_in_rs, p, slot, sm.plan.node[idx / KP], hv);
      sm.x[0][idx / KP][idx % KP] = idx % KP < K ? e[idx % KP] : 0.f;
    }
    for (int idx = tid; idx < n * kRows; idx += kThreads) {
      const float* e = log_entry(p.log_in, p.log_in_rs, p, slot, sm.plan.node[idx / kRows], hv);
      sm.v[idx / kRows][idx % kRows] = v0 + idx % kRows < V ? e[K + v0 + idx % kRows] : 0.f;
    }
    if (tid < n) {
      const float* e = log_entry(p.log_in, p.log_in_rs, p, slot, sm.plan.node[tid], hv);
      sm.cf.dec[tid] = expf(e[K + V]);
      sm.cf.beta[tid] = e[K + V + 1];
    }
    __syncthreads();
    chain_chunk<false, TAct, Tr, KP>(p, sm, w, hv, v0);
  }

  // 2. the one state write: the replayed state, before a verify step's tokens (or a sequence of none)
  const bool commit_before = p.log_tokens || tr.len == 0;
  if (commit_before) store_w();
  if (tr.len == 0) return;

  // 3. the step's tokens, in chunks planned by thread 0 (chunk_plan.h)
  const bool tree = p.parents.present();
  if (tree)
    for (int64_t t = tid; t < tr.len && t < kParCache; t += kThreads)
      sm.par[t] = static_cast<int32_t>(token_parent(p, tr.begin, t));
  float A, dtb;
  head_decay(p, p.gates, hv, A, dtb);
  deferred::StepCursor cur{0, -1};  // thread 0's
  for (bool more = true; more;) {
    __syncthreads();  // the parents staged; the previous chunk consumed
    if (tid == 0) {
      if (tree) {
        auto par = [&](int64_t t) { return t < kParCache ? sm.par[t] : token_parent(p, tr.begin, t); };
        deferred::plan_tree_chunk(par, tr.len, cur, sm.plan);
      } else {
        deferred::plan_chain_chunk(tr.len, !p.log_tokens, cur, sm.plan);
      }
      sm.more = cur.next < tr.len;
      sm.chain = deferred::runs_as_chain(sm.plan, !sm.more && commit_before);  // W unused after the last
    }
    __syncthreads();
    const deferred::ChunkPlan& pl = sm.plan;
    const int n = pl.n;
    more = sm.more;
    const bool chain = sm.chain;
    if (pl.reset) load_w(true);  // the committed state, stored above by these threads
    // k^ and q^ (a warp per token: its norms once), the gates, v of the block's rows
    constexpr int kPer = (KP + 31) / 32;
    for (int u = warp; u < n; u += Tr::kWarps) {
      const int64_t row = tr.begin + pl.node[u];
      const TAct* q = q_row<TAct>(p, row, h);
      const TAct* k = k_row<TAct>(p, row, h);
      float qv[kPer], kv[kPer], qq = 0.f, kk = 0.f, kq = 0.f;
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        const int c = lane + 32 * e;
        qv[e] = c < K ? to_float(q[c]) : 0.f;
        kv[e] = c < K ? to_float(k[c]) : 0.f;
        qq += qv[e] * qv[e];
        kk += kv[e] * kv[e];
      }
      qq = group_sum<32>(qq);
      kk = group_sum<32>(kk);
      const float kn = p.gates.l2norm ? 1.f / sqrtf(kk + 1e-6f) : 1.f;          // k^ = k / |k|
      const float qn = p.gates.l2norm ? p.scale / sqrtf(qq + 1e-6f) : p.scale;  // q^ = q / |q| * scale
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        const int c = lane + 32 * e;
        if (c < KP) {
          const float kh = kv[e] * kn, qh = qv[e] * qn;
          sm.x[0][u][c] = kh;
          sm.x[1][u][c] = qh;
          kq += kh * qh;
        }
      }
      kq = group_sum<32>(kq);  // the same order in every block: the same bits
      if (lane == 0) {
        sm.kq[u] = kq;
        sm.orow[u] = out_row(p, row);
        const GateValues gv = gate_values(p.gates, p.a(row * p.src.a_rs + hv), p.b(row * p.src.b_rs + hv), A, dtb);
        sm.cf.g[u] = gv.g;
        sm.cf.dec[u] = expf(gv.g);
        sm.cf.beta[u] = gv.beta;
      }
    }
    for (int idx = tid; idx < n * kRows; idx += kThreads) {
      const int u = idx / kRows, r = idx % kRows;
      sm.v[u][r] = v0 + r < V ? to_float(v_elem<TAct>(p, tr.begin + pl.node[u], hv, v0, r)) : 0.f;
    }
    __syncthreads();
    if (p.log_tokens) {  // the emitted tokens' entries (rows < log_cols): k^, g, beta by the first row block
      constexpr int kW = KP + 2;
      if (blockIdx.x == 0)
        for (int idx = tid; idx < n * kW; idx += kThreads) {
          const int u = idx / kW, c = idx % kW;
          if (!pl.emit[u] || pl.node[u] >= p.log_cols || (c < KP && c >= K)) continue;
          float* e = log_entry(p.log_out, p.log_out_rs, p, slot, pl.node[u], hv);
          if (c < KP) e[c] = sm.x[0][u][c];
          else e[K + V + c - KP] = c == KP ? sm.cf.g[u] : sm.cf.beta[u];
        }
      for (int idx = tid; idx < n * kRows; idx += kThreads) {  // v of each block's rows
        const int u = idx / kRows, r = idx % kRows;
        if (!pl.emit[u] || pl.node[u] >= p.log_cols || v0 + r >= V) continue;
        log_entry(p.log_out, p.log_out_rs, p, slot, pl.node[u], hv)[K + v0 + r] = sm.v[u][r];
      }
    }
    if (chain) chain_chunk<true, TAct, Tr, KP>(p, sm, w, hv, v0);
    else tree_chunk<TAct, Tr, KP>(p, sm, w, hv, v0);
  }

  // 2'. the one state write of a step whose tokens are all accepted (log_tokens false): after them
  if (!commit_before) store_w();
}

}  // namespace gdn::cuda
