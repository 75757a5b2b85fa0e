// The gate forms of the gated delta rule (include/gdn/ops.h, FLA's conventions), on the CPU:
//   * a given as the log-space decay (no A_log / dt_bias) and b given as beta (beta_sigmoid off),
//     each computed here in float32 by the same operations the op uses (g = -exp(A_log)
//     softplus(a + dt_bias), beta = 1 / (1 + exp(-b))): the same bytes as the computed form, for
//     the recurrent and the chunked op, both state layouts, varlen batches with and without
//     initial states; the two switches one at a time as well;
//   * qk_l2norm off with q and k normalised here (q / sqrt(|q|^2 + 1e-6)): within rel L2 1e-5 of
//     the normalising run (float32 activations and state; only the rounding of the normalised
//     values differs);
//   * on CUDA both ops take them (tests/test_cuda_gate_forms.cpp compares the recurrent op's
//     results with the CPU's in every kernel); where the chunk kernel cannot run (here K = 16) the
//     chunked op runs the recurrence kernels, so its results are the recurrent op's bytes, and both
//     are within the tolerances of float32 (1e-5) or 16-bit (1e-2) activations of the CPU's.
#include "common/seq_rules.h"
#include "prop_ops.h"

namespace gdn::prop {
namespace {

struct Batch {
  std::vector<int64_t> lens{5, 1, 70, 0, 3};
  std::vector<bool> init{true, false, true, true, false};
  int64_t H = 2, HV = 4, K = 16, V = 8;
  GdrIn in;
  int64_t T = 0;
};

Batch make_batch(DType act, Rng& r) {
  Batch b;
  for (int64_t l : b.lens) b.T += l;
  b.in = make_gdr_in(r, b.T, b.H, b.HV, b.K, b.V, act, DType::kFloat32);
  return b;
}

// The gates the op computes, in float32, as [T, HV] tensors: g and beta.
void computed_gates(const GdrIn& in, Buf* g, Buf* beta) {
  *g = Buf(DType::kFloat32, {in.T, in.HV});
  *beta = Buf(DType::kFloat32, {in.T, in.HV});
  for (int64_t t = 0; t < in.T; ++t)
    for (int64_t h = 0; h < in.HV; ++h) {
      const float av = static_cast<float>(in.a.get(t * in.HV + h)), bv = static_cast<float>(in.b.get(t * in.HV + h));
      const float A = static_cast<float>(in.A_log.get(h)), dt = static_cast<float>(in.dt_bias.get(h));
      g->set(t * in.HV + h, -std::exp(A) * rules::softplus(av + dt));
      beta->set(t * in.HV + h, 1.f / (1.f + std::exp(-bv)));
    }
}

struct GateRun {
  Buf o, pool;
};

// Runs the batch with the given inputs and switches (chunked or recurrent).
GateRun run_gates(Backend be, bool chunked, const Batch& b, GdrIn in, StateLayout layout, bool decay_given, bool beta_given,
        bool l2norm, Status* st) {
  Rng r(5);
  GateRun out;
  out.pool = make_ssm_pool(DType::kFloat32, static_cast<int64_t>(b.lens.size()), b.HV, b.K, b.V, layout, 8);
  fill_normal(out.pool, r, 0.3);
  out.o = Buf(in.q.dtype(), {b.T, b.HV, b.V});
  std::vector<int64_t> slots;
  for (size_t i = 0; i < b.lens.size(); ++i) slots.push_back(static_cast<int64_t>(b.lens.size() - 1 - i));
  Buf qsl = index_buf(prefix_sum(b.lens)), sl = index_buf(slots), hi = bool_buf(b.init);
  GatedDeltaRuleArgs a = gdr_args(in, out.pool, layout, qsl, sl, nullptr, &hi, out.o);
  if (decay_given) a.A_log = a.dt_bias = TensorView{};
  a.beta_sigmoid = !beta_given;
  a.qk_l2norm = l2norm;
  *st = chunked ? capture::run_chunked_on(be, a) : capture::run_recurrent_on(be, a);
  return out;
}

class PropGateForms : public ::testing::TestWithParam<DType> {};

TEST_P(PropGateForms, GivenGatesEqualComputedGates) {
  for (bool chunked : {false, true})
    for (StateLayout layout : {StateLayout::kVK, StateLayout::kKV}) {
      SCOPED_TRACE(std::string(chunked ? "chunked" : "recurrent") + " " + to_string(layout));
      Rng r(41);
      const Batch b = make_batch(GetParam(), r);
      Status st;
      const GateRun ref = run_gates(Backend::kCPU, chunked, b, b.in, layout, false, false, true, &st);
      ASSERT_TRUE(st.ok()) << st.message();
      Buf g, beta;
      computed_gates(b.in, &g, &beta);
      for (int form = 1; form < 4; ++form) {  // bit 0: decay given, bit 1: beta given
        const bool dg = form & 1, bg = form & 2;
        SCOPED_TRACE(std::string("decay ") + (dg ? "given" : "computed") + ", beta " + (bg ? "given" : "computed"));
        GdrIn in = b.in;
        if (dg) in.a = g;
        if (bg) in.b = beta;
        const GateRun got = run_gates(Backend::kCPU, chunked, b, in, layout, dg, bg, true, &st);
        ASSERT_TRUE(st.ok()) << st.message();
        EXPECT_EQ(byte_diff(got.o, ref.o), "") << "o";
        EXPECT_EQ(byte_diff(got.pool, ref.pool), "") << "state pool";
      }
    }
}

TEST(PropGateFormsF32, WithoutL2NormOnNormalisedInputs) {
  for (bool chunked : {false, true}) {
    SCOPED_TRACE(chunked ? "chunked" : "recurrent");
    Rng r(43);
    const Batch b = make_batch(DType::kFloat32, r);
    Status st;
    const GateRun ref = run_gates(Backend::kCPU, chunked, b, b.in, StateLayout::kKV, false, false, true, &st);
    ASSERT_TRUE(st.ok()) << st.message();
    GdrIn in = b.in;
    for (Buf* x : {&in.q, &in.k})
      for (int64_t row = 0; row < b.T * b.H; ++row) {
        double ss = 0;
        for (int64_t e = 0; e < b.K; ++e) ss += x->get(row * b.K + e) * x->get(row * b.K + e);
        const float n = 1.f / std::sqrt(static_cast<float>(ss) + 1e-6f);
        for (int64_t e = 0; e < b.K; ++e) x->set(row * b.K + e, static_cast<float>(x->get(row * b.K + e)) * n);
      }
    const GateRun got = run_gates(Backend::kCPU, chunked, b, in, StateLayout::kKV, false, false, false, &st);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_LE(rel_l2(got.o, ref.o), 1e-5);
    EXPECT_LE(rel_l2(got.pool, ref.pool), 1e-5);
    // and it is not a no-op: without normalisation the raw inputs give another result
    const GateRun raw = run_gates(Backend::kCPU, chunked, b, b.in, StateLayout::kKV, false, false, false, &st);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_GT(rel_l2(raw.o, ref.o), 1e-2);
  }
}

TEST_P(PropGateForms, CudaTakesThemInBothOps) {
  PROP_SKIP_IF_UNAVAILABLE(Backend::kCUDA);
  Rng r(44);
  const Batch b = make_batch(GetParam(), r);
  Buf g, beta;
  computed_gates(b.in, &g, &beta);
  GdrIn given = b.in;
  given.a = g;
  given.b = beta;
  struct Form {
    const char* name;
    const GdrIn& in;
    bool decay_given, beta_given, l2norm;
  };
  for (const Form& f : {Form{"decay and beta given", given, true, true, true},
                        Form{"decay given", given, true, false, true}, Form{"no l2 norm", b.in, false, false, false}}) {
    for (StateLayout layout : {StateLayout::kVK, StateLayout::kKV}) {
      SCOPED_TRACE(std::string(f.name) + " " + to_string(layout));
      GdrIn in = f.in;
      if (f.decay_given && !f.beta_given) in.b = b.in.b;  // the raw logit beside the given decay
      Status st;
      const GateRun cpu = run_gates(Backend::kCPU, false, b, in, layout, f.decay_given, f.beta_given, f.l2norm, &st);
      ASSERT_TRUE(st.ok()) << st.message();
      const GateRun rec = run_gates(Backend::kCUDA, false, b, in, layout, f.decay_given, f.beta_given, f.l2norm, &st);
      ASSERT_TRUE(st.ok()) << st.message();
      const GateRun chk = run_gates(Backend::kCUDA, true, b, in, layout, f.decay_given, f.beta_given, f.l2norm, &st);
      ASSERT_TRUE(st.ok()) << st.message();
      EXPECT_EQ(bit_diff(chk.o, 0, rec.o, 0, rec.o.numel()), "") << "chunked op: the recurrent op's outputs";
      EXPECT_EQ(bit_diff(chk.pool, 0, rec.pool, 0, rec.pool.numel()), "") << "chunked op: the recurrent op's states";
      EXPECT_LE(rel_l2(rec.o, cpu.o), tol_for(GetParam())) << "o against the CPU";
      EXPECT_LE(rel_l2(rec.pool, cpu.pool), 1e-5) << "states against the CPU (float32 state)";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Prop, PropGateForms, ::testing::Values(DType::kFloat32, DType::kBFloat16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string("act") + dtype_short(i.param); });

}  // namespace
}  // namespace gdn::prop
