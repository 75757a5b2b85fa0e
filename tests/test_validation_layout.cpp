// Memory layouts the ops refuse, with a message naming the tensor, the op entry writing nothing:
// tensors an op writes that overlap one another (docs/contract.md §5: an output inside a pool, two
// outputs in one buffer; logs: test_prop_deferred.cpp; y against x, where x itself is the in-place
// convolution: test_prop_inplace.cpp) or overlap an input the op only reads (an output a row
// ahead of the values it is computed from, metadata inside a pool), and a strided conv bias (§2: the conv kernels load it as
// vectors; every other tensor may be strided in dim 0).
#include "validation_fixtures.h"

namespace gdn_test {
namespace {

using gdn::TensorView;

// A view of `shape` over the memory of t, `offset` elements in.
TensorView inside(const TensorView& t, int64_t offset, std::initializer_list<int64_t> shape) {
  return gdn::make_view(static_cast<char*>(t.data) + offset * static_cast<int64_t>(gdn::dtype_size(t.dtype)), t.dtype,
                        shape);
}

TEST(ValidateLayout, ConvOutputInsideTheConvPool) {
  ConvFwdCase f;
  GDN_ASSERT_VALID(f);
  f.args.y = inside(f.args.conv_state, 40, {6, 8});
  expect_rejected(f, {"y", "does not overlap conv_state"});
  ConvUpdateCase u;
  GDN_ASSERT_VALID(u);
  u.args.y = inside(u.args.conv_state, 8, {5, 8});
  expect_rejected(u, {"y", "does not overlap conv_state"});
}

TEST(ValidateLayout, RecurrenceOutputInsideTheStatePool) {
  for (bool chunked : {false, true}) {
    GdrCase c(chunked);
    GDN_ASSERT_VALID(c);
    c.args.o = inside(c.args.ssm_state, 100, {5, 4, 4});
    expect_rejected(c, {"o", "does not overlap ssm_state"});
    GdrCase d(chunked);  // one buffer: the last element of o is the first of the pool
    const TensorView both = d.pool.make(kF32, {5 * 4 * 4 + 4 * 4 * 4 * 8 - 1});
    d.args.o = inside(both, 0, {5, 4, 4});
    d.args.ssm_state = inside(both, 5 * 4 * 4 - 1, {4, 4, 4, 8});
    expect_rejected(d, {"o", "does not overlap ssm_state"});
  }
}

TEST(ValidateLayout, AttentionOutputsAndPools) {
  {
    AttentionCase c;
    GDN_ASSERT_VALID(c);
    c.args.z = inside(c.args.core_attn_out, 16, {8, 4, 4});
    expect_rejected(c, {"z", "does not overlap core_attn_out"});
  }
  {
    AttentionCase c;
    c.args.core_attn_out = inside(c.args.conv_state, 0, {8, 4, 4});
    expect_rejected(c, {"conv_state", "does not overlap core_attn_out"});
  }
  {
    AttentionCase c;
    c.args.z = inside(c.args.ssm_state, 64, {8, 4, 4});
    expect_rejected(c, {"ssm_state", "does not overlap z"});
  }
  {
    AttentionCase c;  // the two pools in one buffer
    c.args.ssm_state = inside(c.args.conv_state, 1000, {6, 4, 4, 8});
    expect_rejected(c, {"ssm_state", "does not overlap conv_state"});
  }
}

TEST(ValidateLayout, WrittenTensorsOverlappingInputs) {
  for (bool chunked : {false, true}) {
    GdrCase c(chunked);  // o one token row ahead of v in one buffer: o[t] would overwrite v[t + 1]
    const TensorView both = c.pool.make(kF32, {6 * 4 * 4});
    c.args.v = inside(both, 0, {5, 4, 4});
    c.args.o = inside(both, 16, {5, 4, 4});
    expect_rejected(c, {"o", "does not overlap v (an input the op reads)"});
    GdrCase d(chunked);  // the slots inside the state pool
    d.args.state_indices = gdn::make_view(d.args.ssm_state.data, kI32, {2});
    expect_rejected(d, {"ssm_state", "does not overlap state_indices"});
  }
  ConvFwdCase f;  // the pool over the input rows
  const TensorView both = f.pool.make(kF32, {5 * 3 * 8});
  f.args.conv_state = inside(both, 0, {5, 3, 8});
  f.args.x = inside(both, 8, {6, 8});
  expect_rejected(f, {"conv_state", "does not overlap x"});
  ConvUpdateCase u;  // y over the weights
  const TensorView wy = u.pool.make(kF32, {8 * 3 + 5 * 8});
  u.args.weight = inside(wy, 0, {8, 3});
  u.args.y = inside(wy, 16, {5, 8});
  expect_rejected(u, {"y", "does not overlap weight"});
  AttentionCase a;  // the output over the projections
  const TensorView pz = a.pool.make(kF32, {8 * 64 + 64});
  a.args.projected_states_qkvz = inside(pz, 0, {8, 64});
  a.args.core_attn_out = inside(pz, 64 * 8 - 16, {8, 4, 4});
  expect_rejected(a, {"core_attn_out", "does not overlap projected_states_qkvz"});
}

// Column slices of one buffer (rows at the same pitch) that share no element are apart; slices
// that share some are not. (The byte spans of such slices interleave: the check is by rows.)
TEST(ValidateLayout, ColumnSlicesOfOneBuffer) {
  auto cols = [](const TensorView& buf, int64_t first, std::initializer_list<int64_t> shape) {
    TensorView t = inside(buf, first, shape);
    t.stride[0] = buf.stride[0];
    return t;
  };
  ConvFwdCase f;  // x = columns 0..7, y = columns 8..15 of one [6, 16] buffer
  const TensorView xy = f.pool.make(kF32, {6, 16});
  f.args.x = cols(xy, 0, {6, 8});
  f.args.y = cols(xy, 8, {6, 8});
  GDN_ASSERT_VALID(f);
  f.args.y = cols(xy, 4, {6, 8});  // columns 4..11: half of each row is x's
  expect_rejected(f, {"y must be x itself", "or memory that does not overlap x"});
  AttentionCase a;  // core_attn_out and z as the two halves of each row of one buffer
  const TensorView oz = a.pool.make(kF32, {8, 2 * 4 * 4});
  a.args.core_attn_out = cols(oz, 0, {8, 4, 4});
  a.args.z = cols(oz, 16, {8, 4, 4});
  GDN_ASSERT_VALID(a);
  a.args.z = cols(oz, 12, {8, 4, 4});
  expect_rejected(a, {"z", "does not overlap core_attn_out"});
}

// An empty verify group keeps no rolling line: pools of W-1 rows are enough for it.
TEST(ValidateLayout, EmptyVerifyGroupNeedsNoRollingRows) {
  ConvUpdateCase u;  // W = 3, verify with cols = 3, rolling: W-2+cols = 4 rows for a non-empty group
  u.args.conv_state = u.pool.make(kF32, {6, 2, 8});
  u.args.x = u.pool.make(kF32, {0, 8});
  u.args.y = u.pool.make(kF32, {0, 8});
  u.args.query_start_loc = u.pool.ints(kI32, {1}, {0});
  u.args.state_indices = u.pool.ints(kI32, {0, 3}, {});
  u.args.num_accepted_tokens = u.pool.ints(kI32, {0}, {});
  GDN_ASSERT_VALID(u);
  u.args.x = u.pool.make(kF32, {5, 8});
  u.args.y = u.pool.make(kF32, {5, 8});
  u.args.query_start_loc = u.pool.ints(kI32, {3}, {0, 3, 5});
  u.args.state_indices = u.pool.ints(kI32, {2, 3}, {0, 1, 2, 3, 4, 5});
  u.args.num_accepted_tokens = u.pool.ints(kI32, {2}, {1, 2});
  expect_rejected(u, {"conv_state", "W-2+cols (rolling verify layout) = 4"});
}

TEST(ValidateLayout, StridedConvBias) {
  ConvFwdCase f;
  TensorView wide = f.pool.make(kF32, {16});  // every other element: [8] with stride 2
  wide.shape[0] = 8;
  wide.stride[0] = 2;
  f.args.bias = wide;
  expect_rejected(f, {"bias must be contiguous", "stride 1"});
  ConvUpdateCase u;
  u.args.bias = wide;
  expect_rejected(u, {"bias must be contiguous"});
  AttentionCase c;
  TensorView wide48 = c.pool.make(kF32, {96});
  wide48.shape[0] = 48;
  wide48.stride[0] = 2;
  c.args.conv_bias = wide48;
  expect_rejected(c, {"conv_bias must be contiguous"});
}

TEST(ValidateLayout, NeighboursInOneBufferAreFine) {
  // Adjacent, not overlapping: o right after the pool's last element.
  GdrCase c;
  const TensorView both = c.pool.make(kF32, {4 * 4 * 4 * 8 + 5 * 4 * 4});
  c.args.ssm_state = inside(both, 0, {4, 4, 4, 8});
  c.args.o = inside(both, 4 * 4 * 4 * 8, {5, 4, 4});
  GDN_ASSERT_VALID(c);
}

}  // namespace
}  // namespace gdn_test
