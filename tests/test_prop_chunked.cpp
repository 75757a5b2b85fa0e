// Property 2: gated_delta_rule_chunked == gated_delta_rule_recurrent.
//
// Varlen batches mixing lengths 1, 63, 64, 65, 129 and 1000 (chunk 64 and its neighbours, one long
// sequence), plus an empty sequence and a padding sequence (slot -1); with and without initial
// state (per sequence, and has_initial_state absent); K != V both ways; head ratio 1, 2, 3; "vk"
// and "kv" pools with a padded slot stride.
//
// Tolerance principle: both ops are float32 evaluations of the same recurrence; the chunked one
// reassociates it (WY/UT form with a triangular solve per chunk of 64). Per chunk the rounding error
// is about 64 * 2^-24 ~ 4e-6 relative, and it is not amplified from chunk to chunk because the
// state transition exp(g) (I - beta k k^T) has norm <= 1 (beta in (0,1), k unit-norm). Rel L2 1e-4
// (per sequence, outputs and final states) leaves a margin of about 20x at length 1000. bf16/fp16
// storage of outputs or states adds one rounding (2^-9 relative): rel L2 1e-2.
//
// PropChunkedEdges.ExtremeDecaysOnTheCpu (and PropChunkedEdgesCuda.ExtremeDecays, the CUDA chunk
// kernel's forms at bf16 / K = 128, rel L2 1e-2): log-space decays at float32's edges (a decay of -inf at
// one token; every token -1e37, so that a chunk's sum leaves float's range; -1e4 at each chunk's
// first token before weak decays, so that G_i - G_j is the difference of two large sums): the
// recurrence is finite and accurate there, and the chunked op must equal it (rel L2 1e-5, float32)
// with no NaN or inf.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "prop_ops.h"

namespace gdn::prop {
namespace {

struct ChunkParam {
  Backend backend;
  DType act;
  DType state;
  StateLayout layout;
  int64_t ratio;
};

void PrintTo(const ChunkParam& p, std::ostream* os) {
  *os << capture::backend_name(p.backend) << " act=" << dtype_short(p.act) << " state=" << dtype_short(p.state)
      << " " << layout_name(p.layout) << " ratio=" << p.ratio;
}

std::string param_name(const ::testing::TestParamInfo<ChunkParam>& info) {
  const ChunkParam& p = info.param;
  return std::string(capture::backend_name(p.backend)) + "_act" + dtype_short(p.act) + "_state" +
         dtype_short(p.state) + "_" + layout_name(p.layout) + "_r" + std::to_string(p.ratio);
}

class PropChunked : public ::testing::TestWithParam<ChunkParam> {};

void run_case(const ChunkParam& p, int64_t K, int64_t V, bool has_init_absent, uint64_t seed) {
  Rng r(seed);
  const int64_t H = 2, HV = H * p.ratio;
  // Sequence lengths (shuffled); index 6 is empty, index 7 is padding (slot -1).
  std::vector<int64_t> lens = {1, 63, 64, 65, 129, 1000, 0, 7};
  std::vector<int64_t> order(lens.size());
  std::iota(order.begin(), order.end(), 0);
  for (int64_t i = static_cast<int64_t>(order.size()) - 1; i > 0; --i) std::swap(order[i], order[r.randint(0, i)]);
  const int64_t n = static_cast<int64_t>(lens.size());
  const int64_t num_slots = n + 4;
  std::vector<int64_t> perm(num_slots);
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t i = num_slots - 1; i > 0; --i) std::swap(perm[i], perm[r.randint(0, i)]);

  std::vector<int64_t> seq_len(n), slot(n);
  std::vector<bool> init(n);
  for (int64_t i = 0; i < n; ++i) {
    seq_len[i] = lens[order[i]];
    slot[i] = order[i] == 7 ? -1 : perm[i];
    init[i] = has_init_absent ? true : (i % 2 == 0) != (seed % 2 == 0);
  }
  std::ostringstream desc;
  for (int64_t i = 0; i < n; ++i) desc << " (len " << seq_len[i] << ", slot " << slot[i] << ", init " << init[i] << ")";
  SCOPED_TRACE(::testing::Message() << "backend=" << capture::backend_name(p.backend) << " act=" << dtype_short(p.act)
                                    << " state=" << dtype_short(p.state) << " layout=" << layout_name(p.layout)
                                    << " H=" << H << " HV=" << HV << " K=" << K << " V=" << V
                                    << " has_initial_state=" << (has_init_absent ? "absent" : "given")
                                    << " seed=" << seed << " sequences:" << desc.str());

