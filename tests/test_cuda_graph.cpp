// CUDA graphs, concurrent streams and run-to-run determinism of the CUDA backend, driven through
// the CUDA runtime API as an engine drives it (device buffers allocated once, metadata in device
// buffers of fixed capacity, the caller's stream).
//
//   CudaGraph.AttentionReplayWithNewMetadata: gdn_attention on a mixed batch (prefills, decodes,
//     ragged verify sequences, padding, token remapping, graph-padded rows) is captured once on a
//     non-default stream (global capture mode) and replayed 3 times; before each replay the host
//     writes new projections, new pools and new metadata (other slots, num_accepted_tokens, token
//     order, ragged lengths within the capacities, other sequences turned into padding or into
//     zero-length graph padding) into the same device buffers. The plain ints of the call
//     (num_prefills, num_decodes, num_spec_decodes, num_actual_tokens, shapes) stay as captured:
//     capacity is fixed, content varies. Each replay is compared with the CPU backend run on the
//     same host inputs.
//   CudaGraph.VerifyRecurrentReplayWithNewMetadata: the same for gated_delta_rule_recurrent with
//     verify metadata ([n, cols] slots, num_accepted_tokens, has_initial_state).
//   CudaStreams.TwoStreamsAtOnce: two independent problems (own pools, different sizes, one with a
//     long prefill) launched on two streams back to back without synchronising in between; both
//     equal their CPU references.
//   CudaDeterminism.ByteIdenticalAcrossRuns: the same call from identical device inputs, 3 times:
//     core_attn_out, z, conv_state and ssm_state identical byte for byte (SPEC.md §6).
//
// Tolerance principle: the CUDA kernels evaluate the same float32 math as the CPU backend, in a
// different summation order (and fused differently), so results agree to float32 rounding:
// relative L2 error 1e-5 when activations and SSM state are float32. When either is bf16/fp16, a
// value that is rounded for storage (the conv output before the recurrence, a state column) may
// land one storage ulp (2^-9 relative) apart, and that propagates through the recurrence: 1e-2.
// z and conv state rows are copies of input bits: bit-exact. Rows past the tokens keep the
// sentinel the host wrote before the run (NaN or huge finite patterns): bit-exact.
#include "prop_attention.h"

#ifdef GDN_WITH_CUDA
#include <cuda_runtime.h>

#include <map>

namespace gdn::prop {
namespace {

#define GRAPH_SKIP_WITHOUT_GPU()                                                        \
  do {                                                                                  \
    if (!::gdn::cuda_backend_available()) GTEST_SKIP() << "no CUDA device available"; \
  } while (0)

// ---- device twins of host buffers ----

// One device allocation per host Buf (keyed by the Buf object, whose shape must stay fixed), the
// same bytes including dim-0 stride gaps.
class DeviceBufs {
 public:
  DeviceBufs() = default;
  DeviceBufs(const DeviceBufs&) = delete;
  DeviceBufs& operator=(const DeviceBufs&) = delete;
  ~DeviceBufs() {
    for (auto& e : mem_) cudaFree(e.second.ptr);
  }

  cudaError_t upload(const Buf& b) {
    const size_t n = bytes(b);
    auto it = mem_.find(&b);
    if (it == mem_.end()) {
      if (mem_.empty()) {
        cudaError_t e = cudaGetDevice(&device_);
        if (e != cudaSuccess) return e;
      }
      void* p = nullptr;
      cudaError_t e = cudaMalloc(&p, std::max<size_t>(n, 16));
      if (e != cudaSuccess) return e;
      it = mem_.emplace(&b, Entry{p, n}).first;
    }
    if (it->second.bytes != n) return cudaErrorInvalidValue;  // a fixed-capacity buffer changed size
    return cudaMemcpy(it->second.ptr, b.data(), n, cudaMemcpyHostToDevice);
  }
  // Copies the device twin of `key` into `into` (a buffer of the same shape).
  cudaError_t download(const Buf& key, Buf& into) const {
    const Entry& e = mem_.at(&key);
    if (bytes(into) != e.bytes) return cudaErrorInvalidValue;
    return cudaMemcpy(into.data(), e.ptr, e.bytes, cudaMemcpyDeviceToHost);
  }
  TensorView view(Buf& b) const {
    TensorView v = b.view();
    v.data = mem_.at(&b).ptr;
    v.device = Device::kCUDA;
    v.device_index = device_;
    return v;
  }

