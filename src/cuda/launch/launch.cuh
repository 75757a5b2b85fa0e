// src/cuda/launch/launch.cuh — launch_recurrent (launch.h): the planner's problem and facts from the
// kernels' parameters and the device, the plan (src/cuda/plan/), and its execution by the kernel
// family it names. Included once per (activation, state) dtype pair by launch_<act>_<state>.cu.
#pragma once
#include "cuda/launch/launch.h"
#include "cuda/lean/recurrent_lean.cuh"
#include "cuda/packed/recurrent_packed.cuh"
#include "cuda/pipelined/tma_launch.cuh"
#include "cuda/register/recurrent.cuh"
#include "cuda/step/fused_step.cuh"

namespace gdn::cuda {

// The planner's view of a launch and the device's answers to its questions (plan/plan.h).
template <typename TAct, typename TS, int KP>
class KernelFacts final : public plan::Facts {
 public:
  // forms: the launch takes the gate-form instances (Problem::gate_forms)
  KernelFacts(const RecurrentParams& p, int64_t nseq, bool fused, bool forms, int dev, int sms)
      : p_(p), nseq_(nseq), fused_(fused), forms_(forms), dev_(dev), sms_(sms) {}
  int sms() const override { return sms_; }
  int64_t pipelined_blocks(int kTok) const override {
    return fused_   ? cuda::pipelined_blocks<TAct, TS, KP, true>(dev_, kTok)
           : forms_ ? cuda::pipelined_blocks<TAct, TS, KP, false, true>(dev_, kTok)
                    : cuda::pipelined_blocks<TAct, TS, KP, false>(dev_, kTok);
  }
  bool cluster_resident(bool lean) const override {
    using Tr = RecTraits<TS, true, kFormLarge>;
    const bool dense = kHasVec<TS, KP / Tr::kLanes> && !p_.kv_layout && p_.state_vec && p_.K == KP;
    return dense ? fused_step_resident<TAct, TS, KP, true>(p_, nseq_, lean)
                 : fused_step_resident<TAct, TS, KP, false>(p_, nseq_, lean);
  }
  int lean_blocks_per_sm(bool spec) const override { return cuda::lean_blocks_per_sm<TS>(spec); }

