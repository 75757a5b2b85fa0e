// A failed call changes nothing (docs/contract.md §5), for the allocation gdn_attention's CPU backend makes:
// its scratch is sized by the tokens the sequences use (not by the length of a token_indx), and
// all of it is allocated before the first write. Each case runs in a child process (a gtest death
// test) whose data segment is limited (RLIMIT_DATA) to what it already uses plus a margin:
//   * a spec_token_indx of 2^24 entries of which 6 are used runs within a margin of 512 MB and
//     gives the bytes of the same call with a 6-entry index (sizing by the index's length would
//     need gigabytes);
//   * a batch whose spec group needs more scratch than a 16 MB margin fails with a status naming
//     the memory, and every output and pool is byte-identical to before the call (the non-spec
//     group, which needs little, wrote nothing either).
// Linux only; not under AddressSanitizer (its shadow mappings count against the limit).
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "prop_attention.h"

#if defined(__SANITIZE_ADDRESS__)
#define GDN_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GDN_TEST_ASAN 1
#endif
#endif

namespace gdn::prop {
namespace {

// VmData of this process in bytes (0 if unknown).
int64_t data_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmData:", 0) == 0) return std::stoll(line.substr(7)) * 1024;  // kB
  return 0;
}

// Limits the data segment to what it is now plus `margin` bytes; false if that is not possible.
bool limit_data(int64_t margin) {
  const int64_t now = data_bytes();
  if (now <= 0) return false;
  rlimit r{};
  r.rlim_cur = r.rlim_max = static_cast<rlim_t>(now + margin);
  return setrlimit(RLIMIT_DATA, &r) == 0;
}

#ifdef GDN_TEST_ASAN
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif
#define GDN_SKIP_IF_NO_RLIMIT()                                                                  \
  do {                                                                                           \
    if (kAsan) GTEST_SKIP() << "RLIMIT_DATA cases do not run under AddressSanitizer";            \
    if (data_bytes() <= 0) GTEST_SKIP() << "/proc/self/status has no VmData (not Linux)";        \
  } while (0)

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

}  // namespace
}  // namespace gdn::prop
