// src/cuda/deferred/chunk_plan.h — the deferred-commit kernel's chunks (docs/contract.md §7), as plain
// host/device C++ (no CUDA headers), so that tests/test_deferred_chunks.cpp runs the same planning
// and per-row algebra on the CPU against the reference.
//
// The kernel (deferred.cuh) keeps one state W in registers and feeds it tokens in chunks of at most
// kChunk nodes: the replayed log rows (a chain), then the step's tokens (a chain, or a tree by
// token_parents). Within a chunk, node u's state is its parent's (or W's, for a chunk root) after
// u's update. A chunk that is one path along which W may move (runs_as_chain) is the plain
// recurrence on W, token by token. Any other chunk (branches, or a path after which W must stay)
// goes through the following algebra. With dec_u = exp(g_u), gamma_u the product of dec along u's path from W, and
// E[i][u] the product of dec over the path from node i (exclusive) down to u (E[u][u] = 1, 0 when
// i is not an ancestor of u), node u's state is
//     S_u = gamma_u W + sum_{i ancestor-or-self of u} E[i][u] d_i k_i^T
// so that, per state row, with p_u = W k_u and r_u = W q_u (two dot products per node and row,
// whatever the tree) and y_u = beta_u (v_u - gamma_u p_u),
//     d_u + beta_u sum_{i < u} E[i][u] (k_i . k_u) d_i = y_u,    i.e. d = T y, T = (I + L)^-1
//     o_u = gamma_u r_u + sum_{i <= u} E[i][u] (k_i . q_u) d_i = gamma_u r_u + (P y)_u
// with L and P row-independent (one per chunk and block: chunk_column), which is the recurrence of
// §1 in exact arithmetic. Node states are never materialised and W stays: a chunk after which W
// advances is a path, run as the recurrence.
#pragma once
#include <cstdint>

#include "common/seq_rules.h"  // GDN_HD

