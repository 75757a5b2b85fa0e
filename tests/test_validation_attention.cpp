// Host-side validation of gdn_attention (docs/contract.md §4, §5), in the manner of test_validation.cpp:
// a valid mixed batch (prefill, decode, verify) is broken in one place per test.
#include <limits>

#include "validation_fixtures.h"

namespace gdn_test {
namespace {

using gdn::Activation;
using gdn::Device;
using gdn::TensorView;

TEST(ValidateAttention, ValidCasesPass) {
  AttentionCase c;
  GDN_ASSERT_VALID(c);
  // Optional tensors absent: identity remaps, no bias, all sequences with initial state.
  c.args.non_spec_token_indx = TensorView{};
  c.args.spec_token_indx = TensorView{};
  c.args.conv_bias = TensorView{};
  c.args.has_initial_state = TensorView{};
  c.args.reorder_input = true;
  c.args.null_block_id = 0;
  GDN_ASSERT_VALID(c);
  // Global head counts with tp_size 2 give the same per-rank shapes.
  c.args.num_k_heads = 4;
  c.args.num_v_heads = 8;
  c.args.tp_size = 2;
  GDN_ASSERT_VALID(c);
}

TEST(ValidateAttention, GroupsWithoutSequencesMayOmitTheirTensors) {
  AttentionCase c;
  c.args.num_spec_decodes = 0;
  c.args.spec_query_start_loc = TensorView{};
  c.args.spec_state_indices_tensor = TensorView{};
  c.args.spec_token_indx = TensorView{};
  c.args.num_accepted_tokens = TensorView{};
  GDN_ASSERT_VALID(c);
  AttentionCase d;
  d.args.num_prefills = 0;
  d.args.num_decodes = 0;
  d.args.non_spec_query_start_loc = TensorView{};
  d.args.non_spec_state_indices_tensor = TensorView{};
  d.args.non_spec_token_indx = TensorView{};
  d.args.has_initial_state = TensorView{};
  GDN_ASSERT_VALID(d);
}

TEST(ValidateAttention, TpSizeAtLeastOne) {
  AttentionCase c;
  GDN_ASSERT_VALID(c);
  c.args.tp_size = 0;
  expect_rejected(c, {"gdn_attention: tp_size must be >= 1, got 0"});
}

TEST(ValidateAttention, HeadsNotDivisibleByTp) {
  AttentionCase c;
  GDN_ASSERT_VALID(c);
  c.args.tp_size = 4;
  expect_rejected(c, {"num_k_heads must be divisible by tp_size = 4, got 2"});
  c.args.num_k_heads = 4;
  c.args.num_v_heads = 6;
  c.args.tp_size = 4;
  expect_rejected(c, {"num_v_heads must be divisible by tp_size = 4, got 6"});
}

TEST(ValidateAttention, ValueHeadsNotMultipleOfKeyHeads) {
  AttentionCase c;
  GDN_ASSERT_VALID(c);
  c.args.num_v_heads = 3;
  expect_rejected(c, {"num_v_heads must be a multiple of num_k_heads = 2, got 3"});
}

TEST(ValidateAttention, HeadDimsPositive) {
  AttentionCase c;
  GDN_ASSERT_VALID(c);
  c.args.head_k_dim = 0;
  expect_rejected(c, {"head_k_dim must be > 0, got 0"});
}

TEST(ValidateAttention, NegativeCounts) {
  AttentionCase c;
  GDN_ASSERT_VALID(c);
  c.args.num_decodes = -1;
  expect_rejected(c, {"num_decodes must be >= 0, got -1"});
  c.args.num_decodes = 1;
  c.args.num_actual_tokens = -3;
  expect_rejected(c, {"num_actual_tokens must be >= 0, got -3"});
}

TEST(ValidateAttention, NumActualTokensPastRows) {
  AttentionCase c;
  GDN_ASSERT_VALID(c);
  c.args.z = c.pool.make(kF32, {6, 4, 4});
  expect_rejected(c, {"z must have at least num_actual_tokens = 7 rows", "got float32 [6, 4, 4]"});
}

TEST(ValidateAttention, ProjectionWidths) {
  AttentionCase c;
  GDN_ASSERT_VALID(c);
  c.args.projected_states_qkvz = c.pool.make(kF32, {8, 48});
  expect_rejected(c, {"projected_states_qkvz must be float32, bfloat16 or float16 [rows, H/tp * (2K + 2rV)] = [*, 64]",
                      "got float32 [8, 48]"});
  AttentionCase d;
  d.args.projected_states_ba = d.pool.make(kF32, {8, 4});
  expect_rejected(d, {"projected_states_ba must be float32 [rows, 2 HV/tp] = [*, 8]", "got float32 [8, 4]"});
}

TEST(ValidateAttention, ActivationDtypesDiffer) {
  AttentionCase c;
  GDN_ASSERT_VALID(c);
  c.args.core_attn_out.dtype = DType::kBFloat16;
  expect_rejected(c, {"core_attn_out must be float32 [rows, HV/tp, V] = [*, 4, 4] (the dtype of projected_states_qkvz)",
                      "got bfloat16 [8, 4, 4]"});
}

TEST(ValidateAttention, ConvWeightsShape) {
  AttentionCase c;
  GDN_ASSERT_VALID(c);
  c.args.conv_weights = c.pool.make(kF32, {40, 4});
  expect_rejected(c, {"conv_weights must be float32 [D = 2 H/tp K + HV/tp V, W] = [48, *]", "got float32 [40, 4]"});
}

TEST(ValidateAttention, ConvWidthOutOfRange) {
  AttentionCase c;
  GDN_ASSERT_VALID(c);
  c.args.conv_weights = c.pool.make(kF32, {48, 6});
  expect_rejected(c, {"conv_weights must be [D, W] with 2 <= W <= 5", "got float32 [48, 6]"});
}

TEST(ValidateAttention, SsmStateShapeAndSlots) {
  AttentionCase c;
  GDN_ASSERT_VALID(c);
  c.args.ssm_state = c.pool.make(kF32, {6, 4, 8, 4});  // "kv" is not accepted here
  expect_rejected(c, {"ssm_state must be float32, bfloat16 or float16 [num_slots of conv_state, HV/tp, V, K] = [6, 4, 4, 8]",
                      "got float32 [6, 4, 8, 4]"});
  c.args.ssm_state = c.pool.make(kF32, {5, 4, 4, 8});
  expect_rejected(c, {"[num_slots of conv_state, HV/tp, V, K] = [6, 4, 4, 8]", "got float32 [5, 4, 4, 8]"});
}

TEST(ValidateAttention, GateParameterDtypes) {
  AttentionCase c;
  GDN_ASSERT_VALID(c);
  c.args.A_log.dtype = DType::kBFloat16;  // the checkpoint's dtype is accepted
  GDN_ASSERT_VALID(c);
  c.args.A_log.dtype = DType::kInt64;
  expect_rejected(c, {"A_log must be float32, bfloat16, float16 or float64 [HV/tp] = [4]", "got int64 [4]"});
  AttentionCase d;
  d.args.dt_bias = d.pool.make(kF32, {8});
  expect_rejected(d, {"dt_bias must be float32, bfloat16, float16 or float64 [HV/tp] = [4]", "got float32 [8]"});
}

TEST(ValidateAttention, MissingNonSpecTensors) {
  AttentionCase c;
  GDN_ASSERT_VALID(c);
  c.args.non_spec_query_start_loc = TensorView{};
  expect_rejected(c, {"non_spec_query_start_loc must be int32 or int64 [num_prefills + num_decodes + 1] = [3]",
                      "got absent"});
  AttentionCase d;
  d.args.non_spec_state_indices_tensor = TensorView{};
  expect_rejected(d, {"non_spec_state_indices_tensor must be int32 or int64 [num_prefills + num_decodes] = [2]",
                      "got absent"});
}

TEST(ValidateAttention, MissingSpecTensors) {
  AttentionCase c;
  GDN_ASSERT_VALID(c);
  c.args.spec_state_indices_tensor = TensorView{};
  expect_rejected(c, {"spec_state_indices_tensor must be int32 or int64 [num_spec_decodes, cols] = [1, *]",
                      "got absent"});
  AttentionCase d;
  d.args.num_accepted_tokens = TensorView{};
  expect_rejected(d, {"num_accepted_tokens must be int32 or int64 [num_spec_decodes] = [1]", "got absent"});
  AttentionCase e;
  e.args.spec_query_start_loc = TensorView{};
  expect_rejected(e, {"spec_query_start_loc must be int32 or int64 [num_spec_decodes + 1] = [2]", "got absent"});
}

TEST(ValidateAttention, SpecStateIndicesShapeAndDtype) {
  AttentionCase c;
  GDN_ASSERT_VALID(c);
  c.args.spec_state_indices_tensor = c.pool.ints(DType::kInt64, {3, 4}, {});
  expect_rejected(c, {"spec_state_indices_tensor must be int32 or int64 [num_spec_decodes, cols] = [1, *]",
                      "got int64 [3, 4]"});
  c.args.spec_state_indices_tensor = c.pool.ints(kI32, {1}, {2});
  expect_rejected(c, {"spec_state_indices_tensor must be int32 or int64 [num_spec_decodes, cols]", "got int32 [1]"});
  c.args.spec_state_indices_tensor = c.pool.make(kF32, {1, 3});
  expect_rejected(c, {"spec_state_indices_tensor must be int32 or int64", "got float32 [1, 3]"});
}

TEST(ValidateAttention, GroupTensorsMustFitAnEmptyGroup) {
  AttentionCase c;
  GDN_ASSERT_VALID(c);
  c.args.num_spec_decodes = 0;  // the spec tensors still describe one sequence
  expect_rejected(c, {"spec_state_indices_tensor must be int32 or int64 [num_spec_decodes, cols] = [0, *]",
                      "got int32 [1, 3]"});
}

TEST(ValidateAttention, HasInitialStateLength) {
  AttentionCase c;
  GDN_ASSERT_VALID(c);
  c.args.has_initial_state = c.pool.ints(DType::kBool, {3}, {1, 1, 1});
  expect_rejected(c, {"has_initial_state must be bool [num_prefills + num_decodes] = [2]", "got bool [3]"});
}

TEST(ValidateAttention, TokenIndexMustBeOneDimensional) {
  AttentionCase c;
  GDN_ASSERT_VALID(c);
  c.args.spec_token_indx = c.pool.ints(kI32, {2, 1}, {4, 5});
  expect_rejected(c, {"spec_token_indx must be int32 or int64 [tokens]", "got int32 [2, 1]"});
}

// The verify conv layout sets the rows the pool needs: the rolling line W-2+cols, per token
// (the default, vllm-xpu-kernels' layout) W-1.
TEST(ValidateAttention, ConvRowsFollowTheSpecConvLayout) {
  AttentionCase c;
  c.args.spec_conv_layout = gdn::SpecConvLayout::kRolling;
  GDN_ASSERT_VALID(c);
  c.args.conv_state = c.pool.make(kF32, {6, 4, 48});
  expect_rejected(c, {"conv_state must be [num_slots, rows, D] with rows >= W-2+cols (spec_conv_layout rolling) = 5",
                      "got float32 [6, 4, 48]"});
  c.args.spec_conv_layout = gdn::SpecConvLayout::kPerToken;  // per draft slot: W-1 rows suffice
  GDN_ASSERT_VALID(c);
  c.args.conv_state = c.pool.make(kF32, {6, 3, 48});
  GDN_ASSERT_VALID(c);
  c.args.conv_state = c.pool.make(kF32, {6, 2, 48});
  expect_rejected(c, {"conv_state must be [num_slots, rows, D] with rows >= W-1 = 3", "got float32 [6, 2, 48]"});
  c.args.spec_conv_layout = static_cast<gdn::SpecConvLayout>(7);
  expect_rejected(c, {"spec_conv_layout must be rolling or per_token", "got unknown layout 7"});
  c.args.spec_conv_layout = gdn::SpecConvLayout::kRolling;
  c.args.conv_state = c.pool.make(kF32, {6, 4, 48});
  c.args.num_spec_decodes = 0;  // without verify sequences W-1 rows are enough in either layout
  c.args.spec_query_start_loc = TensorView{};
  c.args.spec_state_indices_tensor = TensorView{};
  c.args.spec_token_indx = TensorView{};
  c.args.num_accepted_tokens = TensorView{};
  GDN_ASSERT_VALID(c);
  c.args.conv_state = c.pool.make(kF32, {6, 2, 48});
  expect_rejected(c, {"conv_state must be [num_slots, rows, D] with rows >= W-1 = 3", "got float32 [6, 2, 48]"});
}

TEST(ValidateAttention, UnknownActivation) {
  AttentionCase c;
  GDN_ASSERT_VALID(c);
  c.args.activation = static_cast<Activation>(3);
  expect_rejected(c, {"gdn_attention: activation must be silu or identity", "unknown activation 3"});
}

TEST(ValidateAttention, ScaleMustBeFinitePositive) {
  AttentionCase c;
  GDN_ASSERT_VALID(c);
  c.args.scale = -std::numeric_limits<double>::infinity();
  expect_rejected(c, {"gdn_attention: scale must be finite and > 0", "got -inf"});
}

TEST(ValidateAttention, MismatchedDevice) {
  AttentionCase c;
  GDN_ASSERT_VALID(c);
  c.args.num_accepted_tokens.device = Device::kCUDA;
  expect_rejected(c, {"num_accepted_tokens must be on cpu like projected_states_qkvz", "got int32 [1] on cuda:0"});
}

TEST(ValidateAttention, NonContiguousInnerDim) {
  AttentionCase c;
  GDN_ASSERT_VALID(c);
  c.args.z.stride[1] = 8;
  expect_rejected(c, {"z must be dense in every dim but dim 0", "with strides [16, 8, 1]"});
}

TEST(ValidateAttention, NegativeSize) {
  AttentionCase c;
  GDN_ASSERT_VALID(c);
  c.args.non_spec_token_indx.shape[0] = -5;
  expect_rejected(c, {"non_spec_token_indx must have sizes >= 0", "got int32 [-5]"});
}

TEST(ValidateAttention, HugeHeadDimsDoNotOverflow) {
  AttentionCase c;
  GDN_ASSERT_VALID(c);
  c.args.head_v_dim = std::numeric_limits<int64_t>::max() / 2;
  expect_rejected(c, {"widths that fit in int64"});
}

}  // namespace
}  // namespace gdn_test
