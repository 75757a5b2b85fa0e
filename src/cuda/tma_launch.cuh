// src/cuda/tma_launch.cuh — host side of the pipelined sm_90 kernels (recurrent_tma.cuh): their
// shared-memory shape per device, and where they are launched instead of the register kernels.
#pragma once
#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "cuda/recurrent_tma.cuh"
#include "cuda/tma_ring.h"

namespace gdn::cuda {

// Per (kernel instantiation, device): stages, shared memory and resident blocks, found once.
struct TmaShape {
  bool ok = false;
  int stages = 0, smem = 0, blocks = 0;  // blocks: resident blocks on the whole device
};
template <typename TAct, typename TS, int KP, int kTok, bool kFused>
TmaShape tma_shape(int dev) {
  using Lay = TmaLayout<TAct, TS, KP, kTok, kFused>;
  constexpr int kMaxDev = 64;
  static std::mutex mu;
  static TmaShape shapes[kMaxDev];
  static bool known[kMaxDev] = {};
  if (dev < 0 || dev >= kMaxDev) return TmaShape{};
  std::lock_guard<std::mutex> lock(mu);
  if (!known[dev]) {
    known[dev] = true;
    TmaShape s;
    auto kernel = recurrent_tma_kernel<TAct, TS, KP, kTok, kFused>;
    int major = 0, sms = 0, per_sm = 0;
    cudaFuncAttributes fa{};
    // the fused ring's size: GDN_TMA_SMEM_KB_FUSED in the environment (tuning sweeps and the ring: tests)
    const int kb = kFused ? env_int("GDN_TMA_SMEM_KB_FUSED", GDN_TMA_SMEM_KB_FUSED, 16, 227) : GDN_TMA_SMEM_KB;
    s.stages = tma_ring_stages(kb * 1024, Lay::kHead, Lay::kStage, Lay::kConsumers, Lay::kMaxStages);  // a multiple of kConsumers
    s.smem = Lay::kHead + s.stages * Lay::kStage;
    const bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                    major >= 9 && cudaFuncGetAttributes(&fa, kernel) == cudaSuccess && fa.binaryVersion >= 90 &&
                    s.stages >= 2 * Lay::kConsumers &&  // every consumer can hold a stage while its next fills
                    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, s.smem) == cudaSuccess &&
                    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Lay::kThreads, s.smem) ==
                        cudaSuccess &&
                    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess;
    if (!ok) (void)cudaGetLastError();  // a failed query is not the caller's error: the other kernels run
    s.blocks = per_sm * sms;
    s.ok = ok && s.blocks > 0;
    shapes[dev] = s;
  }
  return shapes[dev];
}

