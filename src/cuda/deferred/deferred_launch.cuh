// src/cuda/deferred/deferred_launch.cuh — the deferred-commit mode's launcher: the planner's choice
// (plan::plan_deferred) between the lean form (deferred_lean.cuh: linear verify, K = 128, dense
// "vk" state; its 16-row warps after the prep kernel), the algebra on tensor cores after the prep
// kernel (deferred_mma.cuh: verify steps of token trees of a few nodes) and the general kernel
// (deferred.cuh) in its four-warp or one-warp block.
// Instantiated per dtype pair in deferred_<act>_<state>.cu.
#pragma once
#include "cuda/deferred/deferred.cuh"
#include "cuda/deferred/deferred_lean.cuh"
#include "cuda/deferred/deferred_mma.cuh"

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
  pb.tree = p.parents.present();
  pb.nodes = p.log_cols;
  plan::DeferredPlan pl = plan::plan_deferred(pb, major, sms, force);
  if (pb.tree && pl.path == plan::Path::kDeferredLean && (p.prep == nullptr || p.prep_rows * p.H == 0)) {
    pb.lean_ok = false;  // a tree without the algebra's buffer (no logged tokens): the general kernel
    pl = plan::plan_deferred(pb, major, sms, force);
  }
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
    // the algebra commits the state before the step's tokens: verify steps (log_tokens) only
    if (!pl.algebra || !p.log_tokens) return Launch(grid, 32, 0, stream)(deferred_lean_kernel<TAct, TS, k16, true>, p);
    const dim3 ga(static_cast<unsigned>(p.V / kAlgRows), static_cast<unsigned>(p.HV), static_cast<unsigned>(nseq));
    GDN_RETURN_IF_ERROR(Launch(ga, kAlgThreads, 0, stream)(deferred_alg_kernel<TAct, TS>, p));
    if (!pb.tree) return Status::Ok();
    // a tree's sequences the algebra did not take (larger than its chunk): the general kernel, which
    // skips the others
    DeferredParams q = p;
    q.alg_before = true;
    using Tr = DeferredTraits<TS, 128, false>;
    const dim3 g2(static_cast<unsigned>((p.V + Tr::kRows - 1) / Tr::kRows), static_cast<unsigned>(p.HV),
                  static_cast<unsigned>(nseq));
    return Launch(g2, Tr::kThreads, 0, stream)(
        kHasVec<TS, Tr::kPiece> ? deferred_kernel<TAct, TS, 128, true, false> : deferred_kernel<TAct, TS, 128, false, false>, q);
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
