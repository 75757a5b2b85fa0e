// Recurrent kernels for __half activations and float state (every K, fused or not).
#include "cuda/recurrent.cuh"

namespace gdn::cuda {
template Status launch_recurrent<__half, float>(const RecurrentParams&, bool, cudaStream_t);
}  // namespace gdn::cuda
