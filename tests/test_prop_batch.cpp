// Property 4: a mixed batch gives the same results as the same sequences in separate calls, for
// gdn_attention and for each primitive (conv fwd, conv decode, conv verify rolling / per-token,
// recurrent non-spec / verify, chunked).
//
// Tolerances: on the CPU every sequence is computed by the same float32 loops whatever else is in
// the batch, so outputs and pools are compared bit for bit (docs/contract.md §6 asks identical inputs to
// give identical bytes; the CPU oracle keeps that per sequence). On CUDA a kernel may pick other
// tiles or split points for another batch shape, which reorders float32 sums: outputs and SSM
// states within rel L2 1e-5 (float32 storage) / 1e-2 (bf16); conv states and z are copies: bit-exact.
#include "prop_attention.h"

namespace gdn::prop {
namespace {

struct BatchParam {
  Backend backend;
  DType act;
  DType state;
};

void PrintTo(const BatchParam& p, std::ostream* os) {
  *os << capture::backend_name(p.backend) << " act=" << dtype_short(p.act) << " state=" << dtype_short(p.state);
}

std::string param_name(const ::testing::TestParamInfo<BatchParam>& info) {
  return std::string(capture::backend_name(info.param.backend)) + "_act" + dtype_short(info.param.act) + "_state" +
         dtype_short(info.param.state);
}

class PropBatch : public ::testing::TestWithParam<BatchParam> {};

enum class Prim { kConvFwd, kConvDecode, kConvRolling, kConvPerToken, kRecurrent, kRecurrentVerify, kChunked };
const char* prim_name(Prim k) {
  switch (k) {
    case Prim::kConvFwd: return "causal_conv1d_fwd";
    case Prim::kConvDecode: return "causal_conv1d_update(decode)";
    case Prim::kConvRolling: return "causal_conv1d_update(verify, rolling)";
    case Prim::kConvPerToken: return "causal_conv1d_update(verify, per_token)";
    case Prim::kRecurrent: return "gated_delta_rule_recurrent(non-spec)";
    case Prim::kRecurrentVerify: return "gated_delta_rule_recurrent(verify)";
    case Prim::kChunked: return "gated_delta_rule_chunked";
  }
  return "?";
}
bool is_conv(Prim k) { return k == Prim::kConvFwd || k == Prim::kConvDecode || k == Prim::kConvRolling || k == Prim::kConvPerToken; }
bool is_verify(Prim k) { return k == Prim::kConvRolling || k == Prim::kConvPerToken || k == Prim::kRecurrentVerify; }

struct PrimCase {
  Prim kind;
  int64_t cols = 1, D = 36, W = 4, H = 2, HV = 6, K = 8, V = 12, num_slots = 0;
  StateLayout layout = StateLayout::kVK;
  std::vector<int64_t> lens, nacc;
  std::vector<std::vector<int64_t>> slots;
  std::vector<bool> init;
  Buf x, weight, bias;
  GdrIn g;
};

PrimCase make_case(Prim kind, DType act, Rng& r) {
  PrimCase c;
  c.kind = kind;
  c.layout = r.coin() ? StateLayout::kVK : StateLayout::kKV;
  c.cols = is_verify(kind) ? 4 : 1;
  std::vector<int64_t> lens;
  if (kind == Prim::kConvDecode) lens = {1, 1, 1, 1, 1, 1};
  else if (is_verify(kind)) lens = {4, 1, 3, 2, 4, 1};
  else lens = {17, 1, 0, 5, 66, 2};
  const int64_t n = static_cast<int64_t>(lens.size());
  c.num_slots = n * c.cols + 2;
  std::vector<int64_t> perm(c.num_slots);
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t i = c.num_slots - 1; i > 0; --i) std::swap(perm[i], perm[r.randint(0, i)]);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> s(c.cols);
    for (int64_t j = 0; j < c.cols; ++j) s[j] = perm[i * c.cols + j];
    if (i == 3) s[0] = -1;  // padding sequence
    c.slots.push_back(s);
    c.nacc.push_back(r.randint(1, c.cols));
    c.init.push_back(i % 3 != 1);
  }
  c.lens = lens;
  int64_t total = std::accumulate(lens.begin(), lens.end(), int64_t{0});
  c.x = Buf(act, {total, c.D});
  fill_normal(c.x, r, 1.0);
  c.weight = Buf(act, {c.D, c.W});
  fill_normal(c.weight, r, 0.5);
  c.bias = Buf(act, {c.D});
  fill_normal(c.bias, r, 0.2);
  c.g = make_gdr_in(r, total, c.H, c.HV, c.K, c.V, act, DType::kFloat32);
  return c;
}

