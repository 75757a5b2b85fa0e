// The deferred-commit kernel for f16 activations and f16 state (every K and block form).
#include "cuda/deferred/deferred_launch.cuh"

namespace gdn::cuda {
template Status launch_deferred<__half, __half>(const DeferredParams&, plan::Override, cudaStream_t);
}  // namespace gdn::cuda
