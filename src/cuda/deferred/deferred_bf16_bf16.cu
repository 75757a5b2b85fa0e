// The deferred-commit kernel for bf16 activations and bf16 state (every K and block form).
#include "cuda/deferred/deferred_launch.cuh"

namespace gdn::cuda {
template Status launch_deferred<__nv_bfloat16, __nv_bfloat16>(const DeferredParams&, plan::Override, cudaStream_t);
}  // namespace gdn::cuda
