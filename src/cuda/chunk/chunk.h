// src/cuda/chunk/chunk.h — the chunk-parallel prefill kernel (chunk.cuh): its parameters and launcher.
#pragma once
#include "cuda/common/params.h"

namespace gdn::cuda {

// The recurrence's parameters (with every gate and norm form of ops.h: RecurrentParams::gates,
// a_dtype, b_dtype) plus the chunk kernel's own. Sequences: group 0 (non-spec). Inputs: the
// q/k/v/a/b tensors (gated_delta_rule_chunked), or (fused: gdn_attention) q, k, v from the conv's
// buffer (src.q, [local tokens, D] with row stride src.q_rs, conv_rows.cu) and a, b from src.ba at
// the tokens' rows (group 0's token_indx), outputs at those rows; then only sequences of at least
// chunk_from tokens (when the offsets never decrease), the rest being the step's.
struct ChunkParams : RecurrentParams {
  bool fused = false;
  int vs = 64;  // value columns per block: 32, 64 or 128 (the planner's choice, plan_chunked)
  // Split form (the planner's, where few blocks walk long sequences): a prep kernel, parallel over
  // (chunk, value head), writes what the producers would compute for the key side into `prep`
  // (device memory of chunk_prep_bytes: records [HV][prep_rows] of chunk_record_bytes each, then
  // each chunk's T blocks, chunk_frag_bytes); the chunk kernel then loads it and solves only U for
  // the block's value columns (chunk_split.cuh). Null: the producers compute everything.
  void* prep = nullptr;
  int64_t prep_rows = 0;  // group 0's local tokens (its limit)
  // The forms of fewer shared-memory buffers (devices below the full forms' need, chunk_fit): one
  // buffer where the producers compute (producers and consumers take turns), two in the split form.
  bool small = false;
};

// The prep record of a (value head, local token): the rows of W (K = 128) and P (64) in the
// activation dtype, then four floats (the cumulative log decay, scale / |q|, 1 / |k|, 0).
constexpr int64_t chunk_record_bytes(int64_t act_bytes) { return (128 + 64) * act_bytes + 16; }
// A chunk's T blocks for the U solve: D_b diag(beta) (4) and M_bm (6) as 16 x 16 mma A fragments
// in register order (lane-major, 16 bytes a lane), chunk x of sequence i of value head hv at
// [hv][i + (first local token of x) / 64] (distinct while the offsets never decrease).
constexpr int64_t chunk_frag_bytes() { return 10 * 32 * 16; }
constexpr int64_t chunk_frag_slots(int64_t rows, int64_t nseq) { return nseq + (rows + 63) / 64; }
constexpr int64_t chunk_records_bytes(int64_t rows, int64_t HV, int64_t act_bytes) {
  return rows * HV * chunk_record_bytes(act_bytes);
}
constexpr int64_t chunk_prep_bytes(int64_t rows, int64_t nseq, int64_t HV, int64_t act_bytes) {
  return chunk_records_bytes(rows, HV, act_bytes) + HV * chunk_frag_slots(rows, nseq) * chunk_frag_bytes();
}
// What of the chunk kernel fits a device of smem_optin bytes of opt-in shared memory per block, for
// activations act and V value columns: any form (the small forms of 32 columns), the full forms
// (else ChunkParams::small), 64-column blocks (in the forms that fit), 128-column blocks (a full
// form only), and the split form: 16-bit activations, V = 64 or 128 (the widths its tests cover),
// its shared memory.
struct ChunkFit {
  bool any = false, full = false, vs64 = false, vs128 = false, split = false;
};
ChunkFit chunk_fit(DType act, int64_t V, size_t smem_optin);

// The launch for p (vs 32, 64 or 128); the caller has checked that the kernel takes the problem (ops.cu,
// chunk_ok: K = 128, V a multiple of vs, 16-bit q/k/v/o with 16-byte aligned rows, sm_80+).

template <typename TAct, typename TState>
Status launch_chunk(const ChunkParams& p, cudaStream_t stream);

}  // namespace gdn::cuda