// Launches the pipelined kernel where it applies (the primitive recurrence and gdn_attention's
// one-launch step): sm_90 code on an sm_90+ device, dense "vk" state,
// K = 128, V a multiple of the item rows, 16-byte aligned inputs (q/k/v rows; fused: the qkvz rows
// and the conv pool's slots), at least GDN_TMA_MIN_SEQHEADS_* sequence-heads (fused:
// GDN_TMA_MIN_GROUPS_FUSED* (sequence, key head) groups) and on average at most
// 4 tokens per sequence (a persistent block's items run one after another: long prefills keep the
// dynamically scheduled kernels). nullopt: not launched (the caller's other kernels run).
template <typename TAct, typename TS, int KP, bool kFused>
std::optional<Status> launch_tma(const RecurrentParams& p, int64_t nseq, cudaStream_t stream) {
  if constexpr (KP != 128 || GDN_TMA == 0) {
    return std::nullopt;
  } else {
    // GDN_CUDA_TMA=0: never; =1: wherever it can run, whatever the batch (tests run the CUDA suite
    // both ways); unset: by the batch as below.
    const bool off = env_equals("GDN_CUDA_TMA", "0"), force = env_equals("GDN_CUDA_TMA", "1");
    if (off || p.kv_layout || !p.state_vec || p.K != KP) return std::nullopt;
    constexpr int64_t kMinSeqHeads = sizeof(TS) == 4 ? GDN_TMA_MIN_SEQHEADS_F32 : GDN_TMA_MIN_SEQHEADS_16;
    if (!force && !kFused && nseq * p.HV < kMinSeqHeads) return std::nullopt;
    if constexpr (!kFused && sizeof(TS) == 4) {  // float32 verify in the register kernel's window
      const int64_t sh = nseq * p.HV;
      if (!force && multi_token(p, nseq) && sh >= GDN_TMA_F32_VERIFY_REG_LO && sh < GDN_TMA_F32_VERIFY_REG_HI &&
          !env_equals("GDN_TMA_F32_VERIFY_REG", "0"))
        return std::nullopt;
    }
    if constexpr (kFused) {
      // The fused step shares whole (sequence, key head) groups among its blocks: from
      // GDN_TMA_MIN_GROUPS_FUSED* groups on (tma_layout.cuh).
      const int64_t min_groups = !multi_token(p, nseq) ? GDN_TMA_MIN_GROUPS_FUSED_1
                                 : sizeof(TS) == 2      ? GDN_TMA_MIN_GROUPS_FUSED_16
                                                        : GDN_TMA_MIN_GROUPS_FUSED;
      if (!force && nseq * p.H < min_groups) return std::nullopt;
      if (!aligned16(p.src.qkvz, p.src.qkvz_rs, sizeof(TAct)) ||
          !aligned16(p.conv.state, p.conv.slot_stride, sizeof(TAct)) || p.conv.D % 8 != 0 || p.conv.W < 2 ||
          p.conv.W > kMaxW || p.src.proj.K != KP || p.src.proj.V % 8 != 0)
        return std::nullopt;
    } else if (!aligned16(p.src.q, p.src.q_rs, sizeof(TAct)) || !aligned16(p.src.k, p.src.k_rs, sizeof(TAct)) ||
               !aligned16(p.src.v, p.src.v_rs, sizeof(TAct))) {
      return std::nullopt;
    }
    // tokens of the batch (fused: both groups index the same num_actual_tokens rows)
    const int64_t rows = kFused ? p.src.num_actual_tokens : batch_tokens(p);
    auto go = [&](auto tok_tag) -> std::optional<Status> {
      constexpr int kTok = decltype(tok_tag)::value;
      using Lay = TmaLayout<TAct, TS, KP, kTok, kFused>;
      if (p.V % Lay::kItemRows != 0) return std::nullopt;
      int dev = 0;
      if (cudaGetDevice(&dev) != cudaSuccess) return std::nullopt;
      const TmaShape sh = tma_shape<TAct, TS, KP, kTok, kFused>(dev);
      if (!sh.ok) return std::nullopt;
      const int tiles = p.V / Lay::kItemRows;
      const int64_t items = nseq * p.HV * tiles;
      if (items >= (int64_t{1} << 31)) return std::nullopt;
      TmaGrid tg{tiles, sh.stages, p.r * tiles};
      tg.sweep = !env_equals("GDN_TMA_SWEEP", "0");  // 0 in the environment: the 2-pass path
      int64_t work = items;  // what the blocks share out: items, or (fused) whole key-head groups
      if constexpr (kFused) {
        work = nseq * p.H;
        if (p.HV != p.H * p.r || p.r * p.V > kTmaMaxRV) return std::nullopt;  // V (= proj.V) % 8: above
        if (!tma_group_ring_ok(Lay::kConsumers, Lay::kGroupBufs, tg.group_items, Lay::kConvWarps)) return std::nullopt;
        // the conv warp's width-4 code: weights [D, 4] as 16-byte vectors, bias as one
        tg.conv_w4 = GDN_TMA_CONV_W4 && p.conv.W == 4 && p.conv.weight_rs == 4 &&
                     aligned16(p.conv.weight, 0, sizeof(TAct)) &&
                     (p.conv.bias == nullptr || aligned16(p.conv.bias, 0, sizeof(TAct)));
        // each group's items rotated by the block index (GDN_TMA_ROT=0 in the environment: off)
        tg.rot = !env_equals("GDN_TMA_ROT", "0");
        tg.light = !env_equals("GDN_TMA_LIGHT", "0");  // 0 in the environment: the full item resolve
        tg.one = !env_equals("GDN_TMA_CONV_ONE", "0");  // 0 in the environment: the kTok-token conv code for all
      }
      const int64_t blocks = work < sh.blocks ? work : sh.blocks;
      if constexpr (kFused) {
        // The conv prologue (every group of the block convolved before most copies start): where it
        // measured faster (one-token sequences, every group of a block
        // in the prologue); GDN_TMA_CONV_PRE=1 in the environment: always, 0: never (tests, A/B runs).
        const bool pre_on = env_equals("GDN_TMA_CONV_PRE", "1"),
                   pre_off = env_equals("GDN_TMA_CONV_PRE", "0") || !GDN_TMA_CONV_PRE || Lay::kConvWarps != 1;
        const bool fits = (work + blocks - 1) / blocks <= Lay::kGroupBufs;  // every group of a block
        if (!pre_off && (pre_on || (rows <= nseq && fits))) {
          tg.pre = Lay::kGroupBufs;
          // the producer's first items before the prologue ends (GDN_TMA_PRE_EARLY=n: n of them, at
          // most every stage but the prologue's scratch, the last); z by the conv warp when the
          // prologue leaves it little (GDN_TMA_ZCONV=0: by the consumers)
          tg.early = env_int("GDN_TMA_PRE_EARLY", std::min(Lay::kConsumers, tg.stages - 1), 0, tg.stages - 1);
          tg.zc = fits && !env_equals("GDN_TMA_ZCONV", "0");
        }
      }
      return Launch(static_cast<unsigned>(blocks), Lay::kThreads, sh.smem, stream)(
          recurrent_tma_kernel<TAct, TS, KP, kTok, kFused>, p, tg);
    };
    if constexpr (kFused) {  // 4 >= W - 1 staged tokens: later tokens take no conv window tap
      if (rows <= 4 * nseq || force) return go(std::integral_constant<int, 4>{});
    } else {
      if (rows <= nseq) return go(std::integral_constant<int, 1>{});
      if (rows <= 4 * nseq || force) return go(std::integral_constant<int, 4>{});
    }
    return std::nullopt;
  }
}

}  // namespace gdn::cuda
