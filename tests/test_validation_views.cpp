// Validation of the views themselves (docs/contract.md §5), whatever a caller puts in them: more dims
// than a view holds, sizes and strides past int64's byte counts, pointers off their element
// boundary, scales outside float's range. Each is refused with a message naming the argument, before
// anything is read or written; nothing crashes or reads past a view's shape array (the sanitizer
// build runs these too).
#include <cstdint>
#include <limits>

#include "validation_fixtures.h"

namespace gdn_test {
namespace {

using gdn::DType;
using gdn::TensorView;

constexpr int64_t kP62 = int64_t{1} << 62;

// The deferred-commit mode of GdrCase: one slot per sequence, replay counts, logs of 2 columns.
void deferred(GdrCase& c) {
  c.args.state_indices = c.pool.ints(kI32, {2}, {1, 2});
  c.args.num_accepted_tokens = c.pool.ints(kI32, {2}, {0, 0});
  c.args.verify_log = c.pool.make(kF32, {4, 2, 4, 8 + 4 + 2});
  c.args.verify_log_out = c.pool.make(kF32, {4, 2, 4, 8 + 4 + 2});
}

TEST(ValidateViews, DescribeStaysInsideTheShapeArray) {
  TensorView t = gdn::make_view(nullptr, DType::kFloat32, {2, 3});
  t.ndim = 1000;
  EXPECT_EQ(t.describe(), "float32 view with ndim 1000");
  const TensorView five = gdn::make_view(nullptr, DType::kFloat32, {2, 3, 4, 5, 6});  // writes 4 entries only
  EXPECT_EQ(five.describe(), "float32 view with ndim 5");
  EXPECT_EQ(five.stride[3], 1);
  EXPECT_EQ(five.stride[0], 60);
  t.ndim = 4;
  t.shape[0] = kP62;
  t.shape[1] = 8;
  t.shape[2] = t.shape[3] = 1;
  EXPECT_EQ(t.numel(), std::numeric_limits<int64_t>::max()) << "numel saturates instead of wrapping";
}

TEST(ValidateViews, OutputWithTooManyDimsInTheDeferredMode) {
  GdrCase c;
  deferred(c);
  GDN_ASSERT_VALID(c);
  c.args.o.ndim = 1000;  // checked against the logs for overlap before its own check
  expect_rejected(c, {"o must be", "view with ndim 1000"});
}

TEST(ValidateViews, ALogWithoutDtBiasWithTooManyDims) {
  GdrCase c;
  GDN_ASSERT_VALID(c);
  c.args.A_log.ndim = 100000;
  c.args.dt_bias = TensorView{};
  expect_rejected(c, {"A_log and dt_bias must be given together", "A_log float32 view with ndim 100000",
                      "dt_bias absent"});
}

TEST(ValidateViews, ElementCountPastInt64) {
  GdrCase c;
  GDN_ASSERT_VALID(c);
  c.args.ssm_state.shape[0] = kP62;  // [2^62, 4, 4, 8] elements wrap to 0 in int64
  c.args.ssm_state.stride[0] = 128;
  c.args.ssm_state.data = nullptr;
  expect_rejected(c, {"ssm_state", "spans more bytes than int64 counts"});
}

TEST(ValidateViews, RowPitchPastInt64) {
  GdrCase c;
  GDN_ASSERT_VALID(c);
  c.args.ssm_state.stride[0] = kP62;  // 4 slots 2^62 elements apart
  expect_rejected(c, {"ssm_state", "spans more bytes than int64 counts", "strides [4611686018427387904"});
}

TEST(ValidateViews, RowBytesPastInt64InTheDeferredMode) {
  GdrCase c;
  deferred(c);
  GDN_ASSERT_VALID(c);
  for (TensorView* t : {&c.args.q, &c.args.k, &c.args.v, &c.args.a, &c.args.b, &c.args.o}) t->shape[0] = 0;
  c.args.q.shape[2] = c.args.k.shape[2] = c.args.v.shape[2] = c.args.o.shape[2] = kP62;
  c.args.ssm_state.shape[0] = 0;
  c.args.ssm_state.shape[2] = c.args.ssm_state.shape[3] = kP62;
  expect_rejected(c, {"spans more bytes than int64 counts"});
}

TEST(ValidateViews, RowsThatOverlapNameDimZero) {
  ConvFwdCase c;
  GDN_ASSERT_VALID(c);
  c.args.y.stride[0] = 0;
  expect_rejected(c, {"y must have a dim-0 stride of at least its row size (8 elements", "strides [0, 1]"});
}

TEST(ValidateViews, PointerOffItsElementBoundary) {
  {
    GdrCase c;
    GDN_ASSERT_VALID(c);
    c.args.q.data = static_cast<char*>(c.args.q.data) + 1;
    expect_rejected(c, {"q must be aligned to its element size (4 bytes)", "1 bytes past a boundary"});
  }
  {
    GdrCase c;
    GDN_ASSERT_VALID(c);
    c.args.query_start_loc.data = static_cast<char*>(c.args.query_start_loc.data) + 2;
    expect_rejected(c, {"query_start_loc must be aligned to its element size (4 bytes)"});
  }
  {
    AttentionCase c;
    GDN_ASSERT_VALID(c);
    c.args.projected_states_qkvz.data = static_cast<char*>(c.args.projected_states_qkvz.data) + 2;
    expect_rejected(c, {"projected_states_qkvz must be aligned to its element size (4 bytes)"});
  }
}

TEST(ValidateViews, ScaleOutsideFloat) {
  for (double s : {1e300, 3.5e38, 1e-50}) {
    GdrCase c;
    GDN_ASSERT_VALID(c);
    c.args.scale = s;
    expect_rejected(c, {"scale must be finite and > 0 in float32", "got "});
  }
  GdrCase c;
  c.args.scale = 3.0e38;  // below float's largest
  GDN_ASSERT_VALID(c);
}

// check_metadata reads has_initial_state as the backends do: a byte, nonzero true (a uint8 tensor
// reinterpreted as bool may hold 2). A byte of 2 makes its sequence start from its slot's state,
// whose replay count must then lie in [0, log_cols].
TEST(ValidateViews, CheckMetadataReadsHasInitialStateAsAByte) {
  GdrCase c;
  deferred(c);
  c.args.has_initial_state = c.pool.ints(DType::kBool, {2}, {1, 1});
  c.args.num_accepted_tokens = c.pool.ints(kI32, {2}, {0, 5});
  const gdn::Status with_one = c.check();
  ASSERT_FALSE(with_one.ok());
  static_cast<uint8_t*>(c.args.has_initial_state.data)[1] = 2;
  const gdn::Status with_two = c.check();
  ASSERT_FALSE(with_two.ok()) << "a byte of 2 read as false";
  EXPECT_EQ(with_two.message(), with_one.message());
  static_cast<uint8_t*>(c.args.has_initial_state.data)[1] = 0;
  EXPECT_TRUE(c.check().ok()) << c.check().message();
}

}  // namespace
}  // namespace gdn_test
