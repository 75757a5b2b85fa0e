// The deferred-commit mode's metadata the host cannot see, and the memory it must not touch
// (docs/contract.md §3 and §7), on the CPU and on each CUDA backend of the mode (skipped without a GPU).
//   DeferredMeta.HostileEqualsClean: each hostile call against a clean call the rules declare
//     equivalent, bit for bit on the same backend (outputs, pool, both logs), canaries intact:
//     replay counts negative / past log_cols / 2^31 - 1 / 2^40 == clamped into [0, log_cols]; an
//     accepted_path entry negative / log_cols / 2^40 == the replay cut there; a parent negative /
//     the token itself / later / 2^40 == a root; a slot past the pool / 2^32 + 1 (int64) / the null
//     block == padding; query_start_loc past the buffer, negative, decreasing == clamped, empty (an
//     empty sequence commits its replay). check_metadata reports the hostile counts, slots and
//     offsets and accepts the clean calls.
//   DeferredMeta.UntouchedMemory: every call runs twice, everything a call must not read or write
//     (slots no sequence names, the null block's slot, rows of inputs of padding sequences, input
//     and output rows past query_start_loc[n], log entries not replayed, output stride gaps) poisoned
//     two ways: outputs of valid tokens, committed slots and the logged entries are the same and
//     finite in both runs, padding outputs zero, everything else (verify_log whole, log rows past
//     min(T, log_cols), other slots) untouched. Linear verify, trees, accepted paths, log_tokens
//     false; float32 and bf16 activations.
#include <functional>
#include <numeric>

#include "prop_deferred.h"
#include "prop_rules.h"

