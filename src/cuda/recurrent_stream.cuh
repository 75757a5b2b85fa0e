// src/cuda/recurrent_stream.cuh — the plain recurrence for decode batches as a software pipeline:
// persistent warps stream their work items' state through shared memory with cp.async.
//   grid  = min(items / kWarps, resident blocks), block = kWarps independent warps
//   item  = kItemRows rows of one (sequence, value head): 8 rows of float32 state or 16 of 16-bit
//           state (4 KB at K = 128), contiguous in a dense "vk" slot
// recurrent_kernel's one-warp blocks each load their rows, wait, compute and exit: per block, the
// sequence's metadata and the state load are two round trips during which the warp moves no other
// bytes. Here warp w takes items w, w + W, w + 2W, ... (W = warps in the grid) and keeps
// kStages - 1 items in flight while it computes one: at item k it resolves item k + kStages - 1's
// metadata, requests its state rows and the raw q, k of its first token into a free stage
// (cp.async, no registers held), then waits for item k's stage and computes it from shared memory
// (rows converted to float32 registers, kRowsPerLane per lane group at a time; v, a and b of the
// first token are loaded with plain loads an item ahead). Tokens after the first (short non-spec
// sequences) load their inputs when they come. Used for decode batches (no verify group of more than
// one column, at most one token row per sequence: the host checks), so a sequence reads and writes
// column 0's slot only.
#pragma once
#include <optional>

#include "cuda/rec_common.cuh"

