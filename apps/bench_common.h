// apps/bench_common.h — what the cases of `gdn bench` share (bench.cpp, bench_deferred.cpp): device
// buffers with random data, the graph timer (docs/performance.md's method), the models, a case and
// its result, the state pool of a case. CUDA builds only.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda/plan/plan.h"
#include "forced_path.h"
#include "gdn/ops.h"

namespace gdn::bench {
void sm_copy(const void* src, void* dst, size_t bytes, cudaStream_t stream);
void fill_random(void* p, size_t bytes, uint32_t seed, int kind, cudaStream_t stream);
}  // namespace gdn::bench

namespace gdn::cli {

#define BENCH_CHECK(x)                                                                  \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "gdn bench: %s: %s\n", #x, cudaGetErrorString(e_));          \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

struct Model {
  std::string name;
  int64_t H, HV, K, V;
};
inline const Model kModels[] = {
    {"qwen3-next-tp1", 16, 32, 128, 128}, {"qwen3-next-tp4", 4, 8, 128, 128}, {"qwen3.6-27b", 16, 48, 128, 128}};

struct DevBuf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DevBuf(size_t b) : bytes(b) { BENCH_CHECK(cudaMalloc(&p, std::max<size_t>(b, 16))); }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
};

inline uint32_t g_seed = 1;
// Random values into b's first `bytes` (all of it by default), whole 4-byte words.
inline void fill(DevBuf& b, DType t, size_t bytes = SIZE_MAX) {
  bench::fill_random(b.p, std::min(bytes, b.bytes) & ~size_t(3), g_seed++, t == DType::kFloat32 ? 0 : 1, nullptr);
}

