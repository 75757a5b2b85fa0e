// Instantiations of the recurrent kernel for float activations (all state dtypes and K).
#include <type_traits>

#include "cuda/recurrent.cuh"

namespace gdn::cuda {
Status launch_recurrent_f32(const RecurrentParams& p, DType state, bool fused, cudaStream_t stream) {
  return launch_recurrent<float>(p, state, fused, stream);
}
}  // namespace gdn::cuda
