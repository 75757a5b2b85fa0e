// The chunk kernel for __half activations and every state dtype.
#include "cuda/chunk/chunk_launch.cuh"

namespace gdn::cuda {
template Status launch_chunk<__half, float>(const ChunkParams&, cudaStream_t);
template Status launch_chunk<__half, __nv_bfloat16>(const ChunkParams&, cudaStream_t);
template Status launch_chunk<__half, __half>(const ChunkParams&, cudaStream_t);
}  // namespace gdn::cuda
