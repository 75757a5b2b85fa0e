// gdn bench's deferred-commit cases (--ops deferred, attention_deferred): gated_delta_rule_recurrent
// and gdn_attention with their logs, by the method of bench.cpp (a graph of calls, each on its own
// slots of one pool beyond the L2, its recurrence logs after the pool in the same arena; the median
// per call):
//   "deferred"           linear verify of T tokens per sequence, replaying T logged rows first
//                        (num_accepted_tokens = T, so that the replay's cost is in the time);
//   "deferred_tree"      a tree of T nodes per sequence, node t's parent (t - 1) / 2 (binary, depth
//                        floor(log2 T)), replaying the previous step's root-to-node-(T - 1) path
//                        (accepted_path: depth + 1 rows);
//   "attention_deferred" gdn_attention of N verify sequences (spec decodes) of T tokens, each on
//                        one slot (spec_state_indices_tensor [N, 1]): T logged rows replayed into
//                        the conv window and the state (num_accepted_tokens = T), both committed,
//                        then the T tokens, logged in the recurrence and the conv logs; the conv
//                        pool (W - 1 rows) and conv logs allocated per case (as run_case's conv pool).
// bf16 activations; logs of log_cols = T rows. GB/s counts one state read and one state write per
// sequence, the replayed and the written log entries, activations once (attention_deferred: also the
// conv window read and written once per sequence, and the conv log entries).
#ifdef GDN_WITH_CUDA
#include "bench_common.h"
#include "forced_path.h"

