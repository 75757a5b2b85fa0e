// src/cuda/deferred/deferred_prep.cuh — the lean form's token inputs prepared once per (token row,
// key head) by a kernel of their own, instead of by each of the head's row warps (V / 16 of them):
// k^ and q^ through prep_regs with the lean form's 16-lane sums (so the bits the lean form computes
// itself), and per value head g, beta and exp(g). The lean form then loads them (deferred_lean.cuh,
// kPrepped). The workspace (DeferredParams::prep):
//   floats [rows][H][2][128]: q^ then k^ of (row, h); then [rows][HV][4]: g, beta, exp(g), k^ . q^.
// Grid: (row, key head) pairs, a half-warp each, 8 per block of 4 warps.
#pragma once
#include "cuda/deferred/deferred.cuh"

namespace gdn::cuda {

// The workspace's layout lives here only: every reader and writer goes through these.
struct DeferredPrep {
  static constexpr int kL = 16, kEPL = 8, kThreads = 128, kPairs = kThreads / kL;
  // the floats before the gates
  static __host__ __device__ int64_t qk_floats(int64_t rows, int H) { return rows * H * 256; }
  // the whole workspace
  static __host__ size_t bytes(int64_t rows, int H, int HV) {
    return static_cast<size_t>(rows * (H * 256 + HV * 4)) * sizeof(float);
  }
  // q^ of (row, key head) at [0, 128), k^ at [128, 256)
  static __device__ float* qk(const DeferredParams& p, int64_t row, int h) { return p.prep + (row * p.H + h) * 256; }
  // g, beta, exp(g), k^ . q^ of (row, value head)
  static __device__ float* gates(const DeferredParams& p, int64_t row, int hv) {
    return p.prep + qk_floats(p.prep_rows, p.H) + (row * p.HV + hv) * 4;
  }
};

// k^ . q^ over a row's L lanes, each holding EPL elements of both (the same bits in the prep
// kernel and in the lean form).
template <int L, int EPL>
__device__ __forceinline__ float lane_dot(const float (&kr)[EPL], const float (&qr)[EPL]) {
  float x = 0.f;
#pragma unroll
  for (int e = 0; e < EPL; ++e) x += kr[e] * qr[e];
  return group_sum<L>(x);
}

template <typename TAct>
__global__ void __launch_bounds__(DeferredPrep::kThreads) deferred_prep_kernel(const __grid_constant__ DeferredParams p) {
  constexpr int L = DeferredPrep::kL, EPL = DeferredPrep::kEPL;
  static_assert(L * EPL == 128 && EPL == 8, "K = 128, two float4 per lane and vector");
  pdl_start();
  const int ln = threadIdx.x % L;
  const int64_t pairs = p.prep_rows * p.H;
  const int64_t pair = static_cast<int64_t>(blockIdx.x) * DeferredPrep::kPairs + threadIdx.x / L;
  const bool ok = pair < pairs;  // the others compute the last pair (full warps for the shuffles), store nothing
  const int64_t pc = ok ? pair : pairs - 1, row = pc / p.H;
  const int h = static_cast<int>(pc % p.H), hv0 = h * p.r;
  float qr[EPL], kr[EPL];
  load_vec<TAct, EPL, false>(q_row<TAct>(p, row, h) + ln * EPL, qr);
  load_vec<TAct, EPL, false>(k_row<TAct>(p, row, h) + ln * EPL, kr);
  float A, dtb;
  head_decay(p, p.gates, hv0, A, dtb);
  const TokenGates tg0 = prep_regs<L, EPL>(p.a(row * p.src.a_rs + hv0), p.b(row * p.src.b_rs + hv0), A, dtb, p.scale,
                                           kr, qr, p.gates);
  const float kq = lane_dot<L, EPL>(kr, qr);
  if (!ok) return;
  float4* const qk = reinterpret_cast<float4*>(DeferredPrep::qk(p, row, h) + ln * EPL);  // plain stores: read again soon
  qk[0] = make_float4(qr[0], qr[1], qr[2], qr[3]);
  qk[1] = make_float4(qr[4], qr[5], qr[6], qr[7]);
  qk[32] = make_float4(kr[0], kr[1], kr[2], kr[3]);  // + 128 floats
  qk[33] = make_float4(kr[4], kr[5], kr[6], kr[7]);
  for (int j = ln; j < p.r; j += L) {  // the key head's value heads
    const int hv = hv0 + j;
    TokenGates tg = tg0;
    if (j > 0) {
      head_decay(p, p.gates, hv, A, dtb);
      const GateValues gv = gate_values(p.gates, p.a(row * p.src.a_rs + hv), p.b(row * p.src.b_rs + hv), A, dtb);
      tg.g = gv.g;
      tg.beta = gv.beta;
      tg.decay = expf(gv.g);
    }
    *reinterpret_cast<float4*>(DeferredPrep::gates(p, row, hv)) = make_float4(tg.g, tg.beta, tg.decay, kq);
  }
}

}  // namespace gdn::cuda
