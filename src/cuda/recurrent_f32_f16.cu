// Recurrent kernels for float activations and __half state (every K, fused or not).
#include "cuda/recurrent.cuh"

namespace gdn::cuda {
template Status launch_recurrent<float, __half>(const RecurrentParams&, bool, cudaStream_t);
}  // namespace gdn::cuda
