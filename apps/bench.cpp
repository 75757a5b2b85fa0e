// gdn bench — decode and verify timings on the GPU, by the method of docs/performance.md:
//  * each timed unit is a CUDA graph of R <= 1024 calls, each call on its own slots of one large
//    pool (the states of a graph exceed 3x the 60 MB L2, so replays do not measure the cache);
//  * warm-up replays, then >= 20 timed replays (CUDA events); median time per call;
//  * random data (hashed), fresh per case;
//  * GB/s counts the fewest bytes a call must move (each state read once and each stored state
//    written once, activations once) and is compared with an SM copy kernel measured in the run.
// Ops: "recurrent" (gated_delta_rule_recurrent, bf16 activations), "recurrent_given" (the same with
// transformers' decode gates: the log-space decay in float32 and beta in bf16, given, no A_log:
// the gate-form instances; random decays in [-0.5, 0.5)), "fused" (gdn_attention:
// conv + gates + norms + recurrence + conv pool + z, one decode/verify step of one layer, verify
// conv windows in the rolling line) and "fused_per_token" (the same, conv windows per draft slot).
// "chunked" (gated_delta_rule_chunked: prefill of N sequences of T tokens, --shapes NxT,...; ms,
// tokens/s, TFLOP/s of the chunk form and % of the dense bf16 tensor-core peak), "chunked_given"
// (the same prefills with the gates given as recurrent_given's: FLA's chunk_gated_delta_rule),
// "attention_prefill" (the same prefills through gdn_attention: conv, gates, chunk, pools, z),
// "deferred" (gated_delta_rule_recurrent's deferred-commit mode, bench_deferred.cpp: linear verify
// of each T of --t, and trees of each node count of --tree, rows "deferred" and "deferred_tree") and
// "attention_deferred" (gdn_attention's deferred-commit mode, bench_deferred.cpp: N verify sequences
// of each T of --t, one slot each, every logged row replayed).
// --path forces a kernel path of the planner (src/cuda/plan/plan.h) where it can run, for A/B runs.
#include <algorithm>
#include <iterator>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "forced_path.h"
#include "gdn/ops.h"

#ifdef GDN_WITH_CUDA
#include <nlohmann/json.hpp>

#include "bench_common.h"