 private:
  struct Entry {
    void* ptr;
    size_t bytes;
  };
  static size_t bytes(const Buf& b) { return static_cast<size_t>(b.phys_elems()) * b.esize(); }
  std::map<const Buf*, Entry> mem_;
  int device_ = 0;
};

struct Stream {
  cudaStream_t s = nullptr;
  ~Stream() { if (s) cudaStreamDestroy(s); }
};
struct Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~Graph() { if (exec) cudaGraphExecDestroy(exec); if (graph) cudaGraphDestroy(graph); }
};

// Captures launch(stream) on s (global capture mode: the op may make no unsafe call) and
// instantiates the graph.
template <typename F>
void capture(cudaStream_t s, Graph& g, F launch) {
  ASSERT_EQ(cudaSuccess, cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  Status st = launch(s);
  cudaError_t end = cudaStreamEndCapture(s, &g.graph);  // always end the capture
  ASSERT_TRUE(st.ok()) << "op failed during capture: " << st.message();
  ASSERT_EQ(cudaSuccess, end);
  size_t nodes = 0;
  ASSERT_EQ(cudaSuccess, cudaGraphGetNodes(g.graph, nullptr, &nodes));
  EXPECT_GE(nodes, 1u) << "the op launched nothing into the capture";
  ASSERT_EQ(cudaSuccess, cudaGraphInstantiateWithFlags(&g.exec, g.graph, 0));
}

double tol_of(DType act, DType ssm) { return act == DType::kFloat32 && ssm == DType::kFloat32 ? 1e-5 : 1e-2; }

// Every state slot within tol (relative L2 per slot), the stride gaps between slots untouched.
void expect_pool_close(const Buf& got, const Buf& ref, double tol, const char* what) {
  for (int64_t s = 0; s < got.rows(); ++s) expect_slot_close(got, s, ref, s, tol, what);
  for (int64_t q = 0; q < got.phys_elems(); ++q)
    if (!got.is_logical(q) && got.bits_phys(q) != ref.bits_phys(q)) {
      ADD_FAILURE() << what << ": stride gap element " << q << " was written";
      break;
    }
}

std::vector<int64_t> random_perm(int64_t n, Rng& r) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) std::swap(v[i], v[r.randint(0, i)]);
  return v;
}
template <typename T>
void shuffle(std::vector<T>& v, Rng& r) {
  for (int64_t i = static_cast<int64_t>(v.size()) - 1; i > 0; --i) std::swap(v[i], v[r.randint(0, i)]);
}

// ---- gdn_attention on the device ----

GdnAttentionArgs device_attention_args(const DeviceBufs& d, AttnProblem& p, Buf& core, Buf& z) {
  GdnAttentionArgs a = attention_args(p, core, z);  // ints, shapes and which tensors are present
  auto on = [&](TensorView& v, Buf& b) { if (v.present()) v = d.view(b); };
  on(a.core_attn_out, core); on(a.z, z); on(a.projected_states_qkvz, p.qkvz); on(a.projected_states_ba, p.ba);
  on(a.conv_state, p.conv_pool); on(a.ssm_state, p.ssm_pool); on(a.conv_weights, p.weight); on(a.conv_bias, p.bias);
  on(a.A_log, p.A_log); on(a.dt_bias, p.dt_bias); on(a.has_initial_state, p.has_init);
  on(a.non_spec_query_start_loc, p.ns_qsl); on(a.non_spec_token_indx, p.ns_indx);
  on(a.non_spec_state_indices_tensor, p.ns_slots); on(a.spec_query_start_loc, p.sp_qsl);
  on(a.spec_token_indx, p.sp_indx); on(a.spec_state_indices_tensor, p.sp_slots); on(a.num_accepted_tokens, p.nacc);
  return a;
}

// Uploads every tensor of p and the (sentinel-filled) outputs, then waits for the copies.
cudaError_t upload_attention(DeviceBufs& d, AttnProblem& p, Buf& core, Buf& z) {
  for (Buf* b : {&core, &z, &p.qkvz, &p.ba, &p.weight, &p.bias, &p.A_log, &p.dt_bias, &p.conv_pool, &p.ssm_pool,
                 &p.ns_qsl, &p.ns_indx, &p.ns_slots, &p.has_init, &p.sp_qsl, &p.sp_indx, &p.sp_slots, &p.nacc}) {
    cudaError_t e = d.upload(*b);
    if (e != cudaSuccess) return e;
  }
  return cudaDeviceSynchronize();
}

struct AttnOut {
  Buf core, z, conv, ssm;
};

