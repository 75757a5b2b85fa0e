// gated_delta_rule_recurrent on CUDA with the gate and norm forms of ops.h other than the default
// (FLA's API; transformers' decode): the gate-form instances of the lean, pipelined and register
// kernels, on the planner's choice and on every recurrence path forced (tests/test_plan.cpp,
// Plan.GateFormsTakeTheDefaultFormsPathsWithInstances: these forms take the default form's paths
// where those have gate-form instances, else the register kernel's large shape; a forced path
// without instances, register_mid or packed, leaves the planner's choice). Forms: the log-space
// decay given in float32 and in the activation dtype, beta given in float32 and in the activation
// dtype, no l2 norm, the default gates with a and b in float32 beside 16-bit q, transformers' decode
// (float32 g, 16-bit beta) and all three switches at once. Batches: one-token decode of Qwen3-Next
// TP1 heads (H 16, HV 32, K = V = 128) at N = 2 (64 sequence-heads) and N = 5 (a sequence on the
// null slot and one without initial state), a varlen batch of short prefills with a zero-length
// sequence (head ratio 3, K = 64, V = 48), the same with K = 128, V = 64 and sequences of up to 9
// tokens (more than the pipelined kernel's 4 staged ones), and verify (3 state columns, ragged
// accepted counts, K = 128, V = 64); "vk" and "kv" pools with a padded slot stride. Forced, the
// lean kernel (its base and more-blocks forms; with bf16 state its staged form) and the pipelined
// kernel take every "vk" batch with K = 128. Batches where the planner itself chooses those
// kernels (plan/tuning.h, on a 132-SM H200), "vk" only: decode at N = 12 with V = 32 (384
// sequence-heads: the pipelined kernel), on every path, and at N = 64 (2048: the lean kernel, its
// more-blocks form for float32 state and its staged form for bf16), on the planner's choice only (a
// pool of 66 slots, 8.7 M state elements, per call). bf16 and float32 activations, float32 and bf16
// state. Outputs and every state slot against the CPU backend with the same forms, and a second
// CUDA call gives the same bytes.
// Tolerances (tests/test_cuda_shapes.cpp's): the same float32 math in another summation order:
// outputs rel L2 1e-2 when bf16, 1e-5 when float32; states 1e-5 in float32, 1e-2 in bf16 (a rounding
// of the stored state may differ).
#include <map>
#include <optional>

#include "prop_ops.h"

