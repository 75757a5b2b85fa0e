// Host-side validation (docs/contract.md §5): one test per class of invalid argument for each op. Every test
// starts from a valid call (validation_fixtures.h), breaks one thing, and checks that the message
// names the argument, the expectation and what was given, and that the op entry returns the same
// error without changing a byte of any (poisoned) buffer.
#include <cmath>
#include <limits>

#include "validation_fixtures.h"

namespace gdn_test {
namespace {

using gdn::Activation;
using gdn::Device;
using gdn::SpecConvLayout;
using gdn::StateLayout;
using gdn::TensorView;

// ---------------------------------------------------------------- causal_conv1d_fwd

TEST(ValidateConvFwd, ValidCasesPass) {
  ConvFwdCase c;
  GDN_ASSERT_VALID(c);
  c.args.bias = TensorView{};
  c.args.has_initial_state = TensorView{};
  c.args.activation = Activation::kNone;
  GDN_ASSERT_VALID(c);
  c.args.conv_state = c.pool.make(kF32, {3, 5, 8}, 1);  // padded slot stride, more rows than needed
  c.args.conv_state.stride[0] = 48;
  GDN_ASSERT_VALID(c);
  c.args.x.shape[0] = 0;  // an empty batch is well formed
  c.args.y.shape[0] = 0;
  GDN_ASSERT_VALID(c);
}

TEST(ValidateConvFwd, MissingRequiredTensor) {
  ConvFwdCase c;
  GDN_ASSERT_VALID(c);
  c.args.conv_state = TensorView{};
  expect_rejected(c, {"causal_conv1d_fwd: conv_state must be float32 [num_slots, rows, D] = [*, *, 8]", "got absent"});
}

TEST(ValidateConvFwd, ActivationDtypeUnsupported) {
  ConvFwdCase c;
  GDN_ASSERT_VALID(c);
  c.args.x.dtype = DType::kFloat64;
  expect_rejected(c, {"causal_conv1d_fwd: x must be float32, bfloat16 or float16 [T, D]", "got float64 [6, 8]"});
}

TEST(ValidateConvFwd, WeightDtypeDiffersFromX) {
  ConvFwdCase c;
  GDN_ASSERT_VALID(c);
  c.args.weight.dtype = DType::kBFloat16;
  expect_rejected(c, {"weight must be float32 [D, W] = [8, *] (the dtype of x)", "got bfloat16 [8, 4]"});
}

TEST(ValidateConvFwd, ConvStateDtypeDiffersFromX) {
  ConvFwdCase c;
  GDN_ASSERT_VALID(c);
  c.args.conv_state.dtype = DType::kFloat16;
  expect_rejected(c, {"conv_state must be float32", "(the dtype of x)", "got float16 [5, 3, 8]"});
}

TEST(ValidateConvFwd, WidthOutOfRange) {
  for (int64_t w : {1, 6}) {
    ConvFwdCase c;
    GDN_ASSERT_VALID(c);
    c.args.weight = c.pool.make(kF32, {8, w});
    expect_rejected(c, {"weight must be [D, W] with 2 <= W <= 5", "got float32 [8, " + std::to_string(w) + "]"});
  }
}

TEST(ValidateConvFwd, ZeroChannels) {
  ConvFwdCase c;
  GDN_ASSERT_VALID(c);
  c.args.x.shape[1] = 0;
  expect_rejected(c, {"x must be [T, D] with D > 0", "got float32 [6, 0]"});
}

TEST(ValidateConvFwd, BiasShape) {
  ConvFwdCase c;
  GDN_ASSERT_VALID(c);
  c.args.bias = c.pool.make(kF32, {7});
  expect_rejected(c, {"bias must be float32 [D] = [8]", "got float32 [7]"});
}

TEST(ValidateConvFwd, OutputShapeDiffersFromX) {
  ConvFwdCase c;
  GDN_ASSERT_VALID(c);
  c.args.y = c.pool.make(kF32, {5, 8});
  expect_rejected(c, {"y must be float32 [T, D] = [6, 8]", "got float32 [5, 8]"});
}

TEST(ValidateConvFwd, StateIndicesMustBeOneDimensional) {
  ConvFwdCase c;
  GDN_ASSERT_VALID(c);
  c.args.state_indices = c.pool.ints(kI32, {3, 2}, {0, 1, 2, 3, 4, 0});
  expect_rejected(c, {"state_indices must be int32 or int64 [n]", "got int32 [3, 2]"});
}

TEST(ValidateConvFwd, IndexDtype) {
  ConvFwdCase c;
  GDN_ASSERT_VALID(c);
  c.args.query_start_loc.dtype = kF32;
  expect_rejected(c, {"query_start_loc must be int32 or int64 [n+1] = [4]", "got float32 [4]"});
}

TEST(ValidateConvFwd, Int64IndicesAccepted) {
  ConvFwdCase c;
  c.args.query_start_loc = c.pool.ints(DType::kInt64, {4}, {0, 2, 5, 6});
  c.args.state_indices = c.pool.ints(DType::kInt64, {3}, {0, 3, -1});
  GDN_ASSERT_VALID(c);
}

TEST(ValidateConvFwd, QueryStartLocLength) {
  ConvFwdCase c;
  GDN_ASSERT_VALID(c);
  c.args.query_start_loc = c.pool.ints(kI32, {3}, {0, 2, 5});
  expect_rejected(c, {"query_start_loc must be int32 or int64 [n+1] = [4]", "got int32 [3]"});
}

TEST(ValidateConvFwd, HasInitialStateDtypeAndLength) {
  ConvFwdCase c;
  GDN_ASSERT_VALID(c);
  c.args.has_initial_state = c.pool.ints(kI32, {3}, {1, 1, 1});
  expect_rejected(c, {"has_initial_state must be bool [n] = [3]", "got int32 [3]"});
  c.args.has_initial_state = c.pool.ints(DType::kBool, {2}, {1, 1});
  expect_rejected(c, {"has_initial_state must be bool [n] = [3]", "got bool [2]"});
}

TEST(ValidateConvFwd, TooFewConvRows) {
  ConvFwdCase c;
  GDN_ASSERT_VALID(c);
  c.args.conv_state = c.pool.make(kF32, {5, 2, 8});
  expect_rejected(c, {"conv_state must be [num_slots, rows, D] with rows >= W-1 = 3", "got float32 [5, 2, 8]"});
}

TEST(ValidateConvFwd, NegativeSize) {
  ConvFwdCase c;
  GDN_ASSERT_VALID(c);
  c.args.conv_state.shape[0] = -1;
  expect_rejected(c, {"conv_state must have sizes >= 0", "got float32 [-1, 3, 8]"});
}

TEST(ValidateConvFwd, MismatchedDevice) {
  ConvFwdCase c;
  GDN_ASSERT_VALID(c);
  c.args.weight.device = Device::kCUDA;
  expect_rejected(c, {"weight must be on cpu like x", "got float32 [8, 4] on cuda:0"});
}

TEST(ValidateConvFwd, MismatchedDeviceIndex) {
  ConvFwdCase c;
  GDN_ASSERT_VALID(c);
  for (TensorView* t : {&c.args.x, &c.args.weight, &c.args.bias, &c.args.conv_state, &c.args.query_start_loc,
                        &c.args.state_indices, &c.args.has_initial_state, &c.args.y}) {
    t->device = Device::kCUDA;
  }
  c.args.y.device_index = 1;
  expect_rejected(c, {"y must be on cuda:0 like x", "got float32 [6, 8] on cuda:1"});
}

TEST(ValidateConvFwd, IndexTensorOnOtherDevice) {
  ConvFwdCase c;
  GDN_ASSERT_VALID(c);
  c.args.state_indices.device = Device::kCUDA;
  expect_rejected(c, {"state_indices must be on cpu like x", "got int32 [3] on cuda:0"});
}

TEST(ValidateConvFwd, NonContiguousInnerDim) {
  ConvFwdCase c;
  GDN_ASSERT_VALID(c);
  c.args.conv_state.stride[2] = 2;
  expect_rejected(c, {"conv_state must be dense in every dim but dim 0", "got float32 [5, 3, 8] with strides [24, 8, 2]"});
}

TEST(ValidateConvFwd, OverlappingRows) {
  ConvFwdCase c;
  GDN_ASSERT_VALID(c);
  c.args.x.stride[0] = 4;  // rows of 8 channels 4 apart
  expect_rejected(c, {"x must have a dim-0 stride of at least its row size (8 elements", "with strides [4, 1]"});
}

TEST(ValidateConvFwd, NullData) {
  ConvFwdCase c;
  GDN_ASSERT_VALID(c);
  c.args.bias.data = nullptr;
  expect_rejected(c, {"bias must point to memory", "float32 [8]"});
}

TEST(ValidateConvFwd, UnknownActivation) {
  ConvFwdCase c;
  GDN_ASSERT_VALID(c);
  c.args.activation = static_cast<Activation>(7);
  expect_rejected(c, {"causal_conv1d_fwd: activation must be silu or identity", "unknown activation 7"});
}

TEST(ValidateConvFwd, TooManyDims) {
  ConvFwdCase c;
  GDN_ASSERT_VALID(c);
  c.args.x.ndim = 9;
  expect_rejected(c, {"x must be float32, bfloat16 or float16 [T, D]", "got float32 view with ndim 9"});
}

// ---------------------------------------------------------------- causal_conv1d_update

TEST(ValidateConvUpdate, ValidCasesPass) {
  ConvUpdateCase c;
  GDN_ASSERT_VALID(c);
  c.args.spec_layout = SpecConvLayout::kPerToken;
  c.args.conv_state = c.pool.make(kF32, {6, 2, 8});  // per-token layout needs W-1 rows only
  GDN_ASSERT_VALID(c);
  c.decode();
  GDN_ASSERT_VALID(c);
}

TEST(ValidateConvUpdate, VerifyNeedsTwoDimensionalStateIndices) {
  ConvUpdateCase c;
  GDN_ASSERT_VALID(c);
  c.args.state_indices = c.pool.ints(kI32, {2}, {0, 3});
  expect_rejected(c, {"num_accepted_tokens given (verify) requires state_indices [n, cols]",
                      "got state_indices int32 [2] and num_accepted_tokens int32 [2]"});
}

TEST(ValidateConvUpdate, TwoDimensionalStateIndicesNeedNumAccepted) {
  ConvUpdateCase c;
  GDN_ASSERT_VALID(c);
  c.args.num_accepted_tokens = TensorView{};
  expect_rejected(c, {"state_indices [n, cols] (verify) requires num_accepted_tokens [n] = [2]",
                      "got state_indices int32 [2, 3] and num_accepted_tokens absent"});
}

TEST(ValidateConvUpdate, ZeroColumns) {
  ConvUpdateCase c;
  GDN_ASSERT_VALID(c);
  c.args.state_indices = c.pool.ints(kI32, {2, 0}, {});
  expect_rejected(c, {"state_indices must be [n, cols] with cols > 0", "got int32 [2, 0]"});
}

TEST(ValidateConvUpdate, NumAcceptedLengthAndDtype) {
  ConvUpdateCase c;
  GDN_ASSERT_VALID(c);
  c.args.num_accepted_tokens = c.pool.ints(kI32, {3}, {1, 1, 1});
  expect_rejected(c, {"num_accepted_tokens must be int32 or int64 [n] = [2]", "got int32 [3]"});
  c.args.num_accepted_tokens = c.pool.make(kF32, {2});
  expect_rejected(c, {"num_accepted_tokens must be int32 or int64 [n] = [2]", "got float32 [2]"});
}

TEST(ValidateConvUpdate, TooFewRowsForRollingVerify) {
  ConvUpdateCase c;
  GDN_ASSERT_VALID(c);
  c.args.conv_state = c.pool.make(kF32, {6, 3, 8});  // W-1 rows: enough for decode, not rolling verify
  expect_rejected(c, {"conv_state must be [num_slots, rows, D] with rows >= W-2+cols (rolling verify layout) = 4",
                      "got float32 [6, 3, 8]"});
}

TEST(ValidateConvUpdate, TooFewRowsForDecode) {
  ConvUpdateCase c;
  c.decode();
  GDN_ASSERT_VALID(c);
  c.args.conv_state = c.pool.make(kF32, {6, 1, 8});
  expect_rejected(c, {"conv_state must be [num_slots, rows, D] with rows >= W-1 = 2", "got float32 [6, 1, 8]"});
}

TEST(ValidateConvUpdate, UnknownSpecLayout) {
  ConvUpdateCase c;
  GDN_ASSERT_VALID(c);
  c.args.spec_layout = static_cast<SpecConvLayout>(5);
  expect_rejected(c, {"causal_conv1d_update: spec_layout must be rolling or per_token", "unknown layout 5"});
}

TEST(ValidateConvUpdate, UnknownActivation) {
  ConvUpdateCase c;
  GDN_ASSERT_VALID(c);
  c.args.activation = static_cast<Activation>(-1);
  expect_rejected(c, {"causal_conv1d_update: activation must be silu or identity", "unknown activation -1"});
}

TEST(ValidateConvUpdate, QueryStartLocLength) {
  ConvUpdateCase c;
  GDN_ASSERT_VALID(c);
  c.args.query_start_loc = c.pool.ints(kI32, {2}, {0, 5});
  expect_rejected(c, {"causal_conv1d_update: query_start_loc must be int32 or int64 [n+1] = [3]", "got int32 [2]"});
}

TEST(ValidateConvUpdate, BiasDtype) {
  ConvUpdateCase c;
  GDN_ASSERT_VALID(c);
  c.args.bias = c.pool.make(DType::kBFloat16, {8});
  expect_rejected(c, {"bias must be float32 [D] = [8] (the dtype of x)", "got bfloat16 [8]"});
}

TEST(ValidateConvUpdate, NonContiguousStateIndices) {
  ConvUpdateCase c;
  GDN_ASSERT_VALID(c);
  c.args.state_indices.stride[1] = 2;
  expect_rejected(c, {"state_indices must be dense in every dim but dim 0", "with strides [3, 2]"});
}

// ---------------------------------------------------------------- gated_delta_rule_*

TEST(ValidateGatedDeltaRule, ValidCasesPass) {
  for (bool chunked : {false, true}) {
    GdrCase c(chunked);
    GDN_ASSERT_VALID(c);
    c.args.has_initial_state = TensorView{};
    c.args.scale = 0.25;
    c.args.dt_bias.dtype = DType::kBFloat16;
    c.args.state_layout = StateLayout::kKV;
    c.args.ssm_state = c.pool.make(DType::kBFloat16, {4, 4, 8, 4});
    GDN_ASSERT_VALID(c);
  }
  GdrCase c;
  c.verify();
  GDN_ASSERT_VALID(c);
}

TEST(ValidateGatedDeltaRule, MissingQuery) {
  GdrCase c;
  GDN_ASSERT_VALID(c);
  c.args.q = TensorView{};
  expect_rejected(c, {"gated_delta_rule_recurrent: q must be float32, bfloat16 or float16 [T, H, K]", "got absent"});
}

TEST(ValidateGatedDeltaRule, ValueShape) {
  GdrCase c;
  GDN_ASSERT_VALID(c);
  c.args.v = c.pool.make(kF32, {4, 4, 4});
  expect_rejected(c, {"gated_delta_rule_recurrent: v must be float32 [T, HV, V] = [5, *, *]", "got float32 [4, 4, 4]"});
}

TEST(ValidateGatedDeltaRule, KeyShape) {
  GdrCase c(true);
  GDN_ASSERT_VALID(c);
  c.args.k = c.pool.make(kF32, {5, 2, 4});
  expect_rejected(c, {"gated_delta_rule_chunked: k must be float32 [T, H, K] = [5, 2, 8]", "got float32 [5, 2, 4]"});
}

TEST(ValidateGatedDeltaRule, ActivationDtypesDiffer) {
  GdrCase c;
  GDN_ASSERT_VALID(c);
  c.args.b.dtype = DType::kBFloat16;
  expect_rejected(c, {"b must be float32 [T, HV] = [5, 4] (the dtype of q, or float32)", "got bfloat16 [5, 4]"});
  GdrCase d;  // bf16 activations: gate inputs in bf16 or float32 (FLA's float32 log-space decay)
  for (TensorView* t : {&d.args.q, &d.args.k, &d.args.v, &d.args.o}) t->dtype = DType::kBFloat16;
  d.args.a.dtype = DType::kFloat32;
  d.args.b.dtype = DType::kBFloat16;
  GDN_ASSERT_VALID(d);
  d.args.a.dtype = DType::kFloat16;
  expect_rejected(d, {"a must be bfloat16 or float32 [T, HV] = [5, 4] (the dtype of q, or float32)", "got float16 [5, 4]"});
}

// The decay computed from a (A_log and dt_bias) or a as the log-space decay (neither); one alone
// is an error.
TEST(ValidateGatedDeltaRule, ALogAndDtBiasTogether) {
  GdrCase c;
  c.args.A_log = TensorView{};
  c.args.dt_bias = TensorView{};
  GDN_ASSERT_VALID(c);
  GdrCase d;
  d.args.dt_bias = TensorView{};
  expect_rejected(d, {"A_log and dt_bias must be given together", "or both absent", "got A_log float32 [4], dt_bias absent"});
  GdrCase e;
  e.args.A_log = TensorView{};
  expect_rejected(e, {"A_log and dt_bias must be given together", "got A_log absent, dt_bias float32 [4]"});
}

TEST(ValidateGatedDeltaRule, HeadsNotDivisible) {
  GdrCase c;
  GDN_ASSERT_VALID(c);
  c.args.v = c.pool.make(kF32, {5, 3, 4});
  expect_rejected(c, {"num_v_heads (HV = v dim 1) must be a multiple of num_k_heads (H = q dim 1)", "got HV = 3, H = 2"});
}

TEST(ValidateGatedDeltaRule, ZeroHeadDim) {
  GdrCase c;
  GDN_ASSERT_VALID(c);
  c.args.q.shape[2] = 0;
  expect_rejected(c, {"q must be [T, H, K] with K > 0", "got float32 [5, 2, 0]"});
}

// A_log in the checkpoint's dtype (a bf16 model keeps it in bfloat16), like dt_bias.
TEST(ValidateGatedDeltaRule, ALogMustBeFloat) {
  for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kFloat64}) {
    GdrCase c;
    c.args.A_log.dtype = t;
    GDN_ASSERT_VALID(c);
  }
  GdrCase c;
  c.args.A_log.dtype = kI32;
  expect_rejected(c, {"A_log must be float32, bfloat16, float16 or float64 [HV] = [4]", "got int32 [4]"});
}

