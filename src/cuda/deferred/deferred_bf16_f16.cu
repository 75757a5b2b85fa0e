// The deferred-commit kernel for bf16 activations and f16 state (every K and block form).
#include "cuda/deferred/deferred_launch.cuh"

namespace gdn::cuda {
template Status launch_deferred<__nv_bfloat16, __half>(const DeferredParams&, plan::Override, cudaStream_t);
}  // namespace gdn::cuda
