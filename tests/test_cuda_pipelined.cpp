// CUDA tests of the pipelined sm_90 kernels (src/cuda/pipelined/recurrent_tma.cuh) on every batch, whatever
// its size (the default choice takes them only for large batches), and of that choice:
//   CudaPipelinedFused.MixedBatchesMatchTheCpu: gdn_attention with the pipelined step forced, with
//     and without its conv prologue (K = 128), over random mixed batches — prefills up to 20 tokens (tokens
//     past the 4 whose conv the conv warp computes), 1-token prefills without initial state, decodes,
//     ragged verify sequences, padding sequences, random global row order (token_indx) or identity
//     rows (non-spec only), both qkvz layouts, r = 1, 2 and 3, float32 and bf16 state — equals the CPU reference
//     (outputs, z, both pools, sentinels untouched), and its z and conv pool equal, byte for byte,
//     those of the cluster kernel (fused_step.cuh); conv width
//     4 with and without bias and width 3.
//   Both in the rolling and the per-token verify conv layout (pools of W-1 rows and of more).
//   CudaFusedDefault.ModelShapeBatchesMatchTheCpu: the default choice at the Qwen3-Next TP1 shape,
//     288 (sequence, key head) groups (the pipelined fused step), 64 (the cluster kernel), 320 groups
//     of one-token sequences (the pipelined step with its conv prologue) and 560 groups of decodes
//     and prefills (blocks whose forced prologue stops at a prefill).
// Tolerances as in test_cuda_graph.cpp (1e-5 for float32 activations and state, 1e-2 when either is
// 16-bit; copies of input bits exact). Skips without a GPU; kernels that cannot run (no sm_90) fall
// back to the other kernels, which must match the CPU just the same.
#include <string>

#include "cuda_device.h"
#include "prop_attention.h"

