// Element access, write sets and output comparisons for golden cases (see check.h, case.h).
#include "capture/check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

namespace gdn::capture::check {
namespace {

float bits_to_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

double half_to_double(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0) {
    v = std::ldexp(static_cast<double>(mant), -24);
  } else if (exp == 31) {
    v = mant ? std::nan("") : INFINITY;
  } else {
    v = std::ldexp(static_cast<double>(mant | 0x400), exp - 25);
  }
  return sign ? -v : v;
}

uint16_t double_to_half(double v) {
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  if (std::isnan(v)) return sign | 0x7e00;
  double a = std::fabs(v);
  if (a < std::ldexp(1.0, -14)) {  // subnormal (rounding may carry into the smallest normal)
    return sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(a, 24)));
  }
  int e2 = 0;
  std::frexp(a, &e2);
  int e = e2 - 1;  // a = 1.m * 2^e
  double mant = std::nearbyint((std::ldexp(a, -e) - 1.0) * 1024.0);
  if (mant >= 1024) {
    mant = 0;
    ++e;
  }
  if (e > 15) return sign | 0x7c00;
  return sign | static_cast<uint16_t>(((e + 15) << 10) | static_cast<int>(mant));
}

uint16_t float_to_bf16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>(((b >> 16) & 0x8000) | 0x7fc0);
  b += 0x7fff + ((b >> 16) & 1);
  return static_cast<uint16_t>(b >> 16);
}

std::string hex_bytes(const uint8_t* p, size_t n) {
  static const char* kHex = "0123456789abcdef";
  std::string s = "0x";
  for (size_t i = n; i-- > 0;) {
    s.push_back(kHex[p[i] >> 4]);
    s.push_back(kHex[p[i] & 15]);
  }
  return s;
}

// "[3, 1, 7]" for a flat index into a dense shape.
std::string index_string(const std::vector<int64_t>& shape, int64_t flat) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    const int64_t s = shape[d] > 0 ? shape[d] : 1;
    idx[d] = flat % s;
    flat /= s;
  }
  std::ostringstream o;
  o << "[";
  for (size_t d = 0; d < idx.size(); ++d) o << (d ? ", " : "") << idx[d];
  o << "]";
  return o.str();
}

std::string number(double v) {
  std::ostringstream o;
  o.precision(9);
  o << v;
  return o.str();
}

bool same_inner(const HostTensor& a, const HostTensor& b) {
  if (a.shape.size() != b.shape.size() || a.shape.empty()) return false;
  return std::equal(a.shape.begin() + 1, a.shape.end(), b.shape.begin() + 1);
}

// Accumulates ||x - ref||^2 and ||ref||^2; NaN anywhere poisons the result.
struct ErrorSum {
  double d2 = 0, r2 = 0;
  bool nan = false;
  void add(double x, double ref) {
    if (std::isnan(x) || std::isnan(ref)) nan = true;
    d2 += (x - ref) * (x - ref);
    r2 += ref * ref;
  }
  double rel() const {
    if (nan) return std::nan("");
    return r2 > 0 ? std::sqrt(d2 / r2) : std::sqrt(d2);
  }
};

void note(OutputCheck* c, const std::string& s) {
  if (c->detail.empty()) c->detail = s;
}

}  // namespace

double load_real(const uint8_t* p, DType t) {
  switch (t) {
    case DType::kFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::kFloat64: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    case DType::kBFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return bits_to_float(static_cast<uint32_t>(h) << 16);
    }
    case DType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return half_to_double(h);
    }
    case DType::kInt32: {
      int32_t i;
      std::memcpy(&i, p, 4);
      return i;
    }
    case DType::kInt64: {
      int64_t i;
      std::memcpy(&i, p, 8);
      return static_cast<double>(i);
    }
    case DType::kBool: return *p ? 1.0 : 0.0;
  }
  return 0;
}

