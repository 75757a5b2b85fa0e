// The CUDA recurrent op's planner (src/cuda/plan/) picks its kernel from the batch (tests/test_plan.cpp
// checks the choices): on a 132-SM card, float32 one-token batches of <= 128 or >= 512
// sequence-heads with int32 metadata the lean kernel; otherwise on sm_90, batches of at least 128
// (float32 state) or 384 (16-bit) sequence-heads (dense "vk" state, K = 128) the pipelined kernel
// (1 or 4 staged tokens per item, later tokens from global memory); otherwise sequences x value
// heads <= 64 the small-batch shape; 16-bit K = 128 batches up to 128 with at least 2 tokens per
// sequence the mid-batch verify form; larger batches of dense 16-bit "vk" state without
// multi-column verify the packed kernel; the rest the large-batch shape. Every case runs with the
// planner's choice and with each kernel path forced (where it can run: else the planner's).
//   CudaShapes.BothBatchShapesMatchTheCpu: Qwen3-Next TP1 heads (H 16, HV 32, K = V 128), N = 2
//     (64 sequence-heads), N = 4 (128: the mid-batch form for 16-bit verify, short and long
//     batches; for float32 the lean kernel (decode, skewed) or the pipelined one on sm_90) and N = 12
//     (384: the pipelined kernel on sm_90), for each state dtype; and N = 16 (512) float32 decode
//     (lean) and verify / long (float32 verify batches of 512-4095 sequence-heads stay on the
//     register kernel): decode (non-spec, one token per
//     sequence), short non-spec sequences of 1..3 tokens (one launch mixes one-token and longer
//     sequences), verify (3 columns, 1..3 tokens per sequence, ragged accepted counts), verify with
//     one column, "skewed" batches (2 tokens in every other sequence, none in the rest) and "long"
//     ones (7 and 1 tokens alternating: tokens past the 4 staged ones), and "padded" one-token
//     batches (float32 at N = 4, 12, 16, bf16 at N = 12: every fourth sequence on the null slot,
//     one with zero tokens, one of 2 tokens without an initial state), and 16-bit decode and padded
//     one-token batches at N = 64 (2048 sequence-heads: the lean kernel's staged form); outputs and
//     every state slot against the CPU backend.
// Tolerances: same float32 math in another summation order; outputs are bf16: rel L2 1e-2; states
// rel L2 1e-5 in float32, 1e-2 in 16 bits (a rounding of the stored state may differ).
#include <optional>

#include "prop_ops.h"