cudaError_t download_attention(const DeviceBufs& d, const AttnProblem& p, const Buf& core, const Buf& z,
                               AttnOut* o) {
  o->core = core; o->z = z; o->conv = p.conv_pool; o->ssm = p.ssm_pool;  // shapes; bytes from the device
  cudaError_t e = d.download(core, o->core);
  if (e == cudaSuccess) e = d.download(z, o->z);
  if (e == cudaSuccess) e = d.download(p.conv_pool, o->conv);
  if (e == cudaSuccess) e = d.download(p.ssm_pool, o->ssm);
  return e;
}

// The reference: the CPU backend on copies of the same host inputs.
Status cpu_attention(const AttnProblem& p, const Buf& core, const Buf& z, AttnOut* o) {
  AttnProblem c = p;
  o->core = core; o->z = z;
  Status s = gdn::gdn_attention(attention_args(c, o->core, o->z));
  o->conv = c.conv_pool;
  o->ssm = c.ssm_pool;
  return s;
}

// core/ssm within tol, z and conv bit-exact, rows >= num_actual_tokens still hold the sentinel.
void expect_attention_match(const AttnProblem& p, const AttnOut& got, const AttnOut& ref, const Buf& sent_core,
                            const Buf& sent_z, double tol) {
  const int64_t row = p.HV * p.V, n = p.num_actual * row, pad = (p.rows_alloc - p.num_actual) * row;
  const double e = rel_l2(got.core, ref.core, {{0, n}}, {{0, n}});
  EXPECT_LE(e, tol) << "core_attn_out rows < num_actual_tokens: relative L2 error vs the CPU";
  EXPECT_EQ(bit_diff(got.core, n, sent_core, n, pad), "") << "core_attn_out rows >= num_actual_tokens were written";
  EXPECT_EQ(byte_diff(got.z, ref.z), "") << "z differs from the CPU";
  EXPECT_EQ(bit_diff(got.z, n, sent_z, n, pad), "") << "z rows >= num_actual_tokens were written";
  EXPECT_EQ(byte_diff(got.conv, ref.conv), "") << "conv_state pool differs from the CPU";
  expect_pool_close(got.ssm, ref.ssm, tol, "ssm_state vs the CPU");
}

// ---- sequences of a round (fixed counts, varying content) ----

enum class NonSpec { kLong, kShort, kOne, kDecode, kPad, kZero, kZeroPad };
enum class Spec { kValid, kPad, kZero, kZeroPad, kPadA1, kSkipStore };

// A non-spec sequence; its token count is rows.size() (global rows are assigned later).
AttnSeq nonspec_seq(NonSpec role, int64_t slot, Rng& r) {
  AttnSeq s;
  s.slot = slot;
  int64_t len = 0;
  switch (role) {
    case NonSpec::kLong: s.has_init = r.coin(); break;  // length set by the caller
    case NonSpec::kShort: len = r.randint(2, 5); s.has_init = r.coin(); break;
    case NonSpec::kOne: len = 1; s.has_init = false; break;  // 1-token prefill from zeros
    case NonSpec::kDecode: len = 1; break;
    case NonSpec::kPad: len = r.randint(1, 3); s.slot = -1; s.has_init = r.coin(); break;
    case NonSpec::kZero: break;  // zero length, valid slot: must not be touched
    case NonSpec::kZeroPad: s.slot = -1; break;
  }
  s.rows.assign(len, -1);
  return s;
}

// A verify sequence (cols >= 2) with cols distinct slots from perm[next...].
AttnSeq spec_seq(Spec role, int64_t cols, const std::vector<int64_t>& perm, size_t& next, Rng& r) {
  AttnSeq s;
  s.spec = true;
  s.cols.assign(perm.begin() + next, perm.begin() + next + cols);
  next += cols;
  int64_t T = r.randint(1, cols);
  s.nacc = r.randint(1, cols);
  switch (role) {
    case Spec::kValid: break;
    case Spec::kPad: s.cols[0] = -1; break;  // padding, the other columns valid
    case Spec::kZero: T = 0; break;          // zero length, valid slots
    case Spec::kZeroPad: T = 0; s.nacc = 1; s.cols.assign(cols, -1); break;
    case Spec::kPadA1: s.nacc = r.randint(2, cols); s.cols[s.nacc - 1] = -1; break;  // state column invalid: padding
    case Spec::kSkipStore:  // last column invalid (!= a-1, != 0): that store is skipped
      T = cols;
      s.nacc = r.randint(1, cols - 1);
      s.cols[cols - 1] = -1;
      break;
  }
  s.rows.assign(T, -1);
  return s;
}

