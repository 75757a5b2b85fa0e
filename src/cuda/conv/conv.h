// src/cuda/conv/conv.h — launcher of the conv kernel (conv.cu).
#pragma once
#include "cuda/common/params.h"

namespace gdn::cuda {
// fused = false: y and the pool from x (p.src.q, row stride p.src.q_rs).
// fused = true: only the pool (from the projections) and the z copy, after the fused recurrence.
Status launch_conv(const ConvParams& p, DType act, bool fused, cudaStream_t stream);
}  // namespace gdn::cuda
