// The CUDA deferred kernel's chunks (src/cuda/deferred/chunk_plan.h), on the CPU:
//   DeferredChunks.PlansCoverEveryTokenOnce: for random trees (up to 40 nodes, some deeper than a
//     chunk, hostile parents) every token is emitted exactly once, a chunk holds at most kChunk
//     nodes in increasing order, its local parents are the tokens' parents (or W's node), and it
//     is ancestor-closed; a tree of at most kChunk nodes is one chunk; W is reset to the committed
//     state only after a path deeper than a chunk and advances only along a path (a chunk the
//     kernel runs as the recurrence); a chain-shaped tree plans exactly as the chain (linear
//     verify), chunk for chunk, and every chunk of linear verify runs as the recurrence.
//   DeferredChunks.ModelEqualsTheReference: a float32 model of the kernel built on those plans: paths
//     along which W moves as the recurrence, other chunks through the algebra (per row: two products
//     with W per node, the triangular solution)
//     against the CPU reference (docs/contract.md §7) on random batches: linear verify, trees of up
//     to 40 nodes (resets and deep advances included), prefills of up to 40 tokens without logging,
//     replays through accepted paths cut by entries outside the log, sequences without initial state,
//     of zero tokens and padding; outputs and committed states within relative L2 1e-5 (float32
//     state; 1e-2 bf16), the written logs bit for bit and every other log row untouched.
//   DeferredChunks.LeanAlgebraEqualsTheRecurrence: the lean form's algebra (lean_chunk,
//     lean_row_coefs: one chunk of m replayed rows and T step tokens, chains and trees, m + T up to
//     kChunk) applied per row as deferred_lean.cuh applies it, against the recurrence in double
//     along every node's path: outputs and the replayed state within relative L2 1e-5.
#include <algorithm>
#include <functional>

#include "cpu/gdr_util.h"
#include "cuda/deferred/chunk_plan.h"
#include "prop_ops.h"

