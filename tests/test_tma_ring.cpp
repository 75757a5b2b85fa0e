// The pipelined kernels' ring size rule (src/cuda/tma_ring.h), on the CPU: the stage count is the
// most that fits, rounded down to a multiple of the consumer warps; and a model of the ring's
// barrier protocol (producer issuing items in order into stage k % S, consumer c taking items c,
// c + C, ..., bulk copies landing out of order, mbarrier parity waits) never hands a consumer a
// stale stage with such a count, while the counts the rule excludes do.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "cuda/tma_ring.h"

using gdn::cuda::tma_ring_stages;

TEST(TmaRing, MostStagesThatFitAsAMultipleOfTheConsumers) {
  for (int consumers = 1; consumers <= 8; ++consumers)
    for (int smem = 16 * 1024; smem <= 227 * 1024; smem += 4 * 1024 + 96)
      for (int stage : {4352, 6400, 8448}) {
        const int head = 25664, max_stages = 64;
        const int s = tma_ring_stages(smem, head, stage, consumers, max_stages);
        ASSERT_GE(s, 0);
        EXPECT_EQ(s % consumers, 0) << smem << " " << stage << " " << consumers;
        if (s > 0) EXPECT_LE(head + s * stage, smem);
        EXPECT_LE(s, max_stages);
        // maximal: one more round of stages would not fit (or pass the cap)
        EXPECT_TRUE(head + (s + consumers) * stage > smem || s + consumers > max_stages);
      }
  // the fused step's float32 layout (head 25664 B, stages of 4352 B, 6 consumers): 80 KB -> 12;
  // 108 KB held 19 stages before the rule (exposed), now 18; 64 KB -> 6, which the launcher
  // refuses (fewer than 2 stages per consumer)
  EXPECT_EQ(tma_ring_stages(80 * 1024, 25664, 4352, 6, 64), 12);
  EXPECT_EQ(tma_ring_stages(108 * 1024, 25664, 4352, 6, 64), 18);
  EXPECT_EQ(tma_ring_stages(64 * 1024, 25664, 4352, 6, 64), 6);
  EXPECT_EQ(tma_ring_stages(1024, 25664, 4352, 6, 64), 0);
  EXPECT_EQ(tma_ring_stages(80 * 1024, 25664, 4352, 0, 64), 0);
}

namespace {
// One run of the ring model with S stages, C consumers and n items; completions land in random
// order among those in flight. Returns false when a consumer's parity wait passes on a stage that
// does not hold its item.
bool ring_model_run(int S, int C, int n, unsigned seed) {
  struct Bar {
    int phase = 0;
    bool done_parity(int parity) const { return (phase & 1) != parity; }  // mbarrier try_wait.parity
  };
  std::vector<Bar> full(S), empty(S);
  std::vector<int> holds(S, -1), inflight;
  std::vector<int> next(C), st(C), ph(C, 0);
  for (int c = 0; c < C; ++c) next[c] = st[c] = c;
  std::mt19937 rng(seed);
  int issued = 0, consumed = 0;
  while (consumed < n) {
    if (issued < n && empty[issued % S].done_parity(((issued / S) & 1) ^ 1)) inflight.push_back(issued++);
    if (!inflight.empty() && rng() % 2 == 0) {  // a copy lands
      const size_t i = rng() % inflight.size();
      const int item = inflight[i];
      inflight.erase(inflight.begin() + static_cast<long>(i));
      holds[item % S] = item;
      ++full[item % S].phase;
    }
    const int c = static_cast<int>(rng() % static_cast<unsigned>(C));
    if (next[c] < n && full[st[c]].done_parity(ph[c])) {
      if (holds[st[c]] != next[c]) return false;  // a stale stage
      ++empty[st[c]].phase;
      ++consumed;
      next[c] += C;
      st[c] += C;
      if (st[c] >= S) st[c] -= S, ph[c] ^= 1;
    }
  }
  return true;
}
bool ring_model_safe(int S, int C) {
  for (unsigned seed = 0; seed < 64; ++seed)
    if (!ring_model_run(S, C, 400, seed)) return false;
  return true;
}
}  // namespace

TEST(TmaRing, ProtocolModelNeedsAMultipleOfTheConsumers) {
  for (int C : {6, 7}) {
    for (int S = C + 1; S <= 4 * C; ++S) {
      const int rounded = tma_ring_stages(S * 100, 0, 100, C, 64);
      EXPECT_EQ(rounded, S / C * C);
      EXPECT_TRUE(ring_model_safe(rounded, C)) << "rule's count " << rounded << ", " << C << " consumers";
      if (S % C != 0) EXPECT_FALSE(ring_model_safe(S, C)) << S << " stages, " << C << " consumers";
    }
  }
}
