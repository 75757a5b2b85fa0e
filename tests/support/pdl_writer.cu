// tests/support/pdl_writer.cu — a kernel that lets the stream's next kernel start at once
// (griddepcontrol.launch_dependents), then waits and only then writes: the writer of metadata
// that a programmatically launched kernel must not read early (test_cuda_pdl_meta.cpp).
#include <cuda_runtime.h>

#include "pdl_writer.h"

namespace gdn::prop {
namespace {
__global__ void delayed_copy_kernel(CopyJob a, CopyJob b, CopyJob c, long long spin_cycles) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
  const long long t0 = clock64();
  while (clock64() - t0 < spin_cycles) {
  }
  for (const CopyJob& j : {a, b, c})
    for (size_t w = threadIdx.x; w < j.bytes; w += blockDim.x)
      static_cast<unsigned char*>(j.dst)[w] = static_cast<const unsigned char*>(j.src)[w];
}
}  // namespace

cudaError_t launch_delayed_copy(CopyJob a, CopyJob b, CopyJob c, long long spin_cycles, cudaStream_t s) {
  delayed_copy_kernel<<<1, 256, 0, s>>>(a, b, c, spin_cycles);
  return cudaGetLastError();
}
}  // namespace gdn::prop
