// Property 7: hostile device-side metadata (docs/contract.md §3, "Metadata the host cannot
// see", and its padding rules). Each hostile call is compared, bit for bit on the same backend, with a clean
// call that the rules declare equivalent:
//   slot >= num_slots (also an int64 slot that narrows to a valid int32)  == slot -1 (padding);
//   verify column t != a-1 invalid                                        == column t = -1 (store skipped);
//   verify column a-1 invalid                                             == the whole row -1 (padding);
//   num_accepted_tokens 0, negative, > cols                               == clamped into [1, cols];
//   query_start_loc past the buffer / negative / decreasing               == clamped / empty;
//   gdn_attention remap index outside [0, num_actual_tokens)              == that sequence padding.
// T > cols: outputs equal a call with enough columns; the pools hold exactly what the rules of
// tests/support/prop_rules.h say (nothing stored for tokens >= cols), with the conv pool at its
// minimal row count so a stray write would land in the neighbouring slot.
// check_metadata must report each hostile call and accept each clean one. Canaries around every
// host buffer catch CPU writes outside the views; on CUDA this file is the one to run under
// compute-sanitizer.
#include "prop_attention.h"
#include "prop_rules.h"

namespace gdn::prop {
namespace {

class PropHostile : public ::testing::TestWithParam<Backend> {};

enum class Op { kConvFwd, kConvDecode, kRecurrent, kChunked, kConvRolling, kConvPerToken, kRecurrentVerify };
const char* op_name(Op k) {
  const char* n[] = {"causal_conv1d_fwd", "causal_conv1d_update(decode)", "gated_delta_rule_recurrent(non-spec)",
                     "gated_delta_rule_chunked", "causal_conv1d_update(verify, rolling)",
                     "causal_conv1d_update(verify, per_token)", "gated_delta_rule_recurrent(verify)"};
  return n[static_cast<int>(k)];
}
bool is_verify(Op k) { return static_cast<int>(k) >= static_cast<int>(Op::kConvRolling); }
bool is_conv(Op k) { return k == Op::kConvFwd || k == Op::kConvDecode || k == Op::kConvRolling || k == Op::kConvPerToken; }

struct HCase {
  Op op;
  int64_t cols = 1, W = 4, D = 12, H = 1, HV = 2, K = 8, V = 4, num_slots = 0, rows = 0, conv_rows = 0;
  std::vector<int64_t> qsl, nacc;
  std::vector<std::vector<int64_t>> slots;
  std::vector<bool> init;
  DType index_dtype = DType::kInt32;
  StateLayout layout = StateLayout::kVK;
  Buf x, weight, bias, pool0;
  GdrIn g;
};

HCase make_base(Op op, Rng& r) {
  HCase c;
  c.op = op;
  std::vector<int64_t> lens;
  if (is_verify(op)) {
    c.cols = 3;
    lens = {3, 1, 2, 3};
    c.nacc = {2, 1, 3, 1};
  } else {
    lens = op == Op::kConvDecode ? std::vector<int64_t>{1, 1, 1, 1} : std::vector<int64_t>{3, 1, 4, 2};
    c.nacc.assign(lens.size(), 1);
  }
  c.qsl = prefix_sum(lens);
  c.rows = c.qsl.back() + 2;
  c.num_slots = static_cast<int64_t>(lens.size()) * c.cols + 2;
  std::vector<int64_t> perm(c.num_slots);
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t i = c.num_slots - 1; i > 0; --i) std::swap(perm[i], perm[r.randint(0, i)]);
  for (size_t i = 0; i < lens.size(); ++i) {
    c.slots.emplace_back(perm.begin() + i * c.cols, perm.begin() + (i + 1) * c.cols);
    c.init.push_back(i != 1);
  }
  c.layout = r.coin() ? StateLayout::kKV : StateLayout::kVK;
  // Minimal conv pools, dense: a write past the allowed rows lands in the next slot.
  c.conv_rows = op == Op::kConvRolling ? c.W - 2 + c.cols : c.W - 1;
  c.x = Buf(DType::kFloat32, {c.rows, c.D});
  fill_normal(c.x, r, 1.0);
  c.weight = Buf(DType::kFloat32, {c.D, c.W});
  fill_normal(c.weight, r, 0.5);
  c.bias = Buf(DType::kFloat32, {c.D});
  fill_normal(c.bias, r, 0.2);
  c.g = make_gdr_in(r, c.rows, c.H, c.HV, c.K, c.V, DType::kFloat32, DType::kFloat32);
  c.pool0 = is_conv(op) ? Buf(DType::kFloat32, {c.num_slots, c.conv_rows, c.D})
                        : make_ssm_pool(DType::kFloat32, c.num_slots, c.HV, c.K, c.V, c.layout);
  fill_normal(c.pool0, r, 0.5);
  return c;
}

struct HRun {
  Buf pool, out;
  Status status, meta;
};

HRun run_case(Backend be, HCase& c) {
  HRun h;
  h.pool = c.pool0;
  h.out = is_conv(c.op) ? Buf(DType::kFloat32, {c.rows, c.D}) : Buf(DType::kFloat32, {c.rows, c.HV, c.V});
  poison(h.out, 0);
  Buf qsl = index_buf(c.qsl, c.index_dtype), nacc = index_buf(c.nacc, c.index_dtype), hinit = bool_buf(c.init);
  std::vector<int64_t> col0;
  for (auto& s : c.slots) col0.push_back(s[0]);
  Buf slots = is_verify(c.op) ? index_buf2(c.slots, c.cols, c.index_dtype) : index_buf(col0, c.index_dtype);
  switch (c.op) {
    case Op::kConvFwd: {
      CausalConv1dFwdArgs a = conv_fwd_args(c.x, c.weight, &c.bias, h.pool, qsl, slots, &hinit, h.out);
      h.meta = check_metadata(a);
      h.status = capture::run_on(be, a);
      break;
    }
    case Op::kConvDecode:
    case Op::kConvRolling:
    case Op::kConvPerToken: {
      CausalConv1dUpdateArgs a = conv_update_args(c.x, c.weight, &c.bias, h.pool, qsl, slots,
                                                  is_verify(c.op) ? &nacc : nullptr, h.out,
                                                  c.op == Op::kConvPerToken ? SpecConvLayout::kPerToken
                                                                            : SpecConvLayout::kRolling);
      h.meta = check_metadata(a);
      h.status = capture::run_on(be, a);
      break;
    }
    default: {
      GatedDeltaRuleArgs a = gdr_args(c.g, h.pool, c.layout, qsl, slots, is_verify(c.op) ? &nacc : nullptr,
                                      is_verify(c.op) ? nullptr : &hinit, h.out);
      h.meta = check_metadata(a);
      h.status = c.op == Op::kChunked ? capture::run_chunked_on(be, a) : capture::run_recurrent_on(be, a);
    }
  }
  return h;
}

std::string case_desc(const HCase& c) {
  std::ostringstream s;
  s << op_name(c.op) << " cols=" << c.cols << " num_slots=" << c.num_slots << " rows=" << c.rows << " qsl=[";
  for (size_t i = 0; i < c.qsl.size(); ++i) s << (i ? "," : "") << c.qsl[i];
  s << "] slots=[";
  for (size_t i = 0; i < c.slots.size(); ++i) {
    s << (i ? " | " : "");
    for (size_t j = 0; j < c.slots[i].size(); ++j) s << (j ? "," : "") << c.slots[i][j];
  }
  s << "] accepted=[";
  for (size_t i = 0; i < c.nacc.size(); ++i) s << (i ? "," : "") << c.nacc[i];
  s << "] idx=" << dtype_short(c.index_dtype);
  return s.str();
}

enum class Meta { kError, kOk, kAny };

struct Mutation {
  const char* name;
  bool verify_ops, nonspec_ops, rolling_too;
  std::function<void(HCase& hostile, HCase& clean)> apply;
  Meta meta = Meta::kError;
};

std::vector<Mutation> mutations() {
  std::vector<Mutation> m;
  m.push_back({"slot == num_slots", true, true, true, [](HCase& h, HCase& c) {
                 h.slots[2][0] = h.num_slots;
                 c.slots[2][0] = -1;
               }});
  m.push_back({"slot far past the pool", true, true, true, [](HCase& h, HCase& c) {
                 h.slots[0][0] = h.num_slots + 1000;
                 c.slots[0][0] = -1;
               }});
  m.push_back({"int64 slot 2^32 + 1 (narrowing would make it slot 1)", true, true, true, [](HCase& h, HCase& c) {
                 h.index_dtype = c.index_dtype = DType::kInt64;
                 h.slots[3][0] = (int64_t{1} << 32) + 1;
                 c.slots[3][0] = -1;
               }});
  m.push_back({"query_start_loc[n] past the buffer", true, true, true, [](HCase& h, HCase& c) {
                 // Clamped to the rows of x: the last sequence takes the 2 spare rows too (verify:
                 // its T becomes 1 + 2 <= cols).
                 if (is_verify(h.op)) h.qsl.back() = c.qsl.back() = h.qsl[h.qsl.size() - 2] + 1;
                 h.qsl.back() = h.rows + 50;
                 c.qsl.back() = c.rows;
                 if (is_verify(h.op)) c.qsl.back() = c.rows = h.rows = h.qsl[h.qsl.size() - 2] + 3;
                 for (HCase* k : {&h, &c}) {  // x and the gate inputs keep exactly `rows` rows
                   std::vector<int64_t> keep(k->rows);
                   std::iota(keep.begin(), keep.end(), 0);
                   Buf x(k->x.dtype(), {k->rows, k->D});
                   for (int64_t t = 0; t < k->rows; ++t) copy_row(x, t, k->x, t);
                   k->x = x;
                   k->g = slice_tokens(k->g, keep);
                 }
               }});
  m.push_back({"query_start_loc[0] negative", true, true, true, [](HCase& h, HCase& c) {
                 h.qsl[0] = -4;
                 c.qsl[0] = 0;
               }});
  m.push_back({"query_start_loc decreasing at the end (empty last sequence)", true, true, true,
               [](HCase& h, HCase& c) {
                 int64_t n = static_cast<int64_t>(h.qsl.size()) - 1;
                 h.qsl[n] = h.qsl[n - 1] - 1;
                 c.qsl[n] = c.qsl[n - 1];
               }});
  m.push_back({"verify column t != a-1 past the pool (store skipped)", true, false, true, [](HCase& h, HCase& c) {
                 h.slots[0][2] = h.num_slots + 3;  // sequence 0: T = 3, a = 2
                 c.slots[0][2] = -1;
               }});
  // The rolling conv reads only column 0's slot, but by docs/contract.md §3 an invalid column a-1
  // makes the sequence padding there too (zero y, no pool write), as in per_token and gdn_attention.
  m.push_back({"verify column a-1 past the pool (padding)", true, false, true, [](HCase& h, HCase& c) {
                 h.slots[0][1] = h.num_slots;  // sequence 0: a = 2
                 for (auto& s : c.slots[0]) s = -1;
               }});
  m.push_back({"verify column a-1 negative (padding)", true, false, true,
               [](HCase& h, HCase& c) {
                 h.slots[2][2] = -1;  // sequence 2: a = 3; columns 0 and 1 stay valid
                 for (auto& s : c.slots[2]) s = -1;
               },
               Meta::kOk});
  m.push_back({"num_accepted_tokens = 0", true, false, true, [](HCase& h, HCase& c) {
                 h.nacc[1] = 0;
                 c.nacc[1] = 1;
               }});
  m.push_back({"num_accepted_tokens negative", true, false, true, [](HCase& h, HCase& c) {
                 h.nacc[0] = -7;
                 c.nacc[0] = 1;
               }});
  m.push_back({"num_accepted_tokens > cols", true, false, true, [](HCase& h, HCase& c) {
                 h.nacc[3] = h.cols + 2;
                 c.nacc[3] = c.cols;
               }});
  m.push_back({"num_accepted_tokens huge", true, false, true, [](HCase& h, HCase& c) {
                 h.nacc[2] = 2000000000;
                 c.nacc[2] = c.cols;
               }});
  return m;
}

TEST_P(PropHostile, PrimitivesClampOrPad) {
  const Backend be = GetParam();
  PROP_SKIP_IF_UNAVAILABLE(be);
  uint64_t seed = 700;
  for (const Mutation& mu : mutations())
    for (Op op : {Op::kConvFwd, Op::kConvDecode, Op::kRecurrent, Op::kChunked, Op::kConvRolling, Op::kConvPerToken,
                  Op::kRecurrentVerify}) {
      if (is_verify(op) ? !mu.verify_ops : !mu.nonspec_ops) continue;
      if (op == Op::kConvRolling && !mu.rolling_too) continue;
      Rng r(seed++);
      HCase base = make_base(op, r);
      HCase hostile = base, clean = base;
      mu.apply(hostile, clean);
      SCOPED_TRACE(::testing::Message() << "backend=" << capture::backend_name(be) << " case '" << mu.name
                                        << "'\n  hostile: " << case_desc(hostile) << "\n  clean:   " << case_desc(clean));
      HRun h = run_case(be, hostile), c = run_case(be, clean);
      ASSERT_TRUE(h.status.ok()) << "hostile call failed: " << h.status.message();
      ASSERT_TRUE(c.status.ok()) << "clean call failed: " << c.status.message();
      EXPECT_TRUE(c.meta.ok()) << "check_metadata rejects the clean call: " << c.meta.message();
      if (mu.meta == Meta::kError) EXPECT_FALSE(h.meta.ok()) << "check_metadata accepts the hostile call";
      EXPECT_EQ(byte_diff(h.out, c.out), "") << "outputs differ from the clean equivalent";
      EXPECT_EQ(byte_diff(h.pool, c.pool), "") << "pool differs from the clean equivalent";
      EXPECT_TRUE(h.out.canaries_ok() && h.pool.canaries_ok()) << "write outside a buffer";
    }
}

// T > cols: tokens past cols are computed but store nothing.
TEST_P(PropHostile, PrimitivesTokensPastCols) {
  const Backend be = GetParam();
  PROP_SKIP_IF_UNAVAILABLE(be);
  uint64_t seed = 800;
  for (Op op : {Op::kConvRolling, Op::kConvPerToken, Op::kRecurrentVerify}) {
    Rng r(seed++);
    HCase hostile = make_base(op, r);
    // Sequence 1 gets T = cols + 2 (its a = 1); rows grow accordingly.
    const int64_t extra = hostile.cols + 1;
    for (size_t i = 2; i < hostile.qsl.size(); ++i) hostile.qsl[i] += extra;
    hostile.rows += extra;
    Rng r2(seed + 100);
    hostile.x = Buf(DType::kFloat32, {hostile.rows, hostile.D});
    fill_normal(hostile.x, r2, 1.0);
    hostile.g = make_gdr_in(r2, hostile.rows, hostile.H, hostile.HV, hostile.K, hostile.V, DType::kFloat32,
                            DType::kFloat32);
    const int64_t T1 = hostile.qsl[2] - hostile.qsl[1];
    // The reference: cols' = T1, extra columns in fresh slots (other sequences: -1), a pool with
    // room for them (conv: W-2+cols' rows).
    HCase ref = hostile;
    ref.cols = T1;
    const int64_t fresh = hostile.num_slots;
    ref.num_slots = hostile.num_slots + (T1 - hostile.cols);
    for (size_t i = 0; i < ref.slots.size(); ++i)
      for (int64_t j = hostile.cols; j < T1; ++j) ref.slots[i].push_back(i == 1 ? fresh + j - hostile.cols : -1);
    ref.conv_rows = op == Op::kConvRolling ? ref.W - 2 + ref.cols : ref.conv_rows;
    Rng r3(seed + 200);
    ref.pool0 = is_conv(op) ? Buf(DType::kFloat32, {ref.num_slots, ref.conv_rows, ref.D})
                            : make_ssm_pool(DType::kFloat32, ref.num_slots, ref.HV, ref.K, ref.V, ref.layout);
    fill_normal(ref.pool0, r3, 0.5);
    const int64_t per_row = hostile.conv_rows * hostile.D;
    for (int64_t s = 0; s < hostile.num_slots; ++s)  // same contents for the shared slots/rows
      for (int64_t e = 0; e < (is_conv(op) ? per_row : hostile.pool0.row_elems()); ++e) {
        int64_t he = s * hostile.pool0.row_elems() + e;
        int64_t re = is_conv(op) ? (s * ref.conv_rows + e / hostile.D) * ref.D + e % hostile.D : s * ref.pool0.row_elems() + e;
        ref.pool0.set_bits(re, hostile.pool0.bits(he));
      }
    SCOPED_TRACE(::testing::Message() << "backend=" << capture::backend_name(be) << " T > cols\n  hostile: "
                                      << case_desc(hostile) << "\n  reference: " << case_desc(ref));
    HRun h = run_case(be, hostile), c = run_case(be, ref);
    ASSERT_TRUE(h.status.ok()) << h.status.message();
    ASSERT_TRUE(c.status.ok()) << c.status.message();
    EXPECT_FALSE(h.meta.ok()) << "check_metadata accepts T > cols";
    EXPECT_EQ(byte_diff(h.out, c.out), "") << "outputs differ from a call with enough columns";
    EXPECT_TRUE(h.out.canaries_ok() && h.pool.canaries_ok()) << "write outside a buffer";
    // Pools: exactly the rules' result.
    if (is_conv(op)) {
      Buf exp = hostile.pool0;
      for (size_t i = 0; i < hostile.slots.size(); ++i) {
        int64_t T = hostile.qsl[i + 1] - hostile.qsl[i], q0 = hostile.qsl[i];
        InputFn u = [&](int64_t t, int64_t c2) { return hostile.x.bits((q0 + t) * hostile.D + c2); };
        if (op == Op::kConvRolling)
          conv_rule_rolling(exp, hostile.pool0, hostile.slots[i][0], hostile.nacc[i], T, hostile.cols, hostile.W, u, {});
        else
          conv_rule_per_token(exp, hostile.pool0, hostile.slots[i], hostile.nacc[i], T, hostile.W, u, {});
      }
      EXPECT_EQ(byte_diff(h.pool, exp), "") << "conv pool differs from the rules (nothing stored past cols)";
    } else {
      for (int64_t s = 0; s < hostile.num_slots; ++s) {
        bool written = false;
        for (size_t i = 0; i < hostile.slots.size(); ++i)
          for (int64_t j = 0; j < std::min(hostile.cols, hostile.qsl[i + 1] - hostile.qsl[i]); ++j)
            written |= hostile.slots[i][j] == s;
        expect_slot_close(h.pool, s, written ? c.pool : hostile.pool0, s, 0,
                          written ? "state column vs reference" : "slot must be untouched");
      }
    }
    if (HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Prop, PropHostile, ::testing::ValuesIn(capture::test_backends(capture::Ops::kRecurrent)),
                         [](const ::testing::TestParamInfo<Backend>& i) { return std::string(capture::backend_name(i.param)); });

}  // namespace
}  // namespace gdn::prop
