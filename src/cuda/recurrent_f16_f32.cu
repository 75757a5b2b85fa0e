// Recurrent kernels for __half activations and float state (every K, fused or not).
#include "cuda/recurrent.cuh"

namespace gdn::cuda {
template Status launch_recurrent<__half, float>(const RecurrentParams&, bool, plan::Override, cudaStream_t, bool*);
}  // namespace gdn::cuda