#ifdef GDN_WITH_CUDA
namespace gdn::prop {
namespace {

struct PipeParam {
  DType act, ssm;
  int64_t H, HV, V;
  bool reorder, permute, identity;
};
std::string param_str(const PipeParam& p) {
  return std::string("act") + dtype_short(p.act) + "_ssm" + dtype_short(p.ssm) + "_H" + std::to_string(p.H) + "_HV" +
         std::to_string(p.HV) + "_V" + std::to_string(p.V) + (p.reorder ? "_block" : "_grouped") +
         (p.identity ? "_identity" : p.permute ? "_permuted" : "_interleaved");
}
void PrintTo(const PipeParam& p, std::ostream* os) { *os << param_str(p); }

using cuda::plan::Path;
class CudaPipelinedFused : public ::testing::TestWithParam<std::tuple<PipeParam, Path>> {};

// gdn_attention on p with kernel path `path` equals the CPU, and its z and conv pool equal byte for
// byte those of the cluster kernel.
void expect_cpu_and_plain_match(AttnProblem& p, Path path) {
  Buf core, z;
  make_outputs(p, &core, &z, 0);
  const AttnOut got = run_device_attention(p, core, z, path);
  const AttnOut plain = run_device_attention(p, core, z, Path::kStepCluster);
  AttnOut ref;
  PROP_ASSERT_OK(cpu_attention(p, core, z, &ref));
  expect_attention_match(p, got, ref, core, z, tol_of(p.act, p.ssm_dtype));
  EXPECT_TRUE(got.z.same_bytes(plain.z)) << "z: " << byte_diff(got.z, plain.z);
  EXPECT_TRUE(got.conv.same_bytes(plain.conv)) << "conv_state: " << byte_diff(got.conv, plain.conv);
}

TEST_P(CudaPipelinedFused, MixedBatchesMatchTheCpu) {
  GRAPH_SKIP_WITHOUT_GPU();
  const PipeParam& prm = std::get<0>(GetParam());
  for (int run = 0; run < 6; ++run) {  // seeds x verify conv layouts
    const uint64_t seed = 9600u + run % 3;
    Rng r(seed + prm.HV * 11 + prm.V + (prm.reorder ? 5 : 0));
    AttnProblem p;
    if (run >= 3) {  // per draft slot; pools of exactly W-1 rows for one seed
      p.conv_layout = SpecConvLayout::kPerToken;
      p.conv_rows_extra = seed == 9601u ? 0 : 1;
    }
    p.act = prm.act; p.ssm_dtype = prm.ssm; p.H = prm.H; p.HV = prm.HV; p.K = 128; p.V = prm.V; p.cols = 4;
    p.reorder = prm.reorder;
    p.has_bias = seed != 9601u;   // with and without conv bias
    p.W = seed == 9602u ? 3 : 4;  // W = 4: the conv warp's width-4 code (TmaGrid::conv_w4); 3: the general one
    MixOptions m;
    m.permute_rows = prm.permute;
    if (prm.identity) {  // rows in local order, no token_indx: one group only (non-spec)
      m.n_spec = m.n_pad_spec = 0;
      m.interleave = false;
      p.identity_ns = true;
    }
    make_mixed_batch(p, r, m);
    fill_attention_data(p, r);
    SCOPED_TRACE(describe(p));
    expect_cpu_and_plain_match(p, std::get<1>(GetParam()));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cuda, CudaPipelinedFused,
    ::testing::Combine(::testing::Values(PipeParam{DType::kBFloat16, DType::kFloat32, 2, 4, 128, false, true, false},
                      PipeParam{DType::kBFloat16, DType::kFloat32, 2, 4, 128, true, false, false},
                      PipeParam{DType::kBFloat16, DType::kBFloat16, 2, 6, 64, false, false, true},
                      PipeParam{DType::kBFloat16, DType::kBFloat16, 1, 3, 128, true, true, false},
                      // float32 state in 12-block clusters (r = 3, as Qwen3.6-27B)
                      PipeParam{DType::kBFloat16, DType::kFloat32, 1, 3, 128, true, true, false},
                      PipeParam{DType::kFloat32, DType::kFloat32, 2, 4, 64, false, false, false},
                      // one item per (sequence, key head) group (r = 1, V = one 16-row tile): the
                      // group-buffer rule (tma_ring.h) refuses the pipelined step, the cluster kernel runs
                      PipeParam{DType::kBFloat16, DType::kBFloat16, 2, 2, 16, false, false, false}),
                       ::testing::Values(Path::kStepPipelined, Path::kStepPipelinedPrologue)),
    [](const ::testing::TestParamInfo<std::tuple<PipeParam, Path>>& i) {
      return param_str(std::get<0>(i.param)) + "_" + cuda::plan::path_name(std::get<1>(i.param));
    });

// The default kernel choice at the Qwen3-Next TP1 shape (H 16, HV 32, K = V 128, bf16
// activations): 18 sequences (8 decodes, 6 verify, 2 prefills of up to 12 tokens, 2 padding) are
// 288 (sequence, key head) groups, so on sm_90 the default runs the pipelined fused step
// (from 96, 128 or 192 groups on a 132-SM card), with its long-sequence hand-over; 4
// sequences (64 groups) keep the cluster kernel; 8 decodes (128 groups) run the pipelined step (the
// threshold of one-token batches is 96 groups); 13 verify sequences (208 groups) run it too (float32
// verify batches from 192 groups, 16-bit from 128); 20 decodes (320 groups, at most 2 per block on the H200)
// run the pipelined step with its conv prologue (TmaGrid::pre); 30 decodes and 5 prefills (560
// groups, 2-3 per block on the H200) give blocks whose prologue, where forced (the prologue path), stops
// at a prefill after a decode's group. Each equals the CPU and, in z and the conv pool, the
// cluster kernel's run.
class CudaFusedDefault : public ::testing::TestWithParam<DType> {};

TEST_P(CudaFusedDefault, ModelShapeBatchesMatchTheCpu) {
  GRAPH_SKIP_WITHOUT_GPU();
  for (const int kind : {1, 0, 2, 3, 4, 5, 11, 10, 15}) {  // 1: large mixed, 0: small, 2: one-token sequences
    // only, 3: below, 4: 8 decodes, 5: 13 verify sequences; 10 + k: k with per-token verify conv windows
    Rng r(9700u + kind % 10 + (GetParam() == DType::kFloat32 ? 10 : 0));
    AttnProblem p;
    if (kind >= 10) p.conv_layout = SpecConvLayout::kPerToken, p.conv_rows_extra = kind == 15 ? 0 : 1;
    p.act = DType::kBFloat16; p.ssm_dtype = GetParam(); p.H = 16; p.HV = 32; p.K = 128; p.V = 128; p.cols = 4;
    MixOptions m;
    if (kind % 10 == 1) m.n_prefill = 2, m.max_prefill = 12, m.n_decode = 8, m.n_spec = 6;
    else if (kind % 10 == 0) m.n_prefill = 1, m.n_decode = 1, m.n_spec = 1, m.n_pad_ns = 1, m.n_pad_spec = 0;
    else if (kind == 2) m.n_prefill = 0, m.n_decode = 20, m.n_spec = 0, m.n_pad_ns = 0, m.n_pad_spec = 0;
    else if (kind == 3) m.n_prefill = 5, m.max_prefill = 12, m.n_decode = 30, m.n_spec = 0, m.n_pad_ns = 0, m.n_pad_spec = 0;
    else if (kind == 4) m.n_prefill = 0, m.n_decode = 8, m.n_spec = 0, m.n_pad_ns = 0, m.n_pad_spec = 0;
    else m.n_prefill = 0, m.n_decode = 0, m.n_spec = 13, m.n_pad_ns = 0, m.n_pad_spec = 0;
    make_mixed_batch(p, r, m);
    fill_attention_data(p, r);
    SCOPED_TRACE(describe(p));
    for (Path path : {Path::kAuto, Path::kStepPipelinedPrologue}) expect_cpu_and_plain_match(p, path);
  }
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaFusedDefault, ::testing::Values(DType::kFloat32, DType::kBFloat16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string("ssm") + dtype_short(i.param); });

}  // namespace
}  // namespace gdn::prop
#else  // !GDN_WITH_CUDA
#include <gtest/gtest.h>
TEST(CudaPipelinedFused, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
TEST(CudaFusedDefault, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif
