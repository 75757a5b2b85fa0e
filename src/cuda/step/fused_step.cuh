// src/cuda/step/fused_step.cuh — gdn_attention's whole step (causal conv + gates + l2 norms +
// recurrence + conv pool update + z copy) as one launch, on sm_90+ with thread-block clusters.
//   grid    = (ceil(V / kRows), HV, sequences of both groups), block = StepTraits warps
//   cluster = (ceil(V / kRows), r): every block of one (sequence, key head)
// The blocks of a cluster share the key head's q and k: each block computes the causal conv of a
// 1/cluster share of the 2K q/k channels (and of its own v rows) and pushes the outputs into every
// block's shared memory (distributed shared memory); one cluster barrier per token publishes them.
// Each conv channel has exactly one owner thread in the cluster, which reads its window once (into
// its slot of shared memory), slides it over the tokens and writes that channel's pool rows itself
// (docs/contract.md §3, same rows as conv_channel.cuh): no block reads what another writes, so the pool needs
// no barrier.
// Shared q/k/v/gate buffers are double-buffered by token parity, so one barrier per token suffices.
// Every block also copies a slice of z (all rows < num_actual_tokens, padding included).
#pragma once
#include <cooperative_groups.h>

#include <optional>

#include "cuda/conv/conv_channel.cuh"
#include "cuda/plan/plan.h"
#include "cuda/common/rec_common.cuh"

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