namespace gdn::prop {
namespace {

using cuda::deferred::ChunkCoefs;
using cuda::deferred::ChunkPlan;
using cuda::deferred::kChunk;
using cuda::deferred::StepCursor;

// Random parents of T tokens: chains, bushes and hostile values (outside [0, t): roots).
std::vector<int64_t> random_parents(Rng& r, int64_t T) {
  std::vector<int64_t> p(T);
  const int shape = static_cast<int>(r.randint(0, 3));
  for (int64_t t = 0; t < T; ++t) {
    if (t == 0) p[t] = r.coin() ? -1 : 5;
    else if (shape == 0) p[t] = t - 1;                                      // chain
    else if (shape == 1) p[t] = r.coin(0.8) ? t - 1 : r.randint(0, t - 1);  // long paths, branches
    else if (shape == 2) p[t] = r.randint(-1, t - 1);                       // bushy
    else p[t] = r.coin(0.1) ? (r.coin() ? t + 3 : int64_t{1} << 40) : r.randint(0, t - 1);
  }
  return p;
}
int64_t norm_parent(const std::vector<int64_t>& p, int64_t t) { return p[t] >= 0 && p[t] < t ? p[t] : -1; }

std::vector<ChunkPlan> plan_all(int64_t T, const std::vector<int64_t>* parents, bool commit) {
  std::vector<ChunkPlan> out;
  StepCursor cur{0, -1};
  auto par = [&](int64_t t) { return norm_parent(*parents, t); };
  while (cur.next < T) {
    ChunkPlan c;
    if (parents) cuda::deferred::plan_tree_chunk(par, T, cur, c);
    else cuda::deferred::plan_chain_chunk(T, commit, cur, c);
    out.push_back(c);
    if (out.size() > static_cast<size_t>(T * T + 8)) break;  // no progress: reported below
  }
  return out;
}

TEST(DeferredChunks, PlansCoverEveryTokenOnce) {
  Rng r(9100);
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t T = r.randint(1, 40);
    const std::vector<int64_t> par = random_parents(r, T);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " T " << T);
    const std::vector<ChunkPlan> plans = plan_all(T, &par, false);
    std::vector<int> emitted(T, 0);
    int64_t base = -1;
    bool deep = false;  // a chunk without output (a path deeper than a chunk) came before
    for (const ChunkPlan& c : plans) {
      if (c.reset) EXPECT_TRUE(deep) << "the committed state read again without a deep path";
      if (c.reset) base = -1;
      deep = deep || std::none_of(c.emit, c.emit + c.n, [](bool e) { return e; });
      ASSERT_GE(c.n, 1);
      ASSERT_LE(c.n, kChunk);
      for (int k = 0; k < c.n; ++k) {
        if (k > 0) EXPECT_LT(c.node[k - 1], c.node[k]) << "nodes in increasing order";
        const int64_t pu = norm_parent(par, c.node[k]);
        if (c.lp[k] >= 0) EXPECT_EQ(c.node[c.lp[k]], pu) << "local parent";
        else EXPECT_TRUE(pu == base || (pu < 0 && base < 0)) << "a chunk root hangs from W's node";
        emitted[c.node[k]] += c.emit[k];
      }
      if (c.adv >= 0) base = c.node[c.adv];
      if (c.adv >= 0) EXPECT_TRUE(cuda::deferred::runs_as_chain(c, false)) << "W advances only along a path";
    }
    for (int64_t t = 0; t < T; ++t) EXPECT_EQ(emitted[t], 1) << "token " << t;
    if (T <= kChunk) EXPECT_EQ(plans.size(), 1u) << "a tree of at most kChunk nodes is one chunk";
  }
  for (int64_t T = 1; T <= 40; ++T) {  // chain-shaped trees plan as chains
    std::vector<int64_t> chain(T);
    for (int64_t t = 0; t < T; ++t) chain[t] = t - 1;
    const std::vector<ChunkPlan> a = plan_all(T, &chain, false), b = plan_all(T, nullptr, false);
    ASSERT_EQ(a.size(), b.size()) << "T " << T;
    for (size_t j = 0; j < a.size(); ++j) {
      EXPECT_TRUE(cuda::deferred::runs_as_chain(b[j], j + 1 == b.size())) << "linear verify runs as the recurrence";
      EXPECT_EQ(a[j].n, b[j].n);
      EXPECT_EQ(a[j].adv, b[j].adv);
      EXPECT_EQ(a[j].reset, b[j].reset);
      for (int k = 0; k < a[j].n; ++k)
        EXPECT_TRUE(a[j].node[k] == b[j].node[k] && a[j].lp[k] == b[j].lp[k] && a[j].emit[k] == b[j].emit[k])
            << "T " << T << " chunk " << j << " node " << k;
    }
  }
}

// One chunk on W (V x K floats) from per-node inputs, as the kernel does it: a path along which W
// may move (runs_as_chain) token by token, W moving (per row W k^, W q^, y, the output, the update);
// any other chunk through the algebra (products with W, the coefficients, the rows' solution; W
// stays). o[u][v] written for emitted nodes.
struct NodeIn {
  std::vector<float> k, q, v;
  float g = 0.f, beta = 0.f;
};
void run_chunk(const ChunkPlan& c, const std::vector<NodeIn>& in, bool outputs, bool w_done, int64_t V, int64_t K,
               std::vector<float>& W, std::vector<std::vector<float>>& o) {
  auto dot = [&](const float* a, const float* b) {
    float s = 0.f;
    for (int64_t e = 0; e < K; ++e) s += a[e] * b[e];
    return s;
  };
  if (cuda::deferred::runs_as_chain(c, w_done)) {
    for (int u = 0; u < c.n; ++u) {
      const float* k = in[u].k.data();
      const float dec = std::exp(in[u].g), kq = outputs ? dot(k, in[u].q.data()) : 0.f;
      for (int64_t vi = 0; vi < V; ++vi) {
        float* row = W.data() + vi * K;
        const float y = in[u].beta * (in[u].v[vi] - dec * dot(row, k));
        if (outputs) o[u][vi] = dec * dot(row, in[u].q.data()) + y * kq;
        for (int64_t e = 0; e < K; ++e) row[e] = dec * row[e] + y * k[e];
      }
    }
    return;
  }
  EXPECT_LT(c.adv, 0) << "W advances only along a path";
  ChunkCoefs cf{};
  for (int u = 0; u < c.n; ++u) {
    cf.g[u] = in[u].g;
    cf.dec[u] = std::exp(in[u].g);
    cf.beta[u] = in[u].beta;
  }
  for (int i = 0; i < c.n; ++i) cuda::deferred::e_row(c, cf.dec, i, cf.E[i]);
  cuda::deferred::gammas(c, cf.dec, cf.gamma);
  for (int i = 0; i < c.n; ++i)
    for (int u = i; u < c.n; ++u) {
      const bool anc = cuda::deferred::is_ancestor(c, i, u);
      cf.Gk[i][u] = i < u && anc ? dot(in[i].k.data(), in[u].k.data()) : 0.f;
      cf.Gq[i][u] = anc ? dot(in[i].k.data(), in[u].q.data()) : 0.f;
    }
  for (int j = 0; j < c.n; ++j) cuda::deferred::chunk_column(c, cf, j);
  for (int64_t vi = 0; vi < V; ++vi) {
    const float* row = W.data() + vi * K;
    float y[kChunk];
    for (int u = 0; u < c.n; ++u) y[u] = cuda::deferred::row_y(cf, u, in[u].v[vi], dot(row, in[u].k.data()));
    auto yf = [&](int i) { return y[i]; };
    for (int u = 0; u < c.n; ++u)
      if (c.emit[u]) o[u][vi] = cuda::deferred::row_o(cf, u, dot(row, in[u].q.data()), yf);
  }
}