// ---- test (a): gdn_attention under a graph ----

struct GraphParam {
  DType act, ssm;
  int64_t K, V;
  bool reorder;
  StateLayout layout;  // verify recurrent test only
};
std::string param_str(const GraphParam& p) {
  return std::string("act") + dtype_short(p.act) + "_ssm" + dtype_short(p.ssm) + "_K" + std::to_string(p.K) + "_V" +
         std::to_string(p.V) + (p.reorder ? "_reorder" : "") + "_" + to_string(p.layout);
}
void PrintTo(const GraphParam& p, std::ostream* os) { *os << param_str(p); }
std::string graph_param_name(const ::testing::TestParamInfo<GraphParam>& i) { return param_str(i.param); }

class CudaGraph : public ::testing::TestWithParam<GraphParam> {};

// Fixed capacities: 6 non-spec sequences (num_prefills 3 + num_decodes 3), 4 verify sequences with
// cols 4, 40 tokens (every row below num_actual_tokens is a token), 6 graph-padded rows.
constexpr int64_t kNumNs = 6, kNumSpec = 4, kTokens = 40, kPadRows = 6;

AttnProblem init_graph_problem(const GraphParam& prm, Rng& r) {
  AttnProblem p;
  p.H = 2; p.HV = 4; p.K = prm.K; p.V = prm.V; p.W = 4; p.cols = 4;
  p.act = prm.act; p.ssm_dtype = prm.ssm; p.reorder = prm.reorder;
  p.num_actual = kTokens;
  p.rows_alloc = kTokens + kPadRows;
  p.num_slots = kNumNs + kNumSpec * p.cols + 6;
  p.num_prefills = 3; p.num_decodes = kNumNs - 3; p.num_spec = kNumSpec;
  p.qkvz = Buf(p.act, {p.rows_alloc, p.qkvz_width()});
  p.ba = Buf(p.act, {p.rows_alloc, 2 * p.HV});
  p.weight = Buf(p.act, {p.D(), p.W});
  p.bias = Buf(p.act, {p.D()});
  fill_normal(p.weight, r, 0.5);
  fill_normal(p.bias, r, 0.2);
  GdrIn consts = make_gdr_in(r, 0, p.H, p.HV, p.K, p.V, p.act, p.act);
  p.A_log = consts.A_log;
  p.dt_bias = consts.dt_bias;
  const int64_t conv_rows = p.W - 2 + p.cols + 1;
  p.conv_pool = Buf(p.act, {p.num_slots, conv_rows, p.D()}, conv_rows * p.D() + 8);
  p.ssm_pool = make_ssm_pool(p.ssm_dtype, p.num_slots, p.HV, p.K, p.V, StateLayout::kVK, 16);
  return p;
}

// Writes round `round`'s projections, pools and metadata into p, keeping every shape. Returns false
// if the roles do not fit into the token capacity.
bool fill_round(AttnProblem& p, Rng& r, int round) {
  using N = NonSpec;
  using S = Spec;
  static const std::vector<std::vector<N>> kNs = {{N::kLong, N::kShort, N::kOne, N::kDecode, N::kDecode, N::kPad},
                                                  {N::kLong, N::kShort, N::kShort, N::kDecode, N::kPad, N::kPad},
                                                  {N::kLong, N::kZero, N::kOne, N::kDecode, N::kDecode, N::kPad},
                                                  {N::kLong, N::kShort, N::kDecode, N::kOne, N::kZeroPad, N::kZero}};
  static const std::vector<std::vector<S>> kSp = {{S::kValid, S::kValid, S::kValid, S::kPad},
                                                  {S::kValid, S::kValid, S::kPad, S::kZero},
                                                  {S::kValid, S::kSkipStore, S::kValid, S::kPadA1},
                                                  {S::kValid, S::kSkipStore, S::kPad, S::kZeroPad}};
  std::vector<N> ns = kNs[round];
  std::vector<S> sp = kSp[round];
  shuffle(ns, r);
  shuffle(sp, r);
  const std::vector<int64_t> perm = random_perm(p.num_slots, r);
  size_t next = 0, long_i = 0;
  int64_t used = 0;
  p.seqs.clear();
  for (N role : ns) {
    if (role == N::kLong) long_i = p.seqs.size();
    p.seqs.push_back(nonspec_seq(role, perm[next++], r));
    used += static_cast<int64_t>(p.seqs.back().rows.size());
  }
  for (S role : sp) {
    p.seqs.push_back(spec_seq(role, p.cols, perm, next, r));
    used += static_cast<int64_t>(p.seqs.back().rows.size());
  }
  if (used >= p.num_actual) return false;
  p.seqs[long_i].rows.assign(p.num_actual - used, -1);  // the long prefill takes the remaining tokens
  const std::vector<int64_t> order = random_perm(p.num_actual, r);  // spec and non-spec rows interleaved
  size_t k = 0;
  for (AttnSeq& s : p.seqs)
    for (int64_t& row : s.rows) row = order[k++];
  build_meta(p);  // query_start_loc, token_indx, slots, has_initial_state, num_accepted_tokens
  p.num_prefills = 3;  // the captured counts (build_meta recounts by length)
  p.num_decodes = kNumNs - 3;
  // Token index buffers have capacity num_actual_tokens; entries past the group's tokens hold an
  // out-of-range row (they belong to no sequence and must not matter).
  for (Buf* indx : {&p.ns_indx, &p.sp_indx}) {
    Buf full = index_buf(std::vector<int64_t>(p.num_actual, p.num_actual + 3), p.index_dtype);
    copy_elems(full, 0, *indx, 0, indx->numel());
    *indx = full;
  }
  fill_normal(p.qkvz, r, 1.0);
  fill_normal(p.ba, r, 1.0);
  fill_normal(p.conv_pool, r, 1.0);
  fill_normal(p.ssm_pool, r, 0.3);
  return true;
}

