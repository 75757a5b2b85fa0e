// src/cuda/tma_ring.h — how many shared-memory stages the pipelined kernels' ring has (host side,
// no CUDA headers, so that the rule is unit-tested on the CPU: tests/test_tma_ring.cpp).
#pragma once

namespace gdn::cuda {

// Stages of stage_bytes that fit in smem_bytes after head_bytes, at most max_stages, rounded down
// to a multiple of the consumer warps. The multiple is a correctness rule, not tuning: consumer c
// takes the block's items c, c + consumers, ... and item k goes to stage k % stages, so with a
// multiple every use of a stage is one consumer's and its parity wait on the stage's full barrier
// is for the phase right after the one it consumed itself. With another count, the stage's
// previous item (another consumer's) may still be in flight when this consumer tests the barrier
// — bulk copies land out of order — and the unfinished phase's parity reads as complete: the
// consumer takes a stale stage and the ring hangs (H200, eighth session: 9, 11 and 16 stages for 6
// consumers; bench/RESULTS.md step 46). 0 or fewer than 2 per consumer: the caller does not launch.
constexpr int tma_ring_stages(int smem_bytes, int head_bytes, int stage_bytes, int consumers, int max_stages) {
  if (consumers <= 0 || stage_bytes <= 0 || smem_bytes <= head_bytes) return 0;
  int stages = (smem_bytes - head_bytes) / stage_bytes;
  stages = stages < max_stages ? stages : max_stages;
  return stages / consumers * consumers;
}

}  // namespace gdn::cuda
