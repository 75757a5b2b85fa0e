// src/cuda/chunk/chunk_launch.cuh — the chunk kernel's launcher, instantiated per activation dtype in
// chunk_bf16.cu and chunk_f16.cu.
#pragma once
#include <algorithm>
#include <type_traits>

#include "cuda/chunk/chunk.cuh"

namespace gdn::cuda {

// The chunk kernel's shared memory: its layout's, and for the split form's instance the larger of
// its and the producers' layout (a batch whose offsets decrease runs the producers' form there).
template <int VS, bool kSplit, bool kSmall>
constexpr size_t chunk_kernel_bytes() {
  constexpr size_t prod = chunk::ProducerLayout<VS, kSmall>::kBytes;
  if constexpr (kSplit) return std::max(chunk::LoadLayout<VS, kSmall>::kBytes, prod);
  else return prod;
}

template <typename TAct, typename TState, int VS, bool kSplit, bool kSmall>
Status launch_chunk_vs(const ChunkParams& p, cudaStream_t stream) {
  constexpr size_t kBytes = chunk_kernel_bytes<VS, kSplit, kSmall>();
  auto kernel = chunk::chunk_kernel<TAct, TState, VS, kSplit, kSmall>;
  GDN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kBytes)));
  const dim3 grid(static_cast<unsigned>(p.V / VS), static_cast<unsigned>(p.HV), static_cast<unsigned>(p.group[0].n));
  return Launch(grid, dim3(chunk::block_threads(kSplit, VS)), kBytes, stream)(kernel, p);
}

// The split form's prep kernel.
template <typename TAct>
Status launch_chunk_prep(const ChunkParams& p, cudaStream_t stream) {
  constexpr size_t kBytes = chunk::PrepLayout::kBytes;
  auto kernel = chunk::chunk_prep_kernel<TAct>;
  GDN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kBytes)));
  const GroupMeta& g = p.group[0];
  const dim3 grid(static_cast<unsigned>((g.limit + chunk::kC - 1) / chunk::kC + g.n), static_cast<unsigned>(p.HV));
  return Launch(grid, dim3(chunk::kGroupThreads), kBytes, stream)(kernel, p);
}

template <typename TAct, typename TState, bool kSmall>
Status launch_chunk_forms(const ChunkParams& p, cudaStream_t stream) {
  if constexpr (std::is_same_v<TAct, __nv_bfloat16>) {  // the split form: bfloat16, 32 columns (chunk_fit)
    if (p.prep) {
      const Status st = launch_chunk_prep<TAct>(p, stream);
      if (!st.ok()) return st;
      return launch_chunk_vs<TAct, TState, 32, true, kSmall>(p, stream);
    }
  }
  if constexpr (!kSmall) {  // (the 128-column form: two buffers only)
    if (p.vs == 128) return launch_chunk_vs<TAct, TState, 128, false, false>(p, stream);
  }
  return p.vs == 64 ? launch_chunk_vs<TAct, TState, 64, false, kSmall>(p, stream)
                    : launch_chunk_vs<TAct, TState, 32, false, kSmall>(p, stream);
}

template <typename TAct, typename TState>
Status launch_chunk(const ChunkParams& p, cudaStream_t stream) {
  if (p.group[0].n == 0) return Status::Ok();
  return p.small ? launch_chunk_forms<TAct, TState, true>(p, stream) : launch_chunk_forms<TAct, TState, false>(p, stream);
}

}  // namespace gdn::cuda