namespace gdn::prop {
namespace {

struct FormsParam {
  Backend be;
  DType act, state;
};
std::string forms_name(const ::testing::TestParamInfo<FormsParam>& i) {
  return std::string("act") + dtype_short(i.param.act) + "_state" + dtype_short(i.param.state) + "_" +
         capture::backend_name(i.param.be);
}

struct Form {
  const char* name;
  bool decay_given, beta_given, l2norm;
  bool a_f32, b_f32;  // a, b in float32 (else the activation dtype)
};
const Form kForms[] = {
    {"decay_given_f32", true, false, true, true, false},  {"decay_given_act", true, false, true, false, false},
    {"beta_given_f32", false, true, true, false, true},   {"beta_given_act", false, true, true, false, false},
    {"no_l2norm", false, false, false, false, false},     {"computed_gates_f32", false, false, true, true, true},
    {"transformers_decode", true, true, true, true, false}, {"all_given_no_l2norm", true, true, false, true, true},
};

enum class Shape { kDecodeSmall, kDecodeLarge, kVarlen, kVerify, kVarlen128, kDecode12, kDecode64 };
const char* shape_name(Shape s) {
  switch (s) {
    case Shape::kDecodeSmall: return "decode N=2";
    case Shape::kDecodeLarge: return "decode N=5";
    case Shape::kVarlen: return "varlen";
    case Shape::kVerify: return "verify";
    case Shape::kVarlen128: return "varlen K=128";
    case Shape::kDecode12: return "decode N=12";
    case Shape::kDecode64: return "decode N=64";
  }
  return "?";
}
// The planner's batches (N = 12, 64): "vk" only; N = 64 on the planner's choice only.
bool runs(Shape s, StateLayout layout, Backend be) {
  if (s != Shape::kDecode12 && s != Shape::kDecode64) return true;
  return layout == StateLayout::kVK && (s == Shape::kDecode12 || be.path == cuda::plan::Path::kAuto);
}

// One batch: its heads, sequences, slots and inputs in the form f.
struct Batch {
  int64_t H = 16, HV = 32, K = 128, V = 128, cols = 1, num_slots = 0;
  std::vector<int64_t> lens, acc;
  std::vector<std::vector<int64_t>> slots;
  std::vector<bool> init;
  std::optional<int64_t> null_id;
  GdrIn in;
};

Buf with_dtype(const Buf& x, DType dt) {
  Buf y(dt, x.shape());
  for (int64_t e = 0; e < x.numel(); ++e) y.set(e, x.get(e));
  return y;
}

Batch make_batch(Shape shape, DType act, const Form& f, Rng& r) {
  Batch b;
  switch (shape) {
    case Shape::kDecodeSmall: b.lens = {1, 1}; break;
    case Shape::kDecodeLarge: b.lens = {1, 1, 1, 1, 1}; break;
    case Shape::kVarlen:
      b.lens = {5, 1, 17, 0, 3};
      b.H = 2, b.HV = 6, b.K = 64, b.V = 48;
      break;
    case Shape::kVerify:
      b.lens = {3, 1, 2};
      b.H = 2, b.HV = 4, b.K = 128, b.V = 64, b.cols = 3;
      break;
    case Shape::kVarlen128:
      b.lens = {6, 1, 9, 0, 2};
      b.H = 2, b.HV = 4, b.K = 128, b.V = 64;
      break;
    case Shape::kDecode12:
      b.lens.assign(12, 1);
      b.V = 32;
      break;
    case Shape::kDecode64:
      b.lens.assign(64, 1);
      b.V = 32;
      break;
  }
  const int64_t n = static_cast<int64_t>(b.lens.size());
  b.num_slots = n * b.cols + 2;
  std::vector<int64_t> perm(b.num_slots);
  for (int64_t s = 0; s < b.num_slots; ++s) perm[s] = s;
  for (int64_t s = b.num_slots - 1; s > 0; --s) std::swap(perm[s], perm[r.randint(0, s)]);
  for (int64_t i = 0; i < n; ++i) {
    b.slots.push_back(std::vector<int64_t>(perm.begin() + i * b.cols, perm.begin() + (i + 1) * b.cols));
    b.acc.push_back(r.randint(1, b.cols));
    b.init.push_back(true);
  }
  if (shape == Shape::kDecodeLarge) {  // sequence 3 on the null slot (padding), sequence 1 from zeros
    b.null_id = perm[b.num_slots - 1];
    b.slots[3][0] = *b.null_id;
    b.init[1] = false;
  }
  int64_t T = 0;
  for (int64_t l : b.lens) T += l;
  b.in = make_gdr_in(r, T, b.H, b.HV, b.K, b.V, act, DType::kFloat32);
  // the given forms' values: log decays in [-0.5, 0], beta in (0, 1); q, k of norm about 1 unnormalised
  for (int64_t e = 0; e < b.in.a.numel(); ++e) {
    if (f.decay_given) b.in.a.set(e, -0.5 * std::fabs(b.in.a.get(e)));
    if (f.beta_given) b.in.b.set(e, 1.0 / (1.0 + std::exp(-b.in.b.get(e))));
  }
  if (!f.l2norm)
    for (Buf* x : {&b.in.q, &b.in.k})
      for (int64_t e = 0; e < x->numel(); ++e) x->set(e, x->get(e) / std::sqrt(static_cast<double>(b.K)));
  if (f.a_f32) b.in.a = with_dtype(b.in.a, DType::kFloat32);
  if (f.b_f32) b.in.b = with_dtype(b.in.b, DType::kFloat32);
  return b;
}

struct Result {
  Buf o, pool;
};
Result run_call(Backend be, Batch& b, const Form& f, const Buf& pool0, StateLayout layout, DType act, Status* st) {
  Result out{Buf(act, {b.in.T, b.HV, b.V}), pool0};
  Rng fill(99);
  fill_normal(out.o, fill, 1.0);  // a fill that must be overwritten
  const bool verify = b.cols > 1;
  std::vector<int64_t> col0;
  for (const auto& s : b.slots) col0.push_back(s[0]);
  Buf qsl = index_buf(prefix_sum(b.lens)), slots = verify ? index_buf2(b.slots, b.cols) : index_buf(col0);
  Buf nacc = index_buf(b.acc), init = bool_buf(b.init);
  GatedDeltaRuleArgs a =
      gdr_args(b.in, out.pool, layout, qsl, slots, verify ? &nacc : nullptr, &init, out.o, b.null_id);
  if (f.decay_given) a.A_log = a.dt_bias = absent();
  a.beta_sigmoid = !f.beta_given;
  a.qk_l2norm = f.l2norm;
  *st = capture::run_recurrent_on(be, a);
  return out;
}

class CudaGateForms : public ::testing::TestWithParam<FormsParam> {};

TEST_P(CudaGateForms, RecurrentOpMatchesTheCpu) {
  const FormsParam& prm = GetParam();
  PROP_SKIP_IF_UNAVAILABLE(prm.be);
  const double tol_o = tol_for(prm.act), tol_s = tol_for(prm.state);
  for (StateLayout layout : {StateLayout::kVK, StateLayout::kKV})
    for (Shape shape : {Shape::kDecodeSmall, Shape::kDecodeLarge, Shape::kVarlen, Shape::kVerify, Shape::kVarlen128,
                        Shape::kDecode12, Shape::kDecode64})
      for (const Form& f : kForms) {
        if (!runs(shape, layout, prm.be)) continue;
        if (prm.act == DType::kFloat32 && (f.a_f32 || f.b_f32) && !(f.decay_given || f.beta_given || !f.l2norm))
          continue;  // float32 gates beside float32 q: the default form
        SCOPED_TRACE(::testing::Message() << f.name << ", " << shape_name(shape) << ", " << layout_name(layout));
        Rng r(5150 + static_cast<uint64_t>(shape) * 31);
        Batch b = make_batch(shape, prm.act, f, r);
        Buf pool0 = make_ssm_pool(prm.state, b.num_slots, b.HV, b.K, b.V, layout, layout == StateLayout::kKV ? 8 : 0);
        fill_normal(pool0, r, 0.3);
        Status st;
        // the CPU's results, once per case for all kernel paths (the same batch for each; N = 64 runs
        // on one path, uncached)
        static std::map<std::string, Result> cpu_results;
        const std::string key = std::string(dtype_short(prm.act)) + dtype_short(prm.state) + layout_name(layout) +
                                shape_name(shape) + f.name;
        std::optional<Result> own;
        if (shape == Shape::kDecode64 || !cpu_results.count(key)) {
          Result r_cpu = run_call(Backend::kCPU, b, f, pool0, layout, prm.act, &st);
          ASSERT_TRUE(st.ok()) << st.message();
          if (shape == Shape::kDecode64) own = std::move(r_cpu);
          else cpu_results.emplace(key, std::move(r_cpu));
        }
        const Result& ref = own ? *own : cpu_results.at(key);
        const Result got = run_call(prm.be, b, f, pool0, layout, prm.act, &st);
        ASSERT_TRUE(st.ok()) << st.message();
        EXPECT_LE(rel_l2(got.o, ref.o), tol_o) << "o: relative L2 error vs the CPU";
        for (int64_t s = 0; s < pool0.rows(); ++s) expect_slot_close(got.pool, s, ref.pool, s, tol_s, "ssm_state");
        const Result again = run_call(prm.be, b, f, pool0, layout, prm.act, &st);
        ASSERT_TRUE(st.ok()) << st.message();
        EXPECT_EQ(byte_diff(again.o, got.o), "") << "o differs between two identical calls";
        EXPECT_EQ(byte_diff(again.pool, got.pool), "") << "the pool differs between two identical calls";
        if (HasFailure()) return;
      }
}

std::vector<FormsParam> forms_params() {
  std::vector<FormsParam> v;
  for (Backend be : capture::test_backends(capture::Ops::kRecurrent))
    if (be.cuda())
      for (DType act : {DType::kBFloat16, DType::kFloat32})
        for (DType st : {DType::kFloat32, DType::kBFloat16}) v.push_back({be, act, st});
  return v;
}
INSTANTIATE_TEST_SUITE_P(Cuda, CudaGateForms, ::testing::ValuesIn(forms_params()), forms_name);

}  // namespace
}  // namespace gdn::prop