  std::vector<int64_t> qsl_v = prefix_sum(seq_len);
  const int64_t total = qsl_v.back();
  Buf qsl = index_buf(qsl_v);
  Buf slots = index_buf(slot);
  Buf hinit = bool_buf(init);
  GdrIn in = make_gdr_in(r, total, H, HV, K, V, p.act, DType::kFloat32);
  Buf pool0 = make_ssm_pool(p.state, num_slots, HV, K, V, p.layout, 5);
  fill_normal(pool0, r, 0.3);

  Buf pool_c = pool0, pool_r = pool0;
  Buf o_c(p.act, {total, HV, V}), o_r(p.act, {total, HV, V});
  Buf* hi = has_init_absent ? nullptr : &hinit;
  PROP_ASSERT_OK(run_gdr(p.backend, true, in, pool_c, p.layout, qsl, slots, nullptr, hi, o_c));
  PROP_ASSERT_OK(run_gdr(p.backend, false, in, pool_r, p.layout, qsl, slots, nullptr, hi, o_r));

  const double tol_f32 = 1e-4;
  const double tol_o = p.act == DType::kFloat32 ? tol_f32 : 1e-2;
  const double tol_s = p.state == DType::kFloat32 ? tol_f32 : 1e-2;
  const int64_t row = HV * V;
  for (int64_t i = 0; i < n; ++i) {
    SCOPED_TRACE(::testing::Message() << "sequence " << i << " (len " << seq_len[i] << ", slot " << slot[i]
                                      << ", init " << init[i] << ")");
    if (seq_len[i] == 0) continue;
    double e = rel_l2(o_c, o_r, {{qsl_v[i] * row, seq_len[i] * row}}, {{qsl_v[i] * row, seq_len[i] * row}});
    EXPECT_LE(e, tol_o) << "outputs: chunked vs recurrent";
    if (slot[i] < 0) {  // padding: zero outputs on both
      for (const Buf* o : {&o_c, &o_r})
        for (int64_t j = 0; j < seq_len[i] * row; ++j)
          if (o->get(qsl_v[i] * row + j) != 0.0) {
            ADD_FAILURE() << "padding sequence: " << (o == &o_c ? "chunked" : "recurrent") << " output element "
                          << j << " is " << o->get(qsl_v[i] * row + j) << ", expected 0";
            break;
          }
      continue;
    }
    expect_slot_close(pool_c, slot[i], pool_r, slot[i], tol_s, "final state: chunked vs recurrent");
  }
  // Slots no sequence names (and the empty sequence's slot) are untouched by both.
  for (int64_t s = 0; s < num_slots; ++s) {
    bool named = false;
    for (int64_t i = 0; i < n; ++i) named |= (slot[i] == s && seq_len[i] > 0);
    if (named) continue;
    expect_slot_close(pool_c, s, pool0, s, 0, "unnamed slot after chunked");
    expect_slot_close(pool_r, s, pool0, s, 0, "unnamed slot after recurrent");
  }
}

TEST_P(PropChunked, ChunkedEqualsRecurrent) {
  const ChunkParam& p = GetParam();
  PROP_SKIP_IF_UNAVAILABLE(p.backend);
  uint64_t seed = 11;
  for (auto kv : {std::pair<int64_t, int64_t>{16, 24}, std::pair<int64_t, int64_t>{24, 16}})
    for (bool absent_init : {false, true}) {
      run_case(p, kv.first, kv.second, absent_init, seed++);
      if (HasFailure()) return;
    }
}

// Decays at float32's edges through the chunked op and the recurrence of one backend (see the head).
void extreme_decays(Backend be, DType act, int64_t K, int64_t V, double tol) {
  constexpr int64_t H = 1, HV = 2, T = 130;
  for (int kase = 0; kase < 3; ++kase) {
    SCOPED_TRACE(::testing::Message() << capture::backend_name(be) << " case " << kase);
    Rng r(700 + kase);
    GdrIn in = make_gdr_in(r, T, H, HV, K, V, act, DType::kFloat32);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t hv = 0; hv < HV; ++hv) {
        const double g = kase == 0   ? (t == 3 ? -std::numeric_limits<double>::infinity() : -0.05)
                         : kase == 1 ? -1e37
                                     : (t % 64 == 0 ? -1e4 : -0.01);
        in.a.set(t * HV + hv, g);  // the log-space decay itself (A_log absent)
      }
    Buf qsl = index_buf({0, T}), slots = index_buf({1});
    Buf pool0 = make_ssm_pool(DType::kFloat32, 3, HV, K, V, StateLayout::kVK);
    fill_normal(pool0, r, 0.3);
    Buf pool_c = pool0, pool_r = pool0, o_c(act, {T, HV, V}), o_r = o_c;
    auto args = [&](Buf& pool, Buf& o) {
      GatedDeltaRuleArgs a = gdr_args(in, pool, StateLayout::kVK, qsl, slots, nullptr, nullptr, o);
      a.A_log = TensorView{};
      a.dt_bias = TensorView{};
      return a;
    };
    PROP_ASSERT_OK(capture::run_chunked_on(be, args(pool_c, o_c)));
    PROP_ASSERT_OK(capture::run_recurrent_on(be, args(pool_r, o_r)));
    int64_t bad = 0;
    for (int64_t j = 0; j < T * HV * V; ++j) bad += !std::isfinite(o_c.get(j));
    for (int64_t j = 0; j < HV * V * K; ++j) bad += !std::isfinite(pool_c.get(HV * V * K + j));
    EXPECT_EQ(bad, 0) << "NaN or inf in the chunked op's outputs or final state";
    EXPECT_LE(rel_l2(o_c, o_r), tol) << "outputs: chunked vs recurrent";
    expect_slot_close(pool_c, 1, pool_r, 1, tol, "final state: chunked vs recurrent");
  }
}

