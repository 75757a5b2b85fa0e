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
//   Both with the planner's choice and with each kernel path forced where it can run.
//   CudaStreams.TwoStreamsAtOnce: two independent problems (own pools, different sizes, one with a
//     long prefill) launched on two streams back to back without synchronising in between; both
//     equal their CPU references.
//   CudaDeterminism.ByteIdenticalAcrossRuns: the same call from identical device inputs, 3 times:
//     core_attn_out, z, conv_state and ssm_state identical byte for byte (docs/contract.md §6).
//
// Tolerance principle: the CUDA kernels evaluate the same float32 math as the CPU backend, in a
// different summation order (and fused differently), so results agree to float32 rounding:
// relative L2 error 1e-5 when activations and SSM state are float32. When either is bf16/fp16, a
// value that is rounded for storage (the conv output before the recurrence, a state column) may
// land one storage ulp (2^-9 relative) apart, and that propagates through the recurrence: 1e-2.
// z and conv state rows are copies of input bits: bit-exact. Rows past the tokens keep the
// sentinel the host wrote before the run (NaN or huge finite patterns): bit-exact.
#include "cuda_device.h"
#include "forced_path.h"
#include "prop_attention.h"

#ifdef GDN_WITH_CUDA

namespace gdn::prop {
namespace {

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
// Each case with the planner's choice and with every kernel path forced (an op ignores the other
// op's paths).
using GraphCase = std::tuple<GraphParam, Backend>;
std::string graph_param_name(const ::testing::TestParamInfo<GraphCase>& i) {
  return param_str(std::get<0>(i.param)) + "_" + capture::backend_name(std::get<1>(i.param));
}

class CudaGraph : public ::testing::TestWithParam<GraphCase> {
 protected:
  const GraphParam& Param() const { return std::get<0>(GetParam()); }
  cuda::plan::Override Force() const { return {std::get<1>(GetParam()).path}; }
};

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
  alloc_params_and_pools(p, r);
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
  const GraphParam& prm = Param();
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
  ASSERT_NO_FATAL_FAILURE(capture(st.s, g, [&](cudaStream_t s) { return gdn::internal::gdn_attention(dargs, s, Force()); }));
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
  const GraphParam& prm = Param();
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
  ASSERT_NO_FATAL_FAILURE(capture(st.s, g, [&](cudaStream_t s) { return gdn::internal::gated_delta_rule_recurrent(dargs, s, Force()); }));
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
std::vector<Backend> cuda_paths() {
  std::vector<Backend> v;
  for (Backend b : capture::test_backends(capture::Ops::kAll))
    if (b.cuda()) v.push_back(b);
  return v;
}
INSTANTIATE_TEST_SUITE_P(Cuda, CudaGraph,
                         ::testing::Combine(::testing::Values(GraphParam{kF32, kF32, 32, 32, false, StateLayout::kVK},
                                                              GraphParam{kBF16, kF32, 64, 64, true, StateLayout::kKV},
                                                              GraphParam{kBF16, kBF16, 128, 32, false, StateLayout::kVK},
                                                              GraphParam{kF32, kF32, 128, 64, true, StateLayout::kKV}),
                                            ::testing::ValuesIn(cuda_paths())),
                         graph_param_name);

}  // namespace
}  // namespace gdn::prop

#else  // !GDN_WITH_CUDA

TEST(CudaGraph, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif
