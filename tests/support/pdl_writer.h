// tests/support/pdl_writer.h — see pdl_writer.cu. CUDA builds only.
#pragma once
#ifdef GDN_WITH_CUDA
#include <cuda_runtime.h>

#include <cstddef>

namespace gdn::prop {
struct CopyJob {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
};
// One block on s: launch_dependents, spin_cycles of clock64, then the three copies (bytes each).
cudaError_t launch_delayed_copy(CopyJob a, CopyJob b, CopyJob c, long long spin_cycles, cudaStream_t s);
}  // namespace gdn::prop
#endif  // GDN_WITH_CUDA