TEST(PropChunkedEdges, ExtremeDecaysOnTheCpu) { extreme_decays(Backend::kCPU, DType::kFloat32, 16, 8, 1e-5); }

// The CUDA chunk kernel's forms (bf16 activations, K = 128: the shapes it takes; rel L2 1e-2).
class PropChunkedEdgesCuda : public ::testing::TestWithParam<Backend> {};
TEST_P(PropChunkedEdgesCuda, ExtremeDecays) {
  PROP_SKIP_IF_UNAVAILABLE(GetParam());
  extreme_decays(GetParam(), DType::kBFloat16, 128, 32, 1e-2);
}
std::vector<Backend> cuda_chunk_backends() {
  std::vector<Backend> v;
  for (Backend b : capture::test_backends(capture::Ops::kChunked))
    if (b.cuda() && (b.path == cuda::plan::Path::kAuto || cuda::plan::is_chunk_path(b.path))) v.push_back(b);
  return v;
}
INSTANTIATE_TEST_SUITE_P(Cuda, PropChunkedEdgesCuda, ::testing::ValuesIn(cuda_chunk_backends()),
                         [](const ::testing::TestParamInfo<Backend>& i) { return capture::backend_name(i.param); });

std::vector<ChunkParam> all_params() {
  std::vector<ChunkParam> v;
  for (Backend b : capture::test_backends(capture::Ops::kChunked))
    for (auto dt : {std::pair<DType, DType>{DType::kFloat32, DType::kFloat32},
                    std::pair<DType, DType>{DType::kBFloat16, DType::kFloat32},
                    std::pair<DType, DType>{DType::kBFloat16, DType::kBFloat16}})
      for (StateLayout l : {StateLayout::kVK, StateLayout::kKV})
        for (int64_t ratio : {1, 2, 3}) v.push_back({b, dt.first, dt.second, l, ratio});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Prop, PropChunked, ::testing::ValuesIn(all_params()), param_name);

}  // namespace
}  // namespace gdn::prop