namespace gdn::cli {
namespace {

double measure_copy_gbps(int replays) {
  const size_t bytes = size_t(1) << 30;
  DevBuf a(bytes), b(bytes);
  fill(a, DType::kFloat32);
  const double us = time_graph(4, replays, [&](int, cudaStream_t s) { bench::sm_copy(a.p, b.p, bytes, s); });
  return 2.0 * bytes / (us * 1e-6) / 1e9;
}

// Index tensors for call c: slots [N] (decode) or [N, T] (verify) in the c-th slot range.
std::vector<int32_t> host_slots(int64_t c, int64_t N, int64_t T) {
  const int64_t cols = T == 1 ? 1 : T;
  std::vector<int32_t> s(N * cols);
  for (int64_t i = 0; i < N * cols; ++i) s[i] = static_cast<int32_t>(c * N * cols + i);
  return s;
}

// Transformers' and FLA's gates, given: the log-space decay in float32 (g_log, rows x HV, random in
// [-0.5, 0.5)) in place of a, beta in the activation dtype in place of b, no A_log or dt_bias.
void give_gates(GatedDeltaRuleArgs& g, DevBuf& g_log, int64_t rows, int64_t HV) {
  fill(g_log, DType::kFloat32);
  g.a = dev_view(g_log.p, DType::kFloat32, {rows, HV});
  g.A_log = g.dt_bias = TensorView{};
  g.beta_sigmoid = false;
}

bool is_prefill_op(const std::string& op) {
  return op == "chunked" || op == "chunked_given" || op == "attention_prefill";
}

// arena: where every case's state pool lives (one allocation for the whole run, made before the
// first case: a case's time must not depend on what earlier cases allocated and freed; with a
// pool per case, verify T = 4 N = 64 took 205-211 instead of 189-191 us after a T = 3 case).
Result run_case(const Case& k, int replays, DevBuf& arena, cuda::plan::Override force) {
  const Model& m = *k.m;
  const int64_t N = k.N, T = k.T, rows = N * T, cols = T == 1 ? 1 : T, W = 4;
  const bool spec = T > 1;
  const DType act = DType::kBFloat16;
  const PoolShape ps = pool_shape(k);
  const int64_t D = 2 * m.H * m.K + m.HV * m.V;
  const int64_t r = m.HV / m.H;
  DevBuf& pool = arena;
  fill(pool, k.state, ps.state_bytes());  // (the arena: only this case's part)
  // Per-call metadata.
  std::vector<int32_t> qsl(N + 1), acc(N);
  for (int64_t i = 0; i <= N; ++i) qsl[i] = static_cast<int32_t>(i * T);
  uint32_t lcg = 12345;
  for (auto& a : acc) { lcg = lcg * 1664525u + 1013904223u; a = static_cast<int32_t>(1 + (lcg >> 16) % T); }
  DevBuf d_qsl(qsl.size() * 4), d_acc(acc.size() * 4), d_slots(size_t(ps.calls) * ps.slots_per_call * 4);
  BENCH_CHECK(cudaMemcpy(d_qsl.p, qsl.data(), qsl.size() * 4, cudaMemcpyHostToDevice));
  BENCH_CHECK(cudaMemcpy(d_acc.p, acc.data(), acc.size() * 4, cudaMemcpyHostToDevice));
  for (int c = 0; c < ps.calls; ++c) {
    auto s = host_slots(c, N, T);
    BENCH_CHECK(cudaMemcpy(static_cast<int32_t*>(d_slots.p) + c * ps.slots_per_call, s.data(), s.size() * 4,
                           cudaMemcpyHostToDevice));
  }
  auto slots_view = [&](int c) {
    void* p = static_cast<int32_t*>(d_slots.p) + c * ps.slots_per_call;
    return spec ? dev_view(p, DType::kInt32, {N, cols}) : dev_view(p, DType::kInt32, {N});
  };
  DevBuf A_log(m.HV * 4), dt_bias(m.HV * 2);
  fill(A_log, DType::kFloat32);
  fill(dt_bias, act);
  Result res;
  const double state_bytes = double(N) * ps.slot_bytes * (1 + (spec ? T : 1));
  if (k.op == "recurrent" || k.op == "recurrent_given") {
    const bool given = k.op == "recurrent_given";
    TokenBufs tok(m, rows, act);
    GatedDeltaRuleArgs g;
    tok.into(g, m, rows, act, A_log, dt_bias);
    DevBuf g_log(given ? rows * m.HV * 4 : 16);
    if (given) give_gates(g, g_log, rows, m.HV);
    g.ssm_state = dev_view(pool.p, k.state, {ps.num_slots, m.HV, m.V, m.K});
    g.query_start_loc = dev_view(d_qsl.p, DType::kInt32, {N + 1});
    if (spec) g.num_accepted_tokens = dev_view(d_acc.p, DType::kInt32, {N});
    g.state_indices = slots_view(0);
    Status st = can_implement_recurrent(g);
    if (!st.ok()) return Result{0, 0, 0, st.message()};
    res.us = time_recurrent(ps.calls, replays, g, slots_view, force);
    res.bytes = state_bytes + rows * 2.0 * (2 * m.H * m.K + 2 * m.HV * m.V + 2 * m.HV);
    if (given) res.bytes += rows * 2.0 * m.HV;  // a in float32
  } else {
    const bool per_token = k.op == "fused_per_token";
    const int64_t conv_rows = spec && !per_token ? W - 2 + cols : W - 1;
    const AttnBufs bufs(m, rows, ps.num_slots, conv_rows, act);
    GdnAttentionArgs g;
    bufs.into(g, m, rows, ps.num_slots, conv_rows, act, A_log, dt_bias);
    g.ssm_state = dev_view(pool.p, k.state, {ps.num_slots, m.HV, m.V, m.K});
    g.spec_conv_layout = per_token ? SpecConvLayout::kPerToken : SpecConvLayout::kRolling;
    if (spec) {
      g.num_spec_decodes = N;
      g.spec_query_start_loc = dev_view(d_qsl.p, DType::kInt32, {N + 1});
      g.num_accepted_tokens = dev_view(d_acc.p, DType::kInt32, {N});
    } else {
      g.num_decodes = N;
      g.non_spec_query_start_loc = dev_view(d_qsl.p, DType::kInt32, {N + 1});
    }
    auto set_slots = [&](GdnAttentionArgs& x, int c) {
      (spec ? x.spec_state_indices_tensor : x.non_spec_state_indices_tensor) = slots_view(c);
    };
    set_slots(g, 0);
    Status st = can_implement(g);
    if (!st.ok()) return Result{0, 0, 0, st.message()};
    res.us = time_attention(ps.calls, replays, g, set_slots, force);
    // Projections once, outputs and z once, conv window read once and written once per sequence
    // (per token: once per token).
    res.bytes = state_bytes + rows * 2.0 * (m.H * (2 * m.K + 2 * r * m.V) + 2 * m.HV + 2 * m.HV * m.V) +
                N * 2.0 * (W - 1) * D * (1 + (per_token && spec ? T : 1));
  }
  res.gbps = res.bytes / (res.us * 1e-6) / 1e9;
  return res;
}

// Dense bf16 tensor-core peak (TFLOP/s) of the device, for "% of peak"; 0 when unknown.
double bf16_peak_tflops(const cudaDeviceProp& p) {
  const std::string n = p.name;
  if (n.find("H200") != std::string::npos || n.find("H100 SXM") != std::string::npos ||
      n.find("H100 80GB HBM3") != std::string::npos)
    return 989.4;
  if (n.find("H100") != std::string::npos) return 756.0;  // PCIe
  if (n.find("H20") != std::string::npos) return 148.0;
  if (n.find("A100") != std::string::npos) return 312.0;
  return 0.0;
}

// Tensor-core work of the chunk form (chunk C = 64) per token and value head: q k^T and k k^T,
// [W | U] = T [k | v], W H and q H, P delta, and the state update.
double chunk_flops_per_token(const Model& m) {
  const double C = 64, K = m.K, V = m.V;
  return 4 * C * K + 2 * C * (K + V) + 4 * K * V + 2 * C * V + 2 * K * V;
}

// Prefill (ops "chunked", "chunked_given", "attention_prefill"): N sequences of T tokens in one call
// of gated_delta_rule_chunked (or gdn_attention) with initial states; a graph of a few calls (each
// on the same inputs and slots), the median per call.
Result run_prefill(const Case& k, int replays, cuda::plan::Override force) {
  const Model& m = *k.m;
  const int64_t N = k.N, T = k.T, rows = N * T;
  const DType act = DType::kBFloat16;
  const size_t slot_bytes = m.HV * m.V * m.K * dtype_size(k.state);
  DevBuf pool(N * slot_bytes), A_log(m.HV * 4), dt_bias(m.HV * 2);
  TokenBufs tok(m, rows, act);
  fill(dt_bias, act);
  fill(A_log, DType::kFloat32);
  fill(pool, k.state);
  std::vector<int32_t> qsl(N + 1), slots(N);
  for (int64_t i = 0; i <= N; ++i) qsl[i] = static_cast<int32_t>(i * T);
  for (int64_t i = 0; i < N; ++i) slots[i] = static_cast<int32_t>(i);
  DevBuf d_qsl(qsl.size() * 4), d_slots(slots.size() * 4);
  BENCH_CHECK(cudaMemcpy(d_qsl.p, qsl.data(), qsl.size() * 4, cudaMemcpyHostToDevice));
  BENCH_CHECK(cudaMemcpy(d_slots.p, slots.data(), slots.size() * 4, cudaMemcpyHostToDevice));
  GatedDeltaRuleArgs g;
  tok.into(g, m, rows, act, A_log, dt_bias);
  g.ssm_state = dev_view(pool.p, k.state, {N, m.HV, m.V, m.K});
  g.query_start_loc = dev_view(d_qsl.p, DType::kInt32, {N + 1});
  g.state_indices = dev_view(d_slots.p, DType::kInt32, {N});
  Result res;
  res.bytes = 2.0 * N * slot_bytes + rows * 2.0 * (2 * m.H * m.K + 2 * m.HV * m.V + 2 * m.HV);
  if (k.op == "attention_prefill") {  // the same prefill through gdn_attention (projections, conv, pools, z)
    constexpr int64_t W = AttnBufs::kW;
    const AttnBufs bufs(m, rows, N, W - 1, act, false);  // core_attn_out: the chunked op's o
    const int64_t width = bufs.width, D = bufs.D;
    GdnAttentionArgs ga;
    bufs.into(ga, m, rows, N, W - 1, act, A_log, dt_bias);
    ga.core_attn_out = g.o;
    ga.ssm_state = g.ssm_state;
    ga.num_prefills = N;
    ga.non_spec_query_start_loc = g.query_start_loc;
    ga.non_spec_state_indices_tensor = g.state_indices;
    Status st = can_implement(ga);
    if (!st.ok()) return Result{0, 0, 0, st.message()};
    res.us = time_attention(3, replays, ga, [](GdnAttentionArgs&, int) {}, force);
    res.bytes += rows * 2.0 * (width - 2 * m.H * m.K - m.HV * m.V) + N * 4.0 * (W - 1) * D;
  } else {
    DevBuf g_log(k.op == "chunked_given" ? rows * m.HV * 4 : 16);
    if (k.op == "chunked_given") {
      give_gates(g, g_log, rows, m.HV);
      res.bytes += rows * 2.0 * m.HV;  // a in float32
    }
    Status st = can_implement_chunked(g);
    if (!st.ok()) return Result{0, 0, 0, st.message()};
    res.us = time_graph(3, replays, [&](int, cudaStream_t s) {
      Status e = internal::gated_delta_rule_chunked(g, s, force);
      if (!e.ok()) std::fprintf(stderr, "gdn bench: %s\n", e.message().c_str());
    });
  }
  res.gbps = res.bytes / (res.us * 1e-6) / 1e9;
  return res;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');)
    if (!x.empty()) out.push_back(x);
  return out;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  std::string models = "qwen3-next-tp1,qwen3-next-tp4,qwen3.6-27b", ns = "1,4,16,64,256", ts = "1,3,4",
              states = "f32,bf16", ops = "recurrent,fused", out = "bench/results.json", path = "auto", trees = "4,8,16",
              shapes = "1x4096,1x8192,1x16384,4x8192,32x8192,8x2048,64x256";
  int replays = 20;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--models") models = next();
    else if (a == "--n") ns = next();
    else if (a == "--t") ts = next();
    else if (a == "--state") states = next();
    else if (a == "--ops") ops = next();
    else if (a == "--replays") {
      const std::string v = next();
      int64_t r = 0;
      if (!parse_int(v, 20, 1 << 20, &r)) {
        std::fprintf(stderr, "gdn bench: --replays needs an integer in [20, 1048576], got '%s'\n", v.c_str());
        return 2;
      }
      replays = static_cast<int>(r);
    }
    else if (a == "--out") out = next();
    else if (a == "--path") path = next();
    else if (a == "--shapes") shapes = next();
    else if (a == "--tree") trees = next();
    else {
      std::fprintf(stderr,
                   "usage: gdn bench [--models %s] [--n %s] [--t %s] [--state %s] [--ops %s] [--replays N>=20] "
                   "[--path KERNEL_PATH] [--shapes %s] [--tree %s] [--out FILE.json]\n"
                   "ops: recurrent, recurrent_given, fused, fused_per_token (N x T of --n, --t); chunked, "
                   "chunked_given, attention_prefill (--shapes); deferred (and deferred_tree of --tree), "
                   "attention_deferred\n",
                   models.c_str(), ns.c_str(), ts.c_str(), states.c_str(), ops.c_str(), shapes.c_str(), trees.c_str());
      return a == "--help" ? 0 : 2;
    }
  }
  for (const auto& op : split(ops)) {
    static const char* const kOps[] = {"recurrent", "recurrent_given",   "fused",    "fused_per_token",   "chunked",
                                       "chunked_given", "attention_prefill", "deferred", "attention_deferred"};
    if (std::none_of(std::begin(kOps), std::end(kOps), [&](const char* o) { return op == o; })) {
      std::fprintf(stderr, "gdn bench: unknown op %s (gdn bench --help lists them)\n", op.c_str());
      return 2;
    }
  }
  // The lists of numbers, each in its range, and the state dtypes.
  auto ints = [](const std::string& list, int64_t lo, int64_t hi, const char* flag, std::vector<int64_t>* out) {
    for (const auto& x : split(list)) {
      int64_t v = 0;
      if (!parse_int(x, lo, hi, &v)) {
        std::fprintf(stderr, "gdn bench: %s needs integers in [%lld, %lld], got '%s'\n", flag, static_cast<long long>(lo),
                     static_cast<long long>(hi), x.c_str());
        return false;
      }
      out->push_back(v);
    }
    return true;
  };
  std::vector<int64_t> n_list, t_list, tree_list;
  if (!ints(ns, 1, 1 << 16, "--n", &n_list) || !ints(ts, 1, 64, "--t", &t_list) || !ints(trees, 1, 64, "--tree", &tree_list))
    return 2;
  std::vector<std::pair<int64_t, int64_t>> shape_list;
  for (const auto& sh : split(shapes)) {
    const size_t x = sh.find('x');
    int64_t n = 0, t = 0;
    if (x == std::string::npos || !parse_int(sh.substr(0, x), 1, 1 << 16, &n) ||
        !parse_int(sh.substr(x + 1), 1, int64_t{1} << 24, &t)) {
      std::fprintf(stderr, "gdn bench: --shapes needs NxT with N in [1, 65536] and T in [1, 2^24], got '%s'\n", sh.c_str());
      return 2;
    }
    shape_list.emplace_back(n, t);
  }
  for (const auto& st : split(states)) {
    if (st != "f32" && st != "bf16") {
      std::fprintf(stderr, "gdn bench: --state takes f32 and bf16, got '%s'\n", st.c_str());
      return 2;
    }
  }
  cuda::plan::Override force;
  if (!cuda::plan::parse_path(path.c_str(), &force.path)) {
    std::fprintf(stderr, "gdn bench: unknown kernel path %s\n", path.c_str());
    return 2;
  }
  if (!cuda_backend_available()) {
    std::fprintf(stderr, "gdn bench: no CUDA device\n");
    return 2;
  }
  cudaDeviceProp prop;
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  const double copy = measure_copy_gbps(replays);
  const double peak = bf16_peak_tflops(prop);
  std::printf("device: %s; SM copy kernel: %.0f GB/s (read + write); dense bf16 peak %.0f TFLOP/s\n", prop.name, copy,
              peak);
  std::printf("%-18s %-15s %5s %2s %-5s %10s %9s %7s\n", "op", "model", "N", "T", "state", "us", "GB/s", "%copy");
  nlohmann::json rows = nlohmann::json::array();
  // every case first (the arena is as large as the largest pool), in the order they run
  std::vector<Case> cases;
  for (const auto& op : split(ops))
    for (const auto& mn : split(models)) {
      const Model* m = nullptr;
      for (const auto& x : kModels)
        if (x.name == mn) m = &x;
      if (!m) { std::fprintf(stderr, "gdn bench: unknown model %s\n", mn.c_str()); return 2; }
      for (const auto& st : split(states)) {
        const DType sd = st == "bf16" ? DType::kBFloat16 : DType::kFloat32;
        if (is_prefill_op(op)) {  // N x T prefill shapes
          for (const auto& [n, t] : shape_list) cases.push_back(Case{m, n, t, sd, op});
          continue;
        }
        for (int64_t t : t_list)
          for (int64_t n : n_list) cases.push_back(Case{m, n, t, sd, op});
        if (op == "deferred")  // and its trees
          for (int64_t t : tree_list)
            for (int64_t n : n_list) cases.push_back(Case{m, n, t, sd, "deferred_tree"});
      }
    }
  size_t arena_bytes = 0;
  for (const Case& c : cases)
    if (c.N > 0 && c.T > 0 && !is_prefill_op(c.op)) arena_bytes = std::max(arena_bytes, pool_shape(c).bytes());
  DevBuf arena(std::max<size_t>(arena_bytes, 16));
  for (const Case& c : cases) {
    const std::string mn = c.m->name, st = c.state == DType::kBFloat16 ? "bf16" : "f32";
    const bool prefill = is_prefill_op(c.op);
    const Result r = prefill                  ? run_prefill(c, replays, force)
                     : is_deferred_op(c.op) ? run_deferred_case(c, replays, arena, force)
                                            : run_case(c, replays, arena, force);
    if (!r.error.empty()) {
      std::printf("%-18s %-15s %5lld %2lld %-5s error: %s\n", c.op.c_str(), mn.c_str(), static_cast<long long>(c.N),
                  static_cast<long long>(c.T), st.c_str(), r.error.c_str());
      continue;
    }
    nlohmann::json row = {{"impl", "gdn"}, {"op", c.op}, {"path", path}, {"model", mn}, {"N", c.N}, {"T", c.T},
                          {"state", st}, {"us", r.us}, {"bytes", r.bytes}, {"gbps", r.gbps},
                          {"pct_copy", 100.0 * r.gbps / copy}};
    if (prefill) {
      const double tokens = double(c.N) * c.T, tflops = tokens * c.m->HV * chunk_flops_per_token(*c.m) / (r.us * 1e6);
      std::printf("%-18s %-15s %5lld %5lld %-5s %9.3f ms %8.1f Mtok/s %7.1f TFLOP/s %5.1f%% peak\n", c.op.c_str(),
                  mn.c_str(), static_cast<long long>(c.N), static_cast<long long>(c.T), st.c_str(), r.us / 1e3,
                  tokens / r.us, tflops, peak > 0 ? 100.0 * tflops / peak : 0.0);
      row["tokens_per_s"] = tokens / (r.us * 1e-6);
      row["tflops"] = tflops;
      row["pct_peak"] = peak > 0 ? 100.0 * tflops / peak : 0.0;
    } else {
      std::printf("%-18s %-15s %5lld %2lld %-5s %10.2f %9.0f %6.1f%%\n", c.op.c_str(), mn.c_str(),
                  static_cast<long long>(c.N), static_cast<long long>(c.T), st.c_str(), r.us, r.gbps,
                  100.0 * r.gbps / copy);
    }
    std::fflush(stdout);
    rows.push_back(row);
  }
  nlohmann::json doc = {{"device", prop.name}, {"copy_gbps", copy}, {"replays", replays}, {"results", rows}};
  std::ofstream f(out);
  f << doc.dump(1) << "\n";
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

}  // namespace gdn::cli
#else
namespace gdn::cli {
int cmd_bench(int, char**) {
  std::fprintf(stderr, "gdn bench: this build has no CUDA backend (nvcc was not found at configure time)\n");
  return 2;
}
}  // namespace gdn::cli
#endif
