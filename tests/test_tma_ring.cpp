// The pipelined kernels' ring size rule (src/cuda/pipelined/tma_ring.h), on the CPU: the stage count is the
// most that fits, rounded down to a multiple of the consumer warps; and a model of the ring's
// barrier protocol (producer issuing items in order into stage k % S, consumer c taking items c,
// c + C, ..., bulk copies landing out of order, mbarrier parity waits) never hands a consumer a
// stale stage with such a count, while the counts the rule excludes do.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "cuda/pipelined/tma_ring.h"

using gdn::cuda::tma_ring_stages;

namespace {
// An mbarrier as the models need it: `count` arrivals complete a phase; a parity wait passes when
// the phase of that parity is complete, i.e. when the current phase has the other parity.
struct ModelBarrier {
  int count, pending, phase = 0;
  explicit ModelBarrier(int c = 1) : count(c), pending(c) {}
  void arrive() {
    if (--pending == 0) ++phase, pending = count;
  }
  bool done_parity(int parity) const { return (phase & 1) != parity; }  // mbarrier try_wait.parity
};
}  // namespace

TEST(TmaRing, MostStagesThatFitAsAMultipleOfTheConsumers) {
  for (int consumers = 1; consumers <= 8; ++consumers)
    for (int smem = 16 * 1024; smem <= 227 * 1024; smem += 4 * 1024 + 96)
      for (int stage : {4352, 6400, 8448}) {
        const int head = 25664, max_stages = 64;
        const int s = tma_ring_stages(smem, head, stage, consumers, max_stages);
        ASSERT_GE(s, 0);
        EXPECT_EQ(s % consumers, 0) << smem << " " << stage << " " << consumers;
        if (s > 0) {
          EXPECT_LE(head + s * stage, smem);
        }
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
  std::vector<ModelBarrier> full(S), empty(S);
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
      full[item % S].arrive();
    }
    const int c = static_cast<int>(rng() % static_cast<unsigned>(C));
    if (next[c] < n && full[st[c]].done_parity(ph[c])) {
      if (holds[st[c]] != next[c]) return false;  // a stale stage
      empty[st[c]].arrive();
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
      if (S % C != 0) {
        EXPECT_FALSE(ring_model_safe(S, C)) << S << " stages, " << C << " consumers";
      }
    }
  }
}

namespace {
// The fused step's group-buffer ring: conv warp w computes groups w, w + W, ... in order into buffer
// g % B after the buffer's previous group is consumed (gdone, parity); consumer c takes items c,
// c + C, ... (group k / gi), waits for its group's buffer by parity (gready) and checks that the
// buffer holds that group. Returns false when a consumer reads another group's buffer (or the
// protocol stalls).
bool group_model_run(int C, int gi, int B, int W, int groups, unsigned seed) {
  std::vector<ModelBarrier> gdone(B, ModelBarrier(gi)), gready(B, ModelBarrier(1));
  std::vector<int> holds(B, -1), conv_next(W), next(C);
  for (int w = 0; w < W; ++w) conv_next[w] = w;
  for (int c = 0; c < C; ++c) next[c] = c;
  const int items = gi * groups;
  std::mt19937 rng(seed);
  auto conv_can = [&](int w) {
    const int g = conv_next[w];
    return g < groups && gdone[g % B].done_parity(((g / B) & 1) ^ 1);
  };
  auto consumer_can = [&](int c) {
    const int g = next[c] / gi;
    return next[c] < items && gready[g % B].done_parity((g / B) & 1);
  };
  for (;;) {
    bool any = false;
    for (int w = 0; w < W; ++w) any = any || conv_can(w);
    for (int c = 0; c < C; ++c) any = any || consumer_can(c);
    bool all_done = true;
    for (int c = 0; c < C; ++c) all_done = all_done && next[c] >= items;
    if (all_done) return true;
    if (!any) return false;  // stalled
    const int w = static_cast<int>(rng() % static_cast<unsigned>(W));
    if (rng() % 3 == 0 && conv_can(w)) {
      const int g = conv_next[w];
      holds[g % B] = g;
      gready[g % B].arrive();
      conv_next[w] += W;
    }
    const int c = static_cast<int>(rng() % static_cast<unsigned>(C));
    if (consumer_can(c)) {
      const int g = next[c] / gi;
      if (holds[g % B] != g) return false;  // another group's buffer
      gdone[g % B].arrive();
      next[c] += C;
    }
  }
}
bool group_model_safe(int C, int gi, int B, int W) {
  for (unsigned seed = 0; seed < 48; ++seed)
    if (!group_model_run(C, gi, B, W, 40, seed)) return false;
  return true;
}
}  // namespace

TEST(TmaRing, GroupBufferRuleHoldsInTheProtocolModel) {
  using gdn::cuda::tma_group_ring_ok;
  for (int W = 1; W <= 3; ++W)
    for (int B : {2, 4})
      for (int C = 1; C <= 8; ++C)
        for (int gi : {1, 2, 3, 4, 8, 16}) {
          const bool ok = tma_group_ring_ok(C, B, gi, W);
          if (ok) {
            EXPECT_TRUE(group_model_safe(C, gi, B, W)) << "W " << W << " B " << B << " C " << C << " gi " << gi;
          }
          // one conv warp: the rule is exact (what it refuses does go wrong)
          if (W == 1 && !ok) {
            EXPECT_FALSE(group_model_safe(C, gi, B, W)) << "B " << B << " C " << C << " gi " << gi;
          }
        }
  // the shipped shapes: 6 consumers, 4 buffers, 1 conv warp; groups of r x V / item rows items
  EXPECT_TRUE(tma_group_ring_ok(6, 4, 2 * 128 / 8, 1));   // Qwen3-Next, float32 state
  EXPECT_TRUE(tma_group_ring_ok(6, 4, 2 * 128 / 16, 1));  // 16-bit state
  EXPECT_FALSE(tma_group_ring_ok(6, 4, 1 * 16 / 16, 1));  // V = 16, r = 1: one item per group
  EXPECT_FALSE(tma_group_ring_ok(5, 4, 2, 2));            // two conv warps need an item per consumer
}