// The kernel's algorithm for every (sequence, value head) of a deferred call, on host tensors.
void model_deferred(const GatedDeltaRuleArgs& a) {
  const cpu::GdrShape s = cpu::gdr_shape(a);
  const int64_t n = a.state_indices.shape[0], log_cols = a.verify_log.shape[1], K = s.K, V = s.V;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t hv = 0; hv < s.HV; ++hv) {
      const auto tr = cpu::sequence_tokens(a.query_start_loc, i, a.q.shape[0]);
      const int64_t slot = cpu::load_index1(a.state_indices, i);
      if (!rules::slot_valid(slot, s.num_slots, s.has_null, s.null_id)) {
        for (int64_t t = 0; t < tr.len; ++t) cpu::zero_output(a, s, tr.begin + t, hv);
        continue;
      }
      const bool init = cpu::load_bool(a.has_initial_state, i, true);
      std::vector<float> W(V * K, 0.f);
      if (init) cpu::load_state(a, s, slot, hv, W.data());
      const int64_t n_rep = init ? std::clamp<int64_t>(cpu::load_index1(a.num_accepted_tokens, i), 0, log_cols) : 0;
      auto row_of = [&](int64_t j) {
        const int64_t row = a.accepted_path.present() ? cpu::load_index2(a.accepted_path, i, j) : j;
        return row >= 0 && row < log_cols ? row : int64_t{-1};
      };
      std::vector<std::vector<float>> o(kChunk, std::vector<float>(V));
      for (int64_t j0 = 0; j0 < n_rep;) {
        ChunkPlan c;
        const bool more = cuda::deferred::plan_replay_chunk(row_of, n_rep, &j0, c);
        std::vector<NodeIn> in(c.n);
        for (int u = 0; u < c.n; ++u) {
          const float* e = cpu::log_entry(a.verify_log, slot, c.node[u], hv);
          in[u] =
              NodeIn{std::vector<float>(e, e + K), {}, std::vector<float>(e + K, e + K + V), e[K + V], e[K + V + 1]};
        }
        run_chunk(c, in, false, false, V, K, W, o);
        if (!more) break;
      }
      const bool commit_before = a.log_tokens || tr.len == 0;
      if (commit_before) cpu::store_state(a, s, slot, hv, W.data());
      std::vector<int64_t> par;
      if (a.token_parents.present())
        for (int64_t t = 0; t < tr.len; ++t) par.push_back(cpu::load_index1(a.token_parents, tr.begin + t));
      auto parent = [&](int64_t t) { return norm_parent(par, t); };
      StepCursor cur{0, -1};
      while (cur.next < tr.len) {
        ChunkPlan c;
        if (a.token_parents.present()) cuda::deferred::plan_tree_chunk(parent, tr.len, cur, c);
        else cuda::deferred::plan_chain_chunk(tr.len, !a.log_tokens, cur, c);
        if (c.reset) cpu::load_state(a, s, slot, hv, W.data());
        std::vector<NodeIn> in(c.n);
        for (int u = 0; u < c.n; ++u) {
          std::vector<float> qb(K), kb(K), vb(V);
          cpu::TokenInputs ti{qb.data(), kb.data(), vb.data()};
          cpu::load_token(a, s, tr.begin + c.node[u], hv, &ti);
          in[u] = NodeIn{kb, qb, vb, ti.g, ti.beta};
          if (a.log_tokens && c.emit[u] && c.node[u] < log_cols) {
            float* e = cpu::log_entry(a.verify_log_out, slot, c.node[u], hv);
            std::copy(kb.begin(), kb.end(), e);
            std::copy(vb.begin(), vb.end(), e + K);
            e[K + V] = ti.g;
            e[K + V + 1] = ti.beta;
          }
        }
        run_chunk(c, in, true, cur.next >= tr.len && commit_before, V, K, W, o);
        for (int u = 0; u < c.n; ++u)
          if (c.emit[u])
            for (int64_t vi = 0; vi < V; ++vi)
              cpu::store_f(a.o.data, a.o.dtype, (tr.begin + c.node[u]) * a.o.stride[0] + hv * V + vi, o[u][vi]);
      }
      if (!commit_before) cpu::store_state(a, s, slot, hv, W.data());
    }
}

