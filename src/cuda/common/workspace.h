// src/cuda/common/workspace.h — device scratch of the CUDA ops (gdn_attention's conv buffer for the
// chunk kernel, the chunk kernel's split-form records): stream-ordered allocations from one memory pool per device, created on first use,
// that keeps what it has reserved (a later call of the same size maps no new memory). Under stream
// capture the allocation and the free become nodes of the graph, which owns that memory.
#pragma once
#include <cstddef>

#include <cuda_runtime.h>

#include "cuda/common/cuda_util.cuh"

namespace gdn::cuda {

// *ptr: bytes of device memory usable by work enqueued on `stream` after this call.
Status workspace_alloc(int device, size_t bytes, cudaStream_t stream, void** ptr);
// Returns ptr to the pool once the work enqueued on `stream` before this call is done.
Status workspace_free(void* ptr, cudaStream_t stream);

// run(ws) with `bytes` of workspace allocated before it (so that an allocation failure comes before
// anything is written) and returned after the work run enqueued; run's error first, else the free's.
template <typename F>
Status with_workspace(int device, size_t bytes, cudaStream_t stream, F run) {
  void* ws = nullptr;
  const Status got = workspace_alloc(device, bytes, stream, &ws);
  if (!got.ok()) return got;
  const Status st = run(ws);
  const Status freed = workspace_free(ws, stream);
  return st.ok() ? freed : st;
}

}  // namespace gdn::cuda