void store_real(double v, DType t, uint8_t* p) {
  switch (t) {
    case DType::kFloat32: {
      float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      return;
    }
    case DType::kFloat64: std::memcpy(p, &v, 8); return;
    case DType::kBFloat16: {
      uint16_t h = float_to_bf16(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      return;
    }
    case DType::kFloat16: {
      uint16_t h = double_to_half(v);
      std::memcpy(p, &h, 2);
      return;
    }
    case DType::kInt32: {
      int32_t i = std::isnan(v) ? 0 : static_cast<int32_t>(v);
      std::memcpy(p, &i, 4);
      return;
    }
    case DType::kInt64: {
      int64_t i = std::isnan(v) ? 0 : static_cast<int64_t>(v);
      std::memcpy(p, &i, 8);
      return;
    }
    case DType::kBool: *p = (v != 0 && !std::isnan(v)) ? 1 : 0; return;
  }
}

std::vector<int64_t> to_indices(const HostTensor* t) {
  std::vector<int64_t> v;
  if (!t) return v;
  const size_t es = dtype_size(t->dtype);
  const int64_t n = t->numel();
  v.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v.push_back(static_cast<int64_t>(load_real(t->bytes.data() + i * es, t->dtype)));
  return v;
}

void mark_writes(const SequenceGroup& g, int64_t row_bound, int64_t num_slots,
                 std::optional<int64_t> null_block_id, WriteSet* w) {
  auto valid = [&](int64_t s) {
    return s >= 0 && s < num_slots && !(null_block_id && s == *null_block_id);
  };
  auto slot_at = [&](int64_t i, int64_t col) -> int64_t {
    const size_t k = static_cast<size_t>(g.cols ? i * g.cols + col : i);
    return k < g.slots.size() ? g.slots[k] : -1;
  };
  const int64_t cols = g.cols ? g.cols : 1;
  const bool verify = !g.accepted.empty();
  for (int64_t i = 0; i < g.n && i + 1 < static_cast<int64_t>(g.qsl.size()); ++i) {
    const int64_t s = std::clamp<int64_t>(g.qsl[i], 0, g.limit);
    const int64_t e = std::clamp<int64_t>(g.qsl[i + 1], 0, g.limit);
    if (e <= s) continue;  // empty sequence: nothing read or written
    bool padded = false;
    for (int64_t j = s; j < e; ++j) {
      const int64_t row = g.has_remap ? (static_cast<size_t>(j) < g.remap.size() ? g.remap[j] : -1) : j;
      if (row >= 0 && row < row_bound) {
        if (static_cast<size_t>(row) < w->rows.size()) w->rows[row] = 1;
      } else {
        padded = true;  // a token outside the buffer makes the whole sequence padding
      }
    }
    if (padded) continue;
    const int64_t T = e - s;
    if (!verify) {
      const int64_t slot = slot_at(i, 0);
      if (valid(slot) && static_cast<size_t>(slot) < w->slots.size()) w->slots[slot] = 1;
      continue;
    }
    const int64_t a = std::clamp<int64_t>(i < static_cast<int64_t>(g.accepted.size()) ? g.accepted[i] : 1, 1, cols);
    if (!valid(slot_at(i, 0)) || !valid(slot_at(i, a - 1))) continue;
    for (int64_t t = 0; t < std::min(T, cols); ++t) {
      const int64_t slot = slot_at(i, t);
      if (valid(slot) && static_cast<size_t>(slot) < w->slots.size()) w->slots[slot] = 1;
    }
  }
}

OutputCheck check_output(const std::string& name, const HostTensor& result,
                         const HostTensor* expected, const HostTensor* ref_f64,
                         const std::vector<char>& written_rows, const std::vector<uint8_t>& fill,
                         double tol, bool exact) {
  OutputCheck c;
  c.name = name;
  c.exact = exact;
  c.tol = exact ? 0 : tol;
  c.has_reference = expected != nullptr || ref_f64 != nullptr;
  if (expected && (expected->shape != result.shape || expected->dtype != result.dtype)) {
    c.detail = "reference out." + name + " is " + expected->describe() + ", the output is " +
               result.describe();
    return c;
  }
  if (ref_f64 && (!same_inner(*ref_f64, result) || ref_f64->shape[0] > result.shape[0])) {
    c.detail = "reference out." + name + "_f64 is " + ref_f64->describe() +
               ", which does not fit the output " + result.describe();
    return c;
  }
  const size_t es = dtype_size(result.dtype);
  const int64_t numel = result.numel();
  const int64_t rows = result.shape.empty() ? 1 : result.shape[0];
  const int64_t row_elems = rows ? numel / rows : 0;
  const int64_t f64_numel = ref_f64 ? ref_f64->numel() : 0;
  ErrorSum err;
  for (int64_t idx = 0; idx < numel; ++idx) {
    const int64_t r = idx / row_elems;
    const uint8_t* p = result.bytes.data() + idx * es;
    const bool written = r < static_cast<int64_t>(written_rows.size()) && written_rows[r];
    if (!written) {
      if (std::memcmp(p, fill.data(), es) != 0) {
        ++c.untouched_changed;
        note(&c, name + index_string(result.shape, idx) + " is outside the rows the op writes " +
                     "but changed from the fill " + hex_bytes(fill.data(), es) + " to " +
                     hex_bytes(p, es));
      }
      continue;
    }
    if (!c.has_reference) continue;
    ++c.compared;
    const double x = load_real(p, result.dtype);
    const double ref = idx < f64_numel ? load_real(ref_f64->bytes.data() + idx * 8, DType::kFloat64)
                                       : load_real(expected->bytes.data() + idx * es, result.dtype);
    const bool bits_differ = expected && std::memcmp(p, expected->bytes.data() + idx * es, es) != 0;
    if (bits_differ) ++c.inexact;
    if (std::isnan(x) || std::isnan(ref) || (exact && bits_differ))
      note(&c, name + index_string(result.shape, idx) + " = " + number(x) + ", expected " +
                   number(ref) + (std::isnan(ref) ? " (NaN in the reference of a written row)" : ""));
    err.add(x, ref);
  }
  c.rel_err = err.rel();
  const bool value_ok = exact ? c.inexact == 0 : (c.rel_err <= tol);
  c.pass = !err.nan && c.untouched_changed == 0 && value_ok && c.detail.empty();
  if (!c.pass && c.detail.empty())
    c.detail = name + ": relative error " + number(c.rel_err) + " > tolerance " + number(tol);
  return c;
}

OutputCheck check_pool(const std::string& name, const HostTensor& result, const HostTensor& input,
                       const HostTensor* expected, const HostTensor* ref_f64,
                       const std::vector<char>* written_slots, double tol) {
  OutputCheck c;
  c.name = name;
  c.exact = written_slots == nullptr;
  c.tol = c.exact ? 0 : tol;
  c.has_reference = expected != nullptr || ref_f64 != nullptr;
  auto fits = [&](const HostTensor* t, DType dt) {
    return !t || (t->shape == result.shape && t->dtype == dt);
  };
  if (input.shape != result.shape || !fits(expected, result.dtype) ||
      !fits(ref_f64, DType::kFloat64)) {
    c.detail = name + ": output " + result.describe() + ", input " + input.describe() +
               (expected ? ", reference " + expected->describe() : std::string());
    return c;
  }
  const size_t es = dtype_size(result.dtype);
  const int64_t numel = result.numel();
  const int64_t slots = result.shape.empty() ? 1 : result.shape[0];
  const int64_t slot_elems = slots ? numel / slots : 0;
  ErrorSum err;
  bool disagree = false;
  for (int64_t idx = 0; idx < numel; ++idx) {
    const int64_t s = idx / slot_elems;
    const uint8_t* p = result.bytes.data() + idx * es;
    const uint8_t* in = input.bytes.data() + idx * es;
    const uint8_t* ex = expected ? expected->bytes.data() + idx * es : nullptr;
    const bool written = c.exact || (s < static_cast<int64_t>(written_slots->size()) &&
                                     (*written_slots)[s]);
    if (!written) {
      if (std::memcmp(p, in, es) != 0) {
        ++c.untouched_changed;
        note(&c, name + index_string(result.shape, idx) + " is in a slot the rules leave " +
                     "untouched but changed from " + number(load_real(in, result.dtype)) + " to " +
                     number(load_real(p, result.dtype)));
      }
      if (ex && std::memcmp(ex, in, es) != 0 && !disagree) {
        disagree = true;
        note(&c, "the reference out." + name + " changes slot " + std::to_string(s) +
                     ", which the rules leave untouched (write-set rules and the file disagree)");
      }
      continue;
    }
    if (!c.has_reference) continue;
    ++c.compared;
    const double x = load_real(p, result.dtype);
    const double ref = ref_f64 ? load_real(ref_f64->bytes.data() + idx * 8, DType::kFloat64)
                               : load_real(ex, result.dtype);
    const bool bits_differ = ex && std::memcmp(p, ex, es) != 0;
    if (bits_differ) ++c.inexact;
    if (std::isnan(x) || std::isnan(ref) || (c.exact && bits_differ))
      note(&c, name + index_string(result.shape, idx) + " = " + number(x) + ", expected " +
                   number(ref));
    err.add(x, ref);
  }
  c.rel_err = err.rel();
  const bool value_ok = c.exact ? c.inexact == 0 : c.rel_err <= tol;
  c.pass = !err.nan && !disagree && c.untouched_changed == 0 && value_ok && c.detail.empty();
  if (!c.pass && c.detail.empty())
    c.detail = name + ": relative error " + number(c.rel_err) + " > tolerance " + number(tol);
  return c;
}

}  // namespace gdn::capture::check