namespace gdn::prop {
namespace {

enum class Mode { kDecode, kShort, kVerify, kVerify1, kSkewed, kLong, kPadded, kVerify6 };
struct ShapeParam {
  DType state;
  int64_t n;
  Mode mode;
  Backend be = Backend::kCUDA;  // CUDA with the planner's choice or a forced kernel path
};
std::string shape_name(const ::testing::TestParamInfo<ShapeParam>& i) {
  return std::string("state") + dtype_short(i.param.state) + "_N" + std::to_string(i.param.n) +
         (i.param.mode == Mode::kVerify    ? "_verify"
          : i.param.mode == Mode::kVerify1 ? "_verify1col"
          : i.param.mode == Mode::kSkewed  ? "_skewed"
          : i.param.mode == Mode::kShort   ? "_short"
          : i.param.mode == Mode::kLong    ? "_long"
          : i.param.mode == Mode::kPadded  ? "_padded"
          : i.param.mode == Mode::kVerify6 ? "_verify6col"
                                           : "_decode") +
         "_" + capture::backend_name(i.param.be);
}

class CudaShapes : public ::testing::TestWithParam<ShapeParam> {};

TEST_P(CudaShapes, BothBatchShapesMatchTheCpu) {
  PROP_SKIP_IF_UNAVAILABLE(Backend::kCUDA);
  const ShapeParam& prm = GetParam();
  const bool verify = prm.mode == Mode::kVerify || prm.mode == Mode::kVerify1 || prm.mode == Mode::kVerify6;
  const int64_t n = prm.n, H = 16, HV = 32, K = 128, V = 128,
                cols = prm.mode == Mode::kVerify ? 3 : prm.mode == Mode::kVerify6 ? 6 : 1;
  Rng r(9700 + n * 3 + static_cast<int>(prm.mode));
  std::vector<int64_t> lens(n, 1), acc(n), slot_ids(n * cols);
  for (int64_t i = 0; i < n; ++i) {
    acc[i] = r.randint(1, cols);
    if (prm.mode == Mode::kShort || prm.mode == Mode::kVerify) lens[i] = r.randint(1, 3);
    if (prm.mode == Mode::kVerify6) lens[i] = r.randint(1, 6);  // columns past the lean kernel's 4 in registers
    if (prm.mode == Mode::kSkewed) lens[i] = i % 2 == 0 ? 2 : 0;  // as many tokens as sequences
    if (prm.mode == Mode::kLong) lens[i] = i % 2 == 0 ? 7 : 1;    // 4 tokens per sequence on average
    if (prm.mode == Mode::kPadded) lens[i] = i % 4 == 1 ? 0 : i % 4 == 2 ? 2 : 1;  // one token on average
  }
  for (int64_t s = 0; s < n * cols; ++s) slot_ids[s] = s;
  for (int64_t s = n * cols - 1; s > 0; --s) std::swap(slot_ids[s], slot_ids[r.randint(0, s)]);
  // kPadded: sequence i % 4 == 3 on the null slot (padding: o zeros, no state touched), i % 4 == 2
  // (two tokens) without an initial state, i % 4 == 1 of zero tokens (its slot untouched)
  const bool padded = prm.mode == Mode::kPadded;
  const int64_t null_id = n * cols;  // the pool's last slot, which no sequence owns
  std::vector<bool> init_v(n, true);
  for (int64_t i = 0; i < n && padded; ++i) {
    if (i % 4 == 3) slot_ids[i] = null_id;
    init_v[i] = i % 4 != 2;
  }
  Buf has_init = bool_buf(init_v);
  std::vector<std::vector<int64_t>> rows(n, std::vector<int64_t>(cols));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < cols; ++c) rows[i][c] = slot_ids[i * cols + c];
  const std::vector<int64_t> qsl_v = prefix_sum(lens);
  Buf qsl = index_buf(qsl_v);
  Buf slots = verify ? index_buf2(rows, cols) : index_buf(slot_ids);
  Buf nacc = index_buf(acc);
  Buf* init_ptr = padded ? &has_init : nullptr;
  const std::optional<int64_t> null_opt = padded ? std::optional<int64_t>(null_id) : std::nullopt;
  GdrIn in = make_gdr_in(r, qsl_v.back(), H, HV, K, V, DType::kBFloat16, DType::kFloat32);
  Buf pool = make_ssm_pool(prm.state, n * cols + 1, HV, K, V, StateLayout::kVK);
  fill_normal(pool, r, 0.3);
  Buf pool_cpu = pool, o_cpu(DType::kBFloat16, {qsl_v.back(), HV, V}), o_gpu = o_cpu;
  SCOPED_TRACE(::testing::Message() << "state " << dtype_short(prm.state) << ", N " << n << ", "
                                    << shape_name({prm, 0}));
  Buf* nacc_ptr = verify ? &nacc : nullptr;
  PROP_ASSERT_OK(
      run_gdr(Backend::kCPU, false, in, pool_cpu, StateLayout::kVK, qsl, slots, nacc_ptr, init_ptr, o_cpu, null_opt));
  PROP_ASSERT_OK(run_gdr(prm.be, false, in, pool, StateLayout::kVK, qsl, slots, nacc_ptr, init_ptr, o_gpu, null_opt));
  const double tol = 1e-2;  // the outputs are bf16 in every case
  const int64_t no = o_cpu.numel();
  EXPECT_LE(rel_l2(o_gpu, o_cpu, {{0, no}}, {{0, no}}), tol) << "o: relative L2 error vs the CPU";
  const double stol = prm.state == DType::kFloat32 ? 1e-5 : 1e-2;
  for (int64_t s = 0; s < pool.rows(); ++s) expect_slot_close(pool, s, pool_cpu, s, stol, "ssm_state vs the CPU");
}

std::vector<ShapeParam> shapes() {
  std::vector<ShapeParam> v;
  for (DType st : {DType::kBFloat16, DType::kFloat16, DType::kFloat32})
    for (int64_t n : {2, 4, 12})
      for (Mode m : {Mode::kDecode, Mode::kShort, Mode::kVerify, Mode::kVerify1, Mode::kSkewed, Mode::kLong})
        v.push_back({st, n, m});
  // float32 at 512 sequence-heads: decode on the lean kernel, verify batches (2 or more
  // tokens per sequence) on the register kernel (GDN_TMA_F32_VERIFY_REG_LO)
  for (Mode m : {Mode::kDecode, Mode::kVerify, Mode::kLong}) v.push_back({DType::kFloat32, 16, m});
  // padding, zero-token and no-initial-state sequences in one-token batches: float32 at 128 and 512
  // sequence-heads (the lean kernel by default), 384 (the pipelined kernel), and bf16 at 384
  for (int64_t n : {4, 12, 16}) v.push_back({DType::kFloat32, n, Mode::kPadded});
  for (int64_t n : {4, 16}) v.push_back({DType::kFloat32, n, Mode::kVerify6});
  v.push_back({DType::kBFloat16, 12, Mode::kPadded});
  // 16-bit one-token batches of 2048 sequence-heads: the lean kernel's staged form by default
  for (DType st : {DType::kBFloat16, DType::kFloat16}) v.push_back({st, 64, Mode::kDecode});
  v.push_back({DType::kBFloat16, 64, Mode::kPadded});
  return v;
}
std::vector<ShapeParam> shape_params() {
  std::vector<ShapeParam> v;
  for (const ShapeParam& s : shapes())
    for (Backend b : capture::test_backends(capture::Ops::kRecurrent))
      if (b.cuda()) v.push_back({s.state, s.n, s.mode, b});
  return v;
}
INSTANTIATE_TEST_SUITE_P(Cuda, CudaShapes, ::testing::ValuesIn(shape_params()), shape_name);

}  // namespace
}  // namespace gdn::prop
