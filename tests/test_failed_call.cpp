// A failed call changes nothing (docs/contract.md §5), for the allocations the CPU backend makes: its
// scratch is sized by the tokens the sequences use (not by the length of a token_indx), and all of
// it (gdn_attention's gathered groups, every work item's buffers of every op it runs) is allocated
// before the first write. Each case runs in a child process (a gtest death test) whose data segment
// is limited (RLIMIT_DATA, rlimit.h) to what it already uses plus a margin:
//   * a spec_token_indx of 2^24 entries of which 6 are used runs within a margin of 512 MB and
//     gives the bytes of the same call with a 6-entry index (sizing by the index's length would
//     need gigabytes);
//   * a batch whose spec group needs more scratch than a 16 MB margin fails with a status naming
//     the memory, and every output and pool is byte-identical to before the call (the non-spec
//     group, which needs little, wrote nothing either);
//   * deferred-commit token trees whose node states need more than a 64 MB margin (2048 nodes of
//     K = V = 128: 128 MB per work item), through gated_delta_rule_recurrent and gdn_attention
//     (behind a non-spec decode, which would be written first): the call fails with a status
//     naming the memory, and outputs, pools and logs are byte-identical to before the call.
// Linux only; not under AddressSanitizer (its shadow mappings count against the limit).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "prop_deferred_attention.h"
#include "rlimit.h"

