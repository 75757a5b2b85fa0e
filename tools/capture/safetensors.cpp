// Safetensors reader and writer (see safetensors.h for the format).
#include "capture/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

namespace gdn::capture {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;  // the safetensors reference limit
constexpr size_t kMaxFileDims = 8;

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypeNames[] = {
    {DType::kFloat64, "F64"}, {DType::kFloat32, "F32"}, {DType::kFloat16, "F16"},
    {DType::kBFloat16, "BF16"}, {DType::kInt32, "I32"}, {DType::kInt64, "I64"},
    {DType::kBool, "BOOL"}};

std::string shape_string(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

// Reads a non-negative JSON integer into *out; false when it is anything else.
bool get_nonneg(const json& j, uint64_t* out) {
  if (j.is_number_unsigned()) {
    *out = j.get<uint64_t>();
    return true;
  }
  if (j.is_number_integer()) {
    int64_t v = j.get<int64_t>();
    if (v < 0) return false;
    *out = static_cast<uint64_t>(v);
    return true;
  }
  return false;
}

Status parse_tensor_entry(const std::string& what, const std::string& name, const json& e,
                          const uint8_t* data, uint64_t data_size, HostTensor* t,
                          std::pair<uint64_t, uint64_t>* range) {
  const std::string where = what + ": tensor '" + name + "'";
  if (!e.is_object()) return Status::Error(where + ": entry must be a JSON object, got " + e.dump());
  auto dt = e.find("dtype");
  if (dt == e.end() || !dt->is_string())
    return Status::Error(where + ": 'dtype' must be a string");
  GDN_RETURN_IF_ERROR(parse_safetensors_dtype(dt->get<std::string>(), &t->dtype));

  auto sh = e.find("shape");
  if (sh == e.end() || !sh->is_array())
    return Status::Error(where + ": 'shape' must be an array of non-negative integers");
  if (sh->size() > kMaxFileDims)
    return Status::Error(where + ": at most " + std::to_string(kMaxFileDims) +
                         " dimensions supported, got " + std::to_string(sh->size()));
  t->shape.clear();
  uint64_t numel = 1;
  bool overflow = false;
  for (const json& d : *sh) {
    uint64_t v = 0;
    if (!get_nonneg(d, &v))
      return Status::Error(where + ": 'shape' must hold non-negative integers, got " + sh->dump());
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return Status::Error(where + ": dimension too large: " + d.dump());
    t->shape.push_back(static_cast<int64_t>(v));
  }
  // numel, or "overflow" when it exceeds the whole data section (no uint64 wrap-around).
  if (std::find(t->shape.begin(), t->shape.end(), 0) != t->shape.end()) {
    numel = 0;
  } else {
    for (int64_t d : t->shape) {
      const uint64_t v = static_cast<uint64_t>(d);
      if (numel > data_size / v) {
        overflow = true;
        break;
      }
      numel *= v;
    }
  }

  auto off = e.find("data_offsets");
  uint64_t begin = 0, end = 0;
  if (off == e.end() || !off->is_array() || off->size() != 2 || !get_nonneg((*off)[0], &begin) ||
      !get_nonneg((*off)[1], &end))
    return Status::Error(where + ": 'data_offsets' must be [begin, end] of non-negative integers");
  if (begin > end || end > data_size)
    return Status::Error(where + ": data_offsets [" + std::to_string(begin) + ", " +
                         std::to_string(end) + "] outside the data section of " +
                         std::to_string(data_size) + " bytes");
  const uint64_t esize = dtype_size(t->dtype);
  if (overflow || (numel != 0 && numel > data_size / esize))
    return Status::Error(where + ": shape " + shape_string(t->shape) +
                         " needs more bytes than the data section holds (" +
                         std::to_string(data_size) + ")");
  if (numel * esize != end - begin)
    return Status::Error(where + ": " + std::string(safetensors_dtype_name(t->dtype)) + " " +
                         shape_string(t->shape) + " needs " + std::to_string(numel * esize) +
                         " bytes, data_offsets give " + std::to_string(end - begin));
  t->bytes.assign(data + begin, data + end);
  *range = {begin, end};
  return Status::Ok();
}

Status parse_metadata(const std::string& what, const json& m, SafetensorsFile* out) {
  if (!m.is_object()) return Status::Error(what + ": __metadata__ must be an object of strings");
  for (auto it = m.begin(); it != m.end(); ++it) {
    if (!it.value().is_string())
      return Status::Error(what + ": __metadata__['" + it.key() + "'] must be a string, got " +
                           it.value().dump());
    const std::string value = it.value().get<std::string>();
    if (it.key() == "params") {
      json p = json::parse(value, nullptr, /*allow_exceptions=*/false);
      if (p.is_discarded() || !p.is_object())
        return Status::Error(what + ": __metadata__['params'] must be a JSON object, got '" +
                             value.substr(0, 80) + "'");
      out->params = std::move(p);
    } else {
      out->metadata[it.key()] = value;
    }
  }
  return Status::Ok();
}

Status parse_impl(const uint8_t* data, size_t size, const std::string& what, SafetensorsFile* out) {
  if (size < 8)
    return Status::Error(what + ": file of " + std::to_string(size) +
                         " bytes is shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
  if (n == 0 || n > kMaxHeaderBytes || n > size - 8)
    return Status::Error(what + ": header length " + std::to_string(n) + " is invalid (file has " +
                         std::to_string(size - 8) + " bytes after the length, limit " +
                         std::to_string(kMaxHeaderBytes) + ")");
  const char* hb = reinterpret_cast<const char*>(data + 8);
  json header = json::parse(hb, hb + n, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return Status::Error(what + ": header is not valid JSON");
  if (!header.is_object()) return Status::Error(what + ": header must be a JSON object");

  const uint8_t* body = data + 8 + n;
  const uint64_t body_size = size - 8 - n;
  SafetensorsFile f;
  std::vector<std::pair<std::pair<uint64_t, uint64_t>, std::string>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      GDN_RETURN_IF_ERROR(parse_metadata(what, it.value(), &f));
      continue;
    }
    HostTensor t;
    std::pair<uint64_t, uint64_t> r;
    GDN_RETURN_IF_ERROR(parse_tensor_entry(what, it.key(), it.value(), body, body_size, &t, &r));
    if (r.second > r.first) ranges.push_back({r, it.key()});
    f.tensors[it.key()] = std::move(t);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first.first < ranges[i - 1].first.second)
      return Status::Error(what + ": tensors '" + ranges[i - 1].second + "' and '" +
                           ranges[i].second + "' overlap in the data section");
  }
  *out = std::move(f);
  return Status::Ok();
}

}  // namespace

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Status HostTensor::view(TensorView* out) {
  if (shape.size() > static_cast<size_t>(kMaxDims))
    return Status::Error("tensor " + describe() + " has more than " + std::to_string(kMaxDims) +
                         " dimensions");
  TensorView v;
  v.data = bytes.empty() ? nullptr : bytes.data();
  v.dtype = dtype;
  v.device = Device::kCPU;
  v.ndim = static_cast<int>(shape.size());
  int64_t st = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    v.shape[d] = shape[d];
    v.stride[d] = st;
    st *= shape[d];
  }
  *out = v;
  return Status::Ok();
}

