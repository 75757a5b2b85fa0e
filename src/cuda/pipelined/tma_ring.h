// src/cuda/pipelined/tma_ring.h — how many shared-memory stages the pipelined kernels' ring has (host side,
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
// consumer takes a stale stage and the ring hangs (H200: 9, 11 and 16 stages for 6
// consumers). 0 or fewer than 2 per consumer: the caller does not launch.
constexpr int tma_ring_stages(int smem_bytes, int head_bytes, int stage_bytes, int consumers, int max_stages) {
  if (consumers <= 0 || stage_bytes <= 0 || smem_bytes <= head_bytes) return 0;
  int stages = (smem_bytes - head_bytes) / stage_bytes;
  stages = stages < max_stages ? stages : max_stages;
  return stages / consumers * consumers;
}

// Whether the fused step's ring of group buffers is safe (group_bufs buffers, group_items items per
// (sequence, key head) group, conv_warps conv warps taking groups cw, cw + conv_warps, ...). A
// consumer waits for its item's group buffer by parity, and that is sound only when the buffer's
// previous group is known to be written: with one conv warp (groups in order) when the consumer's
// previous item lies at most group_bufs groups back, i.e. consumers <= group_bufs * group_items;
// with several conv warps (no order between them) when every consumer has an item in every group
// (group_items >= consumers) and there are at least as many buffers as conv warps. Else a consumer
// can read a buffer that still holds (or is being given) another group — a model of the protocol
// shows it (tests/test_tma_ring.cpp). The launcher falls back to the cluster kernel then (only tiny
// V: one row tile per group).
constexpr bool tma_group_ring_ok(int consumers, int group_bufs, int group_items, int conv_warps) {
  if (consumers <= 0 || group_bufs <= 0 || group_items <= 0 || conv_warps <= 0) return false;
  if (conv_warps == 1) return consumers <= group_bufs * group_items;
  return group_items >= consumers && group_bufs >= conv_warps;
}

}  // namespace gdn::cuda
