// The chunk kernel for __nv_bfloat16 activations and every state dtype.
#include "cuda/chunk/chunk_launch.cuh"

namespace gdn::cuda {
size_t chunk_smem_bytes(int vs) { return vs == 64 ? chunk::Layout<64>::kBytes : chunk::Layout<32>::kBytes; }
template Status launch_chunk<__nv_bfloat16, float>(const ChunkParams&, cudaStream_t);
template Status launch_chunk<__nv_bfloat16, __nv_bfloat16>(const ChunkParams&, cudaStream_t);
template Status launch_chunk<__nv_bfloat16, __half>(const ChunkParams&, cudaStream_t);
}  // namespace gdn::cuda
