// Property 1: verify-then-accept equals plain decoding.
//
// A verify step runs T_i draft tokens per sequence through causal_conv1d_update and
// gated_delta_rule_recurrent with state_indices [n, cols] and num_accepted_tokens; the engine then
// accepts a_i tokens (1 <= a_i <= T_i). The states the next step reads (docs/contract.md §3: rolling conv
// rows a-1..a+W-3 of the column-0 slot, or per-token slot state_indices[i, a-1]; SSM column a-1)
// must equal what plain decoding (non-spec, one token per sequence per call) of the first a_i
// tokens leaves, and the verify outputs of tokens t < a_i must equal the decode outputs.
// Multi-step trajectories, ragged T_i, cols = T and cols > T, a = 1 and a = T.
//
// Tolerances: conv state rows are copies of inputs: bit-exact. Outputs and SSM states are the same
// float32 math on both paths, possibly in a different order: rel L2 1e-5 when stored in float32.
// With bf16 storage the verify path keeps the state in float32 between tokens while decoding rounds
// it to bf16 after every token (and outputs are rounded to bf16): rel L2 1e-2.
#include <algorithm>
#include <numeric>

#include "prop_ops.h"

namespace gdn::prop {
namespace {

struct VerifyParam {
  Backend backend;
  DType act;
  DType state;
  StateLayout state_layout;
  SpecConvLayout conv_layout;
};

void PrintTo(const VerifyParam& p, std::ostream* os) {
  *os << capture::backend_name(p.backend) << " act=" << dtype_short(p.act) << " state=" << dtype_short(p.state)
      << " " << layout_name(p.state_layout) << " " << layout_name(p.conv_layout);
}

std::string param_name(const ::testing::TestParamInfo<VerifyParam>& info) {
  const VerifyParam& p = info.param;
  return std::string(capture::backend_name(p.backend)) + "_act" + dtype_short(p.act) + "_state" +
         dtype_short(p.state) + "_" + layout_name(p.state_layout) + "_" + layout_name(p.conv_layout);
}

class PropVerify : public ::testing::TestWithParam<VerifyParam> {};

std::string vec_str(const std::vector<int64_t>& v) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < v.size(); ++i) s << (i ? "," : "") << v[i];
  s << "]";
  return s.str();
}

