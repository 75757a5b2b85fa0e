// tests/support/prop_util.h — host buffers, random fills, dtype conversion and comparisons for
// the property tests (tests/test_prop_*.cpp). Test code only.
//
// A Buf owns a host allocation with a guard band (canary bytes) before and after the tensor's
// span, so a CPU write outside the view is caught by canaries_ok(). Its view is dense except in
// dim 0, whose stride (in elements) may exceed the row size, as the API allows for pools.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "capture/runner.h"
#include "gdn/ops.h"

namespace gdn::prop {

using capture::Backend;

// ---- dtype conversion (round to nearest even) ----
inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_to_f32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

inline uint16_t f32_to_f16(float f) {
  uint32_t x = f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (ax < 0x38800000u) {                                                // below 2^-14: subnormal
    float r = std::nearbyint(bits_f32(ax) * 16777216.0f);               // units of 2^-24, RNE
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(r));
  }
  uint32_t h = ((((ax >> 23) - 127 + 15) << 10) | ((ax & 0x7fffffu) >> 13));
  uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}
inline float f16_to_f32(uint16_t h) {
  uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) { float v = std::ldexp(static_cast<float>(m), -24); return sign ? -v : v; }
  if (e == 31) return bits_f32(sign | 0x7f800000u | (m << 13));
  return bits_f32(sign | ((e - 15 + 127) << 23) | (m << 13));
}

inline bool is_float(DType t) {
  return t == DType::kFloat32 || t == DType::kBFloat16 || t == DType::kFloat16 || t == DType::kFloat64;
}

// ---- deterministic random numbers (splitmix64; portable across standard libraries) ----
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 0x1234567ull) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  int64_t randint(int64_t lo, int64_t hi) {  // inclusive
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
  bool coin(double p = 0.5) { return uniform() < p; }
  double normal() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t s_;
};

// ---- host buffer ----
constexpr size_t kGuard = 64;      // canary bytes on each side
constexpr uint8_t kCanary = 0xCD;

class Buf {
 public:
  Buf() = default;
  // stride0: elements between dim-0 rows; -1 = dense.
  Buf(DType dt, std::vector<int64_t> shape, int64_t stride0 = -1) : dtype_(dt), shape_(std::move(shape)) {
    row_ = 1;
    for (size_t d = 1; d < shape_.size(); ++d) row_ *= shape_[d];
    stride0_ = stride0 < 0 ? row_ : stride0;
    phys_ = shape_.empty() ? 0 : shape_[0] * stride0_;
    mem_.assign(2 * kGuard + static_cast<size_t>(phys_) * esize() + 8, kCanary);
    std::memset(data(), 0, static_cast<size_t>(phys_) * esize());
  }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(int d) const { return shape_[d]; }
  int64_t rows() const { return shape_.empty() ? 0 : shape_[0]; }
  int64_t row_elems() const { return row_; }
  int64_t stride0() const { return stride0_; }
  int64_t numel() const { return rows() * row_; }
  int64_t phys_elems() const { return phys_; }   // rows * stride0, the allocation in elements
  size_t esize() const { return dtype_size(dtype_); }
  uint8_t* data() { return mem_.data() + kGuard; }
  const uint8_t* data() const { return mem_.data() + kGuard; }

  TensorView view() {
    TensorView v;
    v.data = data();
    v.dtype = dtype_;
    v.ndim = static_cast<int>(shape_.size());
    int64_t st = 1;
    for (int d = v.ndim - 1; d >= 0; --d) {
      v.shape[d] = shape_[d];
      v.stride[d] = st;
      st *= shape_[d];
    }
    if (v.ndim > 0) v.stride[0] = stride0_;
    return v;
  }

  // Logical flat index -> physical element index.
  int64_t phys(int64_t flat) const { return (flat / row_) * stride0_ + flat % row_; }
  bool is_logical(int64_t p) const { return p % stride0_ < row_; }

  uint64_t bits_phys(int64_t p) const {
    uint64_t u = 0;
    std::memcpy(&u, data() + p * esize(), esize());
    return u;
  }
  void set_bits_phys(int64_t p, uint64_t u) { std::memcpy(data() + p * esize(), &u, esize()); }
  uint64_t bits(int64_t flat) const { return bits_phys(phys(flat)); }
  void set_bits(int64_t flat, uint64_t u) { set_bits_phys(phys(flat), u); }