TEST(DeferredChunks, ModelEqualsTheReference) {
  constexpr int64_t H = 1, HV = 2, K = 16, V = 8, kCols = 40, n = 6, num_slots = 9;
  for (DType state : {DType::kFloat32, DType::kBFloat16})
    for (int trial = 0; trial < 24; ++trial) {
      Rng r(9200 + trial);
      const int kind = trial % 3;  // 0 linear verify, 1 trees, 2 prefill (log_tokens false)
      std::vector<int64_t> lens(n), replay(n), slot_ids(n);
      for (int64_t i = 0; i < n; ++i) {
        lens[i] = i == 4 ? 0 : r.randint(1, r.coin() ? 6 : 40);
        replay[i] = r.randint(-2, kCols + 3);
        slot_ids[i] = i + 1;
      }
      slot_ids[5] = 0;  // the null block: padding
      const std::vector<int64_t> qsl_v = prefix_sum(lens);
      const int64_t T = qsl_v.back();
      std::vector<int64_t> parents;
      for (int64_t i = 0; i < n; ++i) {
        const std::vector<int64_t> p = random_parents(r, lens[i]);
        parents.insert(parents.end(), p.begin(), p.end());
      }
      std::vector<std::vector<int64_t>> path(n, std::vector<int64_t>(kCols));
      for (auto& row : path)
        for (int64_t& e : row) e = r.coin(0.03) ? (r.coin() ? -1 : kCols) : r.randint(0, kCols - 1);
      GdrIn in = make_gdr_in(r, T, H, HV, K, V, DType::kFloat32, DType::kFloat32);
      Buf pool = make_ssm_pool(state, num_slots, HV, K, V, StateLayout::kVK);
      fill_normal(pool, r, 0.5);
      Buf log_in(DType::kFloat32, {num_slots, kCols, HV, K + V + 2}), log_out = log_in;
      GdrIn prev = make_gdr_in(r, kCols, H, HV, K, V, DType::kFloat32, DType::kFloat32);
      for (int64_t sl = 0; sl < num_slots; ++sl)  // plausible logged tokens: unit keys, decays <= 0, beta in (0, 1)
        for (int64_t j = 0; j < kCols; ++j)
          for (int64_t hv = 0; hv < HV; ++hv) {
            const int64_t e = ((sl * kCols + j) * HV + hv) * (K + V + 2);
            double kk = 0;
            for (int64_t c = 0; c < K; ++c) kk += prev.k.get(j * K + c) * prev.k.get(j * K + c);
            for (int64_t c = 0; c < K; ++c) log_in.set(e + c, prev.k.get(j * K + c) / std::sqrt(kk));
            for (int64_t c = 0; c < V; ++c) log_in.set(e + K + c, prev.v.get((j * HV + hv) * V + c));
            log_in.set(e + K + V, -std::fabs(prev.a.get(j * HV + hv)));
            log_in.set(e + K + V + 1, 1.0 / (1.0 + std::exp(-prev.b.get(j * HV + hv))));
          }
      fill_normal(log_out, r, 1.0);
      Buf qsl = index_buf(qsl_v), slots = index_buf(slot_ids), nacc = index_buf(replay);
      Buf has_init = bool_buf({true, true, false, true, true, true}), pbuf = index_buf2(path, kCols);
      Buf par = index_buf(parents, DType::kInt64);
      Buf o(DType::kFloat32, {T, HV, V});
      auto args = [&](Buf& pl, Buf& lo, Buf& out) {
        GatedDeltaRuleArgs a = gdr_args(in, pl, StateLayout::kVK, qsl, slots, &nacc, &has_init, out, int64_t{0});
        a.verify_log = log_in.view();
        a.verify_log_out = lo.view();
        a.log_tokens = kind != 2;
        if (kind == 1) a.token_parents = par.view();
        if (trial % 2) a.accepted_path = pbuf.view();
        return a;
      };
      SCOPED_TRACE(::testing::Message() << "state " << dtype_short(state) << " trial " << trial << " kind " << kind);
      Buf ref_pool = pool, ref_log = log_out, ref_o = o, mod_pool = pool, mod_log = log_out, mod_o = o;
      PROP_ASSERT_OK(gated_delta_rule_recurrent(args(ref_pool, ref_log, ref_o)));
      model_deferred(args(mod_pool, mod_log, mod_o));
      const double tol = state == DType::kFloat32 ? 1e-5 : 1e-2;
      EXPECT_LE(rel_l2(mod_o, ref_o), tol) << "outputs";
      for (int64_t sl = 0; sl < num_slots; ++sl) expect_slot_close(mod_pool, sl, ref_pool, sl, tol, "committed state");
      EXPECT_EQ(byte_diff(mod_log, ref_log), "") << "written log, untouched rows";
    }
}

