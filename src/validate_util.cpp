// Shared pieces of host-side argument validation: tensor checks and message formatting.
#include "validate_util.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace gdn {
namespace validate_detail {
namespace {

bool is_activation_dtype(DType t) {
  return t == DType::kFloat32 || t == DType::kBFloat16 || t == DType::kFloat16;
}

std::string device_text(Device d, int index) {
  switch (d) {
    case Device::kCPU: return "cpu";
    case Device::kCUDA: return "cuda:" + std::to_string(index);
  }
  return "unknown device " + std::to_string(static_cast<int>(d));
}

std::string strides_text(const TensorView& t) {
  std::string s = "[";
  for (int d = 0; d < t.ndim; ++d) s += (d ? ", " : "") + std::to_string(t.stride[d]);
  return s + "]";
}

// A view as rows of dense bytes (dims 1..): n rows of `len` bytes, `pitch` apart (0 for one row),
// `span` bytes from the first byte to past the last.
struct Extent {
  int64_t n, pitch, len, span;
};
// Its row bytes; false when they pass int64 (or the view has more than kMaxDims dims).
bool row_bytes(const TensorView& t, Extent* e) {
  if (t.ndim < 0 || t.ndim > kMaxDims) return false;
  e->len = static_cast<int64_t>(dtype_size(t.dtype));
  for (int d = 1; d < t.ndim; ++d)
    if (t.shape[d] < 0 || __builtin_mul_overflow(e->len, t.shape[d], &e->len)) return false;
  return true;
}
// All of it; false past int64, or for rows at a negative pitch. No memory holds a view that int64
// cannot count.
bool extent_of(const TensorView& t, Extent* e) {
  if (!row_bytes(t, e)) return false;
  e->n = t.ndim > 0 ? t.shape[0] : 1;
  e->pitch = 0;
  e->span = 0;
  if (e->n < 0) return false;
  if (e->n > 1 && (t.stride[0] < 0 || __builtin_mul_overflow(t.stride[0], static_cast<int64_t>(dtype_size(t.dtype)),
                                                               &e->pitch)))
    return false;
  return e->n == 0 || mul_add(e->n - 1, e->pitch, e->len, &e->span);
}

}  // namespace

bool DTypeRule::accepts(DType t) const {
  switch (kind) {
    case kActivation: return is_activation_dtype(t);
    case kAnyFloat: return is_activation_dtype(t) || t == DType::kFloat64;
    case kIndex: return t == DType::kInt32 || t == DType::kInt64;
    case kBool: return t == DType::kBool;
    case kFloat32: return t == DType::kFloat32;
    case kSameAs: return t == same;
    case kSameOrFloat32: return t == same || t == DType::kFloat32;
  }
  return false;
}

std::string DTypeRule::text() const {
  switch (kind) {
    case kActivation: return "float32, bfloat16 or float16";
    case kAnyFloat: return "float32, bfloat16, float16 or float64";
    case kIndex: return "int32 or int64";
    case kBool: return "bool";
    case kFloat32: return "float32";
    case kSameAs: return dtype_name(same);
    case kSameOrFloat32: return same == DType::kFloat32 ? "float32" : std::string(dtype_name(same)) + " or float32";
  }
  return "?";
}

std::string DTypeRule::note() const {
  if (kind == kSameAs) return std::string(" (the dtype of ") + same_name + ")";
  if (kind == kSameOrFloat32) return std::string(" (the dtype of ") + same_name + ", or float32)";
  return std::string();
}

std::string describe_view(const TensorView& t, bool with_device) {
  std::string s = t.describe();
  if (with_device && t.present() && t.device != Device::kCUDA) s += " on " + device_text(t.device, t.device_index);
  return s;
}

std::string dims_text(std::initializer_list<Dim> dims) {
  std::string names = "[", values = "[";
  bool any_known = false;
  bool first = true;
  for (const Dim& d : dims) {
    names += (first ? "" : ", ") + std::string(d.name);
    values += (first ? "" : ", ") + (d.value == kAnySize ? std::string("*") : std::to_string(d.value));
    any_known = any_known || d.value != kAnySize;
    first = false;
  }
  names += "]";
  values += "]";
  return any_known ? names + " = " + values : names;
}

std::string number_text(double x) {
  std::ostringstream s;
  s << x;
  return s.str();
}

Status Validator::fail(const std::string& message) const { return Status::Error(std::string(op_) + ": " + message); }

Status Validator::must(const char* name, const std::string& expected, const TensorView& t) const {
  return fail(std::string(name) + " must be " + expected + ", got " + describe_view(t));
}

Status Validator::tensor(const char* name, const TensorView& t, const DTypeRule& dtype,
                         std::initializer_list<Dim> dims, Presence presence) {
  const std::string expected = dtype.text() + " " + dims_text(dims) + dtype.note();
  if (!t.present()) return presence == Presence::kOptional ? Status::Ok() : must(name, expected, t);
  if (t.ndim > kMaxDims) return must(name, expected, t);
  for (int d = 0; d < t.ndim; ++d) {
    if (t.shape[d] < 0) return fail(std::string(name) + " must have sizes >= 0, got " + describe_view(t));
  }
  bool match = dtype.accepts(t.dtype) && t.ndim == static_cast<int>(dims.size());
  int d = 0;
  for (const Dim& dim : dims) {
    if (!match) break;
    match = dim.value == kAnySize || t.shape[d] == dim.value;
    ++d;
  }
  if (!match) return must(name, expected, t);
  return layout(name, t);
}

// Device, then geometry: dims 1.. dense, dim 0's stride at least a row, a byte span int64 can
// count, memory behind a non-empty view, a pointer aligned to the element size.
Status Validator::layout(const char* name, const TensorView& t) {
  if (t.device != Device::kCPU && t.device != Device::kCUDA) {
    return fail(std::string(name) + " must be on cpu or cuda, got " + describe_view(t, true));
  }
  if (!have_device_) {
    have_device_ = true;
    device_name_ = name;
    device_ = t.device;
    device_index_ = t.device_index;
  } else if (t.device != device_ || (t.device == Device::kCUDA && t.device_index != device_index_)) {
    return fail(std::string(name) + " must be on " + device_text(device_, device_index_) + " like " + device_name_ +
                ", got " + describe_view(t, true));
  }
  Extent e;
  auto too_big = [&] {
    return fail(std::string(name) + " spans more bytes than int64 counts, got " + describe_view(t) + " with strides " +
                strides_text(t));
  };
  if (!row_bytes(t, &e)) return too_big();
  if (t.numel() > 0) {  // an empty tensor has no layout to get wrong (and is never read)
    TensorView inner = t;  // dims 1.. alone
    if (inner.ndim > 0) inner.shape[0] = 1;
    if (!inner.inner_contiguous()) {
      return fail(std::string(name) + " must be dense in every dim but dim 0 (which may be strided), got " +
                  describe_view(t) + " with strides " + strides_text(t));
    }
    if (!t.inner_contiguous()) {
      return fail(std::string(name) + " must have a dim-0 stride of at least its row size (" +
                  std::to_string(e.len / static_cast<int64_t>(dtype_size(t.dtype))) +
                  " elements: rows may lie apart, never overlap), got " + describe_view(t) + " with strides " +
                  strides_text(t));
    }
    if (!extent_of(t, &e)) return too_big();
  }
  if (t.data == nullptr && t.numel() > 0) {
    return fail(std::string(name) + " must point to memory, got a null data pointer for " + describe_view(t));
  }
  const size_t es = dtype_size(t.dtype);
  if (reinterpret_cast<uintptr_t>(t.data) % es != 0) {
    return fail(std::string(name) + " must be aligned to its element size (" + std::to_string(es) +
                " bytes), got a pointer " + std::to_string(reinterpret_cast<uintptr_t>(t.data) % es) +
                " bytes past a boundary for " + describe_view(t));
  }
  return Status::Ok();
}

Status Validator::positive(const char* name, const TensorView& t, int d, const char* shape,
                           const char* dim_name) const {
  if (t.shape[d] > 0) return Status::Ok();
  return must(name, std::string(shape) + " with " + dim_name + " > 0", t);
}

Status Validator::activation(Activation a) const {
  if (a == Activation::kSilu || a == Activation::kNone) return Status::Ok();
  return fail("activation must be silu or identity, got unknown activation " + std::to_string(static_cast<int>(a)));
}

Status Validator::spec_layout(SpecConvLayout l, const char* name) const {
  if (l == SpecConvLayout::kRolling || l == SpecConvLayout::kPerToken) return Status::Ok();
  return fail(std::string(name) + " must be rolling or per_token, got unknown layout " +
              std::to_string(static_cast<int>(l)));
}

Status Validator::state_layout(StateLayout l) const {
  if (l == StateLayout::kVK || l == StateLayout::kKV) return Status::Ok();
  return fail("state_layout must be vk or kv, got unknown layout " + std::to_string(static_cast<int>(l)));
}

Status Validator::scale(const std::optional<double>& s) const {
  // The kernels take it as a float: finite and > 0 there.
  if (!s || (std::isfinite(static_cast<float>(*s)) && static_cast<float>(*s) > 0)) return Status::Ok();
  return fail("scale must be finite and > 0 in float32 (or absent for K^-1/2), got " + number_text(*s));
}

Status Validator::conv_width(const char* name, const TensorView& weight) const {
  const int64_t w = weight.shape[1];
  if (w >= 2 && w <= 5) return Status::Ok();
  return must(name, "[D, W] with 2 <= W <= 5", weight);
}

Status check_slots_pair(Validator& v, const TensorView& si, const TensorView& nat, int64_t* n, int64_t* cols,
                        bool* verify) {
  *verify = nat.present();
  if (*verify && si.present() && si.ndim != 2) {
    return v.fail("num_accepted_tokens given (verify) requires state_indices [n, cols], got state_indices " +
                  describe_view(si) + " and num_accepted_tokens " + describe_view(nat));
  }
  if (!*verify && si.present() && si.ndim == 2) {
    return v.fail("state_indices [n, cols] (verify) requires num_accepted_tokens [n] = [" +
                  std::to_string(si.shape[0]) + "], got state_indices " + describe_view(si) +
                  " and num_accepted_tokens absent");
  }
  if (*verify) {
    GDN_RETURN_IF_ERROR(v.tensor("state_indices", si, index_dtype(), {{"n", kAnySize}, {"cols", kAnySize}}));
    GDN_RETURN_IF_ERROR(v.positive("state_indices", si, 1, "[n, cols]", "cols"));
    *n = si.shape[0];
    *cols = si.shape[1];
    return v.tensor("num_accepted_tokens", nat, index_dtype(), {{"n", *n}});
  }
  GDN_RETURN_IF_ERROR(v.tensor("state_indices", si, index_dtype(), {{"n", kAnySize}}));
  *n = si.shape[0];
  *cols = 1;
  return Status::Ok();
}

bool overlaps(const TensorView& a, const TensorView& b) {
  if (!a.present() || !b.present() || a.numel() == 0 || b.numel() == 0 || a.device != b.device) return false;
  // Rows of dense bytes (dim 0 strided, the rest dense: Extent). A view whose extent int64 cannot
  // count overlaps nothing here: its own check refuses it.
  Extent ea, eb;
  if (!extent_of(a, &ea) || !extent_of(b, &eb)) return false;
  const uintptr_t a0 = reinterpret_cast<uintptr_t>(a.data), b0 = reinterpret_cast<uintptr_t>(b.data);
  if (!(a0 < b0 + static_cast<uintptr_t>(eb.span) && b0 < a0 + static_cast<uintptr_t>(ea.span))) return false;
  // Rows at one pitch (column slices of one buffer): row i of a meets row j of b iff k = i - j has
  // k pitch in (d - len_a, d + len_b), d = b - a; exact. Other pitches: the spans (conservative).
  const int64_t s = ea.n > 1 ? ea.pitch : eb.pitch;
  if ((ea.n > 1 && eb.n > 1 && ea.pitch != eb.pitch) || s <= 0) return true;
  auto floor_div = [](int64_t x, int64_t m) { return x >= 0 ? x / m : -((-x + m - 1) / m); };
  const int64_t d = static_cast<int64_t>(b0 - a0);  // (two's complement: the signed difference)
  const int64_t kmin = floor_div(d - ea.len, s) + 1, kmax = -floor_div(-(d + eb.len), s) - 1;
  return std::max(kmin, -(eb.n - 1)) <= std::min(kmax, ea.n - 1);
}

Status contiguous_vector(const Validator& v, const char* name, const TensorView& t) {
  if (!t.present() || t.numel() <= 1 || t.stride[0] == 1) return Status::Ok();
  return v.must(name, "contiguous (stride 1: the conv kernels load it as vectors)", t);
}

Status disjoint(const Validator& v, std::initializer_list<std::pair<const char*, const TensorView*>> written) {
  for (auto j = written.begin(); j != written.end(); ++j)
    for (auto i = written.begin(); i != j; ++i)
      if (overlaps(*i->second, *j->second))
        return v.must(j->first, std::string("memory that does not overlap ") + i->first + " (tensors the op writes)",
                      *j->second);
  return Status::Ok();
}

Status apart_from_inputs(const Validator& v, std::initializer_list<std::pair<const char*, const TensorView*>> written,
                         std::initializer_list<std::pair<const char*, const TensorView*>> read) {
  for (const auto& w : written)
    for (const auto& r : read)
      if (overlaps(*w.second, *r.second))
        return v.must(w.first, std::string("memory that does not overlap ") + r.first + " (an input the op reads)",
                      *w.second);
  return Status::Ok();
}

bool mul_add(int64_t a, int64_t b, int64_t c, int64_t* out) {
  int64_t p = 0;
  return !__builtin_mul_overflow(a, b, &p) && !__builtin_add_overflow(p, c, out);
}

}  // namespace validate_detail
}  // namespace gdn