TEST_P(CudaGraph, AttentionReplayWithNewMetadata) {
  GRAPH_SKIP_WITHOUT_GPU();
  const GraphParam& prm = GetParam();
  Rng r(9100 + prm.K + prm.V + (prm.reorder ? 7 : 0));
  AttnProblem p = init_graph_problem(prm, r);
  ASSERT_TRUE(fill_round(p, r, 0));
  Buf core, z;
  make_outputs(p, &core, &z, 0);
  DeviceBufs d;
  ASSERT_EQ(cudaSuccess, upload_attention(d, p, core, z));
  const GdnAttentionArgs dargs = device_attention_args(d, p, core, z);
  Stream st;
  ASSERT_EQ(cudaSuccess, cudaStreamCreateWithFlags(&st.s, cudaStreamNonBlocking));
  Graph g;
  ASSERT_NO_FATAL_FAILURE(capture(st.s, g, [&](cudaStream_t s) { return gdn::gdn_attention(dargs, s); }));
  for (int round = 1; round <= 3; ++round) {
    ASSERT_TRUE(fill_round(p, r, round));
    make_outputs(p, &core, &z, round % 2);  // sentinel: NaN pattern or 0x7F bytes
    SCOPED_TRACE(::testing::Message() << "graph replay " << round << ", " << describe(p));
    ASSERT_EQ(cudaSuccess, upload_attention(d, p, core, z));
    ASSERT_EQ(cudaSuccess, cudaGraphLaunch(g.exec, st.s));
    ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(st.s));
    ASSERT_EQ(cudaSuccess, cudaGetLastError());
    AttnOut got, ref;
    ASSERT_EQ(cudaSuccess, download_attention(d, p, core, z, &got));
    PROP_ASSERT_OK(cpu_attention(p, core, z, &ref));
    expect_attention_match(p, got, ref, core, z, tol_of(p.act, p.ssm_dtype));
    if (HasFailure()) return;
  }
}

// ---- test (a'): gated_delta_rule_recurrent (verify) under a graph ----

// Fixed capacities: 5 verify sequences, cols 4, 20 token rows (tokens past query_start_loc[n]
// keep the sentinel in o).
struct VerifyProblem {
  int64_t n = 5, cols = 4, rows = 20, num_slots = 24, H = 2, HV = 4, K = 32, V = 32;
  DType act = DType::kFloat32, ssm = DType::kFloat32;
  StateLayout layout = StateLayout::kVK;
  GdrIn g;
  Buf pool, qsl, slots, nacc, hinit, o;
  std::vector<AttnSeq> seqs;
  int64_t used = 0;  // query_start_loc[n]
};