namespace gdn::cuda {

#ifndef GDN_STREAM
#define GDN_STREAM 1  // 0: never use the streamed kernel
#endif
#ifndef GDN_STREAM_STAGES
#define GDN_STREAM_STAGES 3
#endif
#ifndef GDN_STREAM_WARPS
#define GDN_STREAM_WARPS 4
#endif
#ifndef GDN_STREAM_MB
#define GDN_STREAM_MB 4  // resident blocks per SM the register budget must allow
#endif

template <typename TAct, typename TState, int KP>
struct StreamTraits {
  static constexpr int kWarps = GDN_STREAM_WARPS, kThreads = 32 * kWarps, kStages = GDN_STREAM_STAGES;
  static constexpr int kLanes = 16, kGroups = 2, kRowsPerLane = 4, EPL = KP / kLanes;
  static constexpr int kBatchRows = kGroups * kRowsPerLane;                // rows in registers at once
  static constexpr int kItemRows = sizeof(TState) == 4 ? kBatchRows : 2 * kBatchRows;
  static constexpr int kStateBytes = kItemRows * KP * sizeof(TState);      // one stage's rows
  static constexpr int kQkBytes = 2 * KP * sizeof(TAct);                   // one stage's raw q | k
  static_assert(kStages >= 2, "at least one item in flight while one is computed");
  static_assert(kStateBytes % 16 == 0 && kQkBytes % 16 == 0, "16-byte copies");
};

// One item's metadata, resolved by the warp when it requests the item.
struct StreamItem {
  rules::TokenRange tr;
  int64_t slot0, i;
  int gi, hv, row0;  // row0: first row of the item
  bool pad, load;
};

// Per warp: the stages' rows, raw q|k and metadata, and v, a, b of each stage's first token (a
// later token's inputs replace them in the stage being computed).
template <typename TAct, typename TState, int KP>
struct StreamWarpSmem {
  using Tr = StreamTraits<TAct, TState, KP>;
  alignas(16) unsigned char state[Tr::kStages][Tr::kStateBytes];
  alignas(16) unsigned char qk[Tr::kStages][Tr::kQkBytes];
  StreamItem item[Tr::kStages];
  float v[Tr::kStages][Tr::kItemRows], ab[Tr::kStages][2];
};

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// A lane's EPL elements of a row in a stage, as float (vector loads from shared memory).
template <typename TState, int EPL>
__device__ __forceinline__ void stage_row(const TState* src, float (&s)[EPL]) {
  constexpr int kBytes = EPL * sizeof(TState), kChunk = kBytes < 16 ? kBytes : 16, kPer = kChunk / sizeof(TState);
  using Vec = typename VecOf<kChunk>::type;
#pragma unroll
  for (int c = 0; c < kBytes / kChunk; ++c) {
    const Vec u = reinterpret_cast<const Vec*>(src)[c];
    const TState* e = reinterpret_cast<const TState*>(&u);
#pragma unroll
    for (int j = 0; j < kPer; ++j) s[c * kPer + j] = to_float(e[j]);
  }
}

template <typename TAct, typename TState, int KP>
__global__ void __launch_bounds__(StreamTraits<TAct, TState, KP>::kThreads, GDN_STREAM_MB)
    recurrent_stream_kernel(const __grid_constant__ RecurrentParams p, int64_t items, int rblocks) {
  using Tr = StreamTraits<TAct, TState, KP>;
  using Smem = StreamWarpSmem<TAct, TState, KP>;
  constexpr int S = Tr::kStages, L = Tr::kLanes, G = Tr::kGroups, R = Tr::kRowsPerLane, EPL = Tr::EPL;
  constexpr int IR = Tr::kItemRows;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, ln = lane % L, gq = lane / L;
  Smem& sm = reinterpret_cast<Smem*>(smem_raw)[warp];
  const int64_t step = int64_t{gridDim.x} * Tr::kWarps, first = int64_t{blockIdx.x} * Tr::kWarps + warp;

  float pend_v = 0.f, pend_ab = 0.f;  // the last requested item's v (lanes < IR) and a, b (lanes 0, 1)
  int pend_stage = -1;
  // Requests item `it` into stage st: metadata now, state rows and q|k by cp.async (one group,
  // committed even when empty), v, a, b into pend_* for the next call of flush().
  auto request = [&](int64_t it, int st) {
    StreamItem m;
    const int64_t z = it / (int64_t{p.HV} * rblocks), rem = it % (int64_t{p.HV} * rblocks);
    m.hv = static_cast<int>(rem / rblocks);
    m.row0 = static_cast<int>(rem % rblocks) * IR;
    m.gi = z < p.n0 ? 0 : 1;
    const GroupMeta& g = p.group[m.gi];
    m.i = m.gi ? z - p.n0 : z;
    const SeqInfo si = resolve_seq(p, g, m.i, false);
    m.tr = si.tr;
    m.slot0 = si.slot0;
    m.pad = si.pad;
    m.load = si.tr.len > 0 && !si.pad && si.init;
    const int64_t row = (m.tr.len > 0 && !m.pad) ? global_row(g, m.tr.begin, g.limit) : -1;
    if (m.load) {  // rows row0 .. row0 + IR - 1 (past V: a short last item reads inside the head only)
      const int nrows = p.V - m.row0 < IR ? p.V - m.row0 : IR;
      const unsigned char* src = reinterpret_cast<const unsigned char*>(
          static_cast<const TState*>(p.state) + si.read_slot * p.state_slot_stride +
          (static_cast<int64_t>(m.hv) * p.V + m.row0) * KP);
      for (int c = lane; c < nrows * KP * static_cast<int>(sizeof(TState)) / 16; c += 32)
        cp_async16(sm.state[st] + 16 * c, src + 16 * c);
    }
    if (row >= 0) {
      const int h = m.hv / p.r;
      const TAct* q = static_cast<const TAct*>(p.src.q) + row * p.src.q_rs + static_cast<int64_t>(h) * KP;
      const TAct* k = static_cast<const TAct*>(p.src.k) + row * p.src.k_rs + static_cast<int64_t>(h) * KP;
      constexpr int kHalf = Tr::kQkBytes / 32;  // 16-byte chunks of q (and of k)
      for (int c = lane; c < 2 * kHalf; c += 32)
        cp_async16(sm.qk[st] + 16 * c, reinterpret_cast<const unsigned char*>(c < kHalf ? q : k) + 16 * (c % kHalf));
      if (lane < IR && m.row0 + lane < p.V)
        pend_v = to_float(static_cast<const TAct*>(p.src.v)[row * p.src.v_rs + static_cast<int64_t>(m.hv) * p.V +
                                                           m.row0 + lane]);
      if (lane < 2)
        pend_ab = to_float(static_cast<const TAct*>(lane == 0 ? p.src.a : p.src.b)[row * (lane == 0 ? p.src.a_rs
                                                                                                  : p.src.b_rs) +
                                                                                 m.hv]);
    }
    cp_async_commit();
    if (lane == 0) sm.item[st] = m;
    pend_stage = st;
  };
  auto flush = [&]() {  // the previous request's v, a, b into its stage (they have arrived by now)
    if (pend_stage < 0) return;
    if (lane < IR) sm.v[pend_stage][lane] = pend_v;
    if (lane < 2) sm.ab[pend_stage][lane] = pend_ab;
    pend_stage = -1;
  };

  // Prologue: items 0 .. S-2 of this warp in flight.
#pragma unroll
  for (int k = 0; k < S - 1; ++k) {
    flush();
    const int64_t it = first + k * step;
    if (it < items) request(it, k);
    else cp_async_commit();
  }
  for (int64_t k = 0; first + k * step < items; ++k) {
    const int cur = static_cast<int>(k % S);
    flush();
    const int64_t ahead = first + (k + S - 1) * step;
    if (ahead < items) request(ahead, static_cast<int>((k + S - 1) % S));
    else cp_async_commit();
    cp_async_wait<S - 1>();  // item k's group is complete (this lane's copies)
    __syncwarp();            // ... and every lane's
    const StreamItem& m = sm.item[cur];  // read from shared memory where used
    const GroupMeta& g = p.group[m.gi];
    if (m.tr.len > 0) {
#pragma unroll 1
      for (int b = 0; b < IR / Tr::kBatchRows; ++b) {
        const int lrow0 = b * Tr::kBatchRows + gq, row0 = m.row0 + lrow0;  // rows row0 + j G, j < R
        if (m.pad) {
          zero_outputs<TAct, R, G>(p, g, m.tr, g.limit, m.hv, row0, ln);
          continue;
        }
        float s[R][EPL];
        const TState* st = reinterpret_cast<const TState*>(sm.state[cur]);
#pragma unroll
        for (int j = 0; j < R; ++j) {
#pragma unroll
          for (int e = 0; e < EPL; ++e) s[j][e] = 0.f;
          if (m.load && row0 + j * G < p.V) stage_row<TState, EPL>(st + (lrow0 + j * G) * KP + ln * EPL, s[j]);
        }
        const float A = -expf(p.A_log(m.hv)), dtb = p.dt_bias(m.hv);
        for (int64_t t = 0; t < m.tr.len; ++t) {
          const int64_t row = global_row(g, m.tr.begin + t, g.limit);
          TAct* qk = reinterpret_cast<TAct*>(sm.qk[cur]);
          if (t > 0 || (b > 0 && m.tr.len > 1)) {  // a later token (or token 0 again after a batch's
                                                   // later tokens): its inputs now, over the stage's
            __syncwarp();
            const int h = m.hv / p.r;
            const TAct* q = static_cast<const TAct*>(p.src.q) + row * p.src.q_rs + static_cast<int64_t>(h) * KP;
            const TAct* kk = static_cast<const TAct*>(p.src.k) + row * p.src.k_rs + static_cast<int64_t>(h) * KP;
            for (int c = lane; c < KP; c += 32) {
              qk[c] = q[c];
              qk[KP + c] = kk[c];
            }
            if (lane < IR && m.row0 + lane < p.V)
              sm.v[cur][lane] = to_float(
                  static_cast<const TAct*>(p.src.v)[row * p.src.v_rs + static_cast<int64_t>(m.hv) * p.V + m.row0 + lane]);
            if (lane < 2) {
              const TAct* src = static_cast<const TAct*>(lane == 0 ? p.src.a : p.src.b);
              sm.ab[cur][lane] = to_float(src[row * (lane == 0 ? p.src.a_rs : p.src.b_rs) + m.hv]);
            }
            __syncwarp();
          }
          const float mine = recur_token<L, G, R, EPL>(s, qk, qk + KP, sm.v[cur], lrow0, p.V - row0, sm.ab[cur][0],
                                                       sm.ab[cur][1], A, dtb, p.scale, ln);
          emit_token<TAct, TState, KP, R, EPL, G, true>(p, g, m.i, t, row, m.hv, row0, ln, mine, s);
        }
        if (!g.spec)
#pragma unroll
          for (int j = 0; j < R; ++j)
            if (row0 + j * G < p.V) store_row<TState, KP, EPL, true>(p, m.slot0, m.hv, row0 + j * G, ln, s[j]);
      }
    }
    __syncwarp();  // stage `cur` is read: the next iteration may request into it
  }
  cp_async_wait<0>();  // nothing in flight at exit
}

// Launches the streamed kernel when it applies (dense "vk" rows, no multi-column verify group, q and k
// rows 16-byte aligned, sm_80+); nullopt (nothing launched) otherwise.
template <typename TAct, typename TS, int KP>
std::optional<Status> launch_stream(const RecurrentParams& p, int64_t nseq, cudaStream_t stream) {
  using Tr = StreamTraits<TAct, TS, KP>;
  if (!GDN_STREAM || p.kv_layout || !p.state_vec || p.K != KP) return std::nullopt;
  // At most as many token rows as sequences (decode batches): warps own items statically, so a long
  // sequence must not hold up the items queued behind it.
  for (const GroupMeta& g : p.group)
    if (g.n > 0 && ((g.spec && g.cols > 1) || g.limit > g.n)) return std::nullopt;
  auto aligned = [](const void* ptr, int64_t rs) {
    return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && (rs * static_cast<int64_t>(sizeof(TAct))) % 16 == 0;
  };
  if (!aligned(p.src.q, p.src.q_rs) || !aligned(p.src.k, p.src.k_rs)) return std::nullopt;
  constexpr size_t kSmem = Tr::kWarps * sizeof(StreamWarpSmem<TAct, TS, KP>);
  auto kernel = recurrent_stream_kernel<TAct, TS, KP>;
  // Per device (cached): the compute capability gate, the shared-memory opt-in and the resident
  // blocks per SM at this size.
  static int resident[64] = {};  // 0: not yet asked; -1: not usable on that device
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev >= 64) return std::nullopt;
  if (resident[dev] == 0) {
    int major = 0, sms = 0, nb = 0;
    (void)cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    (void)cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    bool ok = major >= 8 &&
              cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem)) ==
                  cudaSuccess &&
              cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, kernel, Tr::kThreads, kSmem) == cudaSuccess && nb > 0;
    if (!ok) (void)cudaGetLastError();
    resident[dev] = ok ? nb * sms : -1;
  }
  if (resident[dev] < 0) return std::nullopt;
  const int rblocks = (p.V + Tr::kItemRows - 1) / Tr::kItemRows;
  const int64_t items = nseq * p.HV * rblocks;
  const int64_t want = (items + Tr::kWarps - 1) / Tr::kWarps;
  const unsigned grid = static_cast<unsigned>(want < resident[dev] ? want : resident[dev]);
  kernel<<<grid, Tr::kThreads, kSmem, stream>>>(p, items, rblocks);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return Status::Error(std::string("recurrent_stream_kernel: ") + cudaGetErrorString(e));
  return Status::Ok();
}

}  // namespace gdn::cuda