  double get_phys(int64_t p) const {
    uint64_t u = bits_phys(p);
    switch (dtype_) {
      case DType::kFloat32: return bits_f32(static_cast<uint32_t>(u));
      case DType::kBFloat16: return bf16_to_f32(static_cast<uint16_t>(u));
      case DType::kFloat16: return f16_to_f32(static_cast<uint16_t>(u));
      case DType::kFloat64: { double d; std::memcpy(&d, &u, 8); return d; }
      case DType::kInt32: return static_cast<int32_t>(static_cast<uint32_t>(u));
      case DType::kInt64: return static_cast<double>(static_cast<int64_t>(u));
      case DType::kBool: return u ? 1.0 : 0.0;
    }
    return 0;
  }
  double get(int64_t flat) const { return get_phys(phys(flat)); }
  int64_t geti(int64_t flat) const {
    return dtype_ == DType::kInt64 ? static_cast<int64_t>(bits(flat)) : static_cast<int64_t>(get(flat));
  }
  void set(int64_t flat, double v) {
    uint64_t u = 0;
    switch (dtype_) {
      case DType::kFloat32: u = f32_bits(static_cast<float>(v)); break;
      case DType::kBFloat16: u = f32_to_bf16(static_cast<float>(v)); break;
      case DType::kFloat16: u = f32_to_f16(static_cast<float>(v)); break;
      case DType::kFloat64: std::memcpy(&u, &v, 8); break;
      case DType::kInt32: u = static_cast<uint32_t>(static_cast<int32_t>(v)); break;
      case DType::kInt64: u = static_cast<uint64_t>(static_cast<int64_t>(v)); break;
      case DType::kBool: u = v != 0.0; break;
    }
    set_bits(flat, u);
  }
  void seti(int64_t flat, int64_t v) {
    if (dtype_ == DType::kInt64) set_bits(flat, static_cast<uint64_t>(v));
    else if (dtype_ == DType::kInt32) set_bits(flat, static_cast<uint32_t>(static_cast<int32_t>(v)));
    else set(flat, static_cast<double>(v));
  }

  bool canaries_ok() const {
    size_t tail = kGuard + static_cast<size_t>(phys_) * esize();
    for (size_t i = 0; i < kGuard; ++i)
      if (mem_[i] != kCanary) return false;
    for (size_t i = tail; i < mem_.size(); ++i)
      if (mem_[i] != kCanary) return false;
    return true;
  }
  bool same_bytes(const Buf& o) const {
    return o.phys_ == phys_ && o.dtype_ == dtype_ &&
           std::memcmp(data(), o.data(), static_cast<size_t>(phys_) * esize()) == 0;
  }

 private:
  DType dtype_ = DType::kFloat32;
  std::vector<int64_t> shape_;
  int64_t row_ = 1, stride0_ = 1, phys_ = 0;
  std::vector<uint8_t> mem_ = std::vector<uint8_t>(2 * kGuard + 8, kCanary);
};

inline TensorView absent() { return TensorView{}; }

// Index buffer from values.
inline Buf index_buf(const std::vector<int64_t>& v, DType dt = DType::kInt32) {
  Buf b(dt, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) b.seti(static_cast<int64_t>(i), v[i]);
  return b;
}
inline Buf index_buf2(const std::vector<std::vector<int64_t>>& v, int64_t cols, DType dt = DType::kInt32) {
  Buf b(dt, {static_cast<int64_t>(v.size()), cols});
  for (size_t i = 0; i < v.size(); ++i)
    for (int64_t c = 0; c < cols; ++c) b.seti(static_cast<int64_t>(i) * cols + c, v[i][c]);
  return b;
}
inline Buf bool_buf(const std::vector<bool>& v) {
  Buf b(DType::kBool, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) b.set(static_cast<int64_t>(i), v[i] ? 1.0 : 0.0);
  return b;
}
inline std::vector<int64_t> prefix_sum(const std::vector<int64_t>& lens) {
  std::vector<int64_t> q(1, 0);
  for (int64_t l : lens) q.push_back(q.back() + l);
  return q;
}

