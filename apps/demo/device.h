// apps/demo/device.h — memory for the demo on the host or on a CUDA device.
//
// With --device cuda the pools, the layer constants (conv weights, A_log, dt_bias), the
// projections and the metadata live on the GPU and gdn_attention runs there; the dense matmuls of
// the demo model stay on the host and their activations are copied across each layer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gdn/ops.h"

namespace gdn::demo {

Status parse_device(const std::string& s, Device* out);  // "cpu" | "cuda"

// Ok when tensors can be placed on `d` (the CPU always; CUDA only in a CUDA build with a device).
Status device_ready(Device d);

// An owning, zero-initialized byte buffer on one device. Move-only.
class Buffer {
 public:
  Buffer() = default;
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  Status allocate(Device device, size_t bytes);
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

  Status upload(const void* host, size_t bytes, size_t offset = 0);  // host -> buffer
  Status download(void* host, size_t bytes, size_t offset = 0) const;  // buffer -> host
  Status copy_within(size_t dst_offset, size_t src_offset, size_t bytes);
  Status fill_bytes(uint8_t value);

  // A dense view of this buffer's start with the given dtype and shape.
  TensorView view(DType dtype, std::initializer_list<int64_t> shape) const;

 private:
  void release();
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_ = Device::kCPU;
};

// Host vector -> a new buffer on `device`.
template <typename T>
Status to_device(Device device, const std::vector<T>& host, Buffer* out) {
  GDN_RETURN_IF_ERROR(out->allocate(device, host.size() * sizeof(T)));
  return out->upload(host.data(), host.size() * sizeof(T));
}

}  // namespace gdn::demo
