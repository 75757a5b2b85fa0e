// Property 6: untouched memory. Every op runs twice on the same live data, once with all other
// bytes (outputs, pools, input rows that must not be read, stride gaps) filled with a NaN bit
// pattern and once with 0x7F bytes. From the docs/contract.md §3 rules alone (tests/support/prop_rules.h)
// every element is classified beforehand:
//   - written: outputs of valid tokens, states the rules store: same bytes in both runs and
//     finite (an element left unwritten, or computed from a poison read, differs between runs);
//   - zero: output rows of padding sequences;
//   - exact: conv state rows and z are copies of inputs: equal to the rule's value, bit for bit;
//   - untouched: everything else — other slots, conv rows past the window, verify columns >= T,
//     null_block_id slots, rows >= query_start_loc[n] / num_actual_tokens, stride gaps.
// Canary bytes around every buffer catch host-side writes outside the views.
#include "prop_attention.h"
#include "prop_rules.h"

namespace gdn::prop {
namespace {

struct UParam {
  Backend backend;
  DType act;
  bool strided_out;  // outputs with a padded row stride
};

void PrintTo(const UParam& p, std::ostream* os) {
  *os << capture::backend_name(p.backend) << " act=" << dtype_short(p.act) << " strided_out=" << p.strided_out;
}
std::string param_name(const ::testing::TestParamInfo<UParam>& info) {
  return std::string(capture::backend_name(info.param.backend)) + "_act" + dtype_short(info.param.act) +
         (info.param.strided_out ? "_strided" : "_dense");
}

class PropUntouched : public ::testing::TestWithParam<UParam> {};

enum class Op { kConvFwd, kConvDecode, kConvRolling, kConvPerToken, kRecurrent, kRecurrentVerify, kChunked };
const char* op_name(Op k) {
  const char* n[] = {"causal_conv1d_fwd", "causal_conv1d_update(decode)", "causal_conv1d_update(verify, rolling)",
                     "causal_conv1d_update(verify, per_token)", "gated_delta_rule_recurrent(non-spec)",
                     "gated_delta_rule_recurrent(verify)", "gated_delta_rule_chunked"};
  return n[static_cast<int>(k)];
}
bool is_conv(Op k) { return static_cast<int>(k) <= static_cast<int>(Op::kConvPerToken); }
bool is_verify(Op k) { return k == Op::kConvRolling || k == Op::kConvPerToken || k == Op::kRecurrentVerify; }

struct Meta {
  int64_t cols = 1, num_slots = 0;
  std::vector<int64_t> lens, nacc;
  std::vector<std::vector<int64_t>> slots;
  std::vector<bool> init;
  std::optional<int64_t> null_id;
};

// Non-spec: sequence 4 is padding (slot -1), sequence 5 uses the null block, sequences 2 and 6
// start without initial state, sequence 1 is empty. Verify: sequence 1 is padding (column 0 = -1),
// sequence 2 has the null block in column 2 (> a-1, < T), sequences 3 and 4 have T < cols.
Meta make_meta(Op op, Rng& r) {
  Meta m;
  if (is_verify(op)) {
    m.cols = 4;
    m.lens = {4, 1, 3, 2, 3};
    m.nacc = {2, 4, 1, 3, 3};
  } else if (op == Op::kConvDecode) {
    m.lens = {1, 1, 1, 1, 1, 1, 1};
  } else if (op == Op::kChunked) {
    m.lens = {70, 0, 1, 9, 3, 2, 65};
  } else {
    m.lens = {5, 0, 1, 9, 3, 2, 4};
  }
  const int64_t n = static_cast<int64_t>(m.lens.size());
  if (m.nacc.empty()) m.nacc.assign(n, 1);
  m.num_slots = n * m.cols + 3;
  std::vector<int64_t> perm(m.num_slots);
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t i = m.num_slots - 1; i > 0; --i) std::swap(perm[i], perm[r.randint(0, i)]);
  m.null_id = perm[n * m.cols];
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> s(perm.begin() + i * m.cols, perm.begin() + (i + 1) * m.cols);
    if (is_verify(op)) {
      if (i == 1) s[0] = -1;
      if (i == 2) s[2] = *m.null_id;
    } else {
      if (i == 4) s[0] = -1;
      if (i == 5) s[0] = *m.null_id;
    }
    m.slots.push_back(s);
    m.init.push_back(op == Op::kConvDecode || !(i == 2 || i == 6));
  }
  return m;
}