std::string describe_verify(const VerifyProblem& v) {
  std::ostringstream s;
  s << "act=" << dtype_short(v.act) << " ssm=" << dtype_short(v.ssm) << " K=" << v.K << " V=" << v.V
    << " layout=" << to_string(v.layout) << " slots=" << v.num_slots << " tokens=" << v.used << "/" << v.rows << "\n";
  for (const AttnSeq& q : v.seqs) {
    s << "  T=" << q.rows.size() << " accepted " << q.nacc << " init " << q.has_init << " slots [";
    for (size_t i = 0; i < q.cols.size(); ++i) s << (i ? "," : "") << q.cols[i];
    s << "]\n";
  }
  return s.str();
}

void init_verify(VerifyProblem& v, const GraphParam& prm, Rng& r) {
  v.act = prm.act; v.ssm = prm.ssm; v.K = prm.K; v.V = prm.V; v.layout = prm.layout;
  v.g = make_gdr_in(r, v.rows, v.H, v.HV, v.K, v.V, v.act, v.act);
  v.pool = make_ssm_pool(v.ssm, v.num_slots, v.HV, v.K, v.V, v.layout, 16);
}

void fill_verify_round(VerifyProblem& v, Rng& r, int round) {
  using S = Spec;
  static const std::vector<std::vector<S>> kRoles = {{S::kValid, S::kValid, S::kValid, S::kPad, S::kZero},
                                                     {S::kValid, S::kSkipStore, S::kPadA1, S::kValid, S::kPad},
                                                     {S::kValid, S::kValid, S::kZeroPad, S::kPad, S::kValid},
                                                     {S::kSkipStore, S::kValid, S::kValid, S::kPadA1, S::kZero}};
  std::vector<S> roles = kRoles[round];
  shuffle(roles, r);
  const std::vector<int64_t> perm = random_perm(v.num_slots, r);
  size_t next = 0;
  v.seqs.clear();
  std::vector<int64_t> lens, nacc;
  std::vector<std::vector<int64_t>> slots;
  std::vector<bool> hinit;
  for (S role : roles) {
    v.seqs.push_back(spec_seq(role, v.cols, perm, next, r));
    v.seqs.back().has_init = r.coin(0.7);  // applies to verify sequences in the primitive op
    lens.push_back(static_cast<int64_t>(v.seqs.back().rows.size()));
    slots.push_back(v.seqs.back().cols);
    nacc.push_back(v.seqs.back().nacc);
    hinit.push_back(v.seqs.back().has_init);
  }
  const std::vector<int64_t> qsl = prefix_sum(lens);
  v.used = qsl.back();
  v.qsl = index_buf(qsl);
  v.slots = index_buf2(slots, v.cols);
  v.nacc = index_buf(nacc);
  v.hinit = bool_buf(hinit);
  GdrIn fresh = make_gdr_in(r, v.rows, v.H, v.HV, v.K, v.V, v.act, v.act);  // new q, k, v, a, b
  v.g.q = fresh.q; v.g.k = fresh.k; v.g.v = fresh.v; v.g.a = fresh.a; v.g.b = fresh.b;
  fill_normal(v.pool, r, 0.3);
  v.o = Buf(v.act, {v.rows, v.HV, v.V});
  poison(v.o, round % 2);
}

GatedDeltaRuleArgs verify_args(VerifyProblem& v, GdrIn& g, Buf& pool, Buf& o) {
  return gdr_args(g, pool, v.layout, v.qsl, v.slots, &v.nacc, &v.hinit, o);
}