std::string HostTensor::describe() const {
  return std::string(dtype_name(dtype)) + " " + shape_string(shape);
}

HostTensor make_host_tensor(DType dtype, std::vector<int64_t> shape) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.assign(static_cast<size_t>(t.numel()) * dtype_size(dtype), 0);
  return t;
}

const HostTensor* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors.find(name);
  return it == tensors.end() ? nullptr : &it->second;
}

HostTensor* SafetensorsFile::find(const std::string& name) {
  auto it = tensors.find(name);
  return it == tensors.end() ? nullptr : &it->second;
}

const char* safetensors_dtype_name(DType t) {
  for (const DTypeName& d : kDTypeNames)
    if (d.dtype == t) return d.name;
  return "?";
}

Status parse_safetensors_dtype(const std::string& s, DType* out) {
  for (const DTypeName& d : kDTypeNames) {
    if (s == d.name) {
      *out = d.dtype;
      return Status::Ok();
    }
  }
  return Status::Error("safetensors dtype must be one of F64, F32, F16, BF16, I32, I64, BOOL; got '" +
                       s + "'");
}

Status parse_safetensors(const uint8_t* data, size_t size, const std::string& what,
                         SafetensorsFile* out) {
  try {
    return parse_impl(data, size, what, out);
  } catch (const std::exception& e) {  // allocation failure or a JSON type error missed above
    return Status::Error(what + ": " + e.what());
  }
}

Status read_safetensors(const std::string& path, SafetensorsFile* out) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return Status::Error("'" + path + "' is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error("cannot open '" + path + "'");
  std::vector<uint8_t> buf;
  try {  // a read error (the stream buffer throws) or an allocation failure
    buf.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } catch (const std::exception& e) {
    return Status::Error("error reading '" + path + "': " + e.what());
  }
  if (in.bad()) return Status::Error("error reading '" + path + "'");
  return parse_safetensors(buf.data(), buf.size(), path, out);
}

Status serialize_safetensors(const SafetensorsFile& file, std::vector<uint8_t>* out) {
  try {
    json header = json::object();
    uint64_t offset = 0;
    for (const auto& [name, t] : file.tensors) {
      if (name == "__metadata__") return Status::Error("tensor name '__metadata__' is reserved");
      const uint64_t nbytes = static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype);
      if (nbytes != t.bytes.size())
        return Status::Error("tensor '" + name + "': " + t.describe() + " needs " +
                             std::to_string(nbytes) + " bytes, holds " +
                             std::to_string(t.bytes.size()));
      header[name] = {{"dtype", safetensors_dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + nbytes}}};
      offset += nbytes;
    }
    json meta = json::object();
    for (const auto& [k, v] : file.metadata) meta[k] = v;
    if (file.params.is_object() && !file.params.empty()) meta["params"] = file.params.dump();
    if (!meta.empty()) header["__metadata__"] = meta;

    std::string h = header.dump();
    while ((8 + h.size()) % 8 != 0) h.push_back(' ');
    out->clear();
    out->reserve(8 + h.size() + offset);
    uint64_t n = h.size();
    for (int i = 0; i < 8; ++i) out->push_back(static_cast<uint8_t>(n >> (8 * i)));
    out->insert(out->end(), h.begin(), h.end());
    for (const auto& entry : file.tensors)
      out->insert(out->end(), entry.second.bytes.begin(), entry.second.bytes.end());
    return Status::Ok();
  } catch (const std::exception& e) {
    return Status::Error(std::string("serialize_safetensors: ") + e.what());
  }
}

Status write_safetensors(const std::string& path, const SafetensorsFile& file) {
  std::vector<uint8_t> buf;
  GDN_RETURN_IF_ERROR(serialize_safetensors(file, &buf));
  std::ofstream o(path, std::ios::binary | std::ios::trunc);
  if (!o) return Status::Error("cannot open '" + path + "' for writing");
  o.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(buf.size()));
  if (!o) return Status::Error("error writing '" + path + "'");
  return Status::Ok();
}

}  // namespace gdn::capture