// Is sequence i padding (no state I/O, zero outputs)?
bool is_padding(const Meta& m, Op op, int64_t i) {
  const auto& s = m.slots[i];
  if (!slot_ok(s[0], m.num_slots, m.null_id)) return true;
  return is_verify(op) && op != Op::kConvRolling && !slot_ok(s[m.nacc[i] - 1], m.num_slots, m.null_id);
}

void run_primitive(const UParam& prm, Op op, uint64_t seed) {
  Rng r(seed);
  Meta m = make_meta(op, r);
  const int64_t n = static_cast<int64_t>(m.lens.size()), W = 4, D = 20, H = 1, HV = 2, K = 8, V = 4;
  const int64_t extra = 3;
  std::vector<int64_t> qsl_v = prefix_sum(m.lens);
  const int64_t total = qsl_v.back(), rows = total + extra;
  std::ostringstream desc;
  for (int64_t i = 0; i < n; ++i) {
    desc << " (len " << m.lens[i] << " slots";
    for (int64_t v : m.slots[i]) desc << " " << v;
    desc << " acc " << m.nacc[i] << " init " << m.init[i] << ")";
  }
  SCOPED_TRACE(::testing::Message() << op_name(op) << " backend=" << capture::backend_name(prm.backend) << " act="
                                    << dtype_short(prm.act) << " strided_out=" << prm.strided_out << " null_block="
                                    << *m.null_id << " num_slots=" << m.num_slots << " rows=" << rows
                                    << " sequences:" << desc.str());
  // Live data (identical in both runs).
  Buf x(prm.act, {rows, D}), weight(prm.act, {D, W}), bias(prm.act, {D});
  fill_normal(x, r, 1.0);
  fill_normal(weight, r, 0.5);
  fill_normal(bias, r, 0.2);
  GdrIn g = make_gdr_in(r, rows, H, HV, K, V, prm.act, DType::kFloat32);
  const StateLayout layout = seed % 2 ? StateLayout::kKV : StateLayout::kVK;
  const int64_t conv_rows = op == Op::kConvRolling ? W - 2 + m.cols + 1 : W + 1;
  Buf pool = is_conv(op) ? Buf(prm.act, {m.num_slots, conv_rows, D}, conv_rows * D + 5)
                         : make_ssm_pool(prm.act, m.num_slots, HV, K, V, layout, 6);
  fill_normal(pool, r, 0.5);
  const int64_t out_row = is_conv(op) ? D : HV * V;
  Buf out_t = is_conv(op) ? Buf(prm.act, {rows, D}, prm.strided_out ? D + 3 : -1)
                          : Buf(prm.act, {rows, HV, V}, prm.strided_out ? out_row + 3 : -1);

  // What may be read (live) and what the rules write.
  std::vector<uint8_t> live_rows(rows, 0), live_pool = cls_all(pool, 0);
  std::vector<uint8_t> cls_out = cls_all(out_t, kUntouched), cls_pool = cls_all(pool, is_conv(op) ? kExact : kUntouched);
  for (int64_t i = 0; i < n; ++i) {
    const bool pad = is_padding(m, op, i);
    for (int64_t t = qsl_v[i]; t < qsl_v[i + 1]; ++t) {
      live_rows[t] = !pad;
      for (int64_t e = 0; e < out_row; ++e) cls_out[t * out_t.stride0() + e] = pad ? kZero : kWritten;
    }
    if (pad || m.lens[i] == 0) continue;
    const auto& s = m.slots[i];
    const int64_t a = m.nacc[i], T = m.lens[i];
    if (is_conv(op)) {
      int64_t slot = op == Op::kConvPerToken ? s[a - 1] : s[0];
      int64_t r0 = op == Op::kConvRolling ? a - 1 : 0;
      if (is_verify(op) || m.init[i])  // has_initial_state is not passed to the verify calls
        for (int64_t j = 0; j < W - 1; ++j)
          for (int64_t c = 0; c < D; ++c) live_pool[slot * pool.stride0() + (r0 + j) * D + c] = 1;
    } else if (is_verify(op)) {
      mark_index(live_pool, pool, s[a - 1], 1);
      for (int64_t t = 0; t < std::min(T, m.cols); ++t)
        if (slot_ok(s[t], m.num_slots, m.null_id)) mark_index(cls_pool, pool, s[t], kWritten);
    } else {
      if (m.init[i]) mark_index(live_pool, pool, s[0], 1);
      mark_index(cls_pool, pool, s[0], kWritten);
    }
  }
  std::vector<uint8_t> live_x(x.phys_elems(), 0);
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t c = 0; c < D; ++c) live_x[t * D + c] = live_rows[t];
  auto live_of = [&](const Buf& b) {
    std::vector<uint8_t> v(b.phys_elems(), 0);
    for (int64_t t = 0; t < rows; ++t) mark_index(v, b, t, live_rows[t]);
    return v;
  };

  Buf before_pool[2], after_pool[2], before_out[2], after_out[2], exact_pool[2];
  Buf qsl = index_buf(qsl_v), nacc = index_buf(m.nacc), hinit = bool_buf(m.init);
  Buf slots = is_verify(op) ? index_buf2(m.slots, m.cols) : index_buf([&] {
    std::vector<int64_t> v;
    for (auto& s : m.slots) v.push_back(s[0]);
    return v;
  }());
  for (int k = 0; k < 2; ++k) {
    Buf xk = poisoned_copy(x, live_x, k);
    GdrIn gk = g;
    for (Buf* b : {&gk.q, &gk.k, &gk.v, &gk.a, &gk.b}) *b = poisoned_copy(*b, live_of(*b), k);
    Buf pk = poisoned_copy(pool, live_pool, k);
    Buf ok = out_t;
    poison(ok, k);
    before_pool[k] = pk;
    before_out[k] = ok;
    Status st;
    switch (op) {
      case Op::kConvFwd: st = run_conv_fwd(prm.backend, xk, weight, &bias, pk, qsl, slots, &hinit, ok, Activation::kSilu, m.null_id); break;
      case Op::kConvDecode:
        st = run_conv_update(prm.backend, xk, weight, &bias, pk, qsl, slots, nullptr, ok, SpecConvLayout::kRolling,
                             Activation::kSilu, m.null_id);
        break;
      case Op::kConvRolling:
      case Op::kConvPerToken:
        st = run_conv_update(prm.backend, xk, weight, &bias, pk, qsl, slots, &nacc, ok,
                             op == Op::kConvRolling ? SpecConvLayout::kRolling : SpecConvLayout::kPerToken,
                             Activation::kSilu, m.null_id);
        break;
      case Op::kRecurrentVerify: st = run_gdr(prm.backend, false, gk, pk, layout, qsl, slots, &nacc, nullptr, ok, m.null_id); break;
      default: st = run_gdr(prm.backend, op == Op::kChunked, gk, pk, layout, qsl, slots, nullptr, &hinit, ok, m.null_id); break;
    }
    PROP_ASSERT_OK(st);
    after_pool[k] = pk;
    after_out[k] = ok;
    // Conv state: the rules' exact result from this run's before-state and inputs.
    exact_pool[k] = before_pool[k];
    if (is_conv(op))
      for (int64_t i = 0; i < n; ++i) {
        if (is_padding(m, op, i)) continue;
        InputFn u = [&, i](int64_t t, int64_t c) { return xk.bits((qsl_v[i] + t) * D + c); };
        if (op == Op::kConvRolling)
          conv_rule_rolling(exact_pool[k], before_pool[k], m.slots[i][0], m.nacc[i], m.lens[i], m.cols, W, u, m.null_id);
        else if (op == Op::kConvPerToken)
          conv_rule_per_token(exact_pool[k], before_pool[k], m.slots[i], m.nacc[i], m.lens[i], W, u, m.null_id);
        else
          conv_rule_nonspec(exact_pool[k], before_pool[k], m.slots[i][0], m.init[i], m.lens[i], W, u, m.null_id);
      }
  }
  check_buffer(is_conv(op) ? "y" : "o", before_out, after_out, cls_out, nullptr);
  check_buffer(is_conv(op) ? "conv_state" : "ssm_state", before_pool, after_pool, cls_pool, exact_pool);
}

