// gdn_attention's long prefills in the CUDA chunk kernel (src/cuda/chunk/, its q, k, v from the conv
// of the projections into a buffer, src/cuda/conv/conv_rows.cu), the rest of the batch in the
// two-launch step.
//   CudaAttentionChunk.MixedBatchEqualsTheCpu: prefills of lengths 1, 31, 32, 63, 64, 65, 129, 300
//     and 1000 (one of them padding: slot -1; one on the null slot), decodes, ragged verify
//     sequences and padding ones, token rows interleaved between the groups (token_indx), graph-padded
//     rows; both verify conv layouts; K = V = 128, head ratio 2; bf16 and fp16 activations, float32
//     and bf16 state; the planner's choice, each value split and the split form (prep kernel) forced. Against the CPU backend:
//     core_attn_out per sequence and the SSM state per slot within rel L2 1e-2, padding rows zero,
//     graph-padded rows untouched, z and the conv pool bit-exact (copies of inputs), slots no
//     sequence names bit-exact.
//   CudaAttentionChunk.IdenticalBytesRunAfterRun: the same call twice, every output bit for bit.
//   CudaAttentionChunkSplit.SameBytesAsTheProducers: the split form (prep kernel) against the
//     producers' form (chunk32) on the same batch: every output and pool bit for bit, bf16
//     activations with both state dtypes and conv widths 2, 4, 5, fp16 with float32 state and
//     width 4, token rows in order and interleaved
//     (the final state of a sequence whose last chunk is partial included: both take the decay of
//     the last token, chunk_prep.cuh).
//   CudaAttentionChunkOffsets.DecreasingOffsetsTakeTheStep: the same kind of batch with a decreasing
//     pair of non-spec offsets, where every sequence takes the step; against the CPU as above.
//   CudaAttentionChunk.PromptSplitAcrossCalls: a 300-token prompt in one call and in two (130 tokens
//     without initial state, then 170 with it): the same conv pool bytes, outputs and final state
//     within rel L2 1e-2.
//   CudaAttentionChunkLong.MoreTilesThanGridRows: one prefill of 65535 * 8 + 1000 tokens, more
//     tiles of 8 tokens than a grid has block rows (the conv into the chunk kernel's buffer loops
//     over them), the split form forced: against the same call in the step (two launches), both on
//     CUDA: outputs of the last 8192 tokens and the final state within rel L2 1e-2, the conv pool
//     and z bit for bit.
//   CudaAttentionChunkZ.GroupWithoutRemap: the non-spec group without a remap (its local tokens are
//     rows 0..), verify sequences on the rows after it and rows of no sequence below
//     num_actual_tokens (their z still copied): every chunk form and the planner's, z rows on and
//     off 16 bytes, both projection layouts; against the CPU as above.
//   CudaAttentionChunkZ.RowsOffSixteenBytesCopyElementwise: z with rows 16-byte aligned (the conv
//     kernel's vector copy) and with a row stride of HV V + 1 elements (its element copy), bf16 and
//     f32 activations, both projection layouts, the planner's path and the step as two launches: z
//     bit-exact against the CPU's, the gaps between rows and graph-padded rows untouched.
// Tolerance: as tests/test_cuda_chunk.cpp (products in the 16-bit activation dtype, float32
// accumulation: about 3e-3 measured against the float32 recurrence).
#include "prop_attention.h"

