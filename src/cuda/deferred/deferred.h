// src/cuda/deferred/deferred.h — the deferred-commit mode on CUDA (docs/contract.md §7):
// gated_delta_rule_recurrent's (the kernel in deferred.cuh), its parameters and launcher, and
// gdn_attention's (deferred_attention.cu: a conv kernel, then that kernel per group).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/params.h"
#include "cuda/plan/plan.h"

namespace gdn::cuda {
// The recurrence's parameters (group 0: one slot per sequence in slots (column 0), the replay
// counts in num_accepted (absent: none), has_init; every gate and norm form of ops.h:
// RecurrentParams::gates) plus the logs, the tree and the gate inputs as FloatRefs.
struct DeferredParams : RecurrentParams {
  const float* log_in = nullptr;          // verify_log [num_slots, log_cols, HV, K + V + 2]
  float* log_out = nullptr;               // verify_log_out, the same shape
  int64_t log_in_rs = 0, log_out_rs = 0;  // slot strides (floats)
  int64_t log_cols = 1;
  IndexRef path;     // accepted_path [n, log_cols] or absent (rows 0, 1, ...)
  IndexRef parents;  // token_parents [T] or absent (a chain)
  bool log_tokens = true;
  FloatRef a, b;  // gate inputs [T, HV]: element (row, hv) at row * a_rs + hv (src.a_rs, src.b_rs)
  // gdn_attention (out_rows >= 0): the inputs of the group's local token j are at row j as above, its
  // output at row group[0].token_indx(j) of o (identity when absent), and a sequence with a token
  // whose row is outside [0, out_rows) is padding. -1: the primitive op (outputs at row j).
  int64_t out_rows = -1;
  // The lean form's prepared token inputs (deferred_prep.cuh) for the group's local rows
  // 0 .. prep_rows - 1, or null (each row warp prepares its tokens itself).
  float* prep = nullptr;
  int64_t prep_rows = 0;
  // The algebra kernel (deferred_mma.cuh) ran before: the general kernel leaves it the sequences it
  // took (padding, and those whose chunk fits).
  bool alg_before = false;
};

// The bytes of the lean form's prepared token inputs (deferred_prep.cuh) for p's group 0: verify
// steps (log_tokens: a few tokens per sequence) where the lean form can take them (K = 128, "vk"
// state) and the planner gives it 16-row warps (plan_deferred with force), with the algebra's
// coefficients where it plans the algebra (trees: only then); else 0. Callers take them with the
// rest of their workspace, before anything is written, and set prep and prep_rows.
// (deferred_attention.cu)
size_t deferred_prep_bytes(const DeferredParams& p, plan::Override force);

// The launch for p, as plan::plan_deferred decides (force: a deferred path, else the planner's).
template <typename TAct, typename TState>
Status launch_deferred(const DeferredParams& p, plan::Override force, cudaStream_t stream);
// The same for the runtime dtypes of the activations and the state (deferred_attention.cu).
Status launch_deferred_any(const DeferredParams& p, DType act, DType state, plan::Override force,
                           cudaStream_t stream);

// gdn_attention's deferred-commit mode (docs/contract.md §7; deferred_attention.cu): rp as gdn_attention
// fills it for its step (both groups, the projections, the conv pool, the gates, the SSM pool, o), the
// logs, replay counts, paths and parents from a.
Status deferred_attention(const GdnAttentionArgs& a, const RecurrentParams& rp, plan::Override force,
                          cudaStream_t stream);

}  // namespace gdn::cuda
