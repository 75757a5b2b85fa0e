// Instantiations of the recurrent kernel for __nv_bfloat16 activations (all state dtypes and K).
#include <type_traits>

#include "cuda/recurrent.cuh"

namespace gdn::cuda {
Status launch_recurrent_bf16(const RecurrentParams& p, DType state, bool fused, cudaStream_t stream) {
  return launch_recurrent<__nv_bfloat16>(p, state, fused, stream);
}
}  // namespace gdn::cuda
