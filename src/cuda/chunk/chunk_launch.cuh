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

// The tensor maps of the producers' forms (chunk::ChunkMaps) on a 9.x device: q and k as [rows][H][K], v as
// [rows][HV][V] over group 0's local tokens (fused: the conv's buffer, q, k and v at their channel
// offsets), boxes of 64 rows by kLdK (q, k) and VS + 8 (v) columns; ok false where the device or the
// layout cannot.
template <typename TAct, int VS>
chunk::ChunkMaps chunk_maps(const ChunkParams& p) {
  chunk::ChunkMaps m;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || device_props(dev).major < 9) return m;
  const int64_t rows = p.group[0].limit;
  if (rows < chunk::kC || rows > (int64_t{1} << 31) - 1) return m;
  const bool bf16 = std::is_same_v<TAct, __nv_bfloat16>;
  const chunk::ChunkSrc<TAct> s = chunk::chunk_src<TAct>(p, 0, 0, 0);  // head 0, value head 0, column 0
  m.ok = tensor_map_3d(&m.q, s.q, bf16, p.K, p.H, rows, p.K, s.q_rs, chunk::kLdK, chunk::kC) &&
         tensor_map_3d(&m.k, s.k, bf16, p.K, p.H, rows, p.K, s.k_rs, chunk::kLdK, chunk::kC) &&
         tensor_map_3d(&m.v, s.v, bf16, p.V, p.HV, rows, p.V, s.v_rs, VS + 8, chunk::kC);
  return m;
}

template <typename TAct, typename TState, int VS, bool kSplit, bool kSmall>
Status launch_chunk_vs(const ChunkParams& p, cudaStream_t stream) {
  constexpr size_t kBytes = chunk_kernel_bytes<VS, kSplit, kSmall>();
  auto kernel = chunk::chunk_kernel<TAct, TState, VS, kSplit, kSmall>;
  GDN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kBytes)));
  const dim3 grid(static_cast<unsigned>(p.V / VS), static_cast<unsigned>(p.HV), static_cast<unsigned>(p.group[0].n));
  // (TMA staging in the 128-column form)
  const chunk::ChunkMaps maps = kSplit || VS != 128 ? chunk::ChunkMaps{} : chunk_maps<TAct, VS>(p);
  return Launch(grid, dim3(chunk::block_threads(kSplit, VS)), kBytes, stream)(kernel, p, maps);
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
  if (p.prep) {  // the split form: 32 columns (chunk_fit)
    const Status st = launch_chunk_prep<TAct>(p, stream);
    if (!st.ok()) return st;
    return launch_chunk_vs<TAct, TState, 32, true, kSmall>(p, stream);
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