 private:
  const RecurrentParams& p_;
  int64_t nseq_;
  bool fused_, forms_;
  int dev_, sms_;
};

template <typename TAct, typename TS, int KP>
plan::Problem plan_problem(const RecurrentParams& p, int64_t nseq, bool fused) {
  plan::Problem pb;
  pb.step = fused;
  pb.state_bytes = static_cast<int>(sizeof(TS));
  pb.K = p.K, pb.V = p.V, pb.H = p.H, pb.HV = p.HV, pb.r = p.r;
  pb.nseq = nseq;
  pb.tokens = fused ? p.src.num_actual_tokens : batch_tokens(p);
  pb.spec = p.group[0].n > 0 ? p.group[0].spec : p.group[1].spec;
  for (const GroupMeta& g : p.group) pb.verify_cols |= g.n > 0 && g.spec && g.cols > 1;
  pb.dense = !p.kv_layout && p.state_vec;
  pb.gate_forms = !fused && !default_gate_form<TAct>(p);
  pb.pipelined_ok = fused ? pipelined_ok<TAct, TS, KP, true>(p, nseq) : pipelined_ok<TAct, TS, KP, false>(p, nseq);
  if (fused) {
    pipelined_problem<TAct, TS, KP, true>(p, pb);
    pb.cluster_ok = step_cluster_ok<StepTraits<TS>>(p);
    pb.cluster_blocks = step_cluster_blocks<StepTraits<TS>>(p);
    pb.per_token_verify = p.per_token_verify();
  } else {
    pipelined_problem<TAct, TS, KP, false>(p, pb);
    if constexpr (KP == 128) lean_problem<TAct, TS>(p, nseq, pb.spec, pb);
  }
  return pb;
}

template <typename TAct, typename TS>
Status launch_recurrent(const RecurrentParams& p, bool fused, plan::Override force, cudaStream_t stream,
                        bool* one_launch) {
  *one_launch = false;
  const int64_t nseq = p.group[0].n + p.group[1].n;
  if (nseq == 0) return Status::Ok();  // (fused: the caller's conv kernel copies z)
  int dev = 0, major = 0, sms = 0;
  GDN_RETURN_IF_ERROR(device_of(&dev, &major, &sms));
  auto go = [&](auto kp_tag) -> Status {
    constexpr int KP = decltype(kp_tag)::value;
    const plan::Problem pb = plan_problem<TAct, TS, KP>(p, nseq, fused);
    const KernelFacts<TAct, TS, KP> facts(p, nseq, fused, pb.gate_forms, dev, sms);
    const plan::Plan pl = plan::plan_launch(pb, major, facts, force);
    if (pb.gate_forms && !plan::takes_gate_forms(pl.path))
      return Status::Error(std::string("internal: planned kernel ") + plan::path_name(pl.path) +
                           " does not take the gate forms of this launch");
    auto run = [&](auto fused_tag, auto form_tag) -> Status {
      constexpr bool kF = decltype(fused_tag)::value;
      constexpr int kFm = decltype(form_tag)::value;
      using Tr = RecTraits<TS, kF, kFm>;
      constexpr int EPL = KP / Tr::kLanes;
      const bool dense = kHasVec<TS, EPL> && !p.kv_layout && p.state_vec && p.K == KP;
      const dim3 grid(static_cast<unsigned>((p.V + Tr::kRows - 1) / Tr::kRows), static_cast<unsigned>(p.HV),
                      static_cast<unsigned>(nseq));
      if constexpr (!kF && kFm != kFormMid) {
        if (pb.gate_forms)  // the gate-form instances (recurrent.cuh)
          return Launch(grid, Tr::kThreads, 0, stream)(dense ? recurrent_kernel<TAct, TS, KP, false, true, kFm, true>
                                                             : recurrent_kernel<TAct, TS, KP, false, false, kFm, true>,
                                                       p);
      }
      if constexpr (kF) {
        if (pl.path == plan::Path::kStepCluster || pl.path == plan::Path::kStepClusterLean) {
          static_assert(RecTraits<TS, false>::kLanes == Tr::kLanes, "one dense decision for both fused forms");
          const Status st = dense ? launch_fused_step<TAct, TS, KP, true>(p, nseq, pl, stream)
                                  : launch_fused_step<TAct, TS, KP, false>(p, nseq, pl, stream);
          *one_launch = st.ok();
          return st;
        }
      }
      return Launch(grid, Tr::kThreads, 0, stream)(dense ? recurrent_kernel<TAct, TS, KP, kF, true, kFm>
                                                         : recurrent_kernel<TAct, TS, KP, kF, false, kFm>,
                                                   p);
    };
    using T = std::true_type;
    using F = std::false_type;
    using Large = std::integral_constant<int, kFormLarge>;
    using Small = std::integral_constant<int, kFormSmall>;
    using Mid = std::integral_constant<int, kFormMid>;
    switch (pl.path) {
      case plan::Path::kStepPipelined:
      case plan::Path::kStepPipelinedPrologue: {
        const Status st = launch_pipelined<TAct, TS, KP, true>(p, pl, stream);
        *one_launch = st.ok();
        return st;
      }
      case plan::Path::kStepCluster:
      case plan::Path::kStepClusterLean:
      case plan::Path::kStepTwoLaunches:
        return run(T{}, Large{});
      case plan::Path::kLean:
      case plan::Path::kLeanMore:
      case plan::Path::kLeanStaged:
        if constexpr (KP == 128) return launch_lean<TAct, TS>(p, nseq, pb.spec, pl.path, pb.gate_forms, stream);
        break;
      case plan::Path::kPipelined:
        return pb.gate_forms ? launch_pipelined<TAct, TS, KP, false, true>(p, pl, stream)
                             : launch_pipelined<TAct, TS, KP, false>(p, pl, stream);
      case plan::Path::kRegisterSmall:
        return run(F{}, Small{});
      case plan::Path::kRegisterMid:
        if constexpr (sizeof(TS) == 2 && KP == 128) return run(F{}, Mid{});
        break;
      case plan::Path::kPacked:
        if constexpr (sizeof(TS) == 2 && KP == 128) {
          const dim3 grid(static_cast<unsigned>((p.V + PackedTraits::kRows - 1) / PackedTraits::kRows),
                          static_cast<unsigned>(p.HV), static_cast<unsigned>(nseq));
          return Launch(grid, PackedTraits::kThreads, 0, stream)(recurrent_packed_kernel<TAct, TS, KP>, p);
        }
        break;
      case plan::Path::kRegisterLarge:
        return run(F{}, Large{});
      default:
        break;
    }
    return Status::Error(std::string("internal: planned kernel ") + plan::path_name(pl.path) +
                         " has no instance for this launch");
  };
  if (p.K <= 32) return go(std::integral_constant<int, 32>{});
  if (p.K <= 64) return go(std::integral_constant<int, 64>{});
  if (p.K <= 128) return go(std::integral_constant<int, 128>{});
  if (p.K <= 256) return go(std::integral_constant<int, 256>{});
  return Status::Error("unsupported head_k_dim " + std::to_string(p.K) + " on CUDA: at most 256");
}

}  // namespace gdn::cuda
