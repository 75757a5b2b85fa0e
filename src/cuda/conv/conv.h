// src/cuda/conv/conv.h — launcher of the conv kernel (conv.cu).
#pragma once
#include "cuda/common/params.h"

namespace gdn::cuda {
// fused = false: y and the pool from x (p.src.q, row stride p.src.q_rs).
// fused = true: only the pool (from the projections) and the z copy, after the fused recurrence.
Status launch_conv(const ConvParams& p, DType act, bool fused, cudaStream_t stream);
// gdn_attention's long prefills (group 0's sequences of at least p.chunk_from tokens): the conv of
// their q, k, v projections into p.y ([group 0's local tokens, D], row stride p.y_rs), read by the
// chunk kernel; 16-bit activations (conv_rows.cu).
Status launch_conv_rows(const ConvParams& p, DType act, cudaStream_t stream);
}  // namespace gdn::cuda