TEST(ValidateGatedDeltaRule, DtBiasMustBeFloat) {
  GdrCase c;
  GDN_ASSERT_VALID(c);
  c.args.dt_bias.dtype = kI32;
  expect_rejected(c, {"dt_bias must be float32, bfloat16, float16 or float64 [HV] = [4]", "got int32 [4]"});
}

TEST(ValidateGatedDeltaRule, GateShape) {
  GdrCase c;
  GDN_ASSERT_VALID(c);
  c.args.a = c.pool.make(kF32, {5, 2});
  expect_rejected(c, {"a must be float32 [T, HV] = [5, 4]", "got float32 [5, 2]"});
}

TEST(ValidateGatedDeltaRule, SsmStateDtype) {
  GdrCase c;
  GDN_ASSERT_VALID(c);
  c.args.ssm_state.dtype = DType::kFloat64;
  expect_rejected(c, {"ssm_state (state_layout vk) must be float32, bfloat16 or float16", "got float64 [4, 4, 4, 8]"});
}

TEST(ValidateGatedDeltaRule, SsmStateLayoutMismatch) {
  GdrCase c;
  GDN_ASSERT_VALID(c);
  c.args.state_layout = StateLayout::kKV;  // the pool is [slots, HV, V, K]
  expect_rejected(c, {"ssm_state (state_layout kv) must be", "[num_slots, HV, K, V] = [*, 4, 8, 4]",
                      "got float32 [4, 4, 4, 8]"});
}