// ---- fills ----
inline void fill_uniform(Buf& b, Rng& r, double lo, double hi) {
  for (int64_t i = 0; i < b.numel(); ++i) b.set(i, r.uniform(lo, hi));
}
inline void fill_normal(Buf& b, Rng& r, double scale) {
  for (int64_t i = 0; i < b.numel(); ++i) b.set(i, scale * r.normal());
}
inline void fill_value(Buf& b, double value) {
  for (int64_t i = 0; i < b.numel(); ++i) b.set(i, value);
}
// 0, 1, ..., n-1 in a random order.
inline std::vector<int64_t> random_perm(int64_t n, Rng& r) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) std::swap(v[i], v[r.randint(0, i)]);
  return v;
}
// Poison patterns: 0 = a NaN bit pattern per float dtype (0xA5 bytes for integers), 1 = 0x7F bytes
// (a huge finite float). The whole allocation, including the gaps of a padded dim-0 stride.
inline void poison(Buf& b, int kind) {
  if (kind == 1 || !is_float(b.dtype())) {
    std::memset(b.data(), kind == 1 ? 0x7F : 0xA5, static_cast<size_t>(b.phys_elems()) * b.esize());
    return;
  }
  uint64_t pat = b.dtype() == DType::kFloat32 ? 0x7FC0BEEFull
               : b.dtype() == DType::kBFloat16 ? 0x7FC1ull
               : b.dtype() == DType::kFloat16 ? 0x7E01ull : 0x7FF8DEADBEEF0001ull;
  for (int64_t p = 0; p < b.phys_elems(); ++p) b.set_bits_phys(p, pat);
}
// Copy logical elements [src_flat, src_flat+n) of src into dst at dst_flat (same dtype: bits).
inline void copy_elems(Buf& dst, int64_t dst_flat, const Buf& src, int64_t src_flat, int64_t n) {
  if (dst.dtype() == src.dtype()) {
    for (int64_t i = 0; i < n; ++i) dst.set_bits(dst_flat + i, src.bits(src_flat + i));
  } else {
    for (int64_t i = 0; i < n; ++i) dst.set(dst_flat + i, src.get(src_flat + i));
  }
}
inline void copy_row(Buf& dst, int64_t dst_row, const Buf& src, int64_t src_row) {
  copy_elems(dst, dst_row * dst.row_elems(), src, src_row * src.row_elems(), src.row_elems());
}

// ---- comparisons ----
// Relative L2 error ||got - ref|| / ||ref|| over the given logical flat ranges ({start, count});
// NaN or Inf in either gives +inf. A zero reference gives the absolute norm of got.
struct Range { int64_t start, count; };
inline double rel_l2(const Buf& got, const Buf& ref, const std::vector<Range>& ranges_got,
                     const std::vector<Range>& ranges_ref) {
  double num = 0, den = 0;
  for (size_t r = 0; r < ranges_got.size(); ++r)
    for (int64_t i = 0; i < ranges_got[r].count; ++i) {
      double g = got.get(ranges_got[r].start + i), f = ref.get(ranges_ref[r].start + i);
      if (!std::isfinite(g) || !std::isfinite(f)) return std::numeric_limits<double>::infinity();
      num += (g - f) * (g - f);
      den += f * f;
    }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}
inline double rel_l2(const Buf& got, const Buf& ref) {
  return rel_l2(got, ref, {{0, got.numel()}}, {{0, ref.numel()}});
}

// First differing logical element in bits over a range, "" if none.
inline std::string bit_diff(const Buf& got, int64_t got_flat, const Buf& ref, int64_t ref_flat, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (got.bits(got_flat + i) != ref.bits(ref_flat + i)) {
      std::ostringstream s;
      s << "element " << i << " of " << n << ": got " << got.get(got_flat + i) << " (bits 0x" << std::hex
        << got.bits(got_flat + i) << "), expected " << std::dec << ref.get(ref_flat + i) << " (bits 0x" << std::hex
        << ref.bits(ref_flat + i) << ")";
      return s.str();
    }
  return "";
}
// Whole-buffer byte comparison including stride gaps; "" if identical.
inline std::string byte_diff(const Buf& got, const Buf& ref) {
  for (int64_t p = 0; p < got.phys_elems(); ++p)
    if (got.bits_phys(p) != ref.bits_phys(p)) {
      std::ostringstream s;
      int64_t row = p / got.stride0(), in = p % got.stride0();
      s << "dim-0 index " << row << ", element " << in << (got.is_logical(p) ? "" : " (stride gap)") << ": got "
        << got.get_phys(p) << " (0x" << std::hex << got.bits_phys(p) << "), expected " << std::dec << ref.get_phys(p)
        << " (0x" << std::hex << ref.bits_phys(p) << ")";
      return s.str();
    }
  return "";
}

inline const char* dtype_short(DType t) {
  switch (t) {
    case DType::kFloat32: return "f32";
    case DType::kBFloat16: return "bf16";
    case DType::kFloat16: return "f16";
    default: return dtype_name(t);
  }
}

// Tolerance principle (golden/README.md): relative L2 error against a reference. Values that are
// the same float32 math evaluated in a possibly different order: 1e-5 in float32; anything stored
// in bf16/fp16 may differ by the storage rounding (2^-9 relative per element): 1e-2.
inline double tol_for(DType storage) { return storage == DType::kFloat32 ? 1e-5 : 1e-2; }

#define PROP_ASSERT_OK(expr)                                        \
  do {                                                              \
    ::gdn::Status prop_st_ = (expr);                                \
    ASSERT_TRUE(prop_st_.ok()) << #expr << ": " << prop_st_.message(); \
  } while (0)

#define PROP_SKIP_IF_UNAVAILABLE(backend)                                           \
  do {                                                                              \
    if (!::gdn::capture::backend_available(backend))                               \
      GTEST_SKIP() << ::gdn::capture::backend_name(backend) << " backend not available"; \
  } while (0)

}  // namespace gdn::prop
