// src/cuda/pipelined/tma_launch.cuh — host side of the pipelined sm_90 kernels (recurrent_tma.cuh): their
// shared-memory shape per device, and where they are launched instead of the register kernels.
#pragma once
#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "cuda/plan/plan.h"
#include "cuda/pipelined/recurrent_tma.cuh"
#include "cuda/pipelined/tma_ring.h"

namespace gdn::cuda {

// Per (kernel instantiation, device): stages, shared memory and resident blocks, found once.
struct TmaShape {
  bool ok = false;
  int stages = 0, smem = 0, blocks = 0;  // blocks: resident blocks on the whole device
};
template <typename TAct, typename TS, int KP, int kTok, bool kFused, bool kForms = false>
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
    auto kernel = recurrent_tma_kernel<TAct, TS, KP, kTok, kFused, kForms>;
    int major = 0, sms = 0, per_sm = 0;
    cudaFuncAttributes fa{};
    const int kb = kFused ? kTmaSmemKbFused : kTmaSmemKb;
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

// Whether the pipelined kernel can take the launch (planner fact Problem::pipelined_ok): sm_90 code
// dense "vk" state of K = 128, V a multiple of the item rows, 16-byte aligned inputs
// (q/k/v rows; fused: the qkvz rows and the conv pool's slots, the conv's width and channels, whole
// key-head groups that fit the group buffers), fewer than 2^31 items.
template <typename TAct, typename TS, int KP, bool kFused>
bool pipelined_ok(const RecurrentParams& p, int64_t nseq) {
  if constexpr (KP != 128) {
    return false;
  } else {
    using Lay = TmaLayout<TAct, TS, KP, 4, kFused>;
    static_assert(Lay::kItemRows == TmaLayout<TAct, TS, KP, 1, kFused>::kItemRows, "one tile shape for both instances");
    if (p.kv_layout || !p.state_vec || p.K != KP || p.V % Lay::kItemRows != 0) return false;
    if (nseq * p.HV * (p.V / Lay::kItemRows) >= (int64_t{1} << 31)) return false;
    if constexpr (kFused) {
      const int tiles = p.V / Lay::kItemRows;
      return aligned16(p.src.qkvz, p.src.qkvz_rs, sizeof(TAct)) &&
             aligned16(p.conv.state, p.conv.slot_stride, sizeof(TAct)) && p.conv.D % 8 == 0 && p.conv.W >= 2 &&
             p.conv.W <= kMaxW && p.src.proj.K == KP && p.src.proj.V % 8 == 0 && p.HV == p.H * p.r &&
             p.r * p.V <= kTmaMaxRV && tma_group_ring_ok(Lay::kConsumers, Lay::kGroupBufs, p.r * tiles, Lay::kConvWarps);
    } else {
      return aligned16(p.src.q, p.src.q_rs, sizeof(TAct)) && aligned16(p.src.k, p.src.k_rs, sizeof(TAct)) &&
             aligned16(p.src.v, p.src.v_rs, sizeof(TAct));
    }
  }
}

// Resident blocks of the pipelined instance for kTok staged tokens on device dev (0: it cannot run);
// kForms: of its gate-form instance.
template <typename TAct, typename TS, int KP, bool kFused, bool kForms = false>
int64_t pipelined_blocks(int dev, int kTok) {
  if constexpr (KP != 128) {
    return 0;
  } else {
    TmaShape sh = kTok == 1 && !kFused ? tma_shape<TAct, TS, KP, 1, kFused, kForms>(dev)
                                       : tma_shape<TAct, TS, KP, 4, kFused, kForms>(dev);
    return sh.ok ? sh.blocks : 0;
  }
}

// The pipelined kernel's tile shape (row tiles per (sequence, value head)) and the prologue's group
// buffers (0: no prologue).
template <typename TAct, typename TS, int KP, bool kFused>
void pipelined_problem(const RecurrentParams& p, plan::Problem& pb) {
  if constexpr (KP == 128) {
    using Lay = TmaLayout<TAct, TS, KP, 4, kFused>;
    pb.pipelined_tiles = p.V / Lay::kItemRows;
    if constexpr (kFused) pb.pipelined_group_bufs = Lay::kConvWarps == 1 ? Lay::kGroupBufs : 0;
  }
  (void)p;
  (void)pb;
}

// Launches the pipelined kernel as planned (pl.tok staged tokens, pl.blocks blocks; fused: with the
// conv prologue for kStepPipelinedPrologue); kForms (not fused): its gate-form instance.
template <typename TAct, typename TS, int KP, bool kFused, bool kForms = false>
Status launch_pipelined(const RecurrentParams& p, const plan::Plan& pl, cudaStream_t stream) {
  if constexpr (KP != 128) {
    return Status::Error("internal: the pipelined kernel planned for an instance it does not have");
  } else {
    auto go = [&](auto tok_tag) -> Status {
      constexpr int kTok = decltype(tok_tag)::value;
      using Lay = TmaLayout<TAct, TS, KP, kTok, kFused>;
      int dev = 0;
      GDN_CUDA_CHECK(cudaGetDevice(&dev));
      const TmaShape sh = tma_shape<TAct, TS, KP, kTok, kFused, kForms>(dev);
      const int tiles = p.V / Lay::kItemRows;
      TmaGrid tg{tiles, sh.stages, p.r * tiles};
      if constexpr (kFused) {
        // the conv warp's width-4 code: weights [D, 4] as 16-byte vectors, bias as one
        tg.conv_w4 = p.conv.W == 4 && p.conv.weight_rs == 4 &&
                     aligned16(p.conv.weight, 0, sizeof(TAct)) &&
                     (p.conv.bias == nullptr || aligned16(p.conv.bias, 0, sizeof(TAct)));
        if (pl.path == plan::Path::kStepPipelinedPrologue) {
          const int64_t work = (p.group[0].n + p.group[1].n) * p.H;
          tg.pre = Lay::kGroupBufs;
          // the producer's first items before the prologue ends: one per consumer, at most every
          // stage but the prologue's scratch (the last); z by the conv warp where every group of a
          // block is in the prologue
          tg.early = std::min(Lay::kConsumers, tg.stages - 1);
          tg.zc = (work + pl.blocks - 1) / pl.blocks <= Lay::kGroupBufs;
        }
      }
      return Launch(static_cast<unsigned>(pl.blocks), Lay::kThreads, sh.smem, stream)(
          recurrent_tma_kernel<TAct, TS, KP, kTok, kFused, kForms>, p, tg);
    };
    if constexpr (!kFused)
      if (pl.tok == 1) return go(std::integral_constant<int, 1>{});
    return go(std::integral_constant<int, 4>{});
  }
}

}  // namespace gdn::cuda
