// Property 3: gdn_attention == the composition of the primitive ops.
// Property 5: reorder_input true and false agree when the projection columns are permuted.
// Both for the verify conv layouts, rolling and per token (pools of exactly W-1 rows and of more).
//
// Mixed batches: prefills (including 1-token prefills and sequences without initial state),
// decodes, ragged verify sequences, padding sequences (slot -1, verify column 0 = -1), token
// remapping that interleaves spec and non-spec rows (or a fully random row order), graph-padded
// rows past num_actual_tokens (which must stay untouched), empty trailing sequences, int64 indices,
// tp_size 2, a null block.
//
// The composition (tests/support/prop_attention.h) de-interleaves the projections into
// x = [q|k|v], runs causal_conv1d_fwd (non-spec) / causal_conv1d_update (spec, rolling), splits the
// conv output (stored in the activation dtype, as docs/contract.md §4 says) and runs
// gated_delta_rule_recurrent per group. Tolerances: on the CPU the fused op is, by docs/contract.md
// §4, the same float32 operations in the same order: everything bit-exact. On CUDA the fused
// kernel may order the float32 sums differently from the separate kernels: core_attn_out and the
// SSM state within rel L2 1e-5 (float32 storage) or 1e-2 (bf16/fp16 storage); conv state and z are
// copies of inputs, hence bit-exact everywhere. Property 5 only changes where columns are loaded
// from, so it is bit-exact on both backends.
#include "prop_attention.h"

