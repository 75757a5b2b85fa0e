// Causal depthwise conv1d on CUDA: varlen prefill, decode and verify (rolling and per-token), and
// the conv-pool update + z copy that follow the fused gdn_attention recurrence.
//   y_t[c] = act(bias[c] + sum_{j<W} w[c, j] * u_{t-W+1+j}[c])
// One thread per (sequence, channel) — a thread loops over channels when the batch is large: it reads the window into registers before it writes any
// row, walks the sequence's tokens, and writes the rows SPEC.md §3 names — so the in-place update
// needs no synchronisation. Conv pool rows are raw copies of inputs (bit-exact).
//   grid = (<= ceil(D / 128), sequences [+ block rows for z]), block = 128
#include <algorithm>

#include "common/seq_rules.h"
#include "cuda/conv.h"

namespace gdn::cuda {
namespace {

constexpr int kConvThreads = 128;

// Input of channel `col` (the qkvz column when fused, else the x column) for local token `local`.
template <typename TAct, bool kFused>
__device__ __forceinline__ TAct conv_input(const ConvParams& p, const GroupMeta& g, int64_t local, int col) {
  if constexpr (kFused) {
    const int64_t r = g.token_indx.present() ? g.token_indx(local) : local;  // validated by the scan
    return static_cast<const TAct*>(p.src.qkvz)[r * p.src.qkvz_rs + col];
  } else {
    return static_cast<const TAct*>(p.src.q)[local * p.src.q_rs + col];
  }
}

// z[row, hv, :] = its qkvz columns (contiguous in both layouts), rows < num_actual_tokens. One
// (row, hv) pair per thread group of zThreads lanes, over the block rows past the sequences.
template <typename TAct>
__device__ void copy_z(const ConvParams& p, int64_t zblock, int64_t zblocks) {
  const auto& L = p.src.proj;
  const TAct* x = static_cast<const TAct*>(p.src.qkvz);
  TAct* z = static_cast<TAct*>(p.z);
  const int64_t pairs = p.src.num_actual_tokens * L.HV;
  constexpr int kGroup = 32;  // lanes per (row, hv) pair
  const int64_t groups = zblocks * (kConvThreads / kGroup);
  for (int64_t pr = zblock * (kConvThreads / kGroup) + threadIdx.x / kGroup; pr < pairs; pr += groups) {
    const int64_t row = pr / L.HV;
    const int hv = static_cast<int>(pr - row * L.HV);
    const TAct* src = x + row * p.src.qkvz_rs + L.z_col(hv, 0);
    TAct* dst = z + row * p.z_rs + static_cast<int64_t>(hv) * L.V;
    for (int vi = threadIdx.x % kGroup; vi < L.V; vi += kGroup) dst[vi] = src[vi];
  }
}

template <typename TAct, int W, bool kFused>
__global__ void __launch_bounds__(kConvThreads) conv_kernel(const __grid_constant__ ConvParams p) {
  const int64_t nseq = p.group[0].n + p.group[1].n;
  if (kFused && blockIdx.y >= nseq) {
    copy_z<TAct>(p, (blockIdx.y - nseq) * gridDim.x + blockIdx.x, (gridDim.y - nseq) * gridDim.x);
    return;
  }
  const int gi = blockIdx.y < p.n0 ? 0 : 1;
  const GroupMeta& g = p.group[gi];
  const int64_t i = gi ? blockIdx.y - p.n0 : blockIdx.y;
  const auto tr = rules::token_range(g.qsl(i), g.qsl(i + 1), g.limit);
  if (tr.len == 0) return;
  const ConvRef& cv = p.conv;
  const int64_t slot0 = g.slots(i, 0);
  const int64_t acc = g.spec ? rules::accepted(g.num_accepted(i), g.cols) : 1;
  const bool per_token = g.spec && p.per_token;
  const int64_t state_slot = g.spec ? g.slots(i, acc - 1) : slot0;  // column a-1 must be usable
  const int64_t read_slot = per_token ? state_slot : slot0;
  bool pad = !rules::slot_valid(slot0, cv.num_slots, p.has_null, p.null_id) ||
             !rules::slot_valid(state_slot, cv.num_slots, p.has_null, p.null_id);
  if constexpr (kFused) {  // a token outside the buffer makes its sequence padding
    bool bad = false;
    for (int64_t t = threadIdx.x; t < tr.len; t += kConvThreads) {
      const int64_t r = g.token_indx.present() ? g.token_indx(tr.begin + t) : tr.begin + t;
      bad |= r < 0 || r >= p.src.num_actual_tokens;
    }
    pad = __syncthreads_or(bad) || pad;
  }
  const bool init = g.has_init ? g.has_init[i * g.has_init_stride] != 0 : true;
  const int64_t base = (g.spec && !per_token) ? acc - 1 : 0;
  // Fused non-spec sequences only need the last W-1 inputs for the pool.
  const int64_t t0 = (kFused && !g.spec && tr.len > W - 1) ? tr.len - (W - 1) : 0;
  TAct* pool = static_cast<TAct*>(cv.state);
  for (int64_t c = blockIdx.x * static_cast<int64_t>(kConvThreads) + threadIdx.x; c < cv.D;
       c += static_cast<int64_t>(gridDim.x) * kConvThreads) {
    if (pad) {
      if constexpr (!kFused)
        for (int64_t t = 0; t < tr.len; ++t) static_cast<TAct*>(p.y)[(tr.begin + t) * p.y_rs + c] = TAct(0.f);
      continue;
    }
    auto at = [&](int64_t slot, int64_t row) -> TAct& { return pool[slot * cv.slot_stride + row * cv.D + c]; };
    // Window: the W-1 inputs before token 0, oldest first.
    TAct win[W - 1];
#pragma unroll
    for (int j = 0; j < W - 1; ++j) win[j] = (init || g.spec) ? at(read_slot, base + j) : TAct(0.f);
    if (g.spec && !per_token) {  // rolling: rows 0..W-3 <- old rows o+1..o+W-2
#pragma unroll
      for (int j = 0; j < W - 2; ++j) at(slot0, j) = win[j + 1];
    }
    float w[W];
#pragma unroll
    for (int j = 0; j < W; ++j) w[j] = to_float(static_cast<const TAct*>(cv.weight)[c * cv.weight_rs + j]);
    const int col = kFused ? p.src.proj.conv_col(static_cast<int>(c)) : static_cast<int>(c);
    const float bias = cv.bias ? to_float(static_cast<const TAct*>(cv.bias)[c]) : 0.f;
    for (int64_t t = t0; t < tr.len; ++t) {
      const TAct xt = conv_input<TAct, kFused>(p, g, tr.begin + t, col);
      if constexpr (!kFused) {
        float a = bias;
#pragma unroll
        for (int j = 0; j < W - 1; ++j) a += w[j] * to_float(win[j]);
        a += w[W - 1] * to_float(xt);
        if (cv.silu) a = silu(a);
        static_cast<TAct*>(p.y)[(tr.begin + t) * p.y_rs + c] = from_float<TAct>(a);
      }
#pragma unroll
      for (int j = 0; j < W - 2; ++j) win[j] = win[j + 1];
      win[W - 2] = xt;
      if (g.spec && t < g.cols) {
        if (!per_token) {
          at(slot0, W - 2 + t) = xt;  // rolling: row W-2+t <- u_t
        } else {
          const int64_t s = g.slots(i, t);
          if (rules::slot_valid(s, cv.num_slots, p.has_null, p.null_id))
#pragma unroll
            for (int j = 0; j < W - 1; ++j) at(s, j) = win[j];
        }
      }
    }
    if (!g.spec)
#pragma unroll
      for (int j = 0; j < W - 1; ++j) at(slot0, j) = win[j];
  }
}

template <typename TAct, bool kFused>
Status launch_w(const ConvParams& p, cudaStream_t stream) {
  const int64_t nseq = p.group[0].n + p.group[1].n;
  // About one wave of blocks: many sequences share a block row's channels (a thread loops over them).
  const int64_t gx_full = (p.conv.D + kConvThreads - 1) / kConvThreads;
  const int64_t gx = std::clamp<int64_t>((2048 + nseq - 1) / std::max<int64_t>(nseq, 1), 1, gx_full);
  // Fused: extra block rows copy z, about 8 (row, hv) pairs per 32-lane group.
  const int64_t z_pairs = kFused ? p.src.num_actual_tokens * p.src.proj.HV : 0;
  const int64_t z_rows = kFused ? std::min<int64_t>((z_pairs + gx * 32 - 1) / (gx * 32), 1024) : 0;
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(nseq + z_rows));
  if (grid.y == 0) return Status::Ok();
  switch (p.conv.W) {
    case 2: conv_kernel<TAct, 2, kFused><<<grid, kConvThreads, 0, stream>>>(p); break;
    case 3: conv_kernel<TAct, 3, kFused><<<grid, kConvThreads, 0, stream>>>(p); break;
    case 4: conv_kernel<TAct, 4, kFused><<<grid, kConvThreads, 0, stream>>>(p); break;
    case 5: conv_kernel<TAct, 5, kFused><<<grid, kConvThreads, 0, stream>>>(p); break;
    default: return Status::Error("unsupported conv width " + std::to_string(p.conv.W) + ": supported {2, 3, 4, 5}");
  }
  GDN_CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

}  // namespace

Status launch_conv(const ConvParams& p, DType act, bool fused, cudaStream_t stream) {
  switch (act) {
    case DType::kFloat32: return fused ? launch_w<float, true>(p, stream) : launch_w<float, false>(p, stream);
    case DType::kBFloat16:
      return fused ? launch_w<__nv_bfloat16, true>(p, stream) : launch_w<__nv_bfloat16, false>(p, stream);
    case DType::kFloat16: return fused ? launch_w<__half, true>(p, stream) : launch_w<__half, false>(p, stream);
    default: return Status::Error(std::string("unsupported activation dtype ") + dtype_name(act));
  }
}

}  // namespace gdn::cuda