TEST(DeferredChunks, LeanAlgebraEqualsTheRecurrence) {
  constexpr int K = 128, V = 8;
  Rng r(9300);
  for (int trial = 0; trial < 300; ++trial) {
    const int m = static_cast<int>(r.randint(0, kChunk)), T = static_cast<int>(r.randint(0, kChunk - m));
    const bool tree = trial % 2 == 1;
    const std::vector<int64_t> par = random_parents(r, T);
    auto parent = [&](int64_t t) { return tree ? norm_parent(par, t) : t - 1; };
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " m " << m << " T " << T << (tree ? " tree" : ""));
    const int n = m + T;
    std::vector<std::vector<double>> k(n, std::vector<double>(K)), q(n, std::vector<double>(K)),
        v(n, std::vector<double>(V));
    std::vector<double> g(n), beta(n), W(V * K);
    for (double& w : W) w = 0.5 * r.normal();
    for (int u = 0; u < n; ++u) {
      double kk = 0;
      for (int c = 0; c < K; ++c) kk += (k[u][c] = r.normal()) * k[u][c];
      for (int c = 0; c < K; ++c) k[u][c] /= std::sqrt(kk);
      for (int c = 0; c < K; ++c) q[u][c] = r.normal() / std::sqrt(double{K});
      for (int c = 0; c < V; ++c) v[u][c] = r.normal();
      g[u] = r.coin(0.1) ? r.uniform(-30.0, -5.0) : r.uniform(-1.0, 0.1);
      beta[u] = r.uniform(0.0, 1.0);
    }
    // the reference: node states along the paths in double
    auto step = [&](const std::vector<double>& S, int u) {
      std::vector<double> out(V * K);
      const double dec = std::exp(g[u]);
      for (int vi = 0; vi < V; ++vi) {
        double p = 0;
        for (int c = 0; c < K; ++c) p += dec * S[vi * K + c] * k[u][c];
        const double d = beta[u] * (v[u][vi] - p);
        for (int c = 0; c < K; ++c) out[vi * K + c] = dec * S[vi * K + c] + d * k[u][c];
      }
      return out;
    };
    std::vector<std::vector<double>> node(n);
    for (int u = 0; u < n; ++u) {
      const int64_t pt = u < m ? u - 1 : parent(u - m) >= 0 ? m + parent(u - m) : m - 1;
      node[u] = step(pt < 0 ? W : node[pt], u);
    }
    const std::vector<double>& committed = m > 0 ? node[m - 1] : W;
    // the algebra, in float as the kernels run it
    ChunkPlan c;
    cuda::deferred::lean_chunk(m, T, parent, c);
    ChunkCoefs cf{};
    for (int u = 0; u < n; ++u) {
      cf.g[u] = static_cast<float>(g[u]);
      cf.dec[u] = std::exp(cf.g[u]);
      cf.beta[u] = static_cast<float>(beta[u]);
    }
    for (int i = 0; i < n; ++i) cuda::deferred::e_row(c, cf.dec, i, cf.E[i]);
    cuda::deferred::gammas(c, cf.dec, cf.gamma);
    auto fdot = [&](const std::vector<double>& a, const std::vector<double>& b, const float* w = nullptr) {
      float s = 0.f;
      for (int e = 0; e < K; ++e) s += (w ? w[e] : static_cast<float>(a[e])) * static_cast<float>(b[e]);
      return s;
    };
    for (int i = 0; i < n; ++i)
      for (int u = i; u < n; ++u) {
        const bool anc = cuda::deferred::is_ancestor(c, i, u);
        cf.Gk[i][u] = i < u && anc ? fdot(k[i], k[u]) : 0.f;
        cf.Gq[i][u] = u >= m && anc ? fdot(k[i], q[u]) : 0.f;
      }
    for (int j = 0; j < n; ++j) cuda::deferred::chunk_column(c, cf, j);
    cuda::deferred::LeanCoefs lc{};
    for (int u = 0; u < n; ++u) cuda::deferred::lean_row_coefs(c, cf, n, m, u, lc);
    for (int u = 0; u < n; ++u)  // anc: u and its ancestors (replayed rows, then the step's tokens)
      for (int i = 0; i < n; ++i) {
        bool want = i == u;
        for (int64_t a = u; !want && a >= 0;) {
          a = a < m ? a - 1 : parent(a - m) >= 0 ? m + parent(a - m) : m - 1;
          want = a == i;
        }
        EXPECT_EQ((lc.anc[u] >> i) & 1u, want ? 1u : 0u) << "anc[" << u << "] bit " << i;
      }
    double e_o = 0, n_o = 0, e_s = 0, n_s = 0;
    for (int vi = 0; vi < V; ++vi) {
      std::vector<float> w(K);
      for (int e = 0; e < K; ++e) w[e] = static_cast<float>(W[vi * K + e]);
      float y[kChunk] = {};
      for (int j = 0; j < n; ++j) y[j] = lc.beta[j] * static_cast<float>(v[j][vi]) - lc.bgam[j] * fdot({}, k[j], w.data());
      auto zrow = [&](int u) {
        float acc = 0.f;
        for (int j = 0; j < kChunk; ++j) acc += lc.Z[u][j] * y[j];
        return acc;
      };
      for (int u = m; u < n; ++u) {
        const double o = lc.gamma[u] * fdot({}, q[u], w.data()) + zrow(u);
        double want = 0;
        for (int e = 0; e < K; ++e) want += node[u][vi * K + e] * q[u][e];
        e_o += (o - want) * (o - want);
        n_o += want * want;
      }
      std::vector<float> s(K);
      for (int e = 0; e < K; ++e) s[e] = (m > 0 ? lc.gamma[m - 1] : 1.f) * w[e];
      for (int i = 0; i < m; ++i)
        for (int e = 0; e < K; ++e) s[e] += zrow(i) * static_cast<float>(k[i][e]);
      for (int e = 0; e < K; ++e) {
        const double want = committed[vi * K + e];
        e_s += (s[e] - want) * (s[e] - want);
        n_s += want * want;
      }
    }
    if (n > m) EXPECT_LE(std::sqrt(e_o / std::max(n_o, 1e-30)), 1e-5) << "outputs";
    EXPECT_LE(std::sqrt(e_s / std::max(n_s, 1e-30)), 1e-5) << "replayed state";
  }
}

}  // namespace
}  // namespace gdn::prop
