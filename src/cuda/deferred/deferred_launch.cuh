// src/cuda/deferred/deferred_launch.cuh — the deferred-commit mode's launcher: the planner's choice
// (plan::plan_deferred) between the lean form (deferred_lean.cuh: linear verify, K = 128, dense
// "vk" state) and the general kernel (deferred.cuh) in its four-warp or one-warp block.
// Instantiated per dtype pair in deferred_<act>_<state>.cu.
#pragma once
#include "cuda/deferred/deferred.cuh"
#include "cuda/deferred/deferred_lean.cuh"

namespace gdn::cuda {

template <typename TAct, typename TS>
Status launch_deferred(const DeferredParams& p, plan::Override force, cudaStream_t stream) {
  const int64_t nseq = p.group[0].n;
  if (nseq == 0) return Status::Ok();
  int dev = 0, major = 0, sms = 0;
  GDN_RETURN_IF_ERROR(device_of(&dev, &major, &sms));
  plan::DeferredProblem pb;
  pb.nseq = nseq;
  pb.HV = p.HV;
  pb.V = p.V;
  pb.lean_ok = deferred_lean_applies<TAct, TS>(p);
  const plan::DeferredPlan pl = plan::plan_deferred(pb, major, sms, force);
  const dim3 grid(static_cast<unsigned>(pl.grid_x), static_cast<unsigned>(pl.grid_y), static_cast<unsigned>(pl.grid_z));
  if (pl.path == plan::Path::kDeferredLean) {
    constexpr int k16 = plan::kDeferredLean16Rows, k8 = plan::kDeferredSmallRows;
    if (pl.rows != k16) return Launch(grid, 32, 0, stream)(deferred_lean_kernel<TAct, TS, k8, false>, p);
    // The 16-row warps read their token inputs from the prep kernel where the caller gave it a
    // buffer (verify steps); the 8-row warps (small batches) prepare their own, one launch fewer.
    const int64_t pairs = p.prep_rows * p.H;
    if (p.prep == nullptr || pairs == 0) return Launch(grid, 32, 0, stream)(deferred_lean_kernel<TAct, TS, k16, false>, p);
    const unsigned blocks = static_cast<unsigned>((pairs + DeferredPrep::kPairs - 1) / DeferredPrep::kPairs);
    GDN_RETURN_IF_ERROR(Launch(dim3(blocks), DeferredPrep::kThreads, 0, stream)(deferred_prep_kernel<TAct>, p));
    return Launch(grid, 32, 0, stream)(deferred_lean_kernel<TAct, TS, k16, true>, p);
  }
  auto go = [&](auto kp_tag, auto small_tag) -> Status {
    constexpr int KP = decltype(kp_tag)::value;
    constexpr bool kS = decltype(small_tag)::value;
    using Tr = DeferredTraits<TS, KP, kS>;
    const bool dense = kHasVec<TS, Tr::kPiece> && !p.kv_layout && p.state_vec && p.K == KP;
    return Launch(grid, Tr::kThreads, 0, stream)(
        dense ? deferred_kernel<TAct, TS, KP, true, kS> : deferred_kernel<TAct, TS, KP, false, kS>, p);
  };
  auto by_form = [&](auto kp_tag) -> Status {
    if (pl.path == plan::Path::kDeferredSmall) return go(kp_tag, std::true_type{});
    return go(kp_tag, std::false_type{});
  };
  if (p.K <= 32) return by_form(std::integral_constant<int, 32>{});
  if (p.K <= 64) return by_form(std::integral_constant<int, 64>{});
  if (p.K <= 128) return by_form(std::integral_constant<int, 128>{});
  if (p.K <= 256) return by_form(std::integral_constant<int, 256>{});
  return Status::Error("unsupported head_k_dim " + std::to_string(p.K) + " on CUDA: at most 256");
}

}  // namespace gdn::cuda
