// src/cuda/plan/tuning.h — the planner's per-architecture constants, in one table.
//
// Every batch-size threshold was measured on a card of `ref_sms` SMs (H200: 132) and applies
// scaled by the SM count of the device at hand (plan.cpp, at_least / at_most): a threshold of X
// sequence-heads on the reference card is X * sms / ref_sms on another, the same number of waves.
// Kernel shapes (warps, rows per block, resident blocks) are compile-time constants of their
// kernels' traits; what the planner needs of them reaches it as facts (plan.h).
#pragma once

namespace gdn::cuda::plan {

struct Tuning {
  int ref_sms;  // SM count of the card the thresholds below were measured on

  // Primitive recurrence, in sequence-heads (sequences x value heads) of the batch.
  int lean_f32_mid_lo, lean_f32_mid_hi;  // float32 one-token batches: lean up to _lo and from _hi
  int lean_16_max;                       // 16-bit one-token batches: lean up to this
  int lean_16_band_lo, lean_16_band_hi;  // ... and in this band
  int lean_16_verify_max;                // 16-bit verify batches: lean up to this
  int lean_staged_min;                   // 16-bit one-token batches: the staged lean form from this on
  // The lean kernel's form with more resident blocks, by grid blocks: _lo and _hi in blocks, _waves
  // in waves of its base form (resident blocks per SM x SMs, a fact of the device).
  int lean_more_lo, lean_more_hi, lean_more_waves;
  int pipelined_min_f32, pipelined_min_16;  // the pipelined kernel from this many sequence-heads
  int pipelined_f32_verify_lo, pipelined_f32_verify_hi;  // float32 verify in [lo, hi): register kernel
  int register_small_f32, register_small_16;  // the register kernel's small-batch form up to this
  int register_mid_16;                        // 16-bit verify: its mid-batch form up to this

  // gdn_attention's step, in (sequence, key head) groups.
  int step_pipelined_min_one;  // one-token batches: the pipelined step from this many groups
  int step_pipelined_min_16;   // 16-bit verify batches
  int step_pipelined_min_f32;  // float32 verify batches
  int step_cluster_lean_groups;  // float32 cluster step: lean lanes up to this many groups (large clusters)
  int step_cluster_overlap_seqheads;  // cluster step: programmatic overlap up to this many sequence-heads

  // The deferred-commit kernel: its one-warp form while the four-warp form's grid has at most this
  // many blocks (half the reference card's SMs: a rule of the grid's size, not yet a measurement).
  int deferred_small_blocks;
  // Its lean form: 16-row warps (and the prep kernel) once the 8-row warps' grid has more than this
  // many warps; below, the 8-row warps, whose twice as many warps fill the SMs (Qwen3-Next TP1: N = 1
  // 512 warps, 8-row faster by 5-30%; N = 16, 8192 warps, 16-row + prep faster by up to 36%).
  int deferred_lean16_warps;

  // The chunked op.
  int chunk_min_tokens;   // the chunk kernel from this many tokens per sequence (on average)
  int chunk_vs64_blocks;  // 64 value columns per block from this many such blocks
  // 128 value columns per block (V a multiple of 128) from this many such blocks: more than half a
  // wave, where the 64-column blocks need more than one (H100, Qwen3-Next TP1: 0.61-0.66x the
  // 64-column form's time at 4 x 8192, 8 x 2048, 32 x 8192 and 64 x 256, one block per SM in both;
  // a chunk's chain ~1.17x the 64-column block's, so below, fewer waves of those win).
  int chunk_vs128_blocks;
  // The split form (prep kernel first) up to this many 32-column blocks: two waves of one block per
  // SM (H100, Qwen3-Next TP1: 1 x 8192 and 2 x 8192 0.41x and 0.80x the 128-column form's time; at
  // three sequences the 128-column form's one wave, ~0.9 ms, is below the split form's 1.05 ms).
  int chunk_split_blocks;
};

// sm_90 (H100, H200, H20), measured on an H200 with the three model shapes of docs/performance.md.
// Other architectures with these kernels (sm_80 and later; the pipelined and cluster kernels need
// sm_90) take the same table until measured.
inline constexpr Tuning kSm90 = {
    /*ref_sms=*/132,
    /*lean_f32_mid_lo=*/128, /*lean_f32_mid_hi=*/512,
    /*lean_16_max=*/128,
    /*lean_16_band_lo=*/256, /*lean_16_band_hi=*/256,
    /*lean_16_verify_max=*/768,
    /*lean_staged_min=*/2048,
    /*lean_more_lo=*/1024, /*lean_more_hi=*/1536, /*lean_more_waves=*/10,
    /*pipelined_min_f32=*/128, /*pipelined_min_16=*/384,
    /*pipelined_f32_verify_lo=*/512, /*pipelined_f32_verify_hi=*/4096,
    /*register_small_f32=*/64, /*register_small_16=*/64,
    /*register_mid_16=*/128,
    /*step_pipelined_min_one=*/96,
    /*step_pipelined_min_16=*/128,
    /*step_pipelined_min_f32=*/192,
    /*step_cluster_lean_groups=*/32,
    /*step_cluster_overlap_seqheads=*/96,
    /*deferred_small_blocks=*/66,
    /*deferred_lean16_warps=*/2048,
    /*chunk_min_tokens=*/32,
    /*chunk_vs64_blocks=*/132,
    /*chunk_vs128_blocks=*/67,
    /*chunk_split_blocks=*/264,
};

inline const Tuning& tuning_for(int /*cc_major*/) { return kSm90; }

}  // namespace gdn::cuda::plan