namespace gdn::prop {
namespace {

struct AttnParam {
  Backend backend;
  DType act;
  DType ssm;
};

void PrintTo(const AttnParam& p, std::ostream* os) {
  *os << capture::backend_name(p.backend) << " act=" << dtype_short(p.act) << " ssm=" << dtype_short(p.ssm);
}

std::string param_name(const ::testing::TestParamInfo<AttnParam>& info) {
  return std::string(capture::backend_name(info.param.backend)) + "_act" + dtype_short(info.param.act) + "_ssm" +
         dtype_short(info.param.ssm);
}

class PropAttention : public ::testing::TestWithParam<AttnParam> {};

// Problem variants; each exercises a different corner of the argument list.
// layout: the verify conv layout; per token, odd variants get pools of exactly W-1 rows.
AttnProblem make_variant(const AttnParam& prm, int variant, Rng& r,
                         SpecConvLayout layout = SpecConvLayout::kRolling) {
  AttnProblem p;
  p.act = prm.act;
  p.ssm_dtype = prm.ssm;
  p.conv_layout = layout;
  if (layout == SpecConvLayout::kPerToken) p.conv_rows_extra = variant % 2 ? 0 : 2;
  MixOptions m;
  switch (variant) {
    case 0: p.cols = 3; break;
    case 1:
      p.cols = 4; p.reorder = true; p.tp = 2; p.index_dtype = DType::kInt64; m.permute_rows = true;
      break;
    case 2:  // spec only, no token remapping
      p.cols = 3; p.reorder = true; p.identity_spec = true; m.n_prefill = 0; m.n_decode = 0; m.n_pad_ns = 0;
      m.interleave = false; m.n_spec = 5;
      break;
    case 3:  // non-spec only, no remapping, no bias, identity activation, K != V the other way
      p.K = 8; p.V = 16; p.has_bias = false; p.act_fn = Activation::kNone; p.identity_ns = true;
      m.n_spec = 0; m.n_pad_spec = 0; m.interleave = false;
      break;
    case 4:  // head ratio 3, width 3, trailing empty sequences
      p.H = 1; p.HV = 3; p.W = 3; p.cols = 2; m.trailing_empty = true;
      break;
    case 5:  // null block: one non-spec sequence and one verify column point at it
      p.cols = 3; p.W = 2; m.n_prefill = 4;
      break;
    default: break;
  }
  make_mixed_batch(p, r, m);
  if (variant == 5) {
    int64_t null_slot = -1;
    for (AttnSeq& s : p.seqs)
      if (!s.spec && s.slot >= 0 && null_slot < 0) null_slot = s.slot;
    p.null_id = null_slot;
    for (AttnSeq& s : p.seqs)
      if (s.spec && s.cols[0] >= 0 && p.cols > 1) { s.cols[p.cols - 1] = null_slot; break; }
  }
  fill_attention_data(p, r);
  return p;
}

constexpr int kVariants = 6;

// Compares the results of two runs of the same problem.
void expect_same_results(const AttnProblem& pa, const Buf& core_a, const Buf& z_a, const AttnProblem& pb,
                         const Buf& core_b, const Buf& z_b, bool exact, const char* what) {
  SCOPED_TRACE(what);
  const int64_t row = pa.HV * pa.V;
  // Rows >= num_actual_tokens: both still hold the caller's fill (the same poison in both).
  if (exact) {
    EXPECT_EQ(byte_diff(core_a, core_b), "") << "core_attn_out differs";
  } else {
    double e = rel_l2(core_a, core_b, {{0, pa.num_actual * row}}, {{0, pa.num_actual * row}});
    EXPECT_LE(e, tol_for(pa.act)) << "core_attn_out rows < num_actual_tokens: rel L2";
    std::string d = bit_diff(core_a, pa.num_actual * row, core_b, pa.num_actual * row,
                             (pa.rows_alloc - pa.num_actual) * row);
    EXPECT_EQ(d, "") << "core_attn_out rows >= num_actual_tokens";
  }
  EXPECT_EQ(byte_diff(z_a, z_b), "") << "z differs";
  EXPECT_EQ(byte_diff(pa.conv_pool, pb.conv_pool), "") << "conv_state pool differs";
  if (exact) {
    EXPECT_EQ(byte_diff(pa.ssm_pool, pb.ssm_pool), "") << "ssm_state pool differs";
  } else {
    double e = rel_l2(pa.ssm_pool, pb.ssm_pool);
    EXPECT_LE(e, tol_for(pa.ssm_dtype)) << "ssm_state pool: rel L2";
  }
  EXPECT_TRUE(core_a.canaries_ok() && z_a.canaries_ok() && pa.conv_pool.canaries_ok() && pa.ssm_pool.canaries_ok())
      << "write outside a buffer";
}

TEST_P(PropAttention, FusedEqualsComposition) {
  const AttnParam& prm = GetParam();
  PROP_SKIP_IF_UNAVAILABLE(prm.backend);
  for (int lv = 0; lv < 2 * kVariants; ++lv) {
    const int variant = lv % kVariants;
    const SpecConvLayout layout = lv < kVariants ? SpecConvLayout::kRolling : SpecConvLayout::kPerToken;
    Rng r(100 + variant);
    AttnProblem p = make_variant(prm, variant, r, layout);
    SCOPED_TRACE(::testing::Message() << "backend=" << capture::backend_name(prm.backend) << " variant=" << variant
                                      << " " << describe(p));
    AttnProblem fused = p, composed = p;
    Buf core_f, z_f, core_c, z_c;
    make_outputs(p, &core_f, &z_f, 0);
    make_outputs(p, &core_c, &z_c, 0);
    PROP_ASSERT_OK(run_attention(prm.backend, fused, core_f, z_f));
    PROP_ASSERT_OK(compose_attention(prm.backend, composed, core_c, z_c));
    expect_same_results(fused, core_f, z_f, composed, core_c, z_c, prm.backend == Backend::kCPU,
                        "gdn_attention vs composition of primitives");
    if (HasFailure()) return;
  }
}

TEST_P(PropAttention, ReorderInputIsAColumnPermutation) {
  const AttnParam& prm = GetParam();
  PROP_SKIP_IF_UNAVAILABLE(prm.backend);
  for (int lv = 0; lv < 2 * kVariants; ++lv) {
    const int variant = lv % kVariants;
    const SpecConvLayout layout = lv < kVariants ? SpecConvLayout::kRolling : SpecConvLayout::kPerToken;
    Rng r(200 + variant);
    AttnProblem p = make_variant(prm, variant, r, layout);
    SCOPED_TRACE(::testing::Message() << "backend=" << capture::backend_name(prm.backend) << " variant=" << variant
                                      << " " << describe(p));
    AttnProblem other = p;
    other.reorder = !p.reorder;
    permute_projections(p, other.reorder, p.qkvz, p.ba, &other.qkvz, &other.ba);
    Buf core_a, z_a, core_b, z_b;
    make_outputs(p, &core_a, &z_a, 1);
    make_outputs(p, &core_b, &z_b, 1);
    PROP_ASSERT_OK(run_attention(prm.backend, p, core_a, z_a));
    PROP_ASSERT_OK(run_attention(prm.backend, other, core_b, z_b));
    expect_same_results(p, core_a, z_a, other, core_b, z_b, true, "reorder_input true vs false (permuted columns)");
    if (HasFailure()) return;
  }
}

// A_log in the checkpoint's dtype (bfloat16 / float16, as a bf16 model keeps it): the gates are
// computed in float32 from its values, so the result is the float32 A_log run's of the same
// (rounded) values, byte for byte, on every backend; for gdn_attention and the recurrent op.
TEST_P(PropAttention, ALogInTheModelDtypeEqualsFloat32OfItsValues) {
  const AttnParam& prm = GetParam();
  PROP_SKIP_IF_UNAVAILABLE(prm.backend);
  for (DType low : {DType::kBFloat16, DType::kFloat16}) {
    Rng r(300 + static_cast<int>(low));
    AttnProblem p = make_variant(prm, 0, r);
    Buf a_low(low, {p.HV});
    for (int64_t h = 0; h < p.HV; ++h) a_low.set(h, p.A_log.get(h));
    Buf a_f32(DType::kFloat32, {p.HV});
    for (int64_t h = 0; h < p.HV; ++h) a_f32.set(h, a_low.get(h));  // exact: float32 holds every 16-bit value
    SCOPED_TRACE(::testing::Message() << "A_log " << dtype_short(low) << " " << describe(p));
    AttnProblem pl = p, pf = p;
    pl.A_log = a_low;
    pf.A_log = a_f32;
    Buf core_l, z_l, core_f, z_f;
    make_outputs(p, &core_l, &z_l, 0);
    make_outputs(p, &core_f, &z_f, 0);
    PROP_ASSERT_OK(run_attention(prm.backend, pl, core_l, z_l));
    PROP_ASSERT_OK(run_attention(prm.backend, pf, core_f, z_f));
    expect_same_results(pl, core_l, z_l, pf, core_f, z_f, true, "gdn_attention, A_log 16-bit vs float32");
    // The recurrent op on the same tokens (composition's primitive).
    Rng rg(400);
    GdrIn g = make_gdr_in(rg, 6, p.H, p.HV, p.K, p.V, p.act, DType::kFloat32);
    GdrIn gl = g, gf = g;
    gl.A_log = a_low;
    gf.A_log = a_f32;
    Buf qsl = index_buf({0, 1, 6}), slots = index_buf({1, 0});
    Buf pool_l = make_ssm_pool(p.ssm_dtype, 2, p.HV, p.K, p.V, StateLayout::kVK), pool_f = pool_l;
    Buf o_l(p.act, {6, p.HV, p.V}), o_f(p.act, {6, p.HV, p.V});
    PROP_ASSERT_OK(run_gdr(prm.backend, false, gl, pool_l, StateLayout::kVK, qsl, slots, nullptr, nullptr, o_l));
    PROP_ASSERT_OK(run_gdr(prm.backend, false, gf, pool_f, StateLayout::kVK, qsl, slots, nullptr, nullptr, o_f));
    EXPECT_EQ(byte_diff(o_l, o_f), "") << "gated_delta_rule_recurrent o, A_log 16-bit vs float32";
    EXPECT_EQ(byte_diff(pool_l, pool_f), "") << "gated_delta_rule_recurrent state, A_log 16-bit vs float32";
    if (HasFailure()) return;
  }
}

std::vector<AttnParam> all_params() {
  std::vector<AttnParam> v;
  for (Backend b : capture::test_backends(capture::Ops::kAttention))
    for (auto dt : {std::pair<DType, DType>{DType::kBFloat16, DType::kFloat32},
                    std::pair<DType, DType>{DType::kBFloat16, DType::kBFloat16},
                    std::pair<DType, DType>{DType::kFloat32, DType::kFloat32},
                    std::pair<DType, DType>{DType::kFloat16, DType::kFloat32}})
      v.push_back({b, dt.first, dt.second});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Prop, PropAttention, ::testing::ValuesIn(all_params()), param_name);

}  // namespace
}  // namespace gdn::prop