TEST_P(CudaGraph, VerifyRecurrentReplayWithNewMetadata) {
  GRAPH_SKIP_WITHOUT_GPU();
  const GraphParam& prm = GetParam();
  Rng r(9200 + prm.K + prm.V + (prm.reorder ? 7 : 0));
  VerifyProblem v;
  init_verify(v, prm, r);
  fill_verify_round(v, r, 0);
  DeviceBufs d;
  auto upload = [&]() -> cudaError_t {
    for (Buf* b : {&v.g.q, &v.g.k, &v.g.v, &v.g.a, &v.g.b, &v.g.A_log, &v.g.dt_bias, &v.pool, &v.qsl, &v.slots,
                   &v.nacc, &v.hinit, &v.o}) {
      cudaError_t e = d.upload(*b);
      if (e != cudaSuccess) return e;
    }
    return cudaDeviceSynchronize();
  };
  ASSERT_EQ(cudaSuccess, upload());
  GatedDeltaRuleArgs dargs = verify_args(v, v.g, v.pool, v.o);
  dargs.q = d.view(v.g.q); dargs.k = d.view(v.g.k); dargs.v = d.view(v.g.v);
  dargs.a = d.view(v.g.a); dargs.b = d.view(v.g.b);
  dargs.A_log = d.view(v.g.A_log); dargs.dt_bias = d.view(v.g.dt_bias); dargs.ssm_state = d.view(v.pool);
  dargs.query_start_loc = d.view(v.qsl); dargs.state_indices = d.view(v.slots);
  dargs.num_accepted_tokens = d.view(v.nacc); dargs.has_initial_state = d.view(v.hinit); dargs.o = d.view(v.o);
  Stream st;
  ASSERT_EQ(cudaSuccess, cudaStreamCreateWithFlags(&st.s, cudaStreamNonBlocking));
  Graph g;
  ASSERT_NO_FATAL_FAILURE(capture(st.s, g, [&](cudaStream_t s) { return gdn::gated_delta_rule_recurrent(dargs, s); }));
  const double tol = tol_of(v.act, v.ssm);
  for (int round = 1; round <= 3; ++round) {
    fill_verify_round(v, r, round);
    SCOPED_TRACE(::testing::Message() << "graph replay " << round << ", " << describe_verify(v));
    ASSERT_EQ(cudaSuccess, upload());
    ASSERT_EQ(cudaSuccess, cudaGraphLaunch(g.exec, st.s));
    ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(st.s));
    ASSERT_EQ(cudaSuccess, cudaGetLastError());
    Buf got_o = v.o, got_pool = v.pool;
    ASSERT_EQ(cudaSuccess, d.download(v.o, got_o));
    ASSERT_EQ(cudaSuccess, d.download(v.pool, got_pool));
    GdrIn gc = v.g;
    Buf ref_o = v.o, ref_pool = v.pool;
    PROP_ASSERT_OK(gdn::gated_delta_rule_recurrent(verify_args(v, gc, ref_pool, ref_o)));
    const int64_t row = v.HV * v.V, n = v.used * row;
    EXPECT_LE(rel_l2(got_o, ref_o, {{0, n}}, {{0, n}}), tol) << "o rows < query_start_loc[n]: relative L2 vs the CPU";
    EXPECT_EQ(bit_diff(got_o, n, v.o, n, v.rows * row - n), "") << "o rows past the tokens were written";
    expect_pool_close(got_pool, ref_pool, tol, "ssm_state vs the CPU");
    if (HasFailure()) return;
  }
}

constexpr DType kF32 = DType::kFloat32, kBF16 = DType::kBFloat16;
INSTANTIATE_TEST_SUITE_P(Cuda, CudaGraph,
                         ::testing::Values(GraphParam{kF32, kF32, 32, 32, false, StateLayout::kVK},
                                           GraphParam{kBF16, kF32, 64, 64, true, StateLayout::kKV},
                                           GraphParam{kBF16, kBF16, 128, 32, false, StateLayout::kVK},
                                           GraphParam{kF32, kF32, 128, 64, true, StateLayout::kKV}),
                         graph_param_name);

// ---- test (b): two streams at once ----

AttnProblem stream_problem(int which, Rng& r) {
  AttnProblem p;
  MixOptions m;
  if (which == 0) {  // long prefills (up to 300 tokens), bf16 activations
    p.act = DType::kBFloat16; p.ssm_dtype = DType::kFloat32; p.K = 64; p.V = 64; p.cols = 3;
    m.max_prefill = 300;
  } else {           // many short sequences, float32, block layout, random row order
    p.act = DType::kFloat32; p.ssm_dtype = DType::kFloat32; p.K = 32; p.V = 64; p.cols = 4; p.reorder = true;
    m.n_spec = 6; m.n_decode = 5; m.permute_rows = true;
  }
  make_mixed_batch(p, r, m);
  fill_attention_data(p, r);
  return p;
}