namespace gdn::prop {
namespace {

using cuda::plan::Path;
constexpr double kTol = 1e-2;

struct Case {
  DType act, ssm;
  SpecConvLayout layout;
  Path path;
};
std::string case_name(const ::testing::TestParamInfo<Case>& i) {
  const Case& c = i.param;
  return std::string("act") + dtype_short(c.act) + "_ssm" + dtype_short(c.ssm) +
         (c.layout == SpecConvLayout::kPerToken ? "_per_token_" : "_rolling_") + cuda::plan::path_name(c.path);
}

// The long padding sequences of these batches: the 65-token prefill on slot -1, the 129-token one
// on the null slot.
void pad_long_prefills(AttnProblem& p) {
  int64_t null_slot = -1;
  for (AttnSeq& s : p.seqs) {
    if (s.spec) continue;
    if (s.rows.size() == 65) s.slot = -1;
    if (s.rows.size() == 129) null_slot = s.slot;
  }
  p.null_id = null_slot;
}

AttnProblem make_problem(DType act, DType ssm, SpecConvLayout layout, Rng& r, bool reorder = false, int W = 4) {
  AttnProblem p;
  p.H = 1; p.HV = 2; p.K = 128; p.V = 128; p.W = W; p.cols = 3;
  p.reorder = reorder;
  p.act = act;
  p.ssm_dtype = ssm;
  p.conv_layout = layout;
  MixOptions m;
  m.prefill_lens = {1, 31, 32, 63, 64, 65, 129, 300, 1000};
  m.n_decode = 2;
  m.n_spec = 3;
  make_mixed_batch(p, r, m);
  pad_long_prefills(p);
  for (AttnSeq& s : p.seqs) {
    if (s.spec) continue;
    if (s.rows.size() == 300) s.has_init = false;
    if (s.rows.size() == 1000) s.has_init = true;
  }
  build_meta(p);
  fill_attention_data(p, r);
  return p;
}

std::vector<Range> row_ranges(const AttnProblem& p, const std::vector<int64_t>& rows) {
  std::vector<Range> v;
  for (int64_t row : rows) v.push_back({row * p.HV * p.V, p.HV * p.V});
  return v;
}

void expect_like_cpu(const AttnProblem& got, const Buf& core_g, const Buf& z_g, const AttnProblem& ref,
                     const Buf& core_r, const Buf& z_r) {
  const int64_t row = got.HV * got.V, slot_elems = got.HV * got.K * got.V;
  std::vector<bool> named(got.num_slots, false);
  for (const AttnSeq& s : got.seqs) {
    if (s.rows.empty()) continue;
    const std::vector<Range> rr = row_ranges(got, s.rows);
    const bool pad = s.spec ? s.cols[0] < 0 : s.slot < 0 || (got.null_id && s.slot == *got.null_id);
    SCOPED_TRACE(::testing::Message() << (s.spec ? "verify" : "non-spec") << " sequence of " << s.rows.size()
                                      << " tokens" << (pad ? " (padding)" : ""));
    if (pad) {
      for (const Range& g : rr) EXPECT_EQ(bit_diff(core_g, g.start, core_r, g.start, g.count), "");
      continue;
    }
    EXPECT_LE(rel_l2(core_g, core_r, rr, rr), kTol) << "core_attn_out rows";
    if (!s.spec) {
      named[s.slot] = true;
      const std::vector<Range> sr = {{s.slot * slot_elems, slot_elems}};
      EXPECT_LE(rel_l2(got.ssm_pool, ref.ssm_pool, sr, sr), kTol) << "final state";
    } else {
      for (int64_t c : s.cols)
        if (c >= 0) named[c] = true;
    }
  }
  for (int64_t slot = 0; slot < got.num_slots; ++slot)
    if (!named[slot])
      EXPECT_EQ(bit_diff(got.ssm_pool, slot * slot_elems, ref.ssm_pool, slot * slot_elems, slot_elems), "")
          << "slot " << slot << ", named by no sequence (or the null slot)";
  // Verify states (columns) are the step's, against the CPU within the tolerance.
  EXPECT_LE(rel_l2(got.ssm_pool, ref.ssm_pool), kTol) << "ssm_state pool";
  EXPECT_EQ(bit_diff(core_g, got.num_actual * row, core_r, got.num_actual * row,
                     (got.rows_alloc - got.num_actual) * row),
            "")
      << "graph-padded rows of core_attn_out";
  EXPECT_EQ(byte_diff(z_g, z_r), "") << "z";
  EXPECT_EQ(byte_diff(got.conv_pool, ref.conv_pool), "") << "conv_state pool";
  EXPECT_TRUE(core_g.canaries_ok() && z_g.canaries_ok() && got.conv_pool.canaries_ok() && got.ssm_pool.canaries_ok())
      << "write outside a buffer";
}

// p's call on `be` with its own copy of p's pools and new outputs (make_outputs' poison kind; z's
// rows z_stride elements apart, -1: dense): the pools and outputs after it, and its status.
struct AttnRun {
  AttnProblem p;
  Buf core, z;
  Status st;
};
AttnRun run_copy(const Backend& be, const AttnProblem& p, int poison_kind, int64_t z_stride = -1) {
  AttnRun r{p, {}, {}, Status::Ok()};
  make_outputs(p, &r.core, &r.z, poison_kind);
  if (z_stride >= 0) {
    r.z = Buf(p.act, {p.rows_alloc, p.HV, p.V}, z_stride);
    poison(r.z, poison_kind);
  }
  r.st = run_attention(be, r.p, r.core, r.z);
  return r;
}

// p on `cuda` and on the CPU, from the same inputs and the same poisoned outputs: expect_like_cpu.
void expect_cuda_like_cpu(const Backend& cuda, const AttnProblem& p) {
  const AttnRun c = run_copy(cuda, p, 0), r = run_copy(Backend::kCPU, p, 0);
  PROP_ASSERT_OK(c.st);
  PROP_ASSERT_OK(r.st);
  expect_like_cpu(c.p, c.core, c.z, r.p, r.core, r.z);
}

class CudaAttentionChunk : public ::testing::TestWithParam<Case> {};

TEST_P(CudaAttentionChunk, MixedBatchEqualsTheCpu) {
  const Case& c = GetParam();
  const Backend cuda(Backend::kCUDA, c.path);
  PROP_SKIP_IF_UNAVAILABLE(cuda);
  Rng r(71);
  AttnProblem p = make_problem(c.act, c.ssm, c.layout, r);
  SCOPED_TRACE(describe(p));
  expect_cuda_like_cpu(cuda, p);
}

TEST_P(CudaAttentionChunk, IdenticalBytesRunAfterRun) {
  const Case& c = GetParam();
  const Backend cuda(Backend::kCUDA, c.path);
  PROP_SKIP_IF_UNAVAILABLE(cuda);
  Rng r(72);
  AttnProblem p = make_problem(c.act, c.ssm, c.layout, r);
  const AttnRun a = run_copy(cuda, p, 1), b = run_copy(cuda, p, 1);
  PROP_ASSERT_OK(a.st);
  PROP_ASSERT_OK(b.st);
  EXPECT_EQ(byte_diff(a.core, b.core), "");
  EXPECT_EQ(byte_diff(a.z, b.z), "");
  EXPECT_EQ(byte_diff(a.p.conv_pool, b.p.conv_pool), "");
  EXPECT_EQ(byte_diff(a.p.ssm_pool, b.p.ssm_pool), "");
}

// The split form (prep kernel) against the producers' form (chunk32): the same bytes everywhere.
TEST(CudaAttentionChunkSplit, SameBytesAsTheProducers) {
  const Backend split(Backend::kCUDA, Path::kChunkSplit), prod(Backend::kCUDA, Path::kChunk32);
  PROP_SKIP_IF_UNAVAILABLE(split);
  for (DType act : {DType::kBFloat16, DType::kFloat16})
    for (DType ssm : {DType::kFloat32, DType::kBFloat16})
      for (int W : {4, 2, 5})
        for (bool reorder : {false, true}) {
          if (act == DType::kFloat16 && (ssm != DType::kFloat32 || W != 4)) continue;  // fp16: one case a layout order
          Rng r(74 + W);
          const AttnProblem p = make_problem(act, ssm, SpecConvLayout::kPerToken, r, reorder, W);
          SCOPED_TRACE(::testing::Message() << dtype_short(act) << ", state " << dtype_short(ssm) << ", W " << W
                                            << ", reorder " << reorder);
          const AttnRun a = run_copy(split, p, 1), b = run_copy(prod, p, 1);
          PROP_ASSERT_OK(a.st);
          PROP_ASSERT_OK(b.st);
          EXPECT_EQ(byte_diff(a.core, b.core), "") << "core_attn_out";
          EXPECT_EQ(byte_diff(a.z, b.z), "") << "z";
          EXPECT_EQ(byte_diff(a.p.conv_pool, b.p.conv_pool), "") << "conv pool";
          EXPECT_EQ(byte_diff(a.p.ssm_pool, b.p.ssm_pool), "") << "ssm pool";
        }
}

// Offsets that decrease somewhere (docs/contract.md §3: that pair is an empty sequence) may make
// token ranges overlap, so the whole batch takes the step: the long prefills too, against the CPU.
TEST(CudaAttentionChunkOffsets, DecreasingOffsetsTakeTheStep) {
  const Backend cuda(Backend::kCUDA);
  PROP_SKIP_IF_UNAVAILABLE(cuda);
  Rng r(74);
  AttnProblem p;
  p.H = 1; p.HV = 2; p.K = 128; p.V = 128; p.W = 4; p.cols = 3;
  MixOptions m;
  m.prefill_lens = {40, 200};
  m.trailing_empty = true;
  make_mixed_batch(p, r, m);
  build_meta(p);
  fill_attention_data(p, r);
  const int64_t n = p.ns_qsl.numel() - 1;
  p.ns_qsl.seti(n, p.ns_qsl.geti(n - 1) - 1);  // the trailing empty sequence as a decreasing pair
  expect_cuda_like_cpu(cuda, p);
}

// One prefill of n tokens (rows `first`.. of `full`'s projections) on slot 1 of pools `from`.
AttnProblem one_prefill(const AttnProblem& full, int64_t first, int64_t n, bool init) {
  AttnProblem p = full;
  AttnSeq s;
  s.slot = 1;
  s.has_init = init;
  for (int64_t t = 0; t < n; ++t) s.rows.push_back(t);
  p.seqs = {s};
  p.num_actual = p.rows_alloc = n;
  build_meta(p);
  p.qkvz = Buf(full.qkvz.dtype(), {n, full.qkvz_width()});
  p.ba = Buf(full.ba.dtype(), {n, 2 * full.HV});
  for (int64_t e = 0; e < n * full.qkvz_width(); ++e) p.qkvz.set_bits(e, full.qkvz.bits(first * full.qkvz_width() + e));
  for (int64_t e = 0; e < n * 2 * full.HV; ++e) p.ba.set_bits(e, full.ba.bits(first * 2 * full.HV + e));
  return p;
}

TEST(CudaAttentionChunkSplit, PromptSplitAcrossCalls) {
  const Backend cuda(Backend::kCUDA);
  PROP_SKIP_IF_UNAVAILABLE(cuda);
  Rng r(73);
  AttnProblem base;
  base.H = 1; base.HV = 2; base.K = 128; base.V = 128; base.W = 4;
  base.num_slots = 3;
  base.seqs = {AttnSeq{}};
  base.rows_alloc = base.num_actual = 300;
  for (int64_t t = 0; t < 300; ++t) base.seqs[0].rows.push_back(t);
  base.seqs[0].slot = 1;
  build_meta(base);
  fill_attention_data(base, r);
  AttnProblem whole = one_prefill(base, 0, 300, false);
  AttnProblem first = one_prefill(base, 0, 130, false);
  Buf core_w, z_w, core_1, z_1, core_2, z_2;
  make_outputs(whole, &core_w, &z_w, 0);
  make_outputs(first, &core_1, &z_1, 0);
  PROP_ASSERT_OK(run_attention(cuda, whole, core_w, z_w));
  PROP_ASSERT_OK(run_attention(cuda, first, core_1, z_1));
  AttnProblem second = one_prefill(base, 130, 170, true);
  second.conv_pool = first.conv_pool;
  second.ssm_pool = first.ssm_pool;
  make_outputs(second, &core_2, &z_2, 0);
  PROP_ASSERT_OK(run_attention(cuda, second, core_2, z_2));
  EXPECT_EQ(byte_diff(second.conv_pool, whole.conv_pool), "") << "conv pool after the prompt";
  EXPECT_LE(rel_l2(second.ssm_pool, whole.ssm_pool), kTol) << "state after the prompt";
  const int64_t row = base.HV * base.V;
  EXPECT_LE(rel_l2(core_1, core_w, {{0, 130 * row}}, {{0, 130 * row}}), kTol) << "outputs of the first piece";
  EXPECT_LE(rel_l2(core_2, core_w, {{0, 170 * row}}, {{130 * row, 170 * row}}), kTol) << "outputs of the second piece";
  EXPECT_EQ(bit_diff(z_2, 0, z_w, 130 * row, 170 * row), "") << "z of the second piece";
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (Path path : {Path::kAuto, Path::kChunk32, Path::kChunk64, Path::kChunk128, Path::kChunkSplit,
                    Path::kChunkSmall, Path::kChunkSplitSmall})
    for (SpecConvLayout layout : {SpecConvLayout::kRolling, SpecConvLayout::kPerToken})
      for (auto dt : {std::pair<DType, DType>{DType::kBFloat16, DType::kFloat32},
                      std::pair<DType, DType>{DType::kBFloat16, DType::kBFloat16},
                      std::pair<DType, DType>{DType::kFloat16, DType::kFloat32}})
        v.push_back({dt.first, dt.second, layout, path});
  return v;
}
INSTANTIATE_TEST_SUITE_P(Prop, CudaAttentionChunk, ::testing::ValuesIn(cases()), case_name);

TEST(CudaAttentionChunkLong, MoreTilesThanGridRows) {
  // the split form forced (one sequence's form) against the step: the chunk path is the one tested
  const Backend chunk(Backend::kCUDA, Path::kChunkSplit), step(Backend::kCUDA, Path::kStepTwoLaunches);
  PROP_SKIP_IF_UNAVAILABLE(chunk);
  constexpr int64_t kLen = 65535 * 8 + 1000, kTail = 8192;
  Rng r(76);
  AttnProblem p;
  p.H = 1; p.HV = 1; p.K = 128; p.V = 128; p.W = 4;
  p.num_slots = 3;
  p.seqs = {AttnSeq{}};
  p.rows_alloc = p.num_actual = kLen;
  for (int64_t t = 0; t < kLen; ++t) p.seqs[0].rows.push_back(t);
  p.seqs[0].slot = 1;
  p.seqs[0].has_init = true;
  build_meta(p);
  fill_attention_data(p, r);
  const AttnRun c = run_copy(chunk, p, 0), s = run_copy(step, p, 0);
  PROP_ASSERT_OK(c.st);
  PROP_ASSERT_OK(s.st);
  const int64_t row = p.HV * p.V;
  const std::vector<Range> tail = {{(kLen - kTail) * row, kTail * row}};
  EXPECT_LE(rel_l2(c.core, s.core, tail, tail), kTol) << "outputs of the last tokens";
  EXPECT_LE(rel_l2(c.p.ssm_pool, s.p.ssm_pool), kTol) << "final state";
  EXPECT_EQ(byte_diff(c.p.conv_pool, s.p.conv_pool), "") << "conv pool";
  EXPECT_EQ(byte_diff(c.z, s.z), "") << "z";
}

// z's copy (conv.cu, copy_z_wide) in 16-byte vectors where every row starts on 16 bytes, element by
// element otherwise: both against the CPU, z bit for bit (a copy of inputs), with the gaps of the
// strided rows left as poisoned.
TEST(CudaAttentionChunkZ, RowsOffSixteenBytesCopyElementwise) {
  PROP_SKIP_IF_UNAVAILABLE(Backend(Backend::kCUDA));
  // the planner's choice (bf16: the chunk kernel, then the conv kernel) and the step as two launches
  // (its conv kernel copies z for every activation dtype)
  for (Path path : {Path::kAuto, Path::kStepTwoLaunches}) {
    for (DType act : {DType::kBFloat16, DType::kFloat32}) {
      for (int64_t extra : {0, 1}) {
        for (bool reorder : {false, true}) {
          const Backend gpu(Backend::kCUDA, path);
          SCOPED_TRACE(::testing::Message() << cuda::plan::path_name(path) << ", " << dtype_name(act)
                                            << ", z row stride HV V + " << extra
                                            << (reorder ? ", [q|k|v|z] rows" : ""));
          Rng r(75);
          AttnProblem p = make_problem(act, DType::kFloat32, SpecConvLayout::kPerToken, r, reorder);
          const int64_t zs = p.HV * p.V + extra;
          const AttnRun c = run_copy(gpu, p, 1, zs), cpu = run_copy(Backend::kCPU, p, 1, zs);
          PROP_ASSERT_OK(c.st);
          PROP_ASSERT_OK(cpu.st);
          EXPECT_EQ(byte_diff(c.z, cpu.z), "") << "z, its stride gaps and graph-padded rows";
        }
      }
    }
  }
}

// The non-spec group without a remap (its local tokens are the rows 0..): prefills of 1, 31, 32, 65
// (padding), 129 (null slot), 300 and 1000 tokens and decodes on rows 0.., verify sequences on the
// rows after them, three rows of no sequence below num_actual_tokens and graph-padded rows; the
// planner's path and every chunk form forced; z rows on 16 bytes and off them; both projection
// layouts. Against the CPU (expect_like_cpu: z bit for bit, rows of no sequence included,
// graph-padded rows untouched).
TEST(CudaAttentionChunkZ, GroupWithoutRemap) {
  PROP_SKIP_IF_UNAVAILABLE(Backend(Backend::kCUDA));
  for (Path path : {Path::kAuto, Path::kChunk32, Path::kChunk64, Path::kChunk128, Path::kChunkSplit,
                    Path::kChunkSmall, Path::kChunkSplitSmall})
    for (int64_t extra : {0, 1})
      for (bool reorder : {false, true}) {
        const Backend gpu(Backend::kCUDA, path);
        SCOPED_TRACE(::testing::Message() << cuda::plan::path_name(path) << ", z row stride HV V + " << extra
                                          << (reorder ? ", [q|k|v|z] rows" : ""));
        Rng r(77);
        AttnProblem p;
        p.H = 1; p.HV = 2; p.K = 128; p.V = 128; p.W = 4; p.cols = 3;
        p.reorder = reorder;
        p.act = DType::kBFloat16;
        p.ssm_dtype = DType::kFloat32;
        MixOptions m;
        m.prefill_lens = {1, 31, 32, 65, 129, 300, 1000};
        m.n_spec = 2;
        m.interleave = false;  // group 0 on rows 0.., the verify sequences after it
        make_mixed_batch(p, r, m);
        p.identity_ns = true;
        pad_long_prefills(p);
        p.num_actual += 3;  // rows of no sequence: z still copied
        p.rows_alloc += 3;
        build_meta(p);
        fill_attention_data(p, r);
        const int64_t zs = p.HV * p.V + extra;
        const AttnRun c = run_copy(gpu, p, 1, zs), cpu = run_copy(Backend::kCPU, p, 1, zs);
        PROP_ASSERT_OK(c.st);
        PROP_ASSERT_OK(cpu.st);
        expect_like_cpu(c.p, c.core, c.z, cpu.p, cpu.core, cpu.z);
      }
}

}  // namespace
}  // namespace gdn::prop
