// src/cpu/cpu_util.h — element access by runtime dtype and index loads (the parallel loop and its
// scratch: scratch.h).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/seq_rules.h"
#include "gdn/tensor.h"

namespace gdn::cpu {

inline float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t float_to_bf16(float f) {  // round to nearest even
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float half_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu, u;
  if (exp == 0) {  // zero or subnormal: man * 2^-24, exact in float
    float f = static_cast<float>(man) * 5.9604644775390625e-8f;
    return sign ? -f : f;
  } else if (exp == 31) {
    u = sign | 0x7f800000u | man << 13;
  } else {
    u = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t float_to_half(float f) {  // round to nearest even
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (a < 0x38800000u) {  // subnormal or zero in half
    float af;
    std::memcpy(&af, &a, 4);
    // value / 2^-24, rounded to nearest even by the FPU
    float scaled = af * 16777216.0f;
    uint32_t m = static_cast<uint32_t>(std::nearbyint(scaled));
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t exp = ((a >> 23) - 127 + 15);
  uint32_t man = a & 0x7fffffu;
  uint32_t h = exp << 10 | man >> 13;
  uint32_t rest = man & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

inline float load_f(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::kFloat32: return static_cast<const float*>(base)[i];
    case DType::kBFloat16: return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::kFloat16: return half_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::kFloat64: return static_cast<float>(static_cast<const double*>(base)[i]);
    default: return 0.f;
  }
}
inline void store_f(void* base, DType t, int64_t i, float v) {
  switch (t) {
    case DType::kFloat32: static_cast<float*>(base)[i] = v; break;
    case DType::kBFloat16: static_cast<uint16_t*>(base)[i] = float_to_bf16(v); break;
    case DType::kFloat16: static_cast<uint16_t*>(base)[i] = float_to_half(v); break;
    case DType::kFloat64: static_cast<double*>(base)[i] = v; break;
    default: break;
  }
}
// Rounds v through dtype t (the value a store followed by a load would give).
inline float round_to(DType t, float v) {
  if (t == DType::kBFloat16) return bf16_to_float(float_to_bf16(v));
  if (t == DType::kFloat16) return half_to_float(float_to_half(v));
  return v;
}

// Element (i, j...) of a view whose dims >= 1 are dense: offset = i * stride0 + inner.
inline int64_t row_offset(const TensorView& v, int64_t row) { return row * v.stride[0]; }

inline int64_t load_index(const TensorView& v, int64_t i) {
  return v.dtype == DType::kInt64 ? static_cast<const int64_t*>(v.data)[i]
                                  : static_cast<const int32_t*>(v.data)[i];
}
// Element [i, j] of a 2-D index view (dim-0 stride honoured).
inline int64_t load_index2(const TensorView& v, int64_t i, int64_t j) {
  return load_index(v, i * v.stride[0] + j);
}
inline bool load_bool(const TensorView& v, int64_t i, bool absent_value) {
  if (!v.present()) return absent_value;
  return static_cast<const uint8_t*>(v.data)[i * (v.ndim > 0 ? v.stride[0] : 1)] != 0;
}
inline int64_t load_index1(const TensorView& v, int64_t i) {
  return load_index(v, i * v.stride[0]);
}

// Tokens of sequence i: [qsl[i], qsl[i+1]) clamped into [0, limit] (docs/contract.md §3).
inline rules::TokenRange sequence_tokens(const TensorView& qsl, int64_t i, int64_t limit) {
  return rules::token_range(load_index1(qsl, i), load_index1(qsl, i + 1), limit);
}

inline float silu(float x) { return x / (1.f + std::exp(-x)); }

}  // namespace gdn::cpu