namespace gdn::cli {

namespace {

Result run_attention_deferred(const Case& k, int replays, DevBuf& arena, cuda::plan::Override force) {
  const Model& m = *k.m;
  const int64_t N = k.N, T = k.T, rows = N * T, E = m.K + m.V + 2, W = AttnBufs::kW;
  const DType act = DType::kBFloat16;
  const PoolShape ps = pool_shape(k);
  fill(arena, k.state, ps.state_bytes());
  char* const logs = static_cast<char*>(arena.p) + ps.log_offset();
  bench::fill_random(logs, ps.log_bytes, g_seed++, 0, nullptr);  // verify_log (verify_log_out: written)
  std::vector<int32_t> qsl(N + 1), nacc(N, static_cast<int32_t>(T)), slots(static_cast<size_t>(ps.num_slots));
  for (int64_t i = 0; i <= N; ++i) qsl[i] = static_cast<int32_t>(i * T);
  for (int64_t s = 0; s < ps.num_slots; ++s) slots[s] = static_cast<int32_t>(s);  // call c: slots c N ..
  DevBuf d_qsl(qsl.size() * 4), d_acc(nacc.size() * 4), d_slots(slots.size() * 4);
  for (auto [buf, host] : {std::pair{&d_qsl, &qsl}, {&d_acc, &nacc}, {&d_slots, &slots}})
    BENCH_CHECK(cudaMemcpy(buf->p, host->data(), host->size() * 4, cudaMemcpyHostToDevice));
  const AttnBufs bufs(m, rows, ps.num_slots, W - 1, act);
  const int64_t width = bufs.width, D = bufs.D;
  DevBuf conv_log(ps.num_slots * T * D * 2), conv_log_out(ps.num_slots * T * D * 2), A_log(m.HV * 4),
      dt_bias(m.HV * 2);
  for (DevBuf* x : {&conv_log, &dt_bias}) fill(*x, act);
  fill(A_log, DType::kFloat32);
  GdnAttentionArgs g;
  bufs.into(g, m, rows, ps.num_slots, W - 1, act, A_log, dt_bias);
  g.ssm_state = dev_view(arena.p, k.state, {ps.num_slots, m.HV, m.V, m.K});
  g.num_spec_decodes = N;
  g.spec_query_start_loc = dev_view(d_qsl.p, DType::kInt32, {N + 1});
  g.num_accepted_tokens = dev_view(d_acc.p, DType::kInt32, {N});
  g.verify_log = dev_view(logs, DType::kFloat32, {ps.num_slots, T, m.HV, E});
  g.verify_log_out = dev_view(logs + ps.log_bytes, DType::kFloat32, {ps.num_slots, T, m.HV, E});
  g.conv_log = dev_view(conv_log.p, act, {ps.num_slots, T, D});
  g.conv_log_out = dev_view(conv_log_out.p, act, {ps.num_slots, T, D});
  auto slots_of = [&](int c) { return dev_view(static_cast<int32_t*>(d_slots.p) + c * N, DType::kInt32, {N, 1}); };
  g.spec_state_indices_tensor = slots_of(0);
  Status st = can_implement(g);
  if (!st.ok()) return Result{0, 0, 0, st.message()};
  Result res;
  res.us = time_attention(ps.calls, replays, g,
                          [&](GdnAttentionArgs& x, int c) { x.spec_state_indices_tensor = slots_of(c); }, force);
  // state and conv window read and written once per sequence; T replayed and T written entries of
  // both logs; projections once, outputs and z once
  res.bytes = 2.0 * N * ps.slot_bytes + N * 2.0 * 2 * (W - 1) * D + N * 2.0 * T * (m.HV * E * 4.0 + D * 2.0) +
              rows * 2.0 * (width + 2 * m.HV + 2 * m.HV * m.V);
  res.gbps = res.bytes / (res.us * 1e-6) / 1e9;
  return res;
}

}  // namespace

Result run_deferred_case(const Case& k, int replays, DevBuf& arena, cuda::plan::Override force) {
  if (k.op == "attention_deferred") return run_attention_deferred(k, replays, arena, force);
  const Model& m = *k.m;
  const int64_t N = k.N, T = k.T, rows = N * T, E = m.K + m.V + 2;
  const bool tree = k.op == "deferred_tree";
  const DType act = DType::kBFloat16;
  const PoolShape ps = pool_shape(k);
  fill(arena, k.state, ps.state_bytes());
  char* const logs = static_cast<char*>(arena.p) + ps.log_offset();
  bench::fill_random(logs, ps.log_bytes, g_seed++, 0, nullptr);  // verify_log (verify_log_out: written)
  // the replayed rows: a chain of T, or the tree's path root .. T - 1
  std::vector<int32_t> path;
  for (int64_t u = T - 1; u >= 0; u = tree ? (u == 0 ? -1 : (u - 1) / 2) : u - 1)
    path.insert(path.begin(), static_cast<int32_t>(u));
  const int64_t replay = static_cast<int64_t>(path.size());
  std::vector<int32_t> qsl(N + 1), nacc(N, static_cast<int32_t>(replay)), parents(rows), paths(N * T, -1);
  std::vector<int32_t> slots(static_cast<size_t>(ps.num_slots));
  for (int64_t i = 0; i <= N; ++i) qsl[i] = static_cast<int32_t>(i * T);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t t = 0; t < T; ++t) {
      parents[i * T + t] = static_cast<int32_t>(t == 0 ? -1 : (t - 1) / 2);
      if (t < replay) paths[i * T + t] = path[t];
    }
  for (int64_t s = 0; s < ps.num_slots; ++s) slots[s] = static_cast<int32_t>(s);  // call c: slots c N ..
  DevBuf d_qsl(qsl.size() * 4), d_acc(nacc.size() * 4), d_par(parents.size() * 4), d_path(paths.size() * 4),
      d_slots(slots.size() * 4);
  for (auto [buf, host] : {std::pair{&d_qsl, &qsl}, {&d_acc, &nacc}, {&d_par, &parents}, {&d_path, &paths},
                           {&d_slots, &slots}})
    BENCH_CHECK(cudaMemcpy(buf->p, host->data(), host->size() * 4, cudaMemcpyHostToDevice));
  TokenBufs tok(m, rows, act);
  DevBuf A_log(m.HV * 4), dt_bias(m.HV * 2);
  fill(dt_bias, act);
  fill(A_log, DType::kFloat32);
  GatedDeltaRuleArgs g;
  tok.into(g, m, rows, act, A_log, dt_bias);
  g.ssm_state = dev_view(arena.p, k.state, {ps.num_slots, m.HV, m.V, m.K});
  g.query_start_loc = dev_view(d_qsl.p, DType::kInt32, {N + 1});
  g.num_accepted_tokens = dev_view(d_acc.p, DType::kInt32, {N});
  g.verify_log = dev_view(logs, DType::kFloat32, {ps.num_slots, T, m.HV, E});
  g.verify_log_out = dev_view(logs + ps.log_bytes, DType::kFloat32, {ps.num_slots, T, m.HV, E});
  if (tree) {
    g.token_parents = dev_view(d_par.p, DType::kInt32, {rows});
    g.accepted_path = dev_view(d_path.p, DType::kInt32, {N, T});
  }
  auto slots_of = [&](int c) { return dev_view(static_cast<int32_t*>(d_slots.p) + c * N, DType::kInt32, {N}); };
  g.state_indices = slots_of(0);
  Status st = can_implement_recurrent(g);
  if (!st.ok()) return Result{0, 0, 0, st.message()};
  Result res;
  res.us = time_recurrent(ps.calls, replays, g, slots_of, force);
  res.bytes = 2.0 * N * ps.slot_bytes + N * (replay + T) * m.HV * E * 4.0 +
              rows * 2.0 * (2 * m.H * m.K + 2 * m.HV * m.V + 2 * m.HV);
  res.gbps = res.bytes / (res.us * 1e-6) / 1e9;
  return res;
}

}  // namespace gdn::cli
#endif
