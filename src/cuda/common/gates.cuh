// src/cuda/common/gates.cuh — a token's gates in every form of ops.h (RecurrentParams::gates), for
// the kernels that take those forms (the gate-form instances of the register, lean and pipelined
// kernels, the chunk kernel, the deferred kernel) and, in the default form, for every recurrence
// kernel; and the loads of gate inputs whose dtype is known only at run time.
#pragma once
#include "common/seq_rules.h"
#include "cuda/common/params.h"

namespace gdn::cuda {

// A gate input of dtype code dt (0 float32, 1 bfloat16, 2 float16) as raw bits (0 where !ok),
// loaded without a branch so that the load stays in flight until raw_float converts it.
__device__ __forceinline__ uint32_t load_raw(const void* base, int dt, int64_t off, bool ok) {
  const int bytes = !ok ? 0 : dt == 0 ? 4 : 2;
  return load_word(static_cast<const char*>(base) + off * bytes, bytes);
}
__device__ __forceinline__ float raw_float(uint32_t r, int dt) {
  if (dt == 1) return __uint_as_float(r << 16);
  if (dt == 2) return __half2float(__ushort_as_half(static_cast<unsigned short>(r)));
  return __uint_as_float(r);
}

// raw_float without a branch: every conversion, then a select, so that a caller's second word load
// does not wait behind the first word's dtype test (the lean kernel's gate forms).
__device__ __forceinline__ float select_float(uint32_t r, int dt) {
  const float bf = __uint_as_float(r << 16), hf = __half2float(__ushort_as_half(static_cast<unsigned short>(r)));
  return dt == 1 ? bf : dt == 2 ? hf : __uint_as_float(r);
}

// The primitive op's gate input a (which = 0) or b (1) of value head hv at global row `row`, in its
// own dtype (p.a_dtype, p.b_dtype), as load_raw gives it.
__device__ __forceinline__ uint32_t gate_word(const RecurrentParams& p, int64_t row, int hv, int which) {
  const void* src = which == 0 ? p.src.a : p.src.b;
  const int64_t rs = which == 0 ? p.src.a_rs : p.src.b_rs;
  return load_raw(src, which == 0 ? p.a_dtype : p.b_dtype, row * rs + hv, true);
}

// A = -exp(A_log) and dt_bias of value head hv where the decay is computed (0 where it is given:
// A_log and dt_bias are absent then).
__device__ __forceinline__ void head_decay(const RecurrentParams& p, GateForm f, int hv, float& A, float& dtb) {
  A = f.decay_given ? 0.f : -expf(p.A_log(hv));
  dtb = f.decay_given ? 0.f : p.dt_bias(hv);
}

// A token's log-space decay g and write strength beta from its gate inputs a, b in form f:
//   g = -exp(A_log) softplus(a + dt_bias) (A = -exp(A_log)), or a;  beta = sigmoid(b), or b.
struct GateValues {
  float g, beta;
};
__device__ __forceinline__ GateValues gate_values(GateForm f, float a, float b, float A, float dtb) {
  GateValues v;
  v.g = f.decay_given ? a : A * rules::softplus(a + dtb);
  v.beta = f.beta_given ? b : 1.f / (1.f + expf(-b));
  return v;
}

}  // namespace gdn::cuda