template <typename TAct, typename TState, int KP, bool kDense, bool kLean = false, bool kPerToken = false>
__global__ void __launch_bounds__(StepTraits<TState, kLean>::kThreads, StepTraits<TState, kLean>::kMinBlocks)
    fused_step_kernel(const __grid_constant__ RecurrentParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  pdl_start();
  using Tr = StepTraits<TState, kLean>;
  constexpr int L = Tr::kLanes, G = Tr::kGroups, R = Tr::kRowsPerLane, EPL = KP / L;
  constexpr int kRows = Tr::kRows, kThreads = Tr::kThreads;
  static_assert(KP % L == 0, "K padded to whole lane groups");
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
  const SeqRef sq = seq_ref(p, blockIdx.z);
  const GroupMeta& g = p.group[sq.gi];
  const int64_t i = sq.i;
  const int64_t out_rows = p.src.num_actual_tokens;
  const SeqInfo si = resolve_seq(p, g, i, true);
  const auto tr = si.tr;

  float s[R][EPL];
#pragma unroll
  for (int j = 0; j < R; ++j) {
#pragma unroll
    for (int e = 0; e < EPL; ++e) s[j][e] = 0.f;
    if (tr.len > 0 && !si.pad && si.init && row0 + j * G < p.V)
      load_row<TState, KP, EPL, kDense>(p, si.read_slot, hv, row0 + j * G, ln, s[j]);
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
  if (tr.len == 0 || pad) {  // uniform over the cluster: every block leaves here
    zero_outputs<TAct, R, G>(p, g, tr, out_rows, hv, row0, ln);
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
  // The channel's conv weights, bias and window: in this thread's slot of shared memory, where they
  // take no registers from the state rows across the token loop.
  __shared__ float s_w[kThreads][kMaxW + 1];
  __shared__ TAct s_win[kThreads][kMaxW - 1];
  float* const w = s_w[tid];
  float& bias = s_w[tid][kMaxW];
  TAct* const win = s_win[tid];  // the W-1 inputs before the current token
  bias = 0.f;
  int col = 0;
  TAct* pool = static_cast<TAct*>(p.conv.state);
  const int64_t D = p.conv.D;
  // kPerToken (an instance of its own, so that the rolling one keeps its code): verify windows in
  // column a-1's slot, stored after token t into column t's slot (conv_window, per_token_slot).
  const bool per_token = kPerToken && g.spec;
  if (ch >= 0) {
    pool += (per_token ? si.read_slot : si.slot0) * p.conv.slot_stride + ch;
    col = PL.conv_col(ch);
    const TAct* wr = static_cast<const TAct*>(p.conv.weight) + static_cast<int64_t>(ch) * p.conv.weight_rs;
#pragma unroll
    for (int j = 0; j < kMaxW; ++j) w[j] = j < W ? to_float(wr[j]) : 0.f;
    if (p.conv.bias) bias = to_float(static_cast<const TAct*>(p.conv.bias)[ch]);
    const int64_t base = g.spec && !per_token ? si.acc - 1 : 0;
#pragma unroll
    for (int j = 0; j < kMaxW - 1; ++j) win[j] = (j < W - 1 && (si.init || g.spec)) ? pool[(base + j) * D] : TAct(0.f);
    if (g.spec && !per_token) {  // rolling: rows 0..W-3 <- old rows base+1..base+W-2
#pragma unroll
      for (int j = 0; j < kMaxW - 2; ++j)
        if (j < W - 2) pool[j * D] = win[j + 1];
    }
  }
  const float A = -expf(p.A_log(hv)), dtb = p.dt_bias(hv);
  // per token: the slot that receives the window after token t, loaded by the second warp's first
  // thread while the first warp loads the token's gates (in one warp the two loads' waits would
  // add up), shared by parity: no register of it lives across the recurrence
  __shared__ int64_t s_slot[2];
  static_assert(kThreads > 32, "a second warp loads the per-token slots");
  cluster_wait();  // every block of the cluster has started: pushes may begin

  for (int64_t t = 0; t < tr.len; ++t) {
    const int buf = static_cast<int>(t & 1);
    const int64_t row = global_row(g, tr.begin + t, out_rows);
    if (ch >= 0) {
      const TAct x = static_cast<const TAct*>(p.src.qkvz)[row * p.src.qkvz_rs + col];
      // taps 0 .. W - 2 from the window, then tap W - 1: the token's input
      float a = conv_taps<kMaxW - 1>(bias, 0, W - 1, [&](int j) { return w[j]; }, [&](int j) { return to_float(win[j]); });
      a = conv_taps<kMaxW>(a, W - 1, W, [&](int j) { return w[j]; }, [&](int) { return to_float(x); });
      if (p.conv.silu) a = silu(a);
      const float y = round_to<TAct>(a);  // the conv output is stored in the activation dtype
      if (is_qk) {
        for (int b = 0; b < cs; ++b) *cluster.map_shared_rank(&s_qk[buf][dst], b) = y;
      } else {
        s_v[buf][dst] = y;
      }
#pragma unroll
      for (int j = 0; j < kMaxW - 2; ++j)
        if (j < W - 2) win[j] = win[j + 1];
#pragma unroll
      for (int j = 0; j < kMaxW - 1; ++j)
        if (j == W - 2) win[j] = x;
      if constexpr (!kPerToken)
        if (g.spec && t < g.cols) pool[(W - 2 + t) * D] = x;  // rolling: row W-2+t <- u_t
    }
    if (tid < 2) {
      const TAct* ba = static_cast<const TAct*>(p.src.ba) + row * p.src.ba_rs;
      s_ab[buf][tid] = to_float(ba[tid == 0 ? PL.a_col(hv) : PL.b_col(hv)]);
    }
    if constexpr (kPerToken)
      if (per_token && tid == 32) s_slot[buf] = per_token_slot(g, p.conv, i, t, p.has_null, p.null_id);
    cluster.sync();  // token t's q, k (whole cluster), v, gates and (per token) window slot are in place
    if constexpr (kPerToken) {
      const int64_t tslot = per_token && ch >= 0 ? s_slot[buf] : -1;
      if (tslot >= 0) {  // rows 0..W-2 of column t's slot <- the window after u_t
        TAct* dst = static_cast<TAct*>(p.conv.state) + tslot * p.conv.slot_stride + ch;
#pragma unroll
        for (int j = 0; j < kMaxW - 1; ++j)
          if (j < W - 1) dst[j * D] = win[j];
      }
    }
    const float mine = recur_token<L, G, R, EPL, Tr::kScatter>(s, s_qk[buf], s_qk[buf] + KP, s_v[buf], lrow0,
                                                               p.V - row0, s_ab[buf][0], s_ab[buf][1], A, dtb,
                                                               p.scale, ln);
    emit_token<TAct, TState, KP, R, EPL, G, kDense>(p, g, i, t, row, hv, row0, ln, mine, s);
  }
  if (!g.spec) {
#pragma unroll
    for (int j = 0; j < R; ++j)
      if (row0 + j * G < p.V) store_row<TState, KP, EPL, kDense>(p, si.slot0, hv, row0 + j * G, ln, s[j]);
    if (ch >= 0)  // the last W-1 inputs of (window ++ tokens)
#pragma unroll
      for (int j = 0; j < kMaxW - 1; ++j)
        if (j < W - 1) pool[j * D] = win[j];
  }
#else
  __trap();  // launched on sm_90 and later only
#endif
}

// The cluster shape of the step kernel with traits Tr: (ceil(V / kRows), r) blocks, at most 16,
// with one conv channel per thread for a block's share (planner fact Problem::cluster_ok).
template <typename Tr>
bool step_cluster_ok(const RecurrentParams& p) {
  const int64_t gx = (p.V + Tr::kRows - 1) / Tr::kRows, csize = gx * p.r;
  if (csize > 16 || p.HV % p.r != 0) return false;
  const int64_t per = (2 * p.K + csize - 1) / csize;
  return per + Tr::kRows <= Tr::kThreads;
}
template <typename Tr>
int64_t step_cluster_blocks(const RecurrentParams& p) {
  return (p.V + Tr::kRows - 1) / Tr::kRows * p.r;
}

// The launch of a step kernel with traits Tr for nseq sequences.
template <typename Tr>
Launch step_launch(const RecurrentParams& p, int64_t nseq, bool overlap, cudaStream_t stream) {
  const unsigned gx = static_cast<unsigned>((p.V + Tr::kRows - 1) / Tr::kRows);
  Launch launch(dim3(gx, static_cast<unsigned>(p.HV), static_cast<unsigned>(nseq)), Tr::kThreads, 0, stream,
                overlap);
  launch.cluster(gx, static_cast<unsigned>(p.r));
  return launch;
}

// Whether a cluster of `kernel` can be resident on the current device (sm_90+; non-portable sizes
// above 8 blocks allowed on H100/H200 where such a cluster fits).
template <typename Tr>
bool step_cluster_resident(void (*kernel)(RecurrentParams), const RecurrentParams& p, int64_t nseq) {
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess || major < 9) {
    (void)cudaGetLastError();
    return false;
  }
  Launch launch = step_launch<Tr>(p, nseq, false, nullptr);
  if (step_cluster_blocks<Tr>(p) > 8 &&
      cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {
    (void)cudaGetLastError();  // a query's error is not the caller's: the two-launch form runs instead
    return false;
  }
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &launch.cfg) != cudaSuccess || clusters < 1) {
    (void)cudaGetLastError();
    return false;
  }
  return true;
}