// Runs the sequences `which` of c in one call (inputs sliced out of c), writing their outputs,
// concatenated in that order, to *out.
Status run_subset(Backend be, PrimCase& c, const std::vector<int64_t>& which, Buf& pool, Buf* out) {
  std::vector<int64_t> qsl_all = prefix_sum(c.lens), lens, rows, nacc;
  std::vector<std::vector<int64_t>> slots;
  std::vector<bool> init;
  for (int64_t i : which) {
    lens.push_back(c.lens[i]);
    for (int64_t t = qsl_all[i]; t < qsl_all[i + 1]; ++t) rows.push_back(t);
    slots.push_back(c.slots[i]);
    nacc.push_back(c.nacc[i]);
    init.push_back(c.init[i]);
  }
  const int64_t T = static_cast<int64_t>(rows.size());
  Buf qsl = index_buf(prefix_sum(lens));
  Buf sl = is_verify(c.kind) ? index_buf2(slots, c.cols) : index_buf([&] {
    std::vector<int64_t> v;
    for (auto& s : slots) v.push_back(s[0]);
    return v;
  }());
  Buf na = index_buf(nacc), hi = bool_buf(init);
  if (is_conv(c.kind)) {
    Buf x(c.x.dtype(), {T, c.D});
    for (int64_t j = 0; j < T; ++j) copy_row(x, j, c.x, rows[j]);
    *out = Buf(c.x.dtype(), {T, c.D});
    switch (c.kind) {
      case Prim::kConvFwd: return run_conv_fwd(be, x, c.weight, &c.bias, pool, qsl, sl, &hi, *out);
      case Prim::kConvDecode:
        return run_conv_update(be, x, c.weight, &c.bias, pool, qsl, sl, nullptr, *out, SpecConvLayout::kRolling);
      case Prim::kConvRolling:
        return run_conv_update(be, x, c.weight, &c.bias, pool, qsl, sl, &na, *out, SpecConvLayout::kRolling);
      default:
        return run_conv_update(be, x, c.weight, &c.bias, pool, qsl, sl, &na, *out, SpecConvLayout::kPerToken);
    }
  }
  GdrIn g = slice_tokens(c.g, rows);
  *out = Buf(c.g.q.dtype(), {T, c.HV, c.V});
  if (c.kind == Prim::kRecurrentVerify) return run_gdr(be, false, g, pool, c.layout, qsl, sl, &na, nullptr, *out);
  return run_gdr(be, c.kind == Prim::kChunked, g, pool, c.layout, qsl, sl, nullptr, &hi, *out);
}

std::string case_desc(const PrimCase& c) {
  std::ostringstream s;
  s << prim_name(c.kind) << " layout=" << layout_name(c.layout) << " cols=" << c.cols << " D=" << c.D << " W=" << c.W
    << " H=" << c.H << " HV=" << c.HV << " K=" << c.K << " V=" << c.V << " sequences:";
  for (size_t i = 0; i < c.lens.size(); ++i) {
    s << " (len " << c.lens[i] << " slots";
    for (int64_t v : c.slots[i]) s << " " << v;
    s << " acc " << c.nacc[i] << " init " << c.init[i] << ")";
  }
  return s.str();
}

TEST_P(PropBatch, PrimitivesMixedBatchEqualsSeparateCalls) {
  const BatchParam& prm = GetParam();
  PROP_SKIP_IF_UNAVAILABLE(prm.backend);
  const bool exact = prm.backend == Backend::kCPU;
  uint64_t seed = 300;
  for (Prim kind : {Prim::kConvFwd, Prim::kConvDecode, Prim::kConvRolling, Prim::kConvPerToken, Prim::kRecurrent,
                    Prim::kRecurrentVerify, Prim::kChunked}) {
    Rng r(seed++);
    PrimCase c = make_case(kind, prm.act, r);
    SCOPED_TRACE(::testing::Message() << "backend=" << capture::backend_name(prm.backend) << " act="
                                      << dtype_short(prm.act) << " state=" << dtype_short(prm.state) << " "
                                      << case_desc(c));
    Buf pool0;
    if (is_conv(kind)) {
      int64_t rows = kind == Prim::kConvRolling ? c.W - 2 + c.cols + 1 : c.W;
      pool0 = Buf(prm.act, {c.num_slots, rows, c.D}, rows * c.D + 4);
    } else {
      pool0 = make_ssm_pool(prm.state, c.num_slots, c.HV, c.K, c.V, c.layout, 3);
    }
    fill_normal(pool0, r, 0.5);
    std::vector<int64_t> all(c.lens.size());
    std::iota(all.begin(), all.end(), 0);
    Buf pool_batch = pool0, pool_sep = pool0, out_batch;
    PROP_ASSERT_OK(run_subset(prm.backend, c, all, pool_batch, &out_batch));
    Buf out_sep(out_batch.dtype(), out_batch.shape());
    int64_t row = out_batch.row_elems(), at = 0;
    for (int64_t i : all) {
      Buf o;
      PROP_ASSERT_OK(run_subset(prm.backend, c, {i}, pool_sep, &o));
      copy_elems(out_sep, at * row, o, 0, o.numel());
      at += o.rows();
    }
    const double tol_o = tol_for(prm.act);
    if (exact) {
      EXPECT_EQ(byte_diff(out_batch, out_sep), "") << "outputs: batch vs separate";
    } else {
      EXPECT_LE(rel_l2(out_batch, out_sep), tol_o) << "outputs: batch vs separate";
    }
    if (exact || is_conv(kind)) {
      EXPECT_EQ(byte_diff(pool_batch, pool_sep), "") << "pool: batch vs separate";
    } else {
      EXPECT_LE(rel_l2(pool_batch, pool_sep), tol_for(prm.state)) << "pool: batch vs separate";
    }
    if (HasFailure()) return;
  }
}