namespace gdn::prop {
namespace {

class DeferredMeta : public ::testing::TestWithParam<Backend> {};

constexpr int64_t kH = 1, kHV = 2, kK = 128, kV = 8, kCols = 4;  // K = 128: the lean form's shape (chains)

// A deferred call: 5 sequences in 7 slots (4 and 6 unnamed), sequence 2 padding (the null block 1),
// sequence 3 without initial state; a log of kCols rows per slot; 15 token rows (2 past the last).
struct MCase {
  std::vector<int64_t> qsl = {0, 3, 4, 8, 10, 13}, slots = {3, 0, 1, 2, 5}, nacc = {2, 1, 4, 1, 3};
  std::vector<int64_t> parents;            // per token row (empty: chains)
  std::vector<std::vector<int64_t>> path;  // [n, kCols] (empty: none)
  std::vector<bool> init = {true, true, true, false, true};
  DType index_dtype = DType::kInt32;
  std::optional<int64_t> null_id = 1;
  bool log_tokens = true;
  int64_t rows = 15, num_slots = 7;
  GdrIn in;
  Buf pool, log_in, log_out;
};

MCase make_case(Rng& r, bool tree, bool path) {
  MCase c;
  c.in = make_gdr_in(r, c.rows, kH, kHV, kK, kV, DType::kFloat32, DType::kFloat32);
  c.pool = make_ssm_pool(DType::kFloat32, c.num_slots, kHV, kK, kV, StateLayout::kVK);
  fill_normal(c.pool, r, 0.5);
  c.log_in = deferred_log(c.num_slots, kCols, kHV, kK, kV);
  fill_log(c.log_in, kK, r);
  c.log_out = c.log_in;
  fill_normal(c.log_out, r, 1.0);
  if (tree)
    for (size_t i = 0; i + 1 < c.qsl.size(); ++i) {
      const int64_t T = (i + 2 < c.qsl.size() ? c.qsl[i + 1] : c.rows) - c.qsl[i];  // the last: every row after it
      for (int64_t t = 0; t < T; ++t) c.parents.push_back(t == 0 ? -1 : r.randint(-1, t - 1));
    }
  if (path)
    for (size_t i = 0; i + 1 < c.qsl.size(); ++i) c.path.push_back({3, 1, 0, 2});
  return c;
}

struct MRun {
  Buf o, pool, log_in, log_out;
  Status status, meta;
};
MRun run(Backend be, MCase& c) {
  MRun m{Buf(DType::kFloat32, {c.rows, kHV, kV}), c.pool, c.log_in, c.log_out, Status::Ok(), Status::Ok()};
  poison(m.o, 0);
  Buf qsl = index_buf(c.qsl, c.index_dtype), slots = index_buf(c.slots, c.index_dtype);
  Buf nacc = index_buf(c.nacc, c.index_dtype), hinit = bool_buf(c.init), par, path;
  DeferredOpts op;
  op.has_init = &hinit;
  op.null_id = c.null_id;
  op.log_tokens = c.log_tokens;
  if (!c.parents.empty()) op.parents = &(par = index_buf(c.parents, c.index_dtype));
  if (!c.path.empty()) op.path = &(path = index_buf2(c.path, kCols, c.index_dtype));
  const GatedDeltaRuleArgs a = deferred_args(c.in, m.pool, qsl, slots, nacc, m.o, m.log_in, m.log_out, op);
  m.meta = check_metadata(a);
  m.status = capture::run_recurrent_on(be, a);
  return m;
}

enum Form : int { kLinear = 1, kTree = 2, kPath = 4, kAll = 7 };
struct Mutation {
  const char* name;
  int forms;  // the call forms it applies to
  std::function<void(MCase& hostile, MCase& clean)> apply;
  bool meta_error;  // check_metadata must report the hostile call
};
std::vector<Mutation> mutations() {
  const int64_t big = int64_t{1} << 40;
  auto int64 = [](MCase& h, MCase& c) { h.index_dtype = c.index_dtype = DType::kInt64; };
  std::vector<Mutation> m;
  m.push_back({"replay count negative", kAll, [](MCase& h, MCase& c) { h.nacc[0] = -5, c.nacc[0] = 0; }, true});
  m.push_back(
      {"replay count past log_cols", kAll, [](MCase& h, MCase& c) { h.nacc[4] = kCols + 2, c.nacc[4] = kCols; }, true});
  m.push_back(
      {"replay count 2^31 - 1", kAll, [](MCase& h, MCase& c) { h.nacc[1] = 2147483647, c.nacc[1] = kCols; }, true});
  m.push_back({"replay count 2^40 (int64)", kAll,
               [=](MCase& h, MCase& c) { int64(h, c), h.nacc[4] = big, c.nacc[4] = kCols; }, true});
  m.push_back({"path entry negative", kPath, [](MCase& h, MCase& c) { h.path[4][1] = -3, c.nacc[4] = 1; }, false});
  m.push_back({"path entry log_cols", kPath, [](MCase& h, MCase& c) { h.path[0][0] = kCols, c.nacc[0] = 0; }, false});
  m.push_back({"path entry 2^40 (int64)", kPath,
               [=](MCase& h, MCase& c) { int64(h, c), h.path[4][2] = big, c.nacc[4] = 2; }, false});
  m.push_back({"parent negative", kTree, [](MCase& h, MCase& c) { h.parents[5] = -9, c.parents[5] = -1; }, false});
  m.push_back(
      {"parent the token itself", kTree, [](MCase& h, MCase& c) { h.parents[6] = 2, c.parents[6] = -1; }, false});
  m.push_back({"parent a later token", kTree, [](MCase& h, MCase& c) { h.parents[1] = 2, c.parents[1] = -1; }, false});
  m.push_back({"parent 2^40 (int64)", kTree,
               [=](MCase& h, MCase& c) { int64(h, c), h.parents[7] = big, c.parents[7] = -1; }, false});
  m.push_back({"slot == num_slots", kAll, [](MCase& h, MCase& c) { h.slots[0] = h.num_slots, c.slots[0] = -1; }, true});
  m.push_back({"slot 2^32 + 1 (int64)", kAll,
               [=](MCase& h, MCase& c) { int64(h, c), h.slots[4] = (int64_t{1} << 32) + 1, c.slots[4] = -1; }, true});
  m.push_back(
      {"query_start_loc[n] past the buffer", kAll, [](MCase& h, MCase& c) { h.qsl[5] = 99, c.qsl[5] = 15; }, true});
  m.push_back({"query_start_loc[0] negative", kAll, [](MCase& h, MCase& c) { h.qsl[0] = -4, c.qsl[0] = 0; }, true});
  m.push_back({"query_start_loc decreasing: the last sequence empty, its replay committed", kAll,
               [](MCase& h, MCase& c) { h.qsl[5] = 9, c.qsl[5] = 10; }, true});
  return m;
}

TEST_P(DeferredMeta, HostileEqualsClean) {
  const Backend be = GetParam();
  PROP_SKIP_IF_UNAVAILABLE(be);
  uint64_t seed = 8600;
  for (const Mutation& mu : mutations())
    for (int form : {kLinear, kTree, kPath}) {
      if (!(mu.forms & form)) continue;
      const bool tree = form == kTree, path = form == kPath;
      Rng r(seed++);
      MCase base = make_case(r, tree, path), hostile = base, clean = base;
      mu.apply(hostile, clean);
      SCOPED_TRACE(::testing::Message() << capture::backend_name(be) << " '" << mu.name << "' form " << form);
      MRun h = run(be, hostile), c = run(be, clean);
      ASSERT_TRUE(h.status.ok()) << h.status.message();
      ASSERT_TRUE(c.status.ok()) << c.status.message();
      EXPECT_TRUE(c.meta.ok()) << "check_metadata rejects the clean call: " << c.meta.message();
      if (mu.meta_error) EXPECT_FALSE(h.meta.ok()) << "check_metadata accepts the hostile call";
      EXPECT_EQ(byte_diff(h.o, c.o), "") << "outputs";
      EXPECT_EQ(byte_diff(h.pool, c.pool), "") << "pool";
      EXPECT_EQ(byte_diff(h.log_out, c.log_out), "") << "verify_log_out";
      EXPECT_TRUE(h.log_in.same_bytes(base.log_in)) << "verify_log written";
      for (const Buf* b : {&h.o, &h.pool, &h.log_in, &h.log_out})
        EXPECT_TRUE(b->canaries_ok()) << "write outside a buffer";
      if (HasFailure()) return;
    }
}

TEST_P(DeferredMeta, UntouchedMemory) {
  const Backend be = GetParam();
  PROP_SKIP_IF_UNAVAILABLE(be);
  for (int variant = 0; variant < 8; ++variant) {
    const bool tree = variant % 4 == 1, path = variant % 4 == 2, log_tokens = variant % 4 != 3;
    const DType act = variant < 4 ? DType::kFloat32 : DType::kBFloat16;
    Rng r(8700 + variant);
    MCase c = make_case(r, tree, path);
    c.log_tokens = log_tokens;
    c.rows = 17;  // two rows past query_start_loc[n]
    c.in = make_gdr_in(r, c.rows, kH, kHV, kK, kV, act, DType::kFloat32);
    if (tree) c.parents.insert(c.parents.end(), {-1, 0});
    const int64_t n = 5, E = kK + kV + 2, orow = kHV * kV + 3;
    SCOPED_TRACE(::testing::Message() << capture::backend_name(be) << " variant " << variant);
    Buf out(act, {c.rows, kHV, kV}, orow);  // padded rows: their gaps must stay as they are
    std::vector<uint8_t> live_rows(c.rows, 0), cls_o = cls_all(out, kUntouched), live_pool = cls_all(c.pool, 0);
    std::vector<uint8_t> cls_pool = cls_all(c.pool, kUntouched), live_log = cls_all(c.log_in, 0);
    std::vector<uint8_t> cls_log = cls_all(c.log_out, kUntouched);
    std::vector<int64_t> lens;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t s = c.slots[i], T = c.qsl[i + 1] - c.qsl[i];
      lens.push_back(T);
      const bool pad = !slot_ok(s, c.num_slots, c.null_id);
      for (int64_t t = c.qsl[i]; t < c.qsl[i + 1]; ++t) {
        live_rows[t] = !pad;
        for (int64_t e = 0; e < kHV * kV; ++e) cls_o[t * orow + e] = pad ? kZero : kWritten;
      }
      if (pad) continue;
      mark_index(cls_pool, c.pool, s, kWritten);
      if (!c.init[i]) continue;
      mark_index(live_pool, c.pool, s, 1);
      for (int64_t j = 0; j < std::min(c.nacc[i], kCols); ++j) {  // the replayed rows
        const int64_t row = path ? c.path[i][j] : j;
        for (int64_t e = 0; e < kHV * E; ++e) live_log[(s * kCols + row) * kHV * E + e] = 1;
      }
    }
    const auto logged = logged_entries(lens, c.slots, c.num_slots, kCols, log_tokens, c.null_id);
    for (int64_t s = 0; s < c.num_slots; ++s)
      for (int64_t j = 0; j < kCols; ++j)
        if (logged[s][j])
          for (int64_t e = 0; e < kHV * E; ++e) cls_log[(s * kCols + j) * kHV * E + e] = kWritten;
    Buf b_o[2], a_o[2], b_pool[2], a_pool[2], b_lin[2], a_lin[2], b_lout[2], a_lout[2];
    for (int k = 0; k < 2; ++k) {
      MCase ck = c;
      auto rows_live = [&](const Buf& b) {
        std::vector<uint8_t> v(b.phys_elems(), 0);
        for (int64_t t = 0; t < c.rows; ++t) mark_index(v, b, t, live_rows[t]);
        return v;
      };
      for (Buf* b : {&ck.in.q, &ck.in.k, &ck.in.v, &ck.in.a, &ck.in.b}) *b = poisoned_copy(*b, rows_live(*b), k);
      ck.pool = poisoned_copy(c.pool, live_pool, k);
      ck.log_in = poisoned_copy(c.log_in, live_log, k);
      ck.log_out = c.log_out;
      poison(ck.log_out, k);
      Buf o = out;
      poison(o, k);
      b_o[k] = o, b_pool[k] = ck.pool, b_lin[k] = ck.log_in, b_lout[k] = ck.log_out;
      Buf qsl = index_buf(ck.qsl), slots = index_buf(ck.slots), nacc = index_buf(ck.nacc), hinit = bool_buf(ck.init);
      Buf par, pb;
      DeferredOpts op;
      op.has_init = &hinit;
      op.null_id = ck.null_id;
      op.log_tokens = log_tokens;
      if (tree) op.parents = &(par = index_buf(ck.parents));
      if (path) op.path = &(pb = index_buf2(ck.path, kCols));
      PROP_ASSERT_OK(run_deferred_on(be, ck.in, ck.pool, qsl, slots, nacc, o, ck.log_in, ck.log_out, op));
      a_o[k] = o, a_pool[k] = ck.pool, a_lin[k] = ck.log_in, a_lout[k] = ck.log_out;
    }
    check_buffer("o", b_o, a_o, cls_o, nullptr);
    check_buffer("ssm_state", b_pool, a_pool, cls_pool, nullptr);
    check_buffer("verify_log", b_lin, a_lin, cls_all(c.log_in, kUntouched), nullptr);
    check_buffer("verify_log_out", b_lout, a_lout, cls_log, nullptr);
    if (HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Prop, DeferredMeta, ::testing::ValuesIn(capture::test_backends(capture::Ops::kDeferred)),
                         [](const ::testing::TestParamInfo<Backend>& i) { return capture::backend_name(i.param); });

}  // namespace
}  // namespace gdn::prop
