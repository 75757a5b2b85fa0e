// src/cuda/fused_step.cuh — gdn_attention's whole step (causal conv + gates + l2 norms +
// recurrence + conv pool update + z copy) as one launch, on sm_90+ with thread-block clusters.
//   grid    = (ceil(V / kRows), HV, sequences of both groups), block = StepTraits warps
//   cluster = (ceil(V / kRows), r): every block of one (sequence, key head)
// The blocks of a cluster share the key head's q and k: each block computes the causal conv of a
// 1/cluster share of the 2K q/k channels (and of its own v rows) and pushes the outputs into every
// block's shared memory (distributed shared memory); one cluster barrier per token publishes them.
// Each conv channel has exactly one owner thread in the cluster, which reads its window once into
// registers, slides it over the tokens and writes that channel's pool rows itself (SPEC.md §3,
// same rows as conv_channel.cuh): no block reads what another writes, so the pool needs no barrier.
// Shared q/k/v/gate buffers are double-buffered by token parity, so one barrier per token suffices.
// Every block also copies a slice of z (all rows < num_actual_tokens, padding included).
#pragma once
#include <cooperative_groups.h>

#include <optional>

#include "cuda/conv_channel.cuh"
#include "cuda/rec_common.cuh"

namespace gdn::cuda {

// Split cluster barrier: arrive early (relaxed), wait before the first distributed shared memory
// access, so that every block of the cluster has started by then.
__device__ __forceinline__ void cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait;\n" ::: "memory");
#endif
}

// 16-byte asynchronous copies global -> shared (no registers held while in flight).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem) : "memory");
#endif
}
__device__ __forceinline__ void cp_async_commit_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\ncp.async.wait_all;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

