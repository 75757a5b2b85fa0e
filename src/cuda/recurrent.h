// src/cuda/recurrent.h — launcher of the recurrent kernel (recurrent.cuh), instantiated per
// (activation, state) dtype pair in recurrent_<act>_<state>.cu so builds run in parallel.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/params.h"

namespace gdn::cuda {
// fused = false: q/k/v/a/b tensors (gated_delta_rule_recurrent); true: gdn_attention's conv on the
// fly. allow_one_launch (fused): update the conv pool and copy z in the same launch where thread-block
// clusters allow it; *one_launch says whether that happened (else the caller launches the conv kernel).
template <typename TAct, typename TState>
Status launch_recurrent(const RecurrentParams& p, bool fused, bool allow_one_launch, cudaStream_t stream,
                        bool* one_launch);
}  // namespace gdn::cuda
