// The CUDA chunk kernel (src/cuda/chunk/): gated_delta_rule_chunked on tensor cores, K = 128.
//   CudaChunk.EqualsTheRecurrence: varlen batches of lengths 1, 2, 63, 64, 65, 127, 128, 129, 1000
//     and 4097 (shuffled; the long list for float32 state, a shorter one for 16-bit state), plus an
//     empty sequence, a padding sequence (slot -1) and a sequence on the null slot; initial states
//     for every other sequence; "vk" and "kv" pools with a padded slot stride; head ratio 1 and 2;
//     the three value splits (chunk_vs32, chunk_vs64, chunk_vs128: eight consumer warps over
//     V = 128, its cases at V = 128 for both head ratios), the split form and the small forms (chunk_split,
//     chunk_small, chunk_split_small); bf16 and fp16 activations; float32, bf16 and fp16
//     state. Outputs and final states per sequence against the CPU backend's recurrence, padding
//     outputs zero, every slot no sequence names (and the null slot) bit-exact.
//   CudaChunkForms.GateForms: the decay given in log space (float32 a), beta given (float32 b), q and k
//     without l2 normalisation: the same batch against the CPU backend with the same forms (V = 64,
//     128 for the 128-column form).
//   CudaChunkForms.IdenticalBytesRunAfterRun: the same call twice, outputs and pool bit for bit.
//   CudaChunkSplit.SameBytesInEveryForm: the 64- and 128-column blocks, the split form (a chunk's key
//     side prepared once per value head, as records; U solved per block) and the small forms for
//     devices of less shared memory (chunk_small, chunk_split_small) against the 32-column blocks
//     that prepare each chunk themselves: outputs and pool bit for bit (the records hold the values
//     the producers compute, and U is solved by the same products), bf16 and fp16 activations,
//     V = 128 and 64, float32 and bf16 state, a batch whose offsets decrease too.
//   CudaChunkSplitWaves.SameBytesAsTheProducers: the same for a batch of 4096 blocks, most of them
//     not resident together (the split form; the 128-column form's 1024 blocks).
// Tolerance principle: the kernel takes its products in the activation dtype (16-bit inputs, float32
// accumulation, as FLA's chunk kernel does), so every product carries a relative rounding of about
// 2^-9 per input; the transition exp(g) (I - beta k k^T) has norm <= 1, so errors of one chunk are not
// amplified by later ones. Outputs and states: rel L2 1e-2 (the golden tolerance for 16-bit
// activations); measured about 3e-3.
#include <algorithm>
#include <numeric>

#include "prop_ops.h"