namespace gdn::prop {
namespace {

// One prefill and two decodes (non-spec) and n_spec verify sequences of 4 tokens (cols 4; real
// slots for a few, padding slots for many), bf16, small heads.
AttnProblem make_problem(int64_t n_spec, Rng& r) {
  AttnProblem p;
  p.cols = 4;
  p.conv_layout = SpecConvLayout::kPerToken;
  int64_t row = 0, slot = 0;
  auto take = [&](int64_t len) {
    std::vector<int64_t> rows;
    for (int64_t t = 0; t < len; ++t) rows.push_back(row++);
    return rows;
  };
  AttnSeq pre;
  pre.rows = take(7);
  pre.slot = slot++;
  p.seqs.push_back(pre);
  for (int d = 0; d < 2; ++d) {
    AttnSeq s;
    s.rows = take(1);
    s.slot = slot++;
    p.seqs.push_back(s);
  }
  for (int64_t i = 0; i < n_spec; ++i) {
    AttnSeq s;
    s.spec = true;
    s.rows = take(4);
    for (int64_t c = 0; c < p.cols; ++c) s.cols.push_back(n_spec < 8 ? slot++ : -1);  // large: padding slots
    s.nacc = 1 + i % p.cols;
    p.seqs.push_back(s);
  }
  p.num_slots = slot + 1;
  p.num_actual = row;
  p.rows_alloc = row + 2;
  fill_attention_data(p, r);
  return p;
}

// The child of SmallIndexUseOfALongSpecTokenIndx: exit code 0 when the long index gives the short
// index's bytes under the limit.
int long_index_child() {
  Rng r(91);
  AttnProblem p = make_problem(2, r);
  AttnProblem q = p;
  Buf core_a, z_a, core_b, z_b;
  make_outputs(p, &core_a, &z_a, 0);
  make_outputs(p, &core_b, &z_b, 0);
  if (!run_attention(Backend::kCPU, p, core_a, z_a).ok()) return 2;
  // The same index in a buffer of 2^24 entries (the rest never read as tokens).
  const int64_t n_long = int64_t{1} << 24;
  Buf long_indx(q.sp_indx.dtype(), {n_long});
  for (int64_t j = 0; j < q.sp_indx.rows(); ++j) long_indx.seti(j, q.sp_indx.geti(j));
  q.sp_indx = long_indx;
  if (!limit_data(int64_t{512} << 20)) return 3;
  const Status s = run_attention(Backend::kCPU, q, core_b, z_b);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 4;
  }
  const bool same = core_a.same_bytes(core_b) && z_a.same_bytes(z_b) && p.conv_pool.same_bytes(q.conv_pool) &&
                    p.ssm_pool.same_bytes(q.ssm_pool);
  return same ? 0 : 5;
}

TEST(AttentionFailedCall, SmallIndexUseOfALongSpecTokenIndx) {
  GDN_SKIP_IF_NO_RLIMIT();
  EXPECT_EXIT(std::exit(long_index_child()), ::testing::ExitedWithCode(0), "");
}

// The child of LateAllocationFailureWritesNothing.
int late_failure_child() {
  Rng r(92);
  AttnProblem p = make_problem(32768, r);  // 131072 spec tokens: ~60 MB of scratch
  Buf core, z;
  make_outputs(p, &core, &z, 1);
  const Buf core0 = core, z0 = z, conv0 = p.conv_pool, ssm0 = p.ssm_pool;
  if (!limit_data(int64_t{16} << 20)) return 3;
  const Status s = run_attention(Backend::kCPU, p, core, z);
  if (s.ok()) return 6;  // the limit did not bite: the case tests nothing
  if (s.message().find("out of host memory") == std::string::npos) {
    std::fprintf(stderr, "unexpected message: %s\n", s.message().c_str());
    return 7;
  }
  const bool same =
      core.same_bytes(core0) && z.same_bytes(z0) && p.conv_pool.same_bytes(conv0) && p.ssm_pool.same_bytes(ssm0);
  return same ? 0 : 5;
}

TEST(AttentionFailedCall, LateAllocationFailureWritesNothing) {
  GDN_SKIP_IF_NO_RLIMIT();
  EXPECT_EXIT(std::exit(late_failure_child()), ::testing::ExitedWithCode(0), "");
}

// A chain of n tokens as token_parents (each token's parent the one before it), with `extra`
// entries past them.
Buf chain_parents(int64_t n, int64_t extra = 0) {
  std::vector<int64_t> par(static_cast<size_t>(n + extra));
  for (int64_t t = 0; t < n + extra; ++t) par[t] = t - 1;
  return index_buf(par, DType::kInt64);
}

constexpr int64_t kTreeNodes = 2048, kTreeMargin = int64_t{64} << 20;

// The child of RecurrentFailedCall.TreeScratchBeyondTheLimitWritesNothing.
int recurrent_tree_child() {
  Rng r(93);
  const int64_t H = 1, HV = 2, K = 128, V = 128, slots = 2, log_cols = 4;
  GdrIn in = make_gdr_in(r, kTreeNodes, H, HV, K, V, DType::kFloat32, DType::kFloat32);
  Buf pool = make_ssm_pool(DType::kFloat32, slots, HV, K, V, StateLayout::kVK);
  fill_normal(pool, r, 0.5);
  Buf log_in(DType::kFloat32, {slots, log_cols, HV, K + V + 2}), log_out = log_in;
  fill_log(log_in, K, r);
  fill_normal(log_out, r, 1.0);
  Buf qsl = index_buf({0, kTreeNodes}), slot_ids = index_buf({1}), nacc = index_buf({2});
  Buf o(DType::kFloat32, {kTreeNodes, HV, V});
  poison(o, 0);
  Buf par = chain_parents(kTreeNodes);
  const Buf pool0 = pool, log_in0 = log_in, log_out0 = log_out, o0 = o;
  DeferredOpts op;
  op.parents = &par;
  if (!limit_data(kTreeMargin)) return 3;
  const Status s = run_deferred_on(Backend::kCPU, in, pool, qsl, slot_ids, nacc, o, log_in, log_out, op);
  if (s.ok()) return 6;  // the limit did not bite: the case tests nothing
  if (s.message().find("out of host memory") == std::string::npos) {
    std::fprintf(stderr, "unexpected message: %s\n", s.message().c_str());
    return 7;
  }
  const bool same = pool.same_bytes(pool0) && o.same_bytes(o0) && log_out.same_bytes(log_out0) &&
                    log_in.same_bytes(log_in0);
  return same ? 0 : 5;
}

TEST(RecurrentFailedCall, TreeScratchBeyondTheLimitWritesNothing) {
  GDN_SKIP_IF_NO_RLIMIT();
  EXPECT_EXIT(std::exit(recurrent_tree_child()), ::testing::ExitedWithCode(0), "");
}

// The child of AttentionFailedCall.TreeScratchBeyondTheLimitWritesNothing: a non-spec decode and
// a verify tree of kTreeNodes tokens, float32, the deferred mode.
int attention_tree_child() {
  Rng r(94);
  AttnProblem p;
  p.H = 1, p.HV = 2, p.K = 128, p.V = 128;
  p.act = DType::kFloat32;
  p.conv_layout = SpecConvLayout::kPerToken;
  p.conv_rows_extra = 0;
  AttnSeq dec;
  dec.rows = {0};
  dec.slot = 0;
  AttnSeq tree;
  tree.spec = true;
  for (int64_t t = 0; t < kTreeNodes; ++t) tree.rows.push_back(1 + t);
  tree.cols = {1};
  tree.nacc = 2;
  p.seqs = {dec, tree};
  p.num_slots = 2;
  p.num_actual = p.rows_alloc = 1 + kTreeNodes;
  fill_attention_data(p, r);
  Side side = make_side(p, 4, r);
  const Side side0 = side;
  Buf par = chain_parents(kTreeNodes);
  Extra x;
  x.parents = &par;
  Out fresh;
  make_outputs(p, &fresh.core, &fresh.z, 0);
  if (!limit_data(kTreeMargin)) return 3;
  Out o;
  const Status s = run_side(Backend::kCPU, p, side, 0, x, &o);
  if (s.ok()) return 6;  // the limit did not bite: the case tests nothing
  if (s.message().find("out of host memory") == std::string::npos) {
    std::fprintf(stderr, "unexpected message: %s\n", s.message().c_str());
    return 7;
  }
  bool same = o.core.same_bytes(fresh.core) && o.z.same_bytes(fresh.z) && side.conv.same_bytes(side0.conv) &&
              side.ssm.same_bytes(side0.ssm);
  for (int k = 0; k < 2; ++k) same = same && side.rec[k].same_bytes(side0.rec[k]) && side.cvl[k].same_bytes(side0.cvl[k]);
  return same ? 0 : 5;
}

TEST(AttentionFailedCall, TreeScratchBeyondTheLimitWritesNothing) {
  GDN_SKIP_IF_NO_RLIMIT();
  EXPECT_EXIT(std::exit(attention_tree_child()), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace gdn::prop