TEST(ValidateGatedDeltaRule, UnknownStateLayout) {
  GdrCase c;
  GDN_ASSERT_VALID(c);
  c.args.state_layout = static_cast<StateLayout>(9);
  expect_rejected(c, {"gated_delta_rule_recurrent: state_layout must be vk or kv", "unknown layout 9"});
}

TEST(ValidateGatedDeltaRule, ScaleMustBeFinitePositive) {
  for (double s : {0.0, -1.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
    GdrCase c;
    GDN_ASSERT_VALID(c);
    c.args.scale = s;
    expect_rejected(c, {"scale must be finite and > 0", "got "});
  }
}

TEST(ValidateGatedDeltaRule, OutputShape) {
  GdrCase c;
  GDN_ASSERT_VALID(c);
  c.args.o = c.pool.make(kF32, {5, 4, 8});
  expect_rejected(c, {"o must be float32 [T, HV, V] = [5, 4, 4]", "got float32 [5, 4, 8]"});
}

TEST(ValidateGatedDeltaRule, HasInitialStateLength) {
  GdrCase c;
  GDN_ASSERT_VALID(c);
  c.args.has_initial_state = c.pool.ints(DType::kBool, {3}, {1, 1, 1});
  expect_rejected(c, {"has_initial_state must be bool [n] = [2]", "got bool [3]"});
}

TEST(ValidateGatedDeltaRule, VerifyPairHalfGiven) {
  GdrCase c;
  c.verify();
  GDN_ASSERT_VALID(c);
  c.args.num_accepted_tokens = TensorView{};
  expect_rejected(c, {"state_indices [n, cols] (verify) requires num_accepted_tokens [n] = [2]", "absent"});
}

TEST(ValidateGatedDeltaRule, MismatchedDevice) {
  GdrCase c;
  GDN_ASSERT_VALID(c);
  c.args.ssm_state.device = Device::kCUDA;
  c.args.ssm_state.device_index = 3;
  expect_rejected(c, {"ssm_state (state_layout vk) must be on cpu like q", "got float32 [4, 4, 4, 8] on cuda:3"});
}

TEST(ValidateGatedDeltaRule, NegativeSize) {
  GdrCase c;
  GDN_ASSERT_VALID(c);
  c.args.state_indices.shape[0] = -2;
  expect_rejected(c, {"state_indices must have sizes >= 0", "got int32 [-2]"});
}

TEST(ValidateGatedDeltaRule, NonContiguousSsmState) {
  GdrCase c;
  GDN_ASSERT_VALID(c);
  std::swap(c.args.ssm_state.stride[2], c.args.ssm_state.stride[3]);  // a transposed view
  expect_rejected(c, {"ssm_state (state_layout vk) must be dense in every dim but dim 0",
                      "with strides [128, 32, 1, 8]"});
}

TEST(ValidateGatedDeltaRule, ChunkedRejectsNumAccepted) {
  GdrCase c(true);
  GDN_ASSERT_VALID(c);
  c.verify();
  expect_rejected(c, {"gated_delta_rule_chunked: num_accepted_tokens must be absent (the chunked op serves "
                      "non-speculative sequences), got int32 [2]"});
}

TEST(ValidateGatedDeltaRule, ChunkedRejectsTwoDimensionalStateIndices) {
  GdrCase c(true);
  GDN_ASSERT_VALID(c);
  c.args.state_indices = c.pool.ints(kI32, {2, 1}, {0, 1});
  expect_rejected(c, {"gated_delta_rule_chunked: state_indices must be int32 or int64 [n] (the chunked op serves "
                      "non-speculative sequences), got int32 [2, 1]"});
}

}  // namespace
}  // namespace gdn_test