TEST_P(PropUntouched, PrimitivesWriteExactlyTheRuleSet) {
  const UParam& prm = GetParam();
  PROP_SKIP_IF_UNAVAILABLE(prm.backend);
  uint64_t seed = 500;
  for (Op op : {Op::kConvFwd, Op::kConvDecode, Op::kConvRolling, Op::kConvPerToken, Op::kRecurrent,
                Op::kRecurrentVerify, Op::kChunked}) {
    run_primitive(prm, op, seed++);
    if (HasFailure()) return;
  }
}

TEST_P(PropUntouched, AttentionWritesExactlyTheRuleSet) {
  const UParam& prm = GetParam();
  PROP_SKIP_IF_UNAVAILABLE(prm.backend);
  for (int variant = 0; variant < 4; ++variant) {  // 2, 3: per-token verify windows (pools of W-1 rows, more)
    Rng r(600 + variant % 2);
    AttnProblem p;
    p.act = prm.act;
    p.ssm_dtype = prm.act;
    p.cols = 3;
    p.reorder = variant % 2 == 1;
    const bool per_token = variant >= 2;
    if (per_token) p.conv_layout = SpecConvLayout::kPerToken, p.conv_rows_extra = variant == 2 ? 0 : 2;
    MixOptions mo;
    mo.graph_pad_rows = 4;
    mo.trailing_empty = variant % 2 == 1;
    make_mixed_batch(p, r, mo);
    // A null block: a spare slot named by one non-spec sequence and by a verify column t
    // (0 < t < T, t != a-1), where the store is skipped.
    p.num_slots += 1;
    p.null_id = p.num_slots - 1;
    for (AttnSeq& s : p.seqs)
      if (!s.spec && s.slot >= 0) { s.slot = *p.null_id; break; }
    for (AttnSeq& s : p.seqs)
      if (s.spec && s.cols[0] >= 0 && s.rows.size() >= 2 && s.nacc != 2) { s.cols[1] = *p.null_id; break; }
    fill_attention_data(p, r);
    SCOPED_TRACE(::testing::Message() << "gdn_attention backend=" << capture::backend_name(prm.backend)
                                      << " strided_out=" << prm.strided_out << " variant=" << variant << " " << describe(p));
    const int64_t row = p.HV * p.V, qw = p.qkvz_width(), D = p.D();
    auto pad_of = [&](const AttnSeq& s) {
      if (s.spec) return !slot_ok(s.cols[0], p.num_slots, p.null_id) || !slot_ok(s.cols[s.nacc - 1], p.num_slots, p.null_id);
      return !slot_ok(s.slot, p.num_slots, p.null_id);
    };
    Buf out_t(p.act, {p.rows_alloc, p.HV, p.V}, prm.strided_out ? row + 2 : -1);
    std::vector<uint8_t> live_row(p.rows_alloc, 0), cls_core = cls_all(out_t, kUntouched), cls_z = cls_all(out_t, kUntouched);
    std::vector<uint8_t> live_conv = cls_all(p.conv_pool, 0), live_ssm = cls_all(p.ssm_pool, 0);
    std::vector<uint8_t> cls_conv = cls_all(p.conv_pool, kExact), cls_ssm = cls_all(p.ssm_pool, kUntouched);
    for (int64_t t = 0; t < p.num_actual; ++t) mark_index(cls_z, out_t, t, kExact);
    for (const AttnSeq& s : p.seqs) {
      const bool pad = pad_of(s);
      for (int64_t t : s.rows) { live_row[t] = !pad; mark_index(cls_core, out_t, t, pad ? kZero : kWritten); }
      if (pad || s.rows.empty()) continue;
      const int64_t T = static_cast<int64_t>(s.rows.size());
      if (s.spec) {
        for (int64_t j = 0; j < p.W - 1; ++j)  // the window: per token rows 0.. of column a-1, else rows a-1.. of column 0
          for (int64_t c = 0; c < D; ++c)
            live_conv[per_token ? s.cols[s.nacc - 1] * p.conv_pool.stride0() + j * D + c
                                : s.cols[0] * p.conv_pool.stride0() + (s.nacc - 1 + j) * D + c] = 1;
        mark_index(live_ssm, p.ssm_pool, s.cols[s.nacc - 1], 1);
        for (int64_t t = 0; t < std::min(T, p.cols); ++t)
          if (slot_ok(s.cols[t], p.num_slots, p.null_id)) mark_index(cls_ssm, p.ssm_pool, s.cols[t], kWritten);
      } else {
        if (s.has_init) {
          for (int64_t e = 0; e < (p.W - 1) * D; ++e) live_conv[s.slot * p.conv_pool.stride0() + e] = 1;
          mark_index(live_ssm, p.ssm_pool, s.slot, 1);
        }
        mark_index(cls_ssm, p.ssm_pool, s.slot, kWritten);
      }
    }
    Buf b_core[2], a_core[2], b_z[2], a_z[2], b_conv[2], a_conv[2], e_conv[2], b_ssm[2], a_ssm[2], e_z[2];
    for (int k = 0; k < 2; ++k) {
      AttnProblem pk = p;
      std::vector<uint8_t> lq = cls_all(p.qkvz, 0), lb = cls_all(p.ba, 0);
      for (int64_t t = 0; t < p.rows_alloc; ++t) { mark_index(lq, p.qkvz, t, live_row[t]); mark_index(lb, p.ba, t, live_row[t]); }
      pk.qkvz = poisoned_copy(p.qkvz, lq, k);
      pk.ba = poisoned_copy(p.ba, lb, k);
      pk.conv_pool = poisoned_copy(p.conv_pool, live_conv, k);
      pk.ssm_pool = poisoned_copy(p.ssm_pool, live_ssm, k);
      Buf core = out_t, z = out_t;
      poison(core, k);
      poison(z, k);
      b_core[k] = core; b_z[k] = z; b_conv[k] = pk.conv_pool; b_ssm[k] = pk.ssm_pool;
      PROP_ASSERT_OK(run_attention(prm.backend, pk, core, z));
      a_core[k] = core; a_z[k] = z; a_conv[k] = pk.conv_pool; a_ssm[k] = pk.ssm_pool;
      e_z[k] = b_z[k];
      for (int64_t t = 0; t < p.num_actual; ++t)
        for (int64_t e = 0; e < row; ++e) e_z[k].set_bits(t * row + e, pk.qkvz.bits(t * qw + z_col(p, p.reorder, e)));
      e_conv[k] = b_conv[k];
      for (const AttnSeq& s : p.seqs) {
        if (pad_of(s)) continue;
        InputFn u = [&](int64_t t, int64_t c) { return pk.qkvz.bits(s.rows[t] * qw + qkvz_col(p, p.reorder, c)); };
        const int64_t T = static_cast<int64_t>(s.rows.size());
        if (s.spec && per_token) conv_rule_per_token(e_conv[k], b_conv[k], s.cols, s.nacc, T, p.W, u, p.null_id);
        else if (s.spec) conv_rule_rolling(e_conv[k], b_conv[k], s.cols[0], s.nacc, T, p.cols, p.W, u, p.null_id);
        else conv_rule_nonspec(e_conv[k], b_conv[k], s.slot, s.has_init, T, p.W, u, p.null_id);
      }
    }
    check_buffer("core_attn_out", b_core, a_core, cls_core, nullptr);
    check_buffer("z", b_z, a_z, cls_z, e_z);
    check_buffer("conv_state", b_conv, a_conv, cls_conv, e_conv);
    check_buffer("ssm_state", b_ssm, a_ssm, cls_ssm, nullptr);
    if (HasFailure()) return;
  }
}

std::vector<UParam> all_params() {
  std::vector<UParam> v;
  for (Backend b : capture::test_backends(capture::Ops::kAll))
    for (DType act : {DType::kFloat32, DType::kBFloat16})
      for (bool strided : {false, true}) v.push_back({b, act, strided});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Prop, PropUntouched, ::testing::ValuesIn(all_params()), param_name);

}  // namespace
}  // namespace gdn::prop
