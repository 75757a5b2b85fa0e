// src/cuda/conv/conv.h — launchers of the conv kernels (conv.cu, conv_rows.cu, deferred_conv.cu).
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

// gdn_attention's conv in the deferred-commit mode (docs/contract.md §7; deferred_conv.cu), for the
// sequences of both groups: a sequence's slot is column 0 of group[g].slots, group[g].num_accepted
// holds its replay count (absent: 0), group 1's sequences (verify) commit their window and log their
// tokens, group 0's store the window after theirs. Local token j of group g gets workspace row
// ws_row0[g] + j of y (row stride y_rs): [q | k | v] conv outputs (D, channel order), then its a (HV)
// and b (HV) from the ba projection; rows of padding sequences are not written. Extra block rows
// copy z.
struct DeferredConvParams : ConvParams {
  const void* log_in = nullptr;  // conv_log [num_slots, log_cols, D], activation dtype
  void* log_out = nullptr;       // conv_log_out, the same shape
  int64_t log_in_rs = 0, log_out_rs = 0, log_cols = 1;  // slot strides (elements), log rows per slot
  IndexRef path[2];  // per group: the accepted path [n, log_cols] (log rows to replay) or absent (0, 1, ...)
  IndexRef parents;  // group 1: token parents [>= its local tokens] or absent (chains)
  int64_t ws_row0[2] = {0, 0};
};
Status launch_deferred_conv(const DeferredConvParams& p, DType act, cudaStream_t stream);
}  // namespace gdn::cuda