TEST(CudaStreams, TwoStreamsAtOnce) {
  GRAPH_SKIP_WITHOUT_GPU();
  Rng r(9300);
  AttnProblem p[2] = {stream_problem(0, r), stream_problem(1, r)};
  Buf core[2], z[2];
  DeviceBufs d[2];
  Stream st[2];
  GdnAttentionArgs args[2];
  for (int i = 0; i < 2; ++i) {
    make_outputs(p[i], &core[i], &z[i], i);
    ASSERT_EQ(cudaSuccess, upload_attention(d[i], p[i], core[i], z[i]));
    ASSERT_EQ(cudaSuccess, cudaStreamCreateWithFlags(&st[i].s, cudaStreamNonBlocking));
    args[i] = device_attention_args(d[i], p[i], core[i], z[i]);
  }
  // Back to back, no synchronisation in between: the second runs while the long prefills of the
  // first are still going.
  Status s0 = gdn::gdn_attention(args[0], st[0].s);
  Status s1 = gdn::gdn_attention(args[1], st[1].s);
  ASSERT_TRUE(s0.ok()) << s0.message();
  ASSERT_TRUE(s1.ok()) << s1.message();
  ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(st[0].s));
  ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(st[1].s));
  ASSERT_EQ(cudaSuccess, cudaGetLastError());
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(::testing::Message() << "stream " << i << ", " << describe(p[i]));
    AttnOut got, ref;
    ASSERT_EQ(cudaSuccess, download_attention(d[i], p[i], core[i], z[i], &got));
    PROP_ASSERT_OK(cpu_attention(p[i], core[i], z[i], &ref));
    expect_attention_match(p[i], got, ref, core[i], z[i], tol_of(p[i].act, p[i].ssm_dtype));
  }
}

// ---- test (c): byte-identical results across runs ----

struct DetParam {
  DType act, ssm;
  int64_t K, V;
};
std::string param_str(const DetParam& p) {
  return std::string("act") + dtype_short(p.act) + "_ssm" + dtype_short(p.ssm) + "_K" + std::to_string(p.K) + "_V" +
         std::to_string(p.V);
}
void PrintTo(const DetParam& p, std::ostream* os) { *os << param_str(p); }

class CudaDeterminism : public ::testing::TestWithParam<DetParam> {};

TEST_P(CudaDeterminism, ByteIdenticalAcrossRuns) {
  GRAPH_SKIP_WITHOUT_GPU();
  const DetParam& prm = GetParam();
  Rng r(9400 + prm.K + prm.V);
  AttnProblem p;
  p.act = prm.act; p.ssm_dtype = prm.ssm; p.K = prm.K; p.V = prm.V; p.cols = 4;
  MixOptions m;
  m.max_prefill = 64;
  m.permute_rows = true;
  make_mixed_batch(p, r, m);
  fill_attention_data(p, r);
  SCOPED_TRACE(describe(p));
  Buf core, z;
  make_outputs(p, &core, &z, 0);
  DeviceBufs d;
  Stream st;
  ASSERT_EQ(cudaSuccess, cudaStreamCreateWithFlags(&st.s, cudaStreamNonBlocking));
  AttnOut runs[3];
  for (int run = 0; run < 3; ++run) {
    ASSERT_EQ(cudaSuccess, upload_attention(d, p, core, z));  // identical inputs, pools and sentinels
    PROP_ASSERT_OK(gdn::gdn_attention(device_attention_args(d, p, core, z), st.s));
    ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(st.s));
    ASSERT_EQ(cudaSuccess, cudaGetLastError());
    ASSERT_EQ(cudaSuccess, download_attention(d, p, core, z, &runs[run]));
  }
  AttnOut ref;  // the first run must also be right (identical garbage would pass the rest)
  PROP_ASSERT_OK(cpu_attention(p, core, z, &ref));
  expect_attention_match(p, runs[0], ref, core, z, tol_of(p.act, p.ssm_dtype));
  for (int run = 1; run < 3; ++run) {  // same_bytes: memcmp of the whole allocation
    SCOPED_TRACE(::testing::Message() << "run " << run << " vs run 0");
    const AttnOut& a = runs[run];
    const AttnOut& b = runs[0];
    EXPECT_TRUE(a.core.same_bytes(b.core)) << "core_attn_out: " << byte_diff(a.core, b.core);
    EXPECT_TRUE(a.z.same_bytes(b.z)) << "z: " << byte_diff(a.z, b.z);
    EXPECT_TRUE(a.conv.same_bytes(b.conv)) << "conv_state: " << byte_diff(a.conv, b.conv);
    EXPECT_TRUE(a.ssm.same_bytes(b.ssm)) << "ssm_state: " << byte_diff(a.ssm, b.ssm);
  }
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaDeterminism,
                         ::testing::Values(DetParam{DType::kBFloat16, DType::kFloat32, 128, 128},
                                           DetParam{DType::kBFloat16, DType::kBFloat16, 64, 64},
                                           DetParam{DType::kFloat32, DType::kFloat32, 64, 32}),
                         [](const ::testing::TestParamInfo<DetParam>& i) { return param_str(i.param); });

}  // namespace
}  // namespace gdn::prop

#else  // !GDN_WITH_CUDA

TEST(CudaGraph, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif
