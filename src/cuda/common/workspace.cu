// The CUDA ops' device scratch (workspace.h).
#include "cuda/common/workspace.h"

#include <cstdint>
#include <mutex>
#include <string>

namespace gdn::cuda {
namespace {

constexpr int kMaxDev = 64;

Status pool_of(int device, cudaMemPool_t* pool) {
  static std::mutex mu;
  static cudaMemPool_t pools[kMaxDev] = {};
  if (device < 0 || device >= kMaxDev) return Status::Error("workspace: device " + std::to_string(device) + " out of range");
  std::lock_guard<std::mutex> lock(mu);
  if (!pools[device]) {
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cudaMemPool_t p = nullptr;
    cudaError_t e = cudaMemPoolCreate(&p, &props);
    uint64_t keep = UINT64_MAX;  // never trim at synchronisation: the next call reuses the memory
    if (e == cudaSuccess) e = cudaMemPoolSetAttribute(p, cudaMemPoolAttrReleaseThreshold, &keep);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return Status::Error(std::string("workspace: cannot create a device memory pool: ") + cudaGetErrorString(e));
    }
    pools[device] = p;
  }
  *pool = pools[device];
  return Status::Ok();
}

}  // namespace

Status workspace_alloc(int device, size_t bytes, cudaStream_t stream, void** ptr) {
  // Under capture the graph owns the allocation (no pool is touched, none may be created); eagerly
  // it comes from the library's pool.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  GDN_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  cudaError_t e;
  if (capture != cudaStreamCaptureStatusNone) {
    e = cudaMallocAsync(ptr, bytes, stream);
  } else {
    cudaMemPool_t pool = nullptr;
    GDN_RETURN_IF_ERROR(pool_of(device, &pool));
    e = cudaMallocFromPoolAsync(ptr, bytes, pool, stream);
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    return Status::Error("workspace: cannot allocate " + std::to_string(bytes) + " bytes of device memory: " +
                         cudaGetErrorString(e));
  }
  return Status::Ok();
}

Status workspace_free(void* ptr, cudaStream_t stream) {
  if (ptr) GDN_CUDA_CHECK(cudaFreeAsync(ptr, stream));
  return Status::Ok();
}

}  // namespace gdn::cuda