void run_trajectory(const VerifyParam& p, int64_t cols, uint64_t seed) {
  Rng r(seed * 1000 + static_cast<uint64_t>(cols));
  const int64_t n = 5, steps = 4;
  const int64_t W = seed == 1 ? 4 : seed == 2 ? 2 : 5;
  const int64_t D = 52, H = 2, HV = 4, K = 8, V = 12;
  const bool rolling = p.conv_layout == SpecConvLayout::kRolling;
  const Activation act_fn = seed == 2 ? Activation::kNone : Activation::kSilu;
  SCOPED_TRACE(::testing::Message() << "backend=" << capture::backend_name(p.backend) << " act=" << dtype_short(p.act)
                                    << " state=" << dtype_short(p.state) << " state_layout="
                                    << layout_name(p.state_layout) << " conv_layout=" << layout_name(p.conv_layout)
                                    << " cols=" << cols << " seed=" << seed << " W=" << W << " D=" << D << " H=" << H
                                    << " HV=" << HV << " K=" << K << " V=" << V);

  // Verify pools: sequence i column c uses slot perm[i*cols + c]; three spare slots.
  const int64_t num_slots = n * cols + 3;
  std::vector<int64_t> perm(num_slots);
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t i = num_slots - 1; i > 0; --i) std::swap(perm[i], perm[r.randint(0, i)]);
  std::vector<std::vector<int64_t>> slot_rows(n, std::vector<int64_t>(cols));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < cols; ++c) slot_rows[i][c] = perm[i * cols + c];
  Buf slots = index_buf2(slot_rows, cols);

  const int64_t conv_rows = rolling ? W - 2 + cols + 1 : W;
  Buf vconv(p.act, {num_slots, conv_rows, D}, conv_rows * D + 3);
  fill_normal(vconv, r, 1.0);
  Buf vssm = make_ssm_pool(p.state, num_slots, HV, K, V, p.state_layout, 7);
  fill_normal(vssm, r, 0.3);

  Buf weight(p.act, {D, W});
  fill_normal(weight, r, 0.5);
  Buf bias(p.act, {D});
  fill_normal(bias, r, 0.2);
  Buf* bias_ptr = seed == 2 ? nullptr : &bias;
  GdrIn consts = make_gdr_in(r, 1, H, HV, K, V, p.act, p.act);  // gate constants shared by all calls

  // Decode pools: sequence i uses slot i, started from what the verify path would read.
  std::vector<int64_t> a_prev(n);
  for (int64_t i = 0; i < n; ++i) a_prev[i] = r.randint(1, cols);
  Buf dconv(p.act, {n, W - 1, D});
  Buf dssm = make_ssm_pool(p.state, n, HV, K, V, p.state_layout);
  for (int64_t i = 0; i < n; ++i) {
    int64_t o = a_prev[i] - 1;
    int64_t src_slot = rolling ? slot_rows[i][0] : slot_rows[i][o];
    int64_t src_row = rolling ? o : 0;
    copy_elems(dconv, i * (W - 1) * D, vconv, (src_slot * conv_rows + src_row) * D, (W - 1) * D);
    copy_elems(dssm, i * dssm.row_elems(), vssm, slot_rows[i][o] * vssm.row_elems(), vssm.row_elems());
  }

  for (int64_t step = 0; step < steps; ++step) {
    std::vector<int64_t> T(n), a(n);
    for (int64_t i = 0; i < n; ++i) {
      T[i] = step == 0 ? cols : r.randint(1, cols);
      int64_t pick = (i + step) % 3;
      a[i] = pick == 0 ? 1 : pick == 1 ? T[i] : r.randint(1, T[i]);
    }
    SCOPED_TRACE(::testing::Message() << "step=" << step << " T=" << vec_str(T) << " num_accepted(prev)="
                                      << vec_str(a_prev) << " accept=" << vec_str(a));
    std::vector<int64_t> qsl_v = prefix_sum(T);
    const int64_t total = qsl_v.back();
    Buf qsl = index_buf(qsl_v);
    Buf nacc = index_buf(a_prev);

    Buf x(p.act, {total, D});
    fill_normal(x, r, 1.0);
    GdrIn gin = make_gdr_in(r, total, H, HV, K, V, p.act, p.act);
    gin.A_log = consts.A_log;
    gin.dt_bias = consts.dt_bias;

    // Verify step.
    Buf y_v(p.act, {total, D});
    Buf o_v(p.act, {total, HV, V});
    PROP_ASSERT_OK(run_conv_update(p.backend, x, weight, bias_ptr, vconv, qsl, slots, &nacc, y_v, p.conv_layout, act_fn));
    PROP_ASSERT_OK(run_gdr(p.backend, false, gin, vssm, p.state_layout, qsl, slots, &nacc, nullptr, o_v));

    // Plain decoding of the accepted tokens, one token per sequence per call.
    Buf y_d(p.act, {total, D});
    Buf o_d(p.act, {total, HV, V});
    int64_t max_a = *std::max_element(a.begin(), a.end());
    for (int64_t t = 0; t < max_a; ++t) {
      std::vector<int64_t> active, rows;
      for (int64_t i = 0; i < n; ++i)
        if (a[i] > t) { active.push_back(i); rows.push_back(qsl_v[i] + t); }
      const int64_t m = static_cast<int64_t>(active.size());
      Buf xt(p.act, {m, D}), yt(p.act, {m, D}), ot(p.act, {m, HV, V});
      for (int64_t j = 0; j < m; ++j) copy_row(xt, j, x, rows[j]);
      std::vector<int64_t> ones(m, 1);
      Buf qsl_t = index_buf(prefix_sum(ones));
      Buf slots_t = index_buf(active);
      GdrIn gt = slice_tokens(gin, rows);
      PROP_ASSERT_OK(run_conv_update(p.backend, xt, weight, bias_ptr, dconv, qsl_t, slots_t, nullptr, yt,
                                     p.conv_layout, act_fn));
      PROP_ASSERT_OK(run_gdr(p.backend, false, gt, dssm, p.state_layout, qsl_t, slots_t, nullptr, nullptr, ot));
      for (int64_t j = 0; j < m; ++j) {
        copy_row(y_d, rows[j], yt, j);
        copy_row(o_d, rows[j], ot, j);
      }
    }

    // Outputs of accepted tokens.
    std::vector<Range> ry, ro;
    for (int64_t i = 0; i < n; ++i) {
      ry.push_back({qsl_v[i] * D, a[i] * D});
      ro.push_back({qsl_v[i] * HV * V, a[i] * HV * V});
    }
    double ey = rel_l2(y_v, y_d, ry, ry), eo = rel_l2(o_v, o_d, ro, ro);
    EXPECT_LE(ey, tol_for(p.act)) << "conv outputs y of accepted tokens: verify vs decode";
    // o depends on the state: bf16 state storage rounds differently on the two paths.
    double tol_o = p.state == DType::kFloat32 ? tol_for(p.act) : 1e-2;
    EXPECT_LE(eo, tol_o) << "recurrent outputs o of accepted tokens: verify vs decode";

    // States the next step reads.
    for (int64_t i = 0; i < n; ++i) {
      SCOPED_TRACE(::testing::Message() << "sequence " << i << " slots " << vec_str(slot_rows[i]));
      int64_t col = a[i] - 1;
      int64_t conv_slot = rolling ? slot_rows[i][0] : slot_rows[i][col];
      int64_t conv_row = rolling ? col : 0;
      std::string d = bit_diff(vconv, (conv_slot * conv_rows + conv_row) * D, dconv, i * (W - 1) * D, (W - 1) * D);
      EXPECT_EQ(d, "") << "conv window after accepting " << a[i] << " (verify slot " << conv_slot << " rows "
                       << conv_row << ".." << conv_row + W - 2 << ") differs from plain decoding";
      double tol = p.state == DType::kFloat32 ? 1e-5 : 1e-2;
      expect_slot_close(vssm, slot_rows[i][col], dssm, i, tol, "SSM state column a-1 vs decoded state");
    }
    if (::testing::Test::HasFailure()) return;
    a_prev = a;
  }
}

TEST_P(PropVerify, VerifyThenAcceptEqualsDecode) {
  const VerifyParam& p = GetParam();
  PROP_SKIP_IF_UNAVAILABLE(p.backend);
  for (int64_t cols : {1, 3, 5})
    for (uint64_t seed : {1, 2, 3}) {
      run_trajectory(p, cols, seed);
      if (HasFailure()) return;
    }
}

std::vector<VerifyParam> all_params() {
  std::vector<VerifyParam> v;
  for (Backend b : capture::test_backends(capture::Ops::kRecurrent))
    for (DType act : {DType::kFloat32, DType::kBFloat16})
      for (DType st : {DType::kFloat32, DType::kBFloat16})
        for (StateLayout sl : {StateLayout::kVK, StateLayout::kKV})
          for (SpecConvLayout cl : {SpecConvLayout::kRolling, SpecConvLayout::kPerToken})
            v.push_back({b, act, st, sl, cl});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Prop, PropVerify, ::testing::ValuesIn(all_params()), param_name);

}  // namespace
}  // namespace gdn::prop
