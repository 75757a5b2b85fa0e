// The chunk kernel for __nv_bfloat16 activations and every state dtype.
#include "cuda/chunk/chunk_launch.cuh"

namespace gdn::cuda {
ChunkFit chunk_fit(DType act, int64_t V, size_t smem_optin) {
  ChunkFit f;
  f.any = smem_optin >= chunk_kernel_bytes<32, false, true>();
  // the split instance's bytes include its producers' layout: both full 32-column forms
  f.full = smem_optin >= chunk_kernel_bytes<32, true, false>();
  f.vs64 = smem_optin >= (f.full ? chunk_kernel_bytes<64, false, false>() : chunk_kernel_bytes<64, false, true>());
  f.vs128 = f.full && smem_optin >= chunk_kernel_bytes<128, false, false>();
  // the prep kernel's bytes are below either split instance's, so the instance's test covers both
  static_assert(chunk::PrepLayout::kBytes <= chunk_kernel_bytes<32, true, true>(),
                "the prep kernel fits where the split form does");
  f.split = (act == DType::kBFloat16 || act == DType::kFloat16) && (V == 64 || V == 128) &&
            (f.full || smem_optin >= chunk_kernel_bytes<32, true, true>());
  return f;
}
template Status launch_chunk<__nv_bfloat16, float>(const ChunkParams&, cudaStream_t);
template Status launch_chunk<__nv_bfloat16, __nv_bfloat16>(const ChunkParams&, cudaStream_t);
template Status launch_chunk<__nv_bfloat16, __half>(const ChunkParams&, cudaStream_t);
}  // namespace gdn::cuda