template <typename TAct, typename TState, int KP, bool kDense>
__global__ void __launch_bounds__(StepTraits<TState>::kThreads, StepTraits<TState>::kMinBlocks)
    fused_step_kernel(const __grid_constant__ RecurrentParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using Tr = StepTraits<TState>;
  constexpr int L = Tr::kLanes, G = Tr::kGroups, R = Tr::kRowsPerLane, EPL = KP / L;
  constexpr int kRows = Tr::kRows, kThreads = Tr::kThreads, kPasses = Tr::kPasses, RP = R / kPasses;
  static_assert(KP % L == 0, "K padded to whole lane groups");
  static_assert(R % kPasses == 0, "whole rows per pass");
  __shared__ float s_qk[2][2 * KP];  // raw conv outputs [q | k] of the key head, by token parity
  __shared__ float s_v[2][kRows], s_ab[2][2];
  cluster_arrive_relaxed();
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const int cs = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, ln = lane % L;
  const int hv = blockIdx.y, h = hv / p.r;
  const int lrow0 = warp * Tr::kRowsPerWarp + lane / L;  // block-local row of lane-group step 0
  const int row0 = blockIdx.x * kRows + lrow0;
  const int gi = blockIdx.z < p.n0 ? 0 : 1;
  const GroupMeta& g = p.group[gi];
  const int64_t i = gi ? blockIdx.z - p.n0 : blockIdx.z;
  const int64_t out_rows = p.src.num_actual_tokens;
  const SeqInfo si = resolve_seq(p, g, i, true);
  const auto tr = si.tr;

  // The state rows live in shared memory between tokens (registers only inside recur_token), so
  // the conv phase has the register file to itself. Thread t's 16-byte chunk c sits at
  // s_rows[c * kThreads + t]: every thread reads and writes only its own chunks (no barriers), and
  // a warp's accesses are contiguous. Dense rows arrive by cp.async (no registers in flight) as raw
  // TState, and are float32 after the first token.
  constexpr int kRowBytes = EPL * static_cast<int>(sizeof(TState));
  constexpr bool kAsync = kDense && kRowBytes % 16 == 0;  // implies whole float chunks
  constexpr int kRawChunks = kRowBytes / 16, kF32Chunks = EPL * 4 / 16;  // per row
  constexpr bool kChunked = (EPL * 4) % 16 == 0;  // else float slots: element (j, e) at (j EPL + e) kThreads + t
  __shared__ uint4 s_rows[R * EPL * kThreads / 4];
  float* s_flt = reinterpret_cast<float*>(s_rows);
  const bool load_state = tr.len > 0 && !si.pad && si.init;
  if constexpr (kAsync) {
    if (load_state) {
      const TState* base = static_cast<const TState*>(p.state) + si.read_slot * p.state_slot_stride +
                           static_cast<int64_t>(hv) * p.V * p.K;
#pragma unroll
      for (int j = 0; j < R; ++j)
        if (row0 + j * G < p.V) {
          const uint4* src = reinterpret_cast<const uint4*>(base + static_cast<int64_t>(row0 + j * G) * p.K + ln * EPL);
#pragma unroll
          for (int c = 0; c < kRawChunks; ++c) cp_async16(&s_rows[(j * kRawChunks + c) * kThreads + tid], src + c);
        }
      cp_async_commit();
    }
  }
  copy_z<TAct, kThreads>(p.src, p.z, p.z_rs, blockIdx.x + gridDim.x * (blockIdx.y + int64_t{gridDim.y} * blockIdx.z),
                         int64_t{gridDim.x} * gridDim.y * gridDim.z);
  // Every value of s_qk is pushed by its owner except K..KP (padding): zero those here.
  for (int c = tid; c < 2 * (KP - p.K); c += kThreads) {
    const int e = c < KP - p.K ? p.K + c : KP + p.K + (c - (KP - p.K));
    s_qk[0][e] = 0.f;
    s_qk[1][e] = 0.f;
  }
  bool pad = si.pad;
  {  // a token outside the buffer makes its sequence padding (same for every block of the cluster)
    bool bad_row = false;
    for (int64_t t = tid; t < tr.len; t += kThreads) bad_row |= global_row(g, tr.begin + t, out_rows) < 0;
    pad = __syncthreads_or(bad_row) || pad;
  }
  TAct* o = static_cast<TAct*>(p.o);
  if (tr.len == 0 || pad) {  // uniform over the cluster: every block leaves here
    const int vi = row0 + ln * G;
    if (ln < R && vi < p.V)
      for (int64_t t = 0; t < tr.len; ++t) {
        const int64_t row = global_row(g, tr.begin + t, out_rows);
        if (row >= 0) o[row * p.o_rs + static_cast<int64_t>(hv) * p.V + vi] = from_float<TAct>(0.f);
      }
    cluster_wait();
    return;
  }

  // This thread's conv channel: q/k channel rank * per + tid of the key head, or v row tid - per.
  const auto& PL = p.src.proj;
  const int per = (2 * p.K + cs - 1) / cs;
  int ch = -1, dst = 0;
  if (tid < per) {
    const int qc = rank * per + tid;
    if (qc < 2 * p.K) {
      ch = qc < p.K ? h * p.K + qc : PL.H * PL.K + h * p.K + (qc - p.K);
      dst = qc < p.K ? qc : KP + (qc - p.K);
    }
  } else if (tid - per < kRows) {
    const int vi = blockIdx.x * kRows + (tid - per);
    if (vi < p.V) ch = 2 * PL.H * PL.K + hv * p.V + vi;
    dst = tid - per;
  }
  const bool is_qk = tid < per;
  const int W = p.conv.W;
  const int64_t D = p.conv.D;
  // The channel's window (the W-1 inputs before the current token, oldest first) lives in shared
  // memory between tokens, its weights in L1: nothing of the conv stays in registers across the
  // recurrence.
  __shared__ float s_win[kMaxW - 1][kThreads];
  auto pool_at = [&](int64_t r) -> TAct& {
    return static_cast<TAct*>(p.conv.state)[si.slot0 * p.conv.slot_stride + r * D + ch];
  };
  if (ch >= 0) {
    const int64_t base = g.spec ? si.acc - 1 : 0;
    TAct win[kMaxW - 1];
#pragma unroll
    for (int j = 0; j < kMaxW - 1; ++j) win[j] = (j < W - 1 && (si.init || g.spec)) ? pool_at(base + j) : TAct(0.f);
    if (g.spec) {  // rolling: rows 0..W-3 <- old rows base+1..base+W-2
#pragma unroll
      for (int j = 0; j < kMaxW - 2; ++j)
        if (j < W - 2) pool_at(j) = win[j + 1];
    }
#pragma unroll
    for (int j = 0; j < kMaxW - 1; ++j) s_win[j][tid] = to_float(win[j]);
  }
  const float A = -expf(p.A_log(hv)), dtb = p.dt_bias(hv);
  cluster_wait();  // every block of the cluster has started: pushes may begin

  for (int64_t t = 0; t < tr.len; ++t) {
    const int buf = static_cast<int>(t & 1);
    const int64_t row = global_row(g, tr.begin + t, out_rows);
    if (ch >= 0) {
      const TAct* wr = static_cast<const TAct*>(p.conv.weight) + static_cast<int64_t>(ch) * p.conv.weight_rs;
      const TAct x = static_cast<const TAct*>(p.src.qkvz)[row * p.src.qkvz_rs + PL.conv_col(ch)];
      float a = p.conv.bias ? to_float(static_cast<const TAct*>(p.conv.bias)[ch]) : 0.f;
#pragma unroll
      for (int j = 0; j < kMaxW - 1; ++j)
        if (j < W - 1) a += to_float(wr[j]) * s_win[j][tid];
#pragma unroll
      for (int j = 0; j < kMaxW; ++j)
        if (j == W - 1) a += to_float(wr[j]) * to_float(x);
      if (p.conv.silu) a = silu(a);
      const float y = round_to<TAct>(a);  // the conv output is stored in the activation dtype
      if (is_qk) {
        for (int b = 0; b < cs; ++b) *cluster.map_shared_rank(&s_qk[buf][dst], b) = y;
      } else {
        s_v[buf][dst] = y;
      }
#pragma unroll
      for (int j = 0; j < kMaxW - 2; ++j)
        if (j < W - 2) s_win[j][tid] = s_win[j + 1][tid];
#pragma unroll
      for (int j = 0; j < kMaxW - 1; ++j)
        if (j == W - 2) s_win[j][tid] = to_float(x);
      if (g.spec && t < g.cols) pool_at(W - 2 + t) = x;  // rolling: row W-2+t <- u_t
    }
    if (tid < 2) {
      const TAct* ba = static_cast<const TAct*>(p.src.ba) + row * p.src.ba_rs;
      s_ab[buf][tid] = to_float(ba[tid == 0 ? PL.a_col(hv) : PL.b_col(hv)]);
    }
    cluster.sync();  // token t's q, k (whole cluster), v and gates (this block) are in place
    // The rows in kPasses passes of RP rows each (fewer registers; the token's q, k are shared).
    const int64_t slot = g.spec && t < g.cols ? g.slots(i, t) : si.slot0;
    const bool store = g.spec ? (t < g.cols && rules::slot_valid(slot, p.num_slots, p.has_null, p.null_id))
                              : t + 1 == tr.len;
#pragma unroll
    for (int ps = 0; ps < kPasses; ++ps) {
      float s[RP][EPL];
#pragma unroll
      for (int jj = 0; jj < RP; ++jj) {
        const int j = ps * RP + jj;  // the lane group's row step
        if (t == 0) {                // the state as read from the pool (zero without initial state)
#pragma unroll
          for (int e = 0; e < EPL; ++e) s[jj][e] = 0.f;
          if constexpr (kAsync) {
            if (load_state) {
              if (j == 0) cp_async_commit_wait_all();
#pragma unroll
              for (int c = 0; c < kRawChunks; ++c) {
                const uint4 u = s_rows[(j * kRawChunks + c) * kThreads + tid];
                const TState* e = reinterpret_cast<const TState*>(&u);
                constexpr int kPer = 16 / sizeof(TState);
#pragma unroll
                for (int q = 0; q < kPer; ++q) s[jj][c * kPer + q] = to_float(e[q]);
              }
            }
          } else if (load_state && row0 + j * G < p.V) {
            load_row<TState, EPL, kDense>(p, si.read_slot, hv, row0 + j * G, ln, s[jj]);
          }
        } else if constexpr (kChunked) {  // float32, as the previous token left it
#pragma unroll
          for (int c = 0; c < kF32Chunks; ++c) {
            const uint4 u = s_rows[(j * kF32Chunks + c) * kThreads + tid];
            s[jj][4 * c] = __uint_as_float(u.x);
            s[jj][4 * c + 1] = __uint_as_float(u.y);
            s[jj][4 * c + 2] = __uint_as_float(u.z);
            s[jj][4 * c + 3] = __uint_as_float(u.w);
          }
        } else {
#pragma unroll
          for (int e = 0; e < EPL; ++e) s[jj][e] = s_flt[(j * EPL + e) * kThreads + tid];
        }
      }
      const int prow0 = row0 + ps * RP * G;  // this pass's first row
      const float mine = recur_token<L, G, RP, EPL>(s, s_qk[buf], s_qk[buf] + KP, s_v[buf], lrow0 + ps * RP * G,
                                                    p.V - prow0, s_ab[buf][0], s_ab[buf][1], A, dtb, p.scale, ln);
      if (ln < RP && prow0 + ln * G < p.V)
        o[row * p.o_rs + static_cast<int64_t>(hv) * p.V + prow0 + ln * G] = from_float<TAct>(mine);
#pragma unroll
      for (int jj = 0; jj < RP; ++jj) {
        const int j = ps * RP + jj;
        if (t + 1 < tr.len) {
          if constexpr (kChunked) {
#pragma unroll
            for (int c = 0; c < kF32Chunks; ++c)
              s_rows[(j * kF32Chunks + c) * kThreads + tid] =
                  make_uint4(__float_as_uint(s[jj][4 * c]), __float_as_uint(s[jj][4 * c + 1]),
                             __float_as_uint(s[jj][4 * c + 2]), __float_as_uint(s[jj][4 * c + 3]));
          } else {
#pragma unroll
            for (int e = 0; e < EPL; ++e) s_flt[(j * EPL + e) * kThreads + tid] = s[jj][e];
          }
        }
        if (store && row0 + j * G < p.V) store_row<TState, EPL, kDense>(p, slot, hv, row0 + j * G, ln, s[jj]);
      }
    }
  }
  if (!g.spec && ch >= 0)  // the last W-1 inputs of (window ++ tokens)
#pragma unroll
    for (int j = 0; j < kMaxW - 1; ++j)
      if (j < W - 1) pool_at(j) = from_float<TAct>(s_win[j][tid]);
#else
  __trap();  // launched on sm_90 and later only
#endif
}