namespace gdn::prop {
namespace {

using cuda::plan::Path;

struct ChunkCase {
  DType act, state;
  StateLayout layout;
  int64_t ratio;
  Path path;
};
std::string case_name(const ::testing::TestParamInfo<ChunkCase>& i) {
  const ChunkCase& c = i.param;
  return std::string("act") + dtype_short(c.act) + "_state" + dtype_short(c.state) + "_" + layout_name(c.layout) +
         "_r" + std::to_string(c.ratio) + "_" + cuda::plan::path_name(c.path);
}

class CudaChunk : public ::testing::TestWithParam<ChunkCase> {};

constexpr int64_t kNull = 3;  // the null slot of these batches

struct ChunkBatch {
  std::vector<int64_t> len, slot;
  std::vector<bool> init;
  std::vector<int64_t> qsl;
};

ChunkBatch make_batch(Rng& r, std::vector<int64_t> lens, int64_t num_slots) {
  ChunkBatch b;
  lens.push_back(0);   // empty
  lens.push_back(70);  // padding (slot -1)
  lens.push_back(5);   // on the null slot
  std::vector<int64_t> order(lens.size());
  std::iota(order.begin(), order.end(), 0);
  for (int64_t i = static_cast<int64_t>(order.size()) - 1; i > 0; --i) std::swap(order[i], order[r.randint(0, i)]);
  std::vector<int64_t> free_slots;
  for (int64_t s = 0; s < num_slots; ++s)
    if (s != kNull) free_slots.push_back(s);
  for (int64_t i = static_cast<int64_t>(free_slots.size()) - 1; i > 0; --i)
    std::swap(free_slots[i], free_slots[r.randint(0, i)]);
  const int64_t n = static_cast<int64_t>(lens.size());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t which = order[i];
    b.len.push_back(lens[which]);
    b.slot.push_back(which == n - 2 ? -1 : which == n - 1 ? kNull : free_slots[i]);
    b.init.push_back(i % 2 == 0);
  }
  b.qsl = prefix_sum(b.len);
  return b;
}

struct ChunkRun {
  Buf o, pool;
};

// Runs the batch on backend be: the chunked op (chunked = true) or the recurrent op; forms: the
// decay and beta given, no l2 norm.
ChunkRun run(Backend be, bool chunked, GdrIn& in, const ChunkBatch& b, const Buf& pool0, StateLayout layout,
             DType act, bool forms = false) {
  ChunkRun out{Buf(act, {in.T, in.HV, in.V}), pool0};
  Rng fill(99);
  fill_normal(out.o, fill, 1.0);  // a fill that must be overwritten
  Buf qsl = index_buf(b.qsl), slots = index_buf(b.slot), hinit = bool_buf(b.init);
  GatedDeltaRuleArgs a = gdr_args(in, out.pool, layout, qsl, slots, nullptr, &hinit, out.o, kNull);
  if (forms) {
    a.A_log = absent();
    a.dt_bias = absent();
    a.beta_sigmoid = false;
    a.qk_l2norm = false;
  }
  const Status s = chunked ? capture::run_chunked_on(be, a) : capture::run_recurrent_on(be, a);
  EXPECT_TRUE(s.ok()) << s.message();
  return out;
}

void expect_match(const ChunkRun& got, const ChunkRun& ref, const ChunkBatch& b, const Buf& pool0, int64_t row,
                  double tol_o, double tol_s) {
  const int64_t n = static_cast<int64_t>(b.len.size());
  for (int64_t i = 0; i < n; ++i) {
    SCOPED_TRACE(::testing::Message() << "sequence " << i << " (len " << b.len[i] << ", slot " << b.slot[i]
                                      << ", init " << b.init[i] << ")");
    if (b.len[i] == 0) continue;
    const int64_t at = b.qsl[i] * row, cnt = b.len[i] * row;
    if (b.slot[i] < 0 || b.slot[i] == kNull) {
      for (int64_t j = 0; j < cnt; ++j)
        if (got.o.get(at + j) != 0.0) {
          ADD_FAILURE() << "padding sequence: output element " << j << " is " << got.o.get(at + j);
          break;
        }
      continue;
    }
    EXPECT_LE(rel_l2(got.o, ref.o, {{at, cnt}}, {{at, cnt}}), tol_o) << "outputs";
    expect_slot_close(got.pool, b.slot[i], ref.pool, b.slot[i], tol_s, "final state");
  }
  const int64_t slots = pool0.shape()[0];
  for (int64_t s = 0; s < slots; ++s) {
    bool named = false;
    for (int64_t i = 0; i < n; ++i) named |= b.slot[i] == s && s != kNull && b.len[i] > 0;
    if (!named) expect_slot_close(got.pool, s, pool0, s, 0, "a slot no sequence writes");
  }
}

// V of a case: the 128-column form needs V = 128 (a forced chunk_vs128 runs a narrower form
// otherwise), so its cases take 128 wherever the others take `v`.
int64_t value_dim(const ChunkCase& c, int64_t v) { return c.path == Path::kChunk128 ? 128 : v; }

TEST_P(CudaChunk, EqualsTheRecurrence) {
  PROP_SKIP_IF_UNAVAILABLE(Backend::kCUDA);
  const ChunkCase& c = GetParam();
  Rng r(1234 + static_cast<uint64_t>(c.ratio) * 7 + static_cast<uint64_t>(c.path));
  const int64_t H = 2, HV = H * c.ratio, K = 128, V = value_dim(c, c.ratio == 1 ? 128 : 64);
  std::vector<int64_t> lens = c.state == DType::kFloat32
                                  ? std::vector<int64_t>{1, 2, 63, 64, 65, 127, 128, 129, 1000, 4097}
                                  : std::vector<int64_t>{1, 2, 64, 65, 129, 700};
  const int64_t num_slots = static_cast<int64_t>(lens.size()) + 6;
  const ChunkBatch b = make_batch(r, lens, num_slots);
  GdrIn in = make_gdr_in(r, b.qsl.back(), H, HV, K, V, c.act, DType::kFloat32);
  Buf pool0 = make_ssm_pool(c.state, num_slots, HV, K, V, c.layout, 8);
  fill_normal(pool0, r, 0.3);
  const ChunkRun got = run(Backend(Backend::kCUDA, c.path), true, in, b, pool0, c.layout, c.act);
  const ChunkRun ref = run(Backend::kCPU, false, in, b, pool0, c.layout, c.act);
  expect_match(got, ref, b, pool0, HV * V, 1e-2, 1e-2);
}

class CudaChunkForms : public ::testing::TestWithParam<ChunkCase> {};

TEST_P(CudaChunkForms, GateForms) {
  PROP_SKIP_IF_UNAVAILABLE(Backend::kCUDA);
  const ChunkCase& c = GetParam();
  Rng r(77 + static_cast<uint64_t>(c.path));
  const int64_t H = 2, HV = 4, K = 128, V = value_dim(c, 64);
  const ChunkBatch b = make_batch(r, {1, 64, 65, 300}, 12);
  GdrIn in = make_gdr_in(r, b.qsl.back(), H, HV, K, V, c.act, DType::kFloat32);
  // float32 log decays in [-0.5, 0], beta in (0, 1); q, k scaled to unit-ish norm by hand
  in.a = Buf(DType::kFloat32, {in.T, HV});
  in.b = Buf(DType::kFloat32, {in.T, HV});
  for (int64_t i = 0; i < in.T * HV; ++i) {
    in.a.set(i, -0.5 * r.uniform(0.0, 1.0));
    in.b.set(i, r.uniform(0.05, 0.95));
  }
  for (Buf* x : {&in.q, &in.k})
    for (int64_t i = 0; i < x->numel(); ++i) x->set(i, x->get(i) / std::sqrt(static_cast<double>(K)));
  Buf pool0 = make_ssm_pool(c.state, 12, HV, K, V, c.layout);
  fill_normal(pool0, r, 0.3);
  const ChunkRun got = run(Backend(Backend::kCUDA, c.path), true, in, b, pool0, c.layout, c.act, true);
  const ChunkRun ref = run(Backend::kCPU, false, in, b, pool0, c.layout, c.act, true);
  expect_match(got, ref, b, pool0, HV * V, 1e-2, 1e-2);
}

TEST_P(CudaChunkForms, IdenticalBytesRunAfterRun) {
  PROP_SKIP_IF_UNAVAILABLE(Backend::kCUDA);
  const ChunkCase& c = GetParam();
  Rng r(5);
  const ChunkBatch b = make_batch(r, {1, 65, 200, 1000}, 12);
  const int64_t V = value_dim(c, 64);
  GdrIn in = make_gdr_in(r, b.qsl.back(), 2, 4, 128, V, c.act, DType::kFloat32);
  Buf pool0 = make_ssm_pool(c.state, 12, 4, 128, V, c.layout);
  fill_normal(pool0, r, 0.3);
  const ChunkRun x = run(Backend(Backend::kCUDA, c.path), true, in, b, pool0, c.layout, c.act);
  const ChunkRun y = run(Backend(Backend::kCUDA, c.path), true, in, b, pool0, c.layout, c.act);
  EXPECT_EQ(byte_diff(x.o, y.o), "") << "outputs differ between two identical calls";
  EXPECT_EQ(byte_diff(x.pool, y.pool), "") << "states differ between two identical calls";
}

// The split form and the small forms against the producers' form of 32 columns: the same bytes (see
// the file's comment).
class CudaChunkSplit : public ::testing::TestWithParam<ChunkCase> {};

TEST_P(CudaChunkSplit, SameBytesInEveryForm) {
  PROP_SKIP_IF_UNAVAILABLE(Backend::kCUDA);
  const ChunkCase& c = GetParam();
  Rng r(4242 + static_cast<uint64_t>(c.ratio));
  const int64_t H = 2, HV = H * c.ratio, K = 128, V = c.ratio == 1 ? 128 : 64;
  const ChunkBatch b = make_batch(r, {1, 63, 64, 65, 130, 1000, 2049}, 16);
  // offsets that decrease at the end (the last sequence an empty pair, the contract's reading of
  // qsl[i] > qsl[i + 1]; no ranges overlap): the chunk kernel's producers prepare every chunk
  // themselves (the split instance in its own layout), and the calls still agree
  ChunkBatch d = b;
  d.qsl.back() = d.qsl[d.qsl.size() - 2] - 1;
  GdrIn in = make_gdr_in(r, b.qsl.back(), H, HV, K, V, c.act, DType::kFloat32);
  Buf pool0 = make_ssm_pool(c.state, 16, HV, K, V, c.layout);
  fill_normal(pool0, r, 0.3);
  for (const ChunkBatch* x : {&b, static_cast<const ChunkBatch*>(&d)}) {
    SCOPED_TRACE(x == &b ? "increasing offsets" : "decreasing offsets");
    const ChunkRun prod = run(Backend(Backend::kCUDA, Path::kChunk32), true, in, *x, pool0, c.layout, c.act);
    for (Path form : {Path::kChunk64, Path::kChunk128, Path::kChunkSplit, Path::kChunkSmall, Path::kChunkSplitSmall}) {
      SCOPED_TRACE(cuda::plan::path_name(form));
      const ChunkRun got = run(Backend(Backend::kCUDA, form), true, in, *x, pool0, c.layout, c.act);
      EXPECT_EQ(byte_diff(got.o, prod.o), "") << "outputs";
      EXPECT_EQ(byte_diff(got.pool, prod.pool), "") << "states";
    }
  }
}

// The split form over many sequences (thousands of chunk-kernel blocks, most not resident at once;
// the prep kernel's chunks of 64 sequences, each chunk's T blocks at its own slot).
TEST(CudaChunkSplitWaves, SameBytesAsTheProducers) {
  PROP_SKIP_IF_UNAVAILABLE(Backend::kCUDA);
  Rng r(777);
  const int64_t H = 8, HV = 16, K = 128, V = 128, slots = 72;
  std::vector<int64_t> lens;
  for (int i = 0; i < 61; ++i) lens.push_back(r.randint(1, 300));
  const ChunkBatch b = make_batch(r, lens, slots);  // 64 sequences: 4096 blocks of 32 columns
  GdrIn in = make_gdr_in(r, b.qsl.back(), H, HV, K, V, DType::kBFloat16, DType::kFloat32);
  Buf pool0 = make_ssm_pool(DType::kFloat32, slots, HV, K, V, StateLayout::kVK);
  fill_normal(pool0, r, 0.3);
  const ChunkRun prod = run(Backend(Backend::kCUDA, Path::kChunk32), true, in, b, pool0, StateLayout::kVK, DType::kBFloat16);
  for (Path form : {Path::kChunkSplit, Path::kChunk128}) {
    SCOPED_TRACE(cuda::plan::path_name(form));
    const ChunkRun got = run(Backend(Backend::kCUDA, form), true, in, b, pool0, StateLayout::kVK, DType::kBFloat16);
    EXPECT_EQ(byte_diff(got.o, prod.o), "") << "outputs";
    EXPECT_EQ(byte_diff(got.pool, prod.pool), "") << "states";
  }
}

std::vector<ChunkCase> cases() {
  std::vector<ChunkCase> v;
  for (DType act : {DType::kBFloat16, DType::kFloat16})
    for (DType st : {DType::kFloat32, DType::kBFloat16, DType::kFloat16})
      for (StateLayout l : {StateLayout::kVK, StateLayout::kKV})
        for (int64_t ratio : {1, 2})
          for (Path p : {Path::kChunk32, Path::kChunk64, Path::kChunk128, Path::kChunkSplit, Path::kChunkSmall,
                         Path::kChunkSplitSmall})
            v.push_back({act, st, l, ratio, p});
  return v;
}
INSTANTIATE_TEST_SUITE_P(Cuda, CudaChunk, ::testing::ValuesIn(cases()), case_name);

// Gate forms and determinism: each activation and state dtype, both splits, one layout and ratio.
std::vector<ChunkCase> form_cases() {
  std::vector<ChunkCase> v;
  for (DType act : {DType::kBFloat16, DType::kFloat16})
    for (DType st : {DType::kFloat32, DType::kBFloat16, DType::kFloat16})
      for (Path p : {Path::kChunk32, Path::kChunk64, Path::kChunk128, Path::kChunkSplit, Path::kChunkSmall,
                         Path::kChunkSplitSmall})
        v.push_back({act, st, StateLayout::kVK, 2, p});
  return v;
}
INSTANTIATE_TEST_SUITE_P(Cuda, CudaChunkForms, ::testing::ValuesIn(form_cases()), case_name);

std::vector<ChunkCase> split_cases() {
  std::vector<ChunkCase> v;
  for (DType act : {DType::kBFloat16, DType::kFloat16})
    for (DType st : {DType::kFloat32, DType::kBFloat16})
      for (int64_t ratio : {1, 2}) v.push_back({act, st, ratio == 1 ? StateLayout::kVK : StateLayout::kKV, ratio, Path::kChunkSplit});
  return v;
}
INSTANTIATE_TEST_SUITE_P(Cuda, CudaChunkSplit, ::testing::ValuesIn(split_cases()), case_name);

}  // namespace
}  // namespace gdn::prop
