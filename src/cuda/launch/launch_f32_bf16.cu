// The recurrence and step kernels for float activations and __nv_bfloat16 state (every K, fused or not).
#include "cuda/launch/launch.cuh"

namespace gdn::cuda {
template Status launch_recurrent<float, __nv_bfloat16>(const RecurrentParams&, bool, plan::Override, cudaStream_t, bool*);
}  // namespace gdn::cuda
