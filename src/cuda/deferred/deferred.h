// src/cuda/deferred/deferred.h — gated_delta_rule_recurrent's deferred-commit mode on CUDA
// (docs/contract.md §7; the kernel in deferred.cuh): its parameters and launcher.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/params.h"
#include "cuda/plan/plan.h"

namespace gdn::cuda {

// The recurrence's parameters (group 0: one slot per sequence in slots, the replay counts in
// num_accepted, has_init; every gate and norm form of ops.h: RecurrentParams::gates) plus the logs,
// the tree and the gate inputs as FloatRefs.
struct DeferredParams : RecurrentParams {
  const float* log_in = nullptr;          // verify_log [num_slots, log_cols, HV, K + V + 2]
  float* log_out = nullptr;               // verify_log_out, the same shape
  int64_t log_in_rs = 0, log_out_rs = 0;  // slot strides (floats)
  int64_t log_cols = 1;
  IndexRef path;     // accepted_path [n, log_cols] or absent (rows 0, 1, ...)
  IndexRef parents;  // token_parents [T] or absent (a chain)
  bool log_tokens = true;
  FloatRef a, b;  // gate inputs [T, HV]: element (row, hv) at row * a_rs + hv (src.a_rs, src.b_rs)
};

// The launch for p, as plan::plan_deferred decides (force: a deferred path, else the planner's).
template <typename TAct, typename TState>
Status launch_deferred(const DeferredParams& p, plan::Override force, cudaStream_t stream);

}  // namespace gdn::cuda
