// In-place causal conv: y = x itself (the documented `out=x` of the torch ops, what vLLM's callers
// do) gives the same bytes as a separate output buffer, for the output rows and the conv pool, on
// every backend: causal_conv1d_fwd (varlen prefill with and without initial state), and
// causal_conv1d_update for decode, verify rolling and verify per-token. Exact: both runs compute
// each output from the same inputs with the same operations, so any difference is a read of an
// already-overwritten row. Rows no sequence covers keep their inputs (y is x). A y that overlaps x
// without being x is rejected before anything is written.
#include "prop_ops.h"

namespace gdn::prop {
namespace {

enum class ConvKind { kFwd, kDecode, kRolling, kPerToken };
const char* kind_name(ConvKind k) {
  switch (k) {
    case ConvKind::kFwd: return "fwd";
    case ConvKind::kDecode: return "decode";
    case ConvKind::kRolling: return "rolling";
    case ConvKind::kPerToken: return "per_token";
  }
  return "?";
}

struct InplaceParam {
  Backend backend;
  DType act;
  ConvKind kind;
};
void PrintTo(const InplaceParam& p, std::ostream* os) {
  *os << capture::backend_name(p.backend) << " act=" << dtype_short(p.act) << " " << kind_name(p.kind);
}
std::string param_name(const ::testing::TestParamInfo<InplaceParam>& i) {
  return std::string(capture::backend_name(i.param.backend)) + "_act" + dtype_short(i.param.act) + "_" +
         kind_name(i.param.kind);
}

class PropInplace : public ::testing::TestWithParam<InplaceParam> {};

// A batch for one conv kind: sequences of several lengths (verify: ragged, up to cols), one padding
// sequence, graph-padded rows at the end of x.
struct ConvBatch {
  int64_t D = 40, W = 4, cols = 1, T = 0;
  std::vector<int64_t> lens, nacc;
  std::vector<std::vector<int64_t>> slots;
  std::vector<bool> init;
  Buf x, weight, bias, pool;
};

ConvBatch make_batch(ConvKind kind, DType act, int64_t W, Rng& r) {
  ConvBatch b;
  b.W = W;
  const bool verify = kind == ConvKind::kRolling || kind == ConvKind::kPerToken;
  b.cols = verify ? 4 : 1;
  if (kind == ConvKind::kFwd) b.lens = {1, 9, W - 1, W, 2, 0, 13};
  else if (kind == ConvKind::kDecode) b.lens = {1, 1, 1, 1};
  else b.lens = {4, 1, 3, 2, 4};
  const int64_t n = static_cast<int64_t>(b.lens.size());
  const int64_t num_slots = n * b.cols + 1;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> s(b.cols);
    for (int64_t j = 0; j < b.cols; ++j) s[j] = i * b.cols + j;
    if (i == 2) s[0] = -1;  // padding
    b.slots.push_back(s);
    b.nacc.push_back(r.randint(1, b.cols));
    b.init.push_back(i % 3 != 1);
  }
  for (int64_t l : b.lens) b.T += l;
  b.x = Buf(act, {b.T + 3, b.D});
  fill_normal(b.x, r, 1.0);
  b.weight = Buf(act, {b.D, W});
  fill_normal(b.weight, r, 0.5);
  b.bias = Buf(act, {b.D});
  fill_normal(b.bias, r, 0.2);
  const int64_t rows = verify && kind == ConvKind::kRolling ? W - 2 + b.cols : W - 1;
  b.pool = Buf(act, {num_slots, rows, b.D});
  fill_normal(b.pool, r, 1.0);
  return b;
}

Status run(Backend be, ConvKind kind, ConvBatch& b, Buf& x, Buf& pool, Buf& y) {
  Buf qsl = index_buf(prefix_sum(b.lens));
  std::vector<int64_t> s0;
  for (const auto& s : b.slots) s0.push_back(s[0]);
  Buf sl1 = index_buf(s0), sl2 = index_buf2(b.slots, b.cols), na = index_buf(b.nacc), hi = bool_buf(b.init);
  switch (kind) {
    case ConvKind::kFwd: return run_conv_fwd(be, x, b.weight, &b.bias, pool, qsl, sl1, &hi, y);
    case ConvKind::kDecode:
      return run_conv_update(be, x, b.weight, &b.bias, pool, qsl, sl1, nullptr, y, SpecConvLayout::kRolling);
    case ConvKind::kRolling:
      return run_conv_update(be, x, b.weight, &b.bias, pool, qsl, sl2, &na, y, SpecConvLayout::kRolling);
    case ConvKind::kPerToken:
      return run_conv_update(be, x, b.weight, &b.bias, pool, qsl, sl2, &na, y, SpecConvLayout::kPerToken);
  }
  return Status::Error("unknown conv kind");
}

TEST_P(PropInplace, InPlaceEqualsSeparateOutput) {
  const InplaceParam prm = GetParam();
  PROP_SKIP_IF_UNAVAILABLE(prm.backend);
  for (int64_t W : {2, 3, 4, 5}) {
    Rng r(700 + W * 10 + static_cast<int>(prm.kind));
    ConvBatch b = make_batch(prm.kind, prm.act, W, r);
    SCOPED_TRACE(std::string("W=") + std::to_string(W) + " T=" + std::to_string(b.T));
    // Reference: a separate output buffer.
    Buf x_ref = b.x, pool_ref = b.pool, y_ref(prm.act, b.x.shape());
    ASSERT_TRUE(run(prm.backend, prm.kind, b, x_ref, pool_ref, y_ref).ok());
    // In place: y is x.
    Buf x_in = b.x, pool_in = b.pool;
    const Status s = run(prm.backend, prm.kind, b, x_in, pool_in, x_in);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(bit_diff(x_in, 0, y_ref, 0, b.T * b.D), "") << "output rows differ from the separate-buffer run";
    EXPECT_EQ(bit_diff(x_in, b.T * b.D, b.x, b.T * b.D, 3 * b.D), "") << "rows past the tokens changed";
    EXPECT_TRUE(pool_in.same_bytes(pool_ref)) << "conv pool differs: " << byte_diff(pool_in, pool_ref);
    EXPECT_TRUE(x_in.canaries_ok() && pool_in.canaries_ok());
  }
}

std::vector<InplaceParam> all_params() {
  std::vector<InplaceParam> v;
  for (Backend be : capture::test_backends(capture::Ops::kConv))
    for (DType act : {DType::kFloat32, DType::kBFloat16})
      for (ConvKind k : {ConvKind::kFwd, ConvKind::kDecode, ConvKind::kRolling, ConvKind::kPerToken})
        v.push_back({be, act, k});
  return v;
}
INSTANTIATE_TEST_SUITE_P(Prop, PropInplace, ::testing::ValuesIn(all_params()), param_name);

// The report's case: one sequence of 4 tokens, 8 channels, W = 4, identity activation, no initial
// state: y[t] = sum_j w[j] x[t - 3 + j], checked against that formula as well.
TEST(ConvInplace, ReportedCaseOnTheCpu) {
  Rng r(11);
  Buf x(DType::kFloat32, {4, 8}), w(DType::kFloat32, {8, 4}), pool(DType::kFloat32, {1, 3, 8});
  fill_normal(x, r, 1.0);
  fill_normal(w, r, 0.5);
  Buf qsl = index_buf({0, 4}), slots = index_buf({0}), init = bool_buf({false});
  Buf x_in = x, pool_in = pool;
  ASSERT_TRUE(run_conv_fwd(Backend::kCPU, x_in, w, nullptr, pool_in, qsl, slots, &init, x_in, Activation::kNone).ok());
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t c = 0; c < 8; ++c) {
      float acc = 0.f;
      for (int64_t j = 0; j < 4; ++j) {
        const int64_t src = t - 3 + j;
        if (src >= 0) acc += static_cast<float>(w.get(c * 4 + j)) * static_cast<float>(x.get(src * 8 + c));
      }
      EXPECT_EQ(x_in.get(t * 8 + c), acc) << "t=" << t << " c=" << c;
    }
  // The pool holds the last W-1 = 3 inputs (raw copies).
  EXPECT_EQ(bit_diff(pool_in, 0, x, 8, 24), "");
}

// y overlapping x but not x itself (a shifted row view) is rejected, and nothing is written.
TEST(ConvInplace, PartialOverlapIsRejected) {
  Rng r(12);
  Buf x(DType::kFloat32, {5, 8}), w(DType::kFloat32, {8, 4}), pool(DType::kFloat32, {1, 3, 8});
  fill_normal(x, r, 1.0);
  fill_normal(w, r, 0.5);
  fill_normal(pool, r, 1.0);
  const Buf x0 = x, pool0 = pool;
  Buf qsl = index_buf({0, 4}), slots = index_buf({0});
  CausalConv1dFwdArgs a;
  a.x = x.view();
  a.x.shape[0] = 4;
  a.y = a.x;
  a.y.data = x.data() + 8 * sizeof(float);  // rows 1..4 of the same buffer
  a.weight = w.view();
  a.conv_state = pool.view();
  a.query_start_loc = qsl.view();
  a.state_indices = slots.view();
  const Status s = causal_conv1d_fwd(a);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("y must be x itself"), std::string::npos) << s.message();
  EXPECT_TRUE(x.same_bytes(x0));
  EXPECT_TRUE(pool.same_bytes(pool0));
}

}  // namespace
}  // namespace gdn::prop