TEST_P(PropBatch, AttentionMixedBatchEqualsSeparateCalls) {
  const BatchParam& prm = GetParam();
  PROP_SKIP_IF_UNAVAILABLE(prm.backend);
  const bool exact = prm.backend == Backend::kCPU;
  for (int variant = 0; variant < 3; ++variant) {
    Rng r(400 + variant);
    AttnProblem p;
    p.act = prm.act;
    p.ssm_dtype = prm.state;
    p.cols = variant == 2 ? 1 : 3;
    p.reorder = variant == 1;
    MixOptions m;
    m.permute_rows = variant == 1;
    m.trailing_empty = variant == 2;
    make_mixed_batch(p, r, m);
    fill_attention_data(p, r);
    SCOPED_TRACE(::testing::Message() << "backend=" << capture::backend_name(prm.backend) << " variant=" << variant
                                      << " " << describe(p));
    AttnProblem batch = p;
    Buf core_b, z_b;
    make_outputs(p, &core_b, &z_b, 0);
    PROP_ASSERT_OK(run_attention(prm.backend, batch, core_b, z_b));

    Buf core_s, z_s;
    make_outputs(p, &core_s, &z_s, 0);
    Buf conv_pool = p.conv_pool, ssm_pool = p.ssm_pool;
    const int64_t qw = p.qkvz_width(), bw = 2 * p.HV, row = p.HV * p.V;
    for (const AttnSeq& s : p.seqs) {
      const int64_t len = static_cast<int64_t>(s.rows.size());
      if (len == 0) continue;
      AttnProblem one = p;
      one.seqs = {s};
      for (int64_t j = 0; j < len; ++j) one.seqs[0].rows[j] = j;
      one.rows_alloc = one.num_actual = len;
      one.identity_ns = one.identity_spec = true;
      one.qkvz = Buf(p.act, {len, qw});
      one.ba = Buf(p.act, {len, bw});
      for (int64_t j = 0; j < len; ++j) {
        copy_row(one.qkvz, j, p.qkvz, s.rows[j]);
        copy_row(one.ba, j, p.ba, s.rows[j]);
      }
      one.conv_pool = conv_pool;
      one.ssm_pool = ssm_pool;
      build_meta(one);
      Buf core1, z1;
      make_outputs(one, &core1, &z1, 1);
      PROP_ASSERT_OK(run_attention(prm.backend, one, core1, z1));
      conv_pool = one.conv_pool;
      ssm_pool = one.ssm_pool;
      for (int64_t j = 0; j < len; ++j) {
        copy_elems(core_s, s.rows[j] * row, core1, j * row, row);
        copy_elems(z_s, s.rows[j] * row, z1, j * row, row);
      }
    }
    if (exact) {
      EXPECT_EQ(byte_diff(core_b, core_s), "") << "core_attn_out: batch vs separate";
      EXPECT_EQ(byte_diff(batch.ssm_pool, ssm_pool), "") << "ssm_state: batch vs separate";
    } else {
      EXPECT_LE(rel_l2(core_b, core_s, {{0, p.num_actual * row}}, {{0, p.num_actual * row}}), tol_for(p.act))
          << "core_attn_out: batch vs separate";
      EXPECT_LE(rel_l2(batch.ssm_pool, ssm_pool), tol_for(p.ssm_dtype)) << "ssm_state: batch vs separate";
    }
    EXPECT_EQ(byte_diff(z_b, z_s), "") << "z: batch vs separate";
    EXPECT_EQ(byte_diff(batch.conv_pool, conv_pool), "") << "conv_state: batch vs separate";
    if (HasFailure()) return;
  }
}

std::vector<BatchParam> all_params() {
  std::vector<BatchParam> v;
  for (Backend b : capture::test_backends(capture::Ops::kRecurrent))
    for (auto dt : {std::pair<DType, DType>{DType::kFloat32, DType::kFloat32},
                    std::pair<DType, DType>{DType::kBFloat16, DType::kFloat32},
                    std::pair<DType, DType>{DType::kBFloat16, DType::kBFloat16}})
      v.push_back({b, dt.first, dt.second});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Prop, PropBatch, ::testing::ValuesIn(all_params()), param_name);

}  // namespace
}  // namespace gdn::prop