namespace gdn::cuda::deferred {

constexpr int kChunk = 16;  // nodes per chunk: a tree of up to kChunk nodes is one chunk

// One chunk: nodes in increasing token (or log row) order, so that parents precede children.
// Plain data (it lives in shared memory).
struct ChunkPlan {
  int n;                 // nodes
  int adv;               // after the chunk, W <- S of local node adv (-1: W stays)
  bool reset;            // before the chunk, W <- the committed state again (reloaded from the slot)
  int64_t node[kChunk];  // the step's token index within the sequence, or the replayed log row
  int lp[kChunk];        // local index of the parent, -1: W
  bool emit[kChunk];     // the node's output (and log entry) is written by this chunk
};

// Where the planning of a sequence's step tokens stands between chunks.
struct StepCursor {
  int64_t next;  // the first token not yet emitted
  int64_t base;  // the token whose state W holds, -1: the committed state
};

// The log rows replayed next: entries j0.. of at most n_rep, row_of(j) the log row of entry j or -1
// (a path entry outside the log: the replay ends there). A chain advancing W to its last node.
// Returns whether the replay goes on after this chunk.
template <typename RowOf>
GDN_HD bool plan_replay_chunk(const RowOf& row_of, int64_t n_rep, int64_t* j0, ChunkPlan& c) {
  c.n = 0;
  c.reset = false;
  bool ended = false;
  for (int k = 0; k < kChunk && *j0 + k < n_rep; ++k) {
    const int64_t row = row_of(*j0 + k);
    if (row < 0) {
      ended = true;
      break;
    }
    c.node[k] = row;
    c.lp[k] = k - 1;
    c.emit[k] = false;
    c.n = k + 1;
  }
  c.adv = c.n - 1;
  *j0 += c.n;
  return !ended && *j0 < n_rep;
}

// The step's tokens as a chain (no token_parents): the next kChunk tokens; W advances to the last
// one when tokens follow or when the final state is committed (`commit`).
GDN_HD void plan_chain_chunk(int64_t T, bool commit, StepCursor& cur, ChunkPlan& c) {
  const int64_t left = T - cur.next;
  c.n = static_cast<int>(left < kChunk ? left : kChunk);
  c.reset = false;
  for (int k = 0; k < c.n; ++k) {
    c.node[k] = cur.next + k;
    c.lp[k] = k - 1;
    c.emit[k] = true;
  }
  cur.next += c.n;
  c.adv = (cur.next < T || commit) ? c.n - 1 : -1;
  if (c.adv >= 0) cur.base = c.node[c.adv];
}

// Nodes of t's path below `base` (exclusive; -1: up to the root); *under: the path reaches base.
// par(u): u's parent in [0, u), or -1.
template <typename Par>
GDN_HD int64_t path_len(const Par& par, int64_t t, int64_t base, bool* under) {
  int64_t cnt = 0, u = t;
  while (u >= 0 && u != base) {
    ++cnt;
    u = par(u);
  }
  *under = base < 0 || u == base;
  return cnt;
}

GDN_HD int find_node(const ChunkPlan& c, int64_t u) {
  for (int k = 0; k < c.n; ++k)
    if (c.node[k] == u) return k;
  return -1;
}

// Whether every token of [from, T) lies below m (walking up its parents reaches m).
template <typename Par>
GDN_HD bool below_all(const Par& par, int64_t m, int64_t from, int64_t T) {
  for (int64_t t = from; t < T; ++t) {
    int64_t u = t;
    while (u > m) u = par(u);
    if (u != m) return false;
  }
  return true;
}

// The step's tokens as a tree (par as above): a chunk is ancestor-closed relative to W, so that
// every node's state follows from W and the chunk's own nodes. From the first token not emitted,
// tokens are taken in order with the ancestors the chunk lacks (already emitted, recomputed without
// output) while they fit. A tree of at most kChunk nodes is therefore one chunk; a larger one
// takes more, and:
//   - a chunk that is one path, full, whose last node is an ancestor of every token left,
//     advances W to that node (a chain-shaped tree is linear verify, chunk for chunk);
//   - a token whose path from W exceeds kChunk nodes (deeper than kChunk) first advances W along
//     that path, kChunk nodes at a time (chunks without output);
//   - a token not below W's node then resets W to the committed state (reloaded): only trees with
//     such deep paths read the state again.
template <typename Par>
GDN_HD void plan_tree_chunk(const Par& par, int64_t T, StepCursor& cur, ChunkPlan& c) {
  c.n = 0;
  c.adv = -1;
  c.reset = false;
  const int64_t t = cur.next;
  if (cur.base < 0 && t == 0 && T <= kChunk) {  // the whole tree (parents precede children)
    for (int k = 0; k < T; ++k) {
      c.node[k] = k;
      c.lp[k] = static_cast<int>(par(k));
      c.emit[k] = true;
    }
    c.n = static_cast<int>(T);
    cur.next = T;
    return;
  }
  bool under = true;
  int64_t cnt = path_len(par, t, cur.base, &under);
  if (!under) {
    c.reset = true;
    cur.base = -1;
    cnt = path_len(par, t, -1, &under);
  }
  if (cnt > kChunk) {  // the first kChunk nodes of t's path below W, W advanced to the last
    for (int k = 0; k < kChunk; ++k) {
      int64_t u = t;
      for (int64_t s = 0; s < cnt - 1 - k; ++s) u = par(u);
      c.node[k] = u;
      c.lp[k] = k - 1;
      c.emit[k] = false;
    }
    c.n = kChunk;
    c.adv = kChunk - 1;
    cur.base = c.node[kChunk - 1];
    return;
  }
  {  // t's path, root first
    int64_t u = t;
    for (int64_t k = cnt - 1; k >= 0; --k) {
      c.node[k] = u;
      c.emit[k] = false;
      u = par(u);
    }
    c.emit[cnt - 1] = true;
    c.n = static_cast<int>(cnt);
  }
  int64_t t2 = t + 1;
  for (; t2 < T; ++t2) {
    int64_t miss[kChunk];  // t2's path nodes the chunk lacks, t2 first
    int nm = 0;
    bool ok = true;
    for (int64_t u = t2;;) {
      if (u == cur.base) break;
      if (u < 0) {
        ok = cur.base < 0;
        break;
      }
      if (find_node(c, u) >= 0) break;
      if (c.n + nm + 1 > kChunk) {
        ok = false;
        break;
      }
      miss[nm++] = u;
      u = par(u);
    }
    if (!ok) break;
    for (int m = 0; m < nm; ++m) {  // insert, keeping the nodes in increasing order
      int k = c.n;
      while (k > 0 && c.node[k - 1] > miss[m]) {
        c.node[k] = c.node[k - 1];
        c.emit[k] = c.emit[k - 1];
        --k;
      }
      c.node[k] = miss[m];
      c.emit[k] = m == 0;
      ++c.n;
    }
  }
  cur.next = t2;
  bool path = true;
  for (int k = 0; k < c.n; ++k) {
    const int64_t pu = par(c.node[k]);
    c.lp[k] = pu < 0 || pu == cur.base ? -1 : find_node(c, pu);
    path = path && c.lp[k] == k - 1;
  }
  if (path && t2 < T && below_all(par, c.node[c.n - 1], t2, T)) {
    c.adv = c.n - 1;
    cur.base = c.node[c.adv];
  }
}

// Whether the kernel runs the chunk as the plain recurrence, a token at a time on W: the chunk is
// one path from W's node (each node's parent the node before it) and W either advances to its last
// node or is not used again after the chunk (`w_done`). Replays and linear verify always are;
// other chunks go through the algebra below.
GDN_HD bool runs_as_chain(const ChunkPlan& c, bool w_done) {
  if (c.adv != c.n - 1 && !w_done) return false;
  for (int k = 0; k < c.n; ++k)
    if (c.lp[k] != k - 1) return false;
  return true;
}

// Whether local node i is an ancestor of, or is, local node u.
GDN_HD bool is_ancestor(const ChunkPlan& c, int i, int u) {
  while (u > i) u = c.lp[u];
  return u == i;
}

// A chunk's coefficients (row-independent; in shared memory): dec_u = exp(g_u), beta_u, gamma_u,
// E (above), the key products Gk[i][u] = k_i . k_u (i < u) and Gq[i][u] = k_i . q_u (i <= u),
// both 0 where i is not an ancestor of u, and the per-row solution's T and P (lower triangular).
struct ChunkCoefs {
  float g[kChunk], dec[kChunk], beta[kChunk], gamma[kChunk];
  float E[kChunk][kChunk];
  float Gk[kChunk][kChunk], Gq[kChunk][kChunk];
  float T[kChunk][kChunk], P[kChunk][kChunk];
};

// Row i of E (E[i][u] for u >= i), from the plan and the decays.
GDN_HD void e_row(const ChunkPlan& c, const float* dec, int i, float* Ei) {
  Ei[i] = 1.f;
  for (int u = i + 1; u < c.n; ++u) Ei[u] = c.lp[u] >= i ? Ei[c.lp[u]] * dec[u] : 0.f;
}

// gamma_u = dec_u times its parent's gamma (1 for W).
GDN_HD void gammas(const ChunkPlan& c, const float* dec, float* gamma) {
  for (int u = 0; u < c.n; ++u) gamma[u] = (c.lp[u] < 0 ? 1.f : gamma[c.lp[u]]) * dec[u];
}

// Column j of T = (I + L)^-1, L[u][i] = beta_u E[i][u] Gk[i][u] (forward substitution; columns are
// independent: a thread each).
GDN_HD void t_column(const ChunkPlan& c, ChunkCoefs& cf, int j) {
  cf.T[j][j] = 1.f;
  for (int u = j + 1; u < c.n; ++u) {
    float s = 0.f;
    for (int i = j; i < u; ++i) s += cf.E[i][u] * cf.Gk[i][u] * cf.T[i][j];
    cf.T[u][j] = -cf.beta[u] * s;
  }
}
// P[u][j] (j <= u) of P = N^T T, N[l][u] = E[l][u] Gq[l][u], once T is solved.
GDN_HD float p_entry(const ChunkCoefs& cf, int u, int j) {
  float s = 0.f;
  for (int l = j; l <= u; ++l) s += cf.E[l][u] * cf.Gq[l][u] * cf.T[l][j];
  return s;
}
// Column j of T and of P.
GDN_HD void chunk_column(const ChunkPlan& c, ChunkCoefs& cf, int j) {
  t_column(c, cf, j);
  for (int u = j; u < c.n; ++u) cf.P[u][j] = p_entry(cf, u, j);
}

// One state row: y_u from its v and p; then o_u = gamma_u r_u + (P y)_u, y(i) the row's y of node i.
GDN_HD float row_y(const ChunkCoefs& cf, int u, float v, float p) { return cf.beta[u] * (v - cf.gamma[u] * p); }
template <typename YF>
GDN_HD float row_o(const ChunkCoefs& cf, int u, float r, const YF& y) {
  float s = cf.gamma[u] * r;
  for (int i = 0; i <= u; ++i) s += cf.P[u][i] * y(i);
  return s;
}


// The algebra kernel's (deferred_mma.cuh): a sequence's replay and step as one chunk of
// n = m + T <= kChunk nodes from the committed state W, the m replayed log rows (a chain) and then
// the step's T tokens (a chain, or a tree whose roots hang below the last replayed node). With the
// coefficients above, per state row, p_u = W k_u (every node), r_u = W q_u (the step's tokens) and
// y_u = beta_u v_u - (beta gamma)_u p_u:
//     o_u = gamma_u r_u + sum_{j <= u} Z[u][j] y_j           u >= m: Z[u] = P[u]
//     S_m = gamma_{m-1} W + sum_{i < m} c_i k_i^T,  c_i = sum_{j <= i} Z[i][j] y_j
//                                                            i < m: Z[i] = E[i][m-1] T[i]
// S_m, the replayed state, is the one committed (a verify step logs its tokens). Row-independent,
// per (sequence, value head): the kernel's block computes them, each of its row warps applies them.
struct LeanCoefs {
  int n, m;  // nodes, replayed rows
  float beta[kChunk], bgam[kChunk], gamma[kChunk];
  float Z[kChunk][kChunk];  // 0 above the diagonal and past n
  uint32_t anc[kChunk];     // bit i of anc[u]: node i is u or one of its ancestors
};

// The chunk of the lean algebra: par(t) step token t's parent in [0, t), or -1 (a root).
template <typename Par>
GDN_HD void lean_chunk(int m, int T, const Par& par, ChunkPlan& c) {
  c.n = m + T;
  c.adv = -1;
  c.reset = false;
  for (int u = 0; u < c.n; ++u) {
    const int64_t pt = u < m ? -1 : par(u - m);
    c.node[u] = u;
    c.lp[u] = u < m ? u - 1 : pt >= 0 ? m + static_cast<int>(pt) : m - 1;
    c.emit[u] = u >= m;
  }
}

// Bit i of the result: node i is u or one of its ancestors.
GDN_HD uint32_t ancestors(const ChunkPlan& c, int u) {
  uint32_t a = 1u << u;
  for (int v = c.lp[u]; v >= 0; v = c.lp[v]) a |= 1u << v;
  return a;
}
// Row u's scalars of the lean coefficients (from beta and gamma).
GDN_HD void lean_row_scalars(const ChunkPlan& c, const ChunkCoefs& cf, int u, LeanCoefs& lc) {
  lc.anc[u] = ancestors(c, u);
  lc.beta[u] = cf.beta[u];
  lc.bgam[u] = cf.beta[u] * cf.gamma[u];
  lc.gamma[u] = cf.gamma[u];
}
// Z[u][j], once T is solved (a step token's row is P's: p_entry).
GDN_HD float lean_z(const ChunkCoefs& cf, int n, int m, int u, int j) {
  return j > u || j >= n ? 0.f : u >= m ? p_entry(cf, u, j) : cf.E[u][m - 1] * cf.T[u][j];
}
// Row u of the lean coefficients, once every column of T is solved (t_column).
GDN_HD void lean_row_coefs(const ChunkPlan& c, const ChunkCoefs& cf, int n, int m, int u, LeanCoefs& lc) {
  lean_row_scalars(c, cf, u, lc);
  for (int j = 0; j < kChunk; ++j) lc.Z[u][j] = lean_z(cf, n, m, u, j);
}

}  // namespace gdn::cuda::deferred
