// src/cuda/launch/launch.h — the launcher of the recurrence and of gdn_attention's step (launch.cuh),
// instantiated per (activation, state) dtype pair in launch_<act>_<state>.cu so builds run in parallel.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/params.h"
#include "cuda/plan/plan.h"

namespace gdn::cuda {
// fused = false: q/k/v/a/b tensors (gated_delta_rule_recurrent); true: gdn_attention's step, the conv
// on the fly. The planner (plan/plan.h) chooses the kernel; `force` overrides it where it can. Fused,
// *one_launch says whether the planned kernel also updated the conv pool and copied z (else the
// caller launches the conv kernel).
template <typename TAct, typename TState>
Status launch_recurrent(const RecurrentParams& p, bool fused, plan::Override force, cudaStream_t stream,
                        bool* one_launch);
}  // namespace gdn::cuda
