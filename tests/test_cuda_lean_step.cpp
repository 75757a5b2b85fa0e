// CUDA tests of gdn_attention's two-launch form on the lean kernel (GDN_CUDA_LEAN_STEP=1:
// recurrent_lean.cuh's fused instance computes the width-4 conv of its q, k and v channels from the
// conv pool, which it only reads, and conv.cu's kernel then rolls the pool and copies z):
//   CudaLeanStep.DecodeAndVerifyBatchesMatchTheCpu: batches the form takes (all non-spec or all
//     verify sequences, int32 metadata, no token_indx, K = 128 dense state): decodes, prefills of
//     2-20 tokens (taps from earlier tokens' projections), 1-token prefills without initial state,
//     padding sequences (slot -1), ragged verify sequences with random accepted counts (the
//     rolling window from row a - 1), padding verify sequences; both qkvz layouts, r = 1, 2 and 3,
//     float32 and 16-bit state, float32 and bf16 activations, with and without conv bias — equal the
//     CPU reference (outputs and state within tol_of, z and the conv pool bit for bit, rows past
//     num_actual_tokens untouched), and the z and conv pool bytes equal those of the default form;
//     16-bit state in both of the lean kernel's forms (registers; staged, GDN_REC_STAGED=1).
// The "leanstep:" ctest pass runs the attention, graph, stream and fused-step tests with the same
// setting. Skips without a GPU.
#include <string>

#include "cuda_device.h"
#include "prop_attention.h"
#include "scoped_env.h"

#ifdef GDN_WITH_CUDA
namespace gdn::prop {
namespace {

struct LeanStepParam {
  DType act, ssm;
  int64_t H, HV, V;
  bool reorder;
};
std::string param_str(const LeanStepParam& p) {
  return std::string("act") + dtype_short(p.act) + "_ssm" + dtype_short(p.ssm) + "_H" + std::to_string(p.H) + "_HV" +
         std::to_string(p.HV) + "_V" + std::to_string(p.V) + (p.reorder ? "_block" : "_grouped");
}
void PrintTo(const LeanStepParam& p, std::ostream* os) { *os << param_str(p); }

class CudaLeanStep : public ::testing::TestWithParam<LeanStepParam> {};

TEST_P(CudaLeanStep, DecodeAndVerifyBatchesMatchTheCpu) {
  GRAPH_SKIP_WITHOUT_GPU();
  const LeanStepParam& prm = GetParam();
  for (const bool spec : {false, true}) {
    for (uint64_t seed : {9800u, 9801u}) {
      Rng r(seed + prm.HV * 13 + prm.V + (prm.reorder ? 7 : 0) + (spec ? 101 : 0));
      AttnProblem p;
      p.act = prm.act; p.ssm_dtype = prm.ssm; p.H = prm.H; p.HV = prm.HV; p.K = 128; p.V = prm.V; p.cols = 4;
      p.reorder = prm.reorder;
      p.has_bias = seed == 9800u;
      MixOptions m;
      m.interleave = false;  // rows in local order: no token_indx
      if (spec) {
        m.n_prefill = m.n_decode = m.n_pad_ns = 0;
        m.n_spec = 5;
        m.n_pad_spec = 1;
        p.identity_spec = true;
      } else {
        m.n_spec = m.n_pad_spec = 0;
        m.n_prefill = 3;  // lengths 1, then 2..20
        m.n_decode = 4;
        m.n_pad_ns = 1;
        p.identity_ns = true;
      }
      make_mixed_batch(p, r, m);
      fill_attention_data(p, r);
      SCOPED_TRACE(describe(p));
      Buf core, z;
      make_outputs(p, &core, &z, 0);
      AttnOut plain, ref;
      {
        ScopedEnv env("GDN_CUDA_LEAN_STEP", nullptr);
        plain = run_device_attention(p, core, z);
      }
      PROP_ASSERT_OK(cpu_attention(p, core, z, &ref));
      // 16-bit state: the register form (default at these sizes) and the staged one (GDN_REC_STAGED=1)
      for (const char* staged : {"0", "1"}) {
        if (std::string(staged) == "1" && p.ssm_dtype == DType::kFloat32) continue;
        SCOPED_TRACE(std::string("GDN_REC_STAGED=") + staged);
        ScopedEnv env("GDN_CUDA_LEAN_STEP", "1"), st("GDN_REC_STAGED", staged);
        const AttnOut got = run_device_attention(p, core, z);
        expect_attention_match(p, got, ref, core, z, tol_of(p.act, p.ssm_dtype));
        EXPECT_TRUE(got.z.same_bytes(plain.z)) << "z: " << byte_diff(got.z, plain.z);
        EXPECT_TRUE(got.conv.same_bytes(plain.conv)) << "conv_state: " << byte_diff(got.conv, plain.conv);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cuda, CudaLeanStep,
    ::testing::Values(LeanStepParam{DType::kBFloat16, DType::kFloat32, 2, 4, 128, false},
                      LeanStepParam{DType::kBFloat16, DType::kFloat32, 1, 3, 128, true},
                      LeanStepParam{DType::kBFloat16, DType::kBFloat16, 2, 4, 128, true},
                      LeanStepParam{DType::kBFloat16, DType::kFloat16, 1, 1, 64, false},
                      LeanStepParam{DType::kFloat32, DType::kFloat32, 2, 4, 64, false},
                      LeanStepParam{DType::kFloat32, DType::kBFloat16, 1, 2, 128, true}),
    [](const ::testing::TestParamInfo<LeanStepParam>& i) { return param_str(i.param); });

}  // namespace
}  // namespace gdn::prop
#else  // !GDN_WITH_CUDA
#include <gtest/gtest.h>
TEST(CudaLeanStep, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif
