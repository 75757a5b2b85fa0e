// src/cuda/chunk/chunk.h — the chunk-parallel prefill kernel (chunk.cuh): its parameters and launcher.
#pragma once
#include "cuda/common/params.h"

namespace gdn::cuda {

// The recurrence's parameters plus the gate and norm forms the chunk kernel loads (ops.h):
// a and b in any float dtype (FloatRef codes), the decay given in log space (no A_log), beta given,
// q and k without l2 normalisation. Sequences: group 0 (non-spec). Inputs: the q/k/v/a/b tensors
// (gated_delta_rule_chunked), or (fused: gdn_attention) q, k, v from the conv's buffer (src.q,
// [local tokens, D] with row stride src.q_rs, conv_rows.cu) and a, b from src.ba at the tokens'
// rows (group 0's token_indx), outputs at those rows; then only sequences of at least chunk_from
// tokens (when the offsets never decrease), the rest being the step's.
struct ChunkParams : RecurrentParams {
  int a_dtype = 1, b_dtype = 1;  // 0 float32, 1 bfloat16, 2 float16, 3 float64
  bool decay_given = false, beta_given = false, l2norm = true;
  bool fused = false;
  int vs = 64;  // value columns per block (the planner's choice: chunk_value_split)
};

// The launch for p (vs 32 or 64); the caller has checked that the kernel takes the problem (ops.cu,
// chunk_ok: K = 128, V a multiple of vs, 16-bit q/k/v/o with 16-byte aligned rows, sm_80+).
// Shared memory of a block with vs value columns (the kernel needs it as opt-in dynamic memory).
size_t chunk_smem_bytes(int vs);

template <typename TAct, typename TState>
Status launch_chunk(const ChunkParams& p, cudaStream_t stream);

}  // namespace gdn::cuda
