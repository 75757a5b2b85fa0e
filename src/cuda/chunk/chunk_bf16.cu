// The chunk kernel for __nv_bfloat16 activations and every state dtype.
#include "cuda/chunk/chunk_launch.cuh"

namespace gdn::cuda {
template Status launch_chunk<__nv_bfloat16, float>(const ChunkParams&, cudaStream_t);
template Status launch_chunk<__nv_bfloat16, __nv_bfloat16>(const ChunkParams&, cudaStream_t);
template Status launch_chunk<__nv_bfloat16, __half>(const ChunkParams&, cudaStream_t);
}  // namespace gdn::cuda