// Launches the one-launch step when the card has clusters (sm_90+), a cluster of
// (ceil(V / kRows), r) blocks can be resident, and one channel per thread covers a block's share;
// nullopt (nothing launched) otherwise.
template <typename TAct, typename TS, int KP, bool kDense>
std::optional<Status> launch_fused_step(const RecurrentParams& p, int64_t nseq, cudaStream_t stream) {
  using Tr = StepTraits<TS>;
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess || major < 9)
    return std::nullopt;
  const unsigned gx = static_cast<unsigned>((p.V + Tr::kRows - 1) / Tr::kRows);
  const unsigned csize = gx * static_cast<unsigned>(p.r);
  if (csize > 16 || p.HV % p.r != 0) return std::nullopt;
  const int per = static_cast<int>((2 * p.K + csize - 1) / csize);
  if (per + Tr::kRows > Tr::kThreads) return std::nullopt;
  auto kernel = fused_step_kernel<TAct, TS, KP, kDense>;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(gx, static_cast<unsigned>(p.HV), static_cast<unsigned>(nseq));
  cfg.blockDim = dim3(Tr::kThreads);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = gx;
  attr[0].val.clusterDim.y = static_cast<unsigned>(p.r);
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  if (csize > 8) {  // non-portable sizes: allowed on H100/H200, if such a cluster fits
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {
      (void)cudaGetLastError();  // clear the attribute's error: the two-launch form runs instead
      return std::nullopt;
    }
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess || clusters < 1) {
      (void)cudaGetLastError();
      return std::nullopt;
    }
  }
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, p);
  if (e != cudaSuccess) return Status::Error(std::string("cudaLaunchKernelEx: ") + cudaGetErrorString(e));
  return Status::Ok();
}

}  // namespace gdn::cuda
