// check_metadata (docs/contract.md §3, "Metadata the host cannot see"): one test per class of violation,
// asserting the words of the report; padding (negative slots, null_block_id) is not a violation.
#include "validation_fixtures.h"

namespace gdn_test {
namespace {

using gdn::Device;
using gdn::TensorView;

template <typename Case>
void expect_metadata_ok(const Case& c) {
  const gdn::Status s = c.check();
  EXPECT_TRUE(s.ok()) << s.message();
}

TEST(CheckMetadata, ValidCasesPass) {
  ConvFwdCase fwd;
  expect_metadata_ok(fwd);
  ConvUpdateCase upd;
  expect_metadata_ok(upd);
  upd.decode();
  expect_metadata_ok(upd);
  GdrCase gdr;
  expect_metadata_ok(gdr);
  gdr.verify();
  expect_metadata_ok(gdr);
  AttentionCase att;
  expect_metadata_ok(att);
}

TEST(CheckMetadata, MalformedCallIsReportedByValidation) {
  ConvFwdCase c;
  c.args.y = TensorView{};
  expect_metadata_error(c, {"causal_conv1d_fwd: y must be float32 [T, D] = [6, 8]", "got absent"});
}

TEST(CheckMetadata, IndexTensorsMustBeOnTheHost) {
  ConvUpdateCase c;
  c.args.num_accepted_tokens.device = Device::kCUDA;
  expect_metadata_error(c, {"causal_conv1d_update: check_metadata reads num_accepted_tokens on the host",
                            "must be on cpu, got int32 [2] on cuda:0"});
  AttentionCase a;
  a.args.spec_token_indx.device = Device::kCUDA;
  expect_metadata_error(a, {"gdn_attention: check_metadata reads spec_token_indx on the host"});
}

TEST(CheckMetadata, HostMetadataMayAccompanyDeviceBuffers) {
  GdrCase c;
  for (TensorView* t : {&c.args.q, &c.args.k, &c.args.v, &c.args.a, &c.args.b, &c.args.A_log, &c.args.dt_bias,
                        &c.args.ssm_state, &c.args.o}) {
    t->device = Device::kCUDA;
  }
  expect_metadata_ok(c);
  c.args.state_indices = c.pool.ints(kI32, {2}, {1, 9});
  expect_metadata_error(c, {"state_indices[1] = 9 is outside [0, 4)"});
}

TEST(CheckMetadata, SlotPastThePool) {
  ConvFwdCase c;
  c.args.state_indices = c.pool.ints(kI32, {3}, {0, 5, -1});
  expect_metadata_error(c, {"causal_conv1d_fwd: state_indices[1] = 5 is outside [0, 5)", "conv_state"});
}

TEST(CheckMetadata, SlotPastThePoolInVerifyColumns) {
  ConvUpdateCase c;
  c.args.conv_state = c.pool.make(kF32, {20, 4, 8});
  c.args.state_indices = c.pool.ints(kI32, {3, 2}, {0, 1, 2, 3, 25, 4});
  c.args.num_accepted_tokens = c.pool.ints(kI32, {3}, {1, 1, 1});
  c.args.query_start_loc = c.pool.ints(kI32, {4}, {0, 2, 3, 5});
  GDN_ASSERT_VALID(c);
  expect_metadata_error(c, {"state_indices[2, 0] = 25 is outside [0, 20)"});
}

TEST(CheckMetadata, PaddingSlotsAreNotViolations) {
  GdrCase c;
  c.args.null_block_id = 7;
  c.args.state_indices = c.pool.ints(kI32, {2}, {-1, 7});  // negative, and the null block past the pool
  expect_metadata_ok(c);
  c.args.null_block_id.reset();
  expect_metadata_error(c, {"gated_delta_rule: state_indices[1] = 7 is outside [0, 4)", "ssm_state"});
}

TEST(CheckMetadata, NumAcceptedOutsideColumns) {
  for (int64_t a : {0, 4}) {
    GdrCase c;
    c.verify();
    c.args.num_accepted_tokens = c.pool.ints(kI32, {2}, {a, 1});
    expect_metadata_error(c, {"num_accepted_tokens[0] = " + std::to_string(a) + " is outside [1, 3]",
                              "cols of state_indices"});
  }
}

TEST(CheckMetadata, PaddedVerifySequenceIsNotChecked) {
  ConvUpdateCase c;
  c.args.state_indices = c.pool.ints(kI32, {2, 3}, {0, 1, 2, -1, -1, -1});
  c.args.num_accepted_tokens = c.pool.ints(kI32, {2}, {1, 0});
  c.args.query_start_loc = c.pool.ints(kI32, {3}, {0, 1, 5});  // 4 tokens > cols, but padding
  expect_metadata_ok(c);
}

TEST(CheckMetadata, VerifySequenceLongerThanColumns) {
  ConvUpdateCase c;
  c.args.query_start_loc = c.pool.ints(kI32, {3}, {0, 1, 5});
  expect_metadata_error(c, {"sequence 1 has T = 4 tokens", "query_start_loc[1] = 1, query_start_loc[2] = 5",
                            "more than cols = 3 of state_indices"});
}

TEST(CheckMetadata, QueryStartLocDecreasing) {
  ConvFwdCase c;
  c.args.query_start_loc = c.pool.ints(kI32, {4}, {0, 4, 2, 6});
  expect_metadata_error(c, {"query_start_loc[2] = 2 is less than query_start_loc[1] = 4"});
}

TEST(CheckMetadata, QueryStartLocPastTheBuffer) {
  ConvFwdCase c;
  c.args.query_start_loc = c.pool.ints(DType::kInt64, {4}, {0, 2, 5, 7});
  expect_metadata_error(c, {"query_start_loc[3] = 7 is outside [0, 6] (rows of x)"});
  GdrCase g;
  g.args.query_start_loc = g.pool.ints(kI32, {3}, {-1, 3, 5});
  expect_metadata_error(g, {"query_start_loc[0] = -1 is outside [0, 5] (rows of q)"});
}

TEST(CheckMetadata, AttentionQueryStartLocPastTheRemap) {
  AttentionCase c;
  c.args.non_spec_query_start_loc = c.pool.ints(kI32, {3}, {0, 4, 6});
  expect_metadata_error(c, {"non_spec_query_start_loc[2] = 6 is outside [0, 5] (length of non_spec_token_indx)"});
  c.args.non_spec_token_indx = TensorView{};  // identity remap: the limit is num_actual_tokens
  expect_metadata_ok(c);
  c.args.num_actual_tokens = 5;
  expect_metadata_error(c, {"non_spec_query_start_loc[2] = 6 is outside [0, 5] (num_actual_tokens)"});
}

TEST(CheckMetadata, AttentionRemapOutsideActualTokens) {
  AttentionCase c;
  c.args.spec_token_indx = c.pool.ints(kI32, {2}, {4, 7});
  expect_metadata_error(c, {"spec_token_indx[1] = 7 is outside [0, 7) (num_actual_tokens)"});
  AttentionCase d;
  d.args.non_spec_token_indx = d.pool.ints(kI32, {5}, {0, -1, 2, 3, 6});
  expect_metadata_error(d, {"non_spec_token_indx[1] = -1 is outside [0, 7)"});
}

TEST(CheckMetadata, AttentionSlotsAndAcceptedCounts) {
  AttentionCase c;
  c.args.non_spec_state_indices_tensor = c.pool.ints(DType::kInt64, {2}, {0, 6});
  expect_metadata_error(c, {"non_spec_state_indices_tensor[1] = 6 is outside [0, 6)", "conv_state and ssm_state"});
  AttentionCase d;
  d.args.num_accepted_tokens = d.pool.ints(kI32, {1}, {5});
  expect_metadata_error(d, {"num_accepted_tokens[0] = 5 is outside [1, 3] (cols of spec_state_indices_tensor)"});
  AttentionCase e;
  e.args.spec_query_start_loc = e.pool.ints(kI32, {2}, {0, 4});
  e.args.spec_token_indx = e.pool.ints(kI32, {4}, {4, 5, 5, 5});
  expect_metadata_error(e, {"sequence 0 has T = 4 tokens", "more than cols = 3 of spec_state_indices_tensor"});
}

TEST(CheckMetadata, VerifySequencePaddedThroughItsReadColumn) {
  // The slot of column a - 1 is padding, so the op pads the sequence: T > cols is no violation.
  ConvUpdateCase c;
  c.args.state_indices = c.pool.ints(kI32, {2, 3}, {0, 1, 2, 3, -1, -1});
  c.args.num_accepted_tokens = c.pool.ints(kI32, {2}, {1, 2});
  c.args.query_start_loc = c.pool.ints(kI32, {3}, {0, 1, 5});  // sequence 1: 4 tokens > cols = 3
  expect_metadata_ok(c);
  c.args.num_accepted_tokens = c.pool.ints(kI32, {2}, {1, 1});  // column 0's slot 3 is read: reported
  expect_metadata_error(c, {"sequence 1 has T = 4 tokens", "more than cols = 3"});
}

constexpr int64_t kLogCols = 3;

// AttentionCase in the deferred mode: logs of kLogCols columns, replay counts, paths and parents.
void make_deferred(AttentionCase& c) {
  const int64_t LC = kLogCols, E = 8 + 4 + 2;  // K + V + 2 floats per logged token and value head
  c.args.verify_log = c.pool.make(kF32, {6, LC, 4, E});
  c.args.verify_log_out = c.pool.make(kF32, {6, LC, 4, E});
  c.args.conv_log = c.pool.make(kF32, {6, LC, 48});
  c.args.conv_log_out = c.pool.make(kF32, {6, LC, 48});
  c.args.non_spec_num_accepted_tokens = c.pool.ints(kI32, {2}, {0, 2});
  c.args.non_spec_accepted_path = c.pool.ints(kI32, {2, LC}, {0, 1, 2, 0, 1, 2});
  c.args.spec_accepted_path = c.pool.ints(kI32, {1, LC}, {0, 1, 2});
  c.args.spec_token_parents = c.pool.ints(kI32, {2}, {-1, 0});
}

// Deferred commit: a verify sequence's columns past 0 are never read, a sequence without an
// initial state replays nothing, and a bad replay count names its tensor.
TEST(CheckMetadata, DeferredReadsWhatTheOpReads) {
  AttentionCase c;
  make_deferred(c);
  GDN_ASSERT_VALID(c);
  c.args.spec_state_indices_tensor = c.pool.ints(kI32, {1, 3}, {2, 999, -5});
  c.args.non_spec_num_accepted_tokens = c.pool.ints(kI32, {2}, {99, 2});  // sequence 0: no initial state
  expect_metadata_ok(c);
  c.args.non_spec_num_accepted_tokens = c.pool.ints(kI32, {2}, {0, 9});
  expect_metadata_error(c, {"non_spec_num_accepted_tokens[1] = 9 is outside [0, 3]"});
  AttentionCase d;
  make_deferred(d);
  d.args.num_accepted_tokens = d.pool.ints(kI32, {1}, {-1});
  expect_metadata_error(d, {"gdn_attention: num_accepted_tokens[0] = -1 is outside [0, 3]"});
  GdrCase g;  // the recurrent op: sequence 1 has no initial state
  g.args.verify_log = g.pool.make(kF32, {4, kLogCols, 4, 8 + 4 + 2});
  g.args.verify_log_out = g.pool.make(kF32, {4, kLogCols, 4, 8 + 4 + 2});
  g.args.num_accepted_tokens = g.pool.ints(kI32, {2}, {3, 7});
  GDN_ASSERT_VALID(g);
  expect_metadata_ok(g);
  g.args.has_initial_state = g.pool.ints(DType::kBool, {2}, {1, 1});
  expect_metadata_error(g, {"num_accepted_tokens[1] = 7 is outside [0, 3]"});
}

// The deferred mode beside device buffers: check_metadata reads the replay counts and
// has_initial_state on the host (they must be host copies); the logs, accepted paths and token
// parents it does not read, so they stay on the device with the buffers.
TEST(CheckMetadata, DeferredAttentionHostCountsBesideDeviceBuffers) {
  AttentionCase c;
  make_deferred(c);
  GDN_ASSERT_VALID(c);
  for (TensorView* t : {&c.args.core_attn_out, &c.args.z, &c.args.projected_states_qkvz, &c.args.projected_states_ba,
                        &c.args.conv_state, &c.args.ssm_state, &c.args.conv_weights, &c.args.conv_bias, &c.args.A_log,
                        &c.args.dt_bias, &c.args.verify_log, &c.args.verify_log_out, &c.args.conv_log,
                        &c.args.conv_log_out, &c.args.non_spec_accepted_path, &c.args.spec_accepted_path,
                        &c.args.spec_token_parents}) {
    t->device = Device::kCUDA;
  }
  expect_metadata_ok(c);
  c.args.non_spec_num_accepted_tokens.device = Device::kCUDA;
  expect_metadata_error(c, {"gdn_attention: check_metadata reads non_spec_num_accepted_tokens on the host",
                            "must be on cpu"});
  // has_initial_state says whose replay counts are read: on the host too (a device copy was read
  // through its pointer on the host)
  c.args.non_spec_num_accepted_tokens.device = Device::kCPU;
  c.args.has_initial_state.device = Device::kCUDA;
  expect_metadata_error(c, {"gdn_attention: check_metadata reads has_initial_state on the host", "must be on cpu"});
  GdrCase g;
  g.args.verify_log = g.pool.make(kF32, {4, kLogCols, 4, 8 + 4 + 2});
  g.args.verify_log_out = g.pool.make(kF32, {4, kLogCols, 4, 8 + 4 + 2});
  g.args.num_accepted_tokens = g.pool.ints(kI32, {2}, {3, 1});
  GDN_ASSERT_VALID(g);
  expect_metadata_ok(g);
  g.args.has_initial_state.device = Device::kCUDA;
  expect_metadata_error(g, {"gated_delta_rule: check_metadata reads has_initial_state on the host", "must be on cpu"});
}

TEST(CheckMetadata, StridedIndexTensorsAreReadByStride) {
  ConvFwdCase c;
  // Slots in every other element of a longer buffer: [0, x, 3, x, 9, x] read as [0, 3, 9].
  TensorView wide = c.pool.ints(kI32, {6}, {0, 100, 3, 100, 9, 100});
  wide.shape[0] = 3;
  wide.stride[0] = 2;
  c.args.state_indices = wide;
  GDN_ASSERT_VALID(c);
  expect_metadata_error(c, {"state_indices[2] = 9 is outside [0, 5)"});
}

// Check 5: a slot one sequence writes must not be read or written by another sequence of the call
// (their updates would race on both backends); slots only read by several sequences, zero-length
// sequences (outside the deferred mode) and padding share freely.
TEST(CheckMetadata, SlotWrittenByTwoSequences) {
  GdrCase c;
  c.args.state_indices = c.pool.ints(kI32, {2}, {1, 1});
  expect_metadata_error(c, {"state_indices[0] = 1, which sequence 0 writes, is also written by sequence 1",
                            "must not share a slot one of them writes"});
  c.args.query_start_loc = c.pool.ints(kI32, {3}, {0, 5, 5});  // sequence 1 has no tokens: writes nothing
  expect_metadata_ok(c);
  c.args.state_indices = c.pool.ints(kI32, {2}, {-1, -1});  // padding
  expect_metadata_ok(c);
}

TEST(CheckMetadata, VerifySlotReadByOneAndWrittenByAnother) {
  GdrCase c;
  c.verify();  // sequence 0: T = 3 reads column 1 (slot 1), writes slots 0, 1, 2
  c.args.state_indices = c.pool.ints(kI32, {2, 3}, {0, 1, 2, 3, 2, -1});
  c.args.num_accepted_tokens = c.pool.ints(kI32, {2}, {2, 2});  // sequence 1 reads column 1: slot 2
  expect_metadata_error(c, {"state_indices[0, 2] = 2, which sequence 0 writes, is also read by sequence 1",
                            "(state_indices[1, 1])"});
  // Both read slot 1 and neither writes it (T = 1 writes column 0 only): fine.
  c.args.query_start_loc = c.pool.ints(kI32, {3}, {0, 1, 2});
  c.args.state_indices = c.pool.ints(kI32, {2, 3}, {0, 1, -1, 2, 1, -1});
  expect_metadata_ok(c);
}

TEST(CheckMetadata, SlotSharedAcrossTheGroupsOfGdnAttention) {
  AttentionCase c;
  c.args.non_spec_state_indices_tensor = c.pool.ints(kI32, {2}, {0, 2});  // the verify sequence's column 0
  expect_metadata_error(c, {"non_spec_state_indices_tensor[1] = 2, which sequence 1 writes, is also read by "
                            "sequence 0 (spec_state_indices_tensor[0, 0])"});
}

TEST(CheckMetadata, DeferredZeroLengthSequencesWriteTheirSlot) {
  GdrCase c;
  c.args.state_indices = c.pool.ints(kI32, {2}, {1, 1});
  c.args.num_accepted_tokens = c.pool.ints(kI32, {2}, {0, 0});
  c.args.verify_log = c.pool.make(kF32, {4, 2, 4, 8 + 4 + 2});
  c.args.verify_log_out = c.pool.make(kF32, {4, 2, 4, 8 + 4 + 2});
  c.args.query_start_loc = c.pool.ints(kI32, {3}, {0, 5, 5});  // commits its replay: a write
  expect_metadata_error(c, {"state_indices[0] = 1, which sequence 0 writes, is also written by sequence 1"});
}

}  // namespace
}  // namespace gdn_test