// The lean lane layout exists for float32 dense K = 128 state only.
template <typename TS, int KP, bool kDense>
constexpr bool kStepLeanLanes = sizeof(TS) == 4 && KP == 128 && kDense;

// The step kernel instance: lean lanes (where they exist) or not, per-token conv windows or not.
template <typename TAct, typename TS, int KP, bool kDense, bool kLean, bool kPerToken>
constexpr auto step_kernel() {
  return fused_step_kernel<TAct, TS, KP, kDense, kLean && kStepLeanLanes<TS, KP, kDense>, kPerToken>;
}
template <typename TAct, typename TS, int KP, bool kDense>
auto step_kernel_of(bool lean, bool per_token) {
  return lean ? (per_token ? step_kernel<TAct, TS, KP, kDense, true, true>() : step_kernel<TAct, TS, KP, kDense, true, false>())
              : (per_token ? step_kernel<TAct, TS, KP, kDense, false, true>()
                           : step_kernel<TAct, TS, KP, kDense, false, false>());
}
// Launches the planned step kernel (lean lanes: kStepClusterLean).
template <typename TAct, typename TS, int KP, bool kDense>
Status launch_fused_step(const RecurrentParams& p, int64_t nseq, const plan::Plan& pl, cudaStream_t stream) {
  const bool lean = pl.path == plan::Path::kStepClusterLean && kStepLeanLanes<TS, KP, kDense>;
  auto kernel = step_kernel_of<TAct, TS, KP, kDense>(lean, pl.per_token);
  Launch launch = lean ? step_launch<StepTraits<TS, true>>(p, nseq, pl.overlap, stream)
                       : step_launch<StepTraits<TS>>(p, nseq, pl.overlap, stream);
  return launch(kernel, p);
}
template <typename TAct, typename TS, int KP, bool kDense>
bool fused_step_resident(const RecurrentParams& p, int64_t nseq, bool lean) {
  lean = lean && kStepLeanLanes<TS, KP, kDense>;
  auto kernel = step_kernel_of<TAct, TS, KP, kDense>(lean, p.per_token_verify());
  return lean ? step_cluster_resident<StepTraits<TS, true>>(kernel, p, nseq)
              : step_cluster_resident<StepTraits<TS>>(kernel, p, nseq);
}

}  // namespace gdn::cuda
