// src/cuda/recurrent.h — launcher of the recurrent kernel (recurrent.cuh), instantiated per
// (activation, state) dtype pair in recurrent_<act>_<state>.cu so builds run in parallel.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/params.h"

namespace gdn::cuda {
// fused = false: q/k/v/a/b tensors (gated_delta_rule_recurrent); true: gdn_attention's conv on the fly.
template <typename TAct, typename TState>
Status launch_recurrent(const RecurrentParams& p, bool fused, cudaStream_t stream);
}  // namespace gdn::cuda
