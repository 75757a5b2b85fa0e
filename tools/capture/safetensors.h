// tools/capture/safetensors.h — read and write safetensors files (the golden/capture format).
//
// Layout: an 8-byte little-endian header length N, N bytes of JSON, then the raw little-endian
// tensor data. The JSON maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}
// (offsets relative to the start of the data section) and may hold "__metadata__", a map of
// strings; its "params" entry is itself a JSON document (the op and its scalar parameters).
// Supported dtypes: F64 F32 F16 BF16 I32 I64 BOOL.
//
// The reader validates everything (header length, JSON shape, dtype names, shapes, offsets against
// the data section, byte counts, overlaps) and reports problems as a Status; it never throws out
// or reads out of bounds. Test and tool code only; not part of the library.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gdn/status.h"
#include "gdn/tensor.h"

namespace gdn::capture {

// A tensor held in host memory, dense row-major.
struct HostTensor {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  int64_t numel() const;
  // A dense CPU view of the bytes (the view aliases this tensor's storage). Fails for more than
  // kMaxDims dimensions.
  Status view(TensorView* out);
  std::string describe() const;  // "bfloat16 [3, 4]"
};

HostTensor make_host_tensor(DType dtype, std::vector<int64_t> shape);  // zero-filled

// A whole file: named tensors, the string metadata and the parsed "params" document.
struct SafetensorsFile {
  std::map<std::string, HostTensor> tensors;
  std::map<std::string, std::string> metadata;  // __metadata__ without "params"
  nlohmann::json params = nlohmann::json::object();

  const HostTensor* find(const std::string& name) const;
  HostTensor* find(const std::string& name);
};

// Safetensors dtype names <-> DType ("F32" <-> kFloat32, ...).
const char* safetensors_dtype_name(DType t);
Status parse_safetensors_dtype(const std::string& s, DType* out);

// Parse a whole file image; `what` names the source in error messages.
Status parse_safetensors(const uint8_t* data, size_t size, const std::string& what,
                         SafetensorsFile* out);
Status read_safetensors(const std::string& path, SafetensorsFile* out);

// Serialize (tensors in name order, data 8-byte aligned by padding the header with spaces);
// params, when it is a non-empty object, goes to __metadata__["params"] as a JSON string.
Status serialize_safetensors(const SafetensorsFile& file, std::vector<uint8_t>* out);
Status write_safetensors(const std::string& path, const SafetensorsFile& file);

}  // namespace gdn::capture
