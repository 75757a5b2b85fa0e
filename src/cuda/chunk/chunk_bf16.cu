// The chunk kernel for __nv_bfloat16 activations and every state dtype.
#include "cuda/chunk/chunk_launch.cuh"

namespace gdn::cuda {
size_t chunk_smem_bytes(int vs) { return vs == 64 ? chunk_kernel_bytes<64, false>() : chunk_kernel_bytes<32, false>(); }
bool chunk_prep_ok(DType act, int64_t V, size_t smem_optin) {
  return act == DType::kBFloat16 && smem_optin >= chunk_kernel_bytes<32, true>() &&
         ((V == 64 && smem_optin >= chunk::PrepLayout<64>::kBytes) ||
          (V == 128 && smem_optin >= chunk::PrepLayout<128>::kBytes));
}
template Status launch_chunk<__nv_bfloat16, float>(const ChunkParams&, cudaStream_t);
template Status launch_chunk<__nv_bfloat16, __nv_bfloat16>(const ChunkParams&, cudaStream_t);
template Status launch_chunk<__nv_bfloat16, __half>(const ChunkParams&, cudaStream_t);
}  // namespace gdn::cuda
