// The CPU backend's worker threads (gdn/ops.h set_cpu_threads): by default the CPUs the process may
// run on (its affinity mask, which taskset and container CPU sets shrink), else the caller's limit;
// results never depend on the count.
#include <sched.h>

#include "prop_attention.h"

namespace gdn::prop {
namespace {

struct ResetThreads {
  ~ResetThreads() { set_cpu_threads(0); }
};

TEST(CpuThreads, DefaultFollowsTheAffinityMask) {
  ResetThreads reset;
  set_cpu_threads(0);
  cpu_set_t all;
  ASSERT_EQ(sched_getaffinity(0, sizeof all, &all), 0);
  EXPECT_EQ(cpu_threads(), CPU_COUNT(&all));
  int first = 0;
  while (!CPU_ISSET(first, &all)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  EXPECT_EQ(cpu_threads(), 1) << "a mask of one CPU";
  ASSERT_EQ(sched_setaffinity(0, sizeof all, &all), 0);
  EXPECT_EQ(cpu_threads(), CPU_COUNT(&all));
}

TEST(CpuThreads, ACallersLimitIsKeptUntilReset) {
  ResetThreads reset;
  set_cpu_threads(3);
  EXPECT_EQ(cpu_threads(), 3);
  set_cpu_threads(-5);  // < 1: the default
  cpu_set_t all;
  ASSERT_EQ(sched_getaffinity(0, sizeof all, &all), 0);
  EXPECT_EQ(cpu_threads(), CPU_COUNT(&all));
}

// A mixed gdn_attention batch (prefills, decodes, verify sequences) with 1, 2 and 7 workers: every
// output and pool byte for byte the same.
TEST(CpuThreads, ResultsDoNotDependOnTheCount) {
  ResetThreads reset;
  Rng r(4242);
  AttnProblem base;
  MixOptions m;
  make_mixed_batch(base, r, m);
  fill_attention_data(base, r);
  Buf core[3], z[3];
  AttnProblem runs[3] = {base, base, base};
  const int counts[3] = {1, 2, 7};
  for (int k = 0; k < 3; ++k) {
    set_cpu_threads(counts[k]);
    make_outputs(runs[k], &core[k], &z[k], 0);
    PROP_ASSERT_OK(run_attention(Backend::kCPU, runs[k], core[k], z[k]));
  }
  for (int k = 1; k < 3; ++k) {
    SCOPED_TRACE(::testing::Message() << counts[k] << " workers against 1");
    EXPECT_EQ(byte_diff(core[k], core[0]), "");
    EXPECT_EQ(byte_diff(z[k], z[0]), "");
    EXPECT_EQ(byte_diff(runs[k].conv_pool, runs[0].conv_pool), "");
    EXPECT_EQ(byte_diff(runs[k].ssm_pool, runs[0].ssm_pool), "");
  }
}

}  // namespace
}  // namespace gdn::prop
