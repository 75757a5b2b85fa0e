// Host or CUDA byte buffers for the demo (cudaMalloc/cudaMemcpy in CUDA builds only).
#include "demo/device.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#ifdef GDN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace gdn::demo {
namespace {

#ifdef GDN_WITH_CUDA
Status cuda_check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status::Error(std::string("demo: ") + what + " failed: " + cudaGetErrorString(e));
}
#endif

Status range_check(size_t offset, size_t bytes, size_t size, const char* what) {
  if (offset > size || bytes > size - offset) {
    return Status::Error(std::string("demo: ") + what + " of " + std::to_string(bytes) + " bytes at offset " +
                         std::to_string(offset) + " is past the buffer of " + std::to_string(size) + " bytes");
  }
  return Status::Ok();
}

}  // namespace

Status parse_device(const std::string& s, Device* out) {
  if (s == "cpu") {
    *out = Device::kCPU;
    return Status::Ok();
  }
  if (s == "cuda") {
    *out = Device::kCUDA;
    return Status::Ok();
  }
  return Status::Error("--device must be cpu or cuda, got '" + s + "'");
}

Status device_ready(Device d) {
  if (d == Device::kCPU) return Status::Ok();
#ifdef GDN_WITH_CUDA
  if (!cuda_backend_available()) {
    return Status::Error(
        "--device cuda: no usable CUDA device or the CUDA backend is not available "
        "(cuda_backend_available() is false); run with --device cpu");
  }
  return Status::Ok();
#else
  return Status::Error(
      "--device cuda: this build has no CUDA backend (configure with nvcc available and "
      "GDN_ENABLE_CUDA=ON); run with --device cpu");
#endif
}

Buffer::~Buffer() { release(); }

Buffer::Buffer(Buffer&& o) noexcept { *this = std::move(o); }

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    device_ = o.device_;
  }
  return *this;
}

void Buffer::release() {
  if (!data_) return;
#ifdef GDN_WITH_CUDA
  if (device_ == Device::kCUDA) {
    cudaFree(data_);
    data_ = nullptr;
    return;
  }
#endif
  std::free(data_);
  data_ = nullptr;
}

Status Buffer::allocate(Device device, size_t bytes) {
  release();
  device_ = device;
  bytes_ = bytes;
  const size_t n = bytes ? bytes : 1;
  if (device == Device::kCUDA) {
#ifdef GDN_WITH_CUDA
    GDN_RETURN_IF_ERROR(cuda_check(cudaMalloc(&data_, n), "cudaMalloc"));
    return cuda_check(cudaMemset(data_, 0, n), "cudaMemset");
#else
    return device_ready(device);
#endif
  }
  data_ = std::calloc(n, 1);
  if (!data_) return Status::Error("demo: out of host memory allocating " + std::to_string(bytes) + " bytes");
  return Status::Ok();
}

Status Buffer::upload(const void* host, size_t bytes, size_t offset) {
  GDN_RETURN_IF_ERROR(range_check(offset, bytes, bytes_, "upload"));
  if (bytes == 0) return Status::Ok();
  char* dst = static_cast<char*>(data_) + offset;
#ifdef GDN_WITH_CUDA
  if (device_ == Device::kCUDA) return cuda_check(cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice), "upload");
#endif
  std::memcpy(dst, host, bytes);
  return Status::Ok();
}

Status Buffer::download(void* host, size_t bytes, size_t offset) const {
  GDN_RETURN_IF_ERROR(range_check(offset, bytes, bytes_, "download"));
  if (bytes == 0) return Status::Ok();
  const char* src = static_cast<const char*>(data_) + offset;
#ifdef GDN_WITH_CUDA
  if (device_ == Device::kCUDA) return cuda_check(cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost), "download");
#endif
  std::memcpy(host, src, bytes);
  return Status::Ok();
}

Status Buffer::copy_within(size_t dst_offset, size_t src_offset, size_t bytes) {
  GDN_RETURN_IF_ERROR(range_check(dst_offset, bytes, bytes_, "copy (destination)"));
  GDN_RETURN_IF_ERROR(range_check(src_offset, bytes, bytes_, "copy (source)"));
  if (bytes == 0) return Status::Ok();
  char* base = static_cast<char*>(data_);
#ifdef GDN_WITH_CUDA
  if (device_ == Device::kCUDA) {
    return cuda_check(cudaMemcpy(base + dst_offset, base + src_offset, bytes, cudaMemcpyDeviceToDevice), "copy");
  }
#endif
  std::memmove(base + dst_offset, base + src_offset, bytes);
  return Status::Ok();
}

Status Buffer::fill_bytes(uint8_t value) {
  if (bytes_ == 0) return Status::Ok();
#ifdef GDN_WITH_CUDA
  if (device_ == Device::kCUDA) return cuda_check(cudaMemset(data_, value, bytes_), "cudaMemset");
#endif
  std::memset(data_, value, bytes_);
  return Status::Ok();
}

TensorView Buffer::view(DType dtype, std::initializer_list<int64_t> shape) const {
  return make_view(data_, dtype, shape, device_, 0);
}

}  // namespace gdn::demo
