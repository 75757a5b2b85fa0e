// The CUDA backend's planner (src/cuda/plan/plan.h) for the chunk kernel, on the CPU: the chunked op
// (when the chunk kernel, which value split, the split form, the small forms) and gdn_attention's
// long prefills beside its step, on a 132-SM card (the table's reference) and others.
#include <gtest/gtest.h>

#include "cuda/plan/plan.h"

namespace gdn::cuda::plan {
namespace {

// The chunked op: the chunk kernel for prefill-like batches (>= chunk_min_tokens = 32 tokens per
// sequence) where it can run; 64 value columns per block once those blocks fill the device (132 on
// the reference card, scaled by SM count), else 32; forced paths.
ChunkProblem chunk_of(int64_t nseq, int64_t tok_per_seq, int V = 128, bool ok = true) {
  ChunkProblem p;
  p.nseq = nseq;
  p.tokens = nseq * tok_per_seq;
  p.HV = 32;
  p.V = V;
  p.chunk_ok = ok;
  return p;
}
TEST(Plan, ChunkedOp) {
  auto vs = [](const ChunkProblem& p, int sms, Override f = {}) {
    const ChunkPlan pl = plan_chunked(p, 9, sms, f);
    return pl.chunk ? pl.vs : 0;  // 0: the recurrence
  };
  EXPECT_EQ(vs(chunk_of(1, 8192), 132), 32);   // 64 blocks of 64 columns: half the device
  EXPECT_EQ(vs(chunk_of(2, 8192), 132), 32);   // 128 < 132; 64 blocks of 128 columns < 67
  EXPECT_EQ(vs(chunk_of(3, 8192), 132), 128);  // 96 blocks of 128 columns >= 67
  EXPECT_EQ(vs(chunk_of(2, 8192), 114), 128);  // 64 >= 67 * 114 / 132: the same waves on a smaller card
  EXPECT_EQ(vs(chunk_of(5, 8192, 64), 132), 64);  // V = 64: 160 blocks of 64 columns
  EXPECT_EQ(vs(chunk_of(64, 256), 132), 128);
  EXPECT_EQ(vs(chunk_of(64, 256, 96), 132), 32);   // V not a multiple of 64
  EXPECT_EQ(vs(chunk_of(64, 256, 192), 132), 64);  // nor of 128
  EXPECT_EQ(vs(chunk_of(64, 32), 132), 128);       // 32 tokens per sequence: prefill-like
  EXPECT_EQ(vs(chunk_of(64, 31), 132), 0);         // fewer: the recurrence
  EXPECT_EQ(vs(chunk_of(64, 1), 132), 0);
  EXPECT_EQ(vs(chunk_of(1, 8192, 128, false), 132), 0);  // the kernel cannot take it
  EXPECT_EQ(vs(chunk_of(1, 8192, 128, false), 132, {Path::kChunk64}), 0);
  EXPECT_EQ(vs(chunk_of(1, 8192), 132, {Path::kChunk64}), 64);
  EXPECT_EQ(vs(chunk_of(64, 1), 132, {Path::kChunk32}), 32);
  EXPECT_EQ(vs(chunk_of(1, 8192, 96), 132, {Path::kChunk64}), 32);  // cannot: the other split
  EXPECT_EQ(vs(chunk_of(1, 8192), 132, {Path::kChunk128}), 128);
  EXPECT_EQ(vs(chunk_of(1, 8192, 192), 132, {Path::kChunk128}), 32);  // V not a multiple of 128
  ChunkProblem no128 = chunk_of(1, 8192);
  no128.vs128_fits = false;
  EXPECT_EQ(vs(no128, 132, {Path::kChunk128}), 32);
  no128.vs128_fits = true;
  no128.full_fits = false;  // the small forms: 32 columns
  EXPECT_EQ(vs(no128, 132, {Path::kChunk128}), 32);
  ChunkProblem small_smem = chunk_of(64, 256);
  small_smem.vs128_fits = false;
  EXPECT_EQ(vs(small_smem, 132), 64);
  small_smem.vs64_fits = false;
  EXPECT_EQ(vs(small_smem, 132), 32);
  small_smem = chunk_of(64, 256);
  small_smem.full_fits = false;  // the small forms: no 128-column form
  EXPECT_EQ(vs(small_smem, 132), 64);
  ChunkProblem forms = chunk_of(64, 1);  // chunk_only: the chunk kernel whatever the batch
  forms.chunk_only = true;
  EXPECT_EQ(vs(forms, 132), 128);
  EXPECT_EQ(vs(forms, 132, {Path::kLean}), 128);
  forms.chunk_ok = false;
  EXPECT_EQ(vs(forms, 132), 0);
  EXPECT_EQ(vs(chunk_of(1, 8192), 132, {Path::kLean}), 0);          // a recurrence path, forced
  EXPECT_EQ(vs(chunk_of(1, 8192), 132, {Path::kStepCluster}), 32);  // another op's path: ignored
  // The split form (prep kernel, then 32-column blocks): where the prep kernel takes the problem and
  // the 32-column blocks are at most chunk_split_blocks in H200 units; forced where it can run.
  auto split = [](ChunkProblem p, int sms, Override f = {}, bool ok = true) {
    p.split_ok = ok;
    const ChunkPlan pl = plan_chunked(p, 9, sms, f);
    EXPECT_TRUE(!pl.split || pl.vs == 32) << "the split form's blocks take 32 columns";
    return pl.chunk && pl.split;
  };
  const int64_t max_seqs = kSm90.chunk_split_blocks / (32 * 128 / 32);  // sequences of 32 heads of 128 columns
  ASSERT_GE(max_seqs, 1);
  EXPECT_TRUE(split(chunk_of(max_seqs, 8192), 132));
  EXPECT_FALSE(split(chunk_of(max_seqs + 1, 8192), 132));
  EXPECT_FALSE(split(chunk_of(max_seqs, 8192), 132, {}, false));  // the prep kernel cannot take it
  EXPECT_TRUE(split(chunk_of(max_seqs + 1, 8192), 264));          // the same blocks on twice the SMs
  EXPECT_TRUE(split(chunk_of(64, 256), 132, {Path::kChunkSplit}));
  EXPECT_FALSE(split(chunk_of(64, 256), 132, {Path::kChunkSplit}, false));
  EXPECT_EQ(vs(chunk_of(64, 256), 132, {Path::kChunkSplit}), 32);  // forced, cannot: 32-column producers
  EXPECT_FALSE(split(chunk_of(max_seqs, 8192), 132, {Path::kChunk32}));
  EXPECT_TRUE(is_chunk_path(Path::kChunkSplit) && !is_step_path(Path::kChunkSplit));
  EXPECT_TRUE(is_chunk_path(Path::kChunk32) && is_chunk_path(Path::kChunk64) && !is_chunk_path(Path::kPacked));
  EXPECT_FALSE(is_step_path(Path::kChunk32));
  // The small forms (fewer buffers): where the full forms do not fit the device (an A100's 163 KB),
  // with the same choices of split and columns; forced, on any device.
  auto small = [](ChunkProblem p, int sms, Override f = {}) {
    p.split_ok = true;
    const ChunkPlan pl = plan_chunked(p, 8, sms, f);
    return pl.chunk && pl.small;
  };
  ChunkProblem a100 = chunk_of(1, 8192);
  a100.full_fits = false;
  EXPECT_TRUE(small(a100, 108));
  EXPECT_FALSE(small(chunk_of(1, 8192), 108));
  a100.split_ok = true;
  EXPECT_TRUE(plan_chunked(a100, 8, 108).split);
  ChunkProblem a100_many = chunk_of(64, 256);  // many sequences: still the split form where small
  a100_many.full_fits = false;
  a100_many.split_ok = true;
  EXPECT_TRUE(plan_chunked(a100_many, 8, 108).split);
  a100_many.full_fits = true;
  EXPECT_FALSE(plan_chunked(a100_many, 8, 108).split);
  EXPECT_TRUE(small(chunk_of(1, 8192), 132, {Path::kChunkSmall}));
  EXPECT_TRUE(small(chunk_of(1, 8192), 132, {Path::kChunkSplitSmall}));
  EXPECT_FALSE(plan_chunked(chunk_of(1, 8192), 9, 132, {Path::kChunkSmall}).split);
  {
    ChunkProblem s = chunk_of(1, 8192);
    s.split_ok = true;
    EXPECT_TRUE(plan_chunked(s, 9, 132, {Path::kChunkSplitSmall}).split);
    EXPECT_EQ(plan_chunked(s, 9, 132, {Path::kChunkSplitSmall}).vs, 32);
  }
  EXPECT_EQ(vs(chunk_of(64, 1), 132, {Path::kChunkSmall}), 32);  // forced: the chunk kernel
  EXPECT_TRUE(is_chunk_path(Path::kChunkSmall) && is_chunk_path(Path::kChunkSplitSmall));
  // The deferred kernel's paths are ignored.
  EXPECT_EQ(plan_chunked(chunk_of(1, 8192), 9, 132, {Path::kDeferred}).vs, 32);
  EXPECT_TRUE(plan_chunked(chunk_of(1, 8192), 9, 132, {Path::kDeferred}).chunk);
}

// gdn_attention: the chunk kernel beside the step when a prefill may be long enough.
TEST(Plan, AttentionChunk) {
  auto plan = [](int64_t prefills, int64_t rows, Override f = {}, bool ok = true, int sms = 132) {
    AttentionChunkProblem p;
    p.prefills = prefills;
    p.prefill_rows = rows;
    p.HV = 32;
    p.V = 128;
    p.chunk_ok = ok;
    return plan_attention_chunk(p, 9, sms, f);
  };
  const int64_t from = kSm90.chunk_min_tokens;
  EXPECT_TRUE(plan(1, 8192).chunk);
  EXPECT_EQ(plan(1, 8192).vs, 32);  // 64 blocks of 64 columns: half the device
  EXPECT_EQ(plan(1, 8192).from, from);
  EXPECT_EQ(plan(8, 8192).vs, 128);
  EXPECT_TRUE(plan(1, from).chunk);
  EXPECT_FALSE(plan(1, from - 1).chunk);  // no prefill can reach the length
  EXPECT_FALSE(plan(0, 8192).chunk);      // decodes and verify only
  EXPECT_FALSE(plan(1, 8192, {}, false).chunk);
  EXPECT_FALSE(plan(1, 8192, {Path::kStepTwoLaunches}).chunk);  // a step path forced: all in the step
  EXPECT_FALSE(plan(1, 8192, {Path::kStepCluster}).chunk);
  EXPECT_EQ(plan(1, 8192, {Path::kChunk64}).vs, 64);
  EXPECT_EQ(plan(8, 8192, {Path::kChunk32}).vs, 32);
  EXPECT_FALSE(plan(1, 8192, {Path::kChunk64}, false).chunk);
  EXPECT_FALSE(plan(1, 8192).split);  // the prep kernel not available (split_ok false)
  AttentionChunkProblem sp;
  sp.prefills = 1;
  sp.prefill_rows = 8192;
  sp.HV = 32;
  sp.V = 128;
  sp.chunk_ok = sp.split_ok = true;
  EXPECT_TRUE(plan_attention_chunk(sp, 9, 132).split);
  EXPECT_EQ(plan_attention_chunk(sp, 9, 132).vs, 32);
  sp.prefills = 2;  // 256 blocks of 32 columns: two waves
  EXPECT_TRUE(plan_attention_chunk(sp, 9, 132).split);
  sp.prefills = 3;
  EXPECT_FALSE(plan_attention_chunk(sp, 9, 132).split);
  EXPECT_EQ(plan_attention_chunk(sp, 9, 132).vs, 128);
  sp.prefills = 8;
  EXPECT_FALSE(plan_attention_chunk(sp, 9, 132).split);
  EXPECT_TRUE(plan_attention_chunk(sp, 9, 132, {Path::kChunkSplit}).split);
  EXPECT_FALSE(plan_attention_chunk(sp, 9, 132).small);
  EXPECT_TRUE(plan_attention_chunk(sp, 9, 132, {Path::kChunkSplitSmall}).small);
  sp.full_fits = false;  // a device of less shared memory: the small forms
  EXPECT_TRUE(plan_attention_chunk(sp, 8, 108).small);
}

}  // namespace
}  // namespace gdn::cuda::plan