// Times a graph of `calls` launches made by `record(c)`; returns the median us per call.
template <typename F>
double time_graph(int calls, int replays, F record) {
  cudaStream_t s;
  BENCH_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  BENCH_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int c = 0; c < calls; ++c) record(c, s);
  BENCH_CHECK(cudaStreamEndCapture(s, &graph));
  BENCH_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int w = 0; w < 3; ++w) BENCH_CHECK(cudaGraphLaunch(exec, s));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<double> us;
  for (int r = 0; r < replays; ++r) {
    cudaEventRecord(e0, s);
    BENCH_CHECK(cudaGraphLaunch(exec, s));
    cudaEventRecord(e1, s);
    BENCH_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    us.push_back(ms * 1000.0 / calls);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

struct Case {
  const Model* m;
  int64_t N, T;
  DType state;
  std::string op;
};

struct Result {
  double us = 0, gbps = 0, bytes = 0;
  std::string error;
};

// The deferred-commit mode's ops: "deferred" (linear verify of T tokens), "deferred_tree" (a tree of
// T nodes), "attention_deferred" (gdn_attention's linear verify of T tokens).
inline bool is_deferred_op(const std::string& op) {
  return op == "deferred" || op == "deferred_tree" || op == "attention_deferred";
}

inline TensorView dev_view(void* p, DType t, std::initializer_list<int64_t> shape) {
  return make_view(p, t, shape, Device::kCUDA, 0);
}

// A case's state pool: R calls (graph nodes) of N x cols slots each (the deferred mode: N), so that
// a graph's states exceed 3x the 60 MB L2; the deferred mode's two logs (log_cols = T) after it.
struct PoolShape {
  size_t slot_bytes;
  int64_t slots_per_call;
  int calls;
  int64_t num_slots;
  size_t log_bytes = 0;  // each log, a multiple of 256
  size_t state_bytes() const { return static_cast<size_t>(num_slots) * slot_bytes; }
  size_t log_offset() const { return (state_bytes() + 255) / 256 * 256; }  // the first log's
  size_t bytes() const { return log_offset() + 2 * log_bytes; }
};
inline PoolShape pool_shape(const Case& k) {
  PoolShape ps;
  ps.slot_bytes = k.m->HV * k.m->V * k.m->K * dtype_size(k.state);
  const bool deferred = is_deferred_op(k.op);
  ps.slots_per_call = k.N * (k.T == 1 || deferred ? 1 : k.T);
  const double min_pool = 3.0 * 60e6;
  ps.calls = static_cast<int>(std::clamp<double>(std::ceil(min_pool / (ps.slots_per_call * ps.slot_bytes)), 1, 1024));
  ps.num_slots = ps.calls * ps.slots_per_call;
  if (deferred) {
    const size_t log = static_cast<size_t>(ps.num_slots * k.T * k.m->HV * (k.m->K + k.m->V + 2)) * sizeof(float);
    ps.log_bytes = (log + 255) / 256 * 256;
  }
  return ps;
}

// The recurrent op's token tensors for `rows` tokens of model m (16-bit act), random; into(g) sets
// them and the gate parameters in g.
struct TokenBufs {
  DevBuf q, k, v, a, b, o;
  TokenBufs(const Model& m, int64_t rows, DType act)
      : q(rows * m.H * m.K * 2), k(rows * m.H * m.K * 2), v(rows * m.HV * m.V * 2), a(rows * m.HV * 2),
        b(rows * m.HV * 2), o(rows * m.HV * m.V * 2) {
    for (DevBuf* x : {&q, &k, &v, &a, &b}) fill(*x, act);
  }
  void into(GatedDeltaRuleArgs& g, const Model& m, int64_t rows, DType act, DevBuf& A_log, DevBuf& dt_bias) {
    g.q = dev_view(q.p, act, {rows, m.H, m.K});
    g.k = dev_view(k.p, act, {rows, m.H, m.K});
    g.v = dev_view(v.p, act, {rows, m.HV, m.V});
    g.a = dev_view(a.p, act, {rows, m.HV});
    g.b = dev_view(b.p, act, {rows, m.HV});
    g.A_log = dev_view(A_log.p, DType::kFloat32, {m.HV});
    g.dt_bias = dev_view(dt_bias.p, act, {m.HV});
    g.o = dev_view(o.p, act, {rows, m.HV, m.V});
  }
};

// gdn_attention's buffers for `rows` tokens of model m: the projections qkvz and ba, z and (with_out)
// core_attn_out, a conv pool of `slots` slots of `conv_rows` rows, conv weights of width kW, the
// inputs filled. into(): their views, the head sizes and the gates' constants.
struct AttnBufs {
  static constexpr int64_t kW = 4;
  const int64_t width, D;  // qkvz row, conv channels
  const bool with_out;
  DevBuf qkvz, ba, z, out, conv, w;
  AttnBufs(const Model& m, int64_t rows, int64_t slots, int64_t conv_rows, DType act, bool with_out_ = true)
      : width(m.H * (2 * m.K + 2 * (m.HV / m.H) * m.V)), D(2 * m.H * m.K + m.HV * m.V), with_out(with_out_),
        qkvz(rows * width * 2), ba(rows * 2 * m.HV * 2), z(rows * m.HV * m.V * 2),
        out(with_out ? rows * m.HV * m.V * 2 : 0), conv(slots * conv_rows * D * 2), w(D * kW * 2) {
    for (DevBuf* x : {&qkvz, &ba, &conv, &w}) fill(*x, act);
  }
  void into(GdnAttentionArgs& g, const Model& m, int64_t rows, int64_t slots, int64_t conv_rows, DType act,
            DevBuf& A_log, DevBuf& dt_bias) const {
    if (with_out) g.core_attn_out = dev_view(out.p, act, {rows, m.HV, m.V});
    g.z = dev_view(z.p, act, {rows, m.HV, m.V});
    g.projected_states_qkvz = dev_view(qkvz.p, act, {rows, width});
    g.projected_states_ba = dev_view(ba.p, act, {rows, 2 * m.HV});
    g.num_k_heads = m.H;
    g.num_v_heads = m.HV;
    g.head_k_dim = m.K;
    g.head_v_dim = m.V;
    g.conv_state = dev_view(conv.p, act, {slots, conv_rows, D});
    g.conv_weights = dev_view(w.p, act, {D, kW});
    g.A_log = dev_view(A_log.p, DType::kFloat32, {m.HV});
    g.dt_bias = dev_view(dt_bias.p, act, {m.HV});
    g.num_actual_tokens = rows;
  }
};

// Median us per call of `calls` gdn_attention calls on g, call c with set_call(args, c) applied.
template <typename SetCall>
double time_attention(int calls, int replays, const GdnAttentionArgs& g, SetCall set_call,
                      cuda::plan::Override force) {
  return time_graph(calls, replays, [&](int c, cudaStream_t s) {
    GdnAttentionArgs gc = g;
    set_call(gc, c);
    Status e = internal::gdn_attention(gc, s, force);
    if (!e.ok()) std::fprintf(stderr, "gdn bench: %s\n", e.message().c_str());
  });
}

// Median us per call of `calls` recurrent-op calls on g, call c on the slots slots_of(c).
template <typename Slots>
double time_recurrent(int calls, int replays, const GatedDeltaRuleArgs& g, Slots slots_of,
                      cuda::plan::Override force) {
  return time_graph(calls, replays, [&](int c, cudaStream_t s) {
    GatedDeltaRuleArgs gc = g;
    gc.state_indices = slots_of(c);
    Status e = internal::gated_delta_rule_recurrent(gc, s, force);
    if (!e.ok()) std::fprintf(stderr, "gdn bench: %s\n", e.message().c_str());
  });
}

// The deferred-commit mode's cases (bench_deferred.cpp: every op of is_deferred_op), on the same arena
// as run_case.
Result run_deferred_case(const Case& k, int replays, DevBuf& arena, cuda::plan::Override force);

}  // namespace gdn::cli
