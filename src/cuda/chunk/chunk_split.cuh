// src/cuda/chunk/chunk_split.cuh — the chunk kernel's split form (chunk.h, ChunkParams::prep): a prep
// kernel computes, for every (chunk, value head) in parallel, what the producer group would
// (chunk_prep.cuh: the gates, norms, P, L and [W | U], for every value column at once) and writes
// it as records (chunk.h); the chunk kernel's producers then only load a chunk's records and raw q,
// k. A long sequence's chain is then the consumers' alone, and the producers' work is done once per
// value head instead of once per value slice. The records hold the same 16-bit and float values the
// producers would have computed, so both forms give the same bytes.
#pragma once
#include <cub/block/block_scan.cuh>

#include "cuda/chunk/chunk_prep.cuh"
#include "cuda/chunk/chunk_prep_layout.cuh"

namespace gdn::cuda::chunk {

// Record rows of value head hv from local token lt (16-byte aligned: K + V + kC is a multiple of 8).
template <typename TAct>
__device__ __forceinline__ const char* prep_at(const ChunkParams& p, int hv, int64_t lt) {
  const int64_t rb = chunk_record_bytes(p.V, sizeof(TAct));
  return static_cast<const char*>(p.prep) + (static_cast<int64_t>(hv) * p.prep_rows + lt) * rb;
}

// kPieces 16-byte pieces per row (a power of two, at most kGroupThreads) from a tile of row stride ld
// to byte `at` of the chunk's n records (base, rb bytes apart): thread gt, piece gt % kPieces of rows
// gt / kPieces, + kGroupThreads / kPieces, ...
template <int kPieces, typename TAct>
__device__ __forceinline__ void store_pieces(char* base, int64_t rb, int at, const TAct* src, int ld, int n, int gt) {
  static_assert((kPieces & (kPieces - 1)) == 0 && kPieces <= kGroupThreads, "power-of-two index math");
  constexpr int kRows = kGroupThreads / kPieces;  // rows per pass
  const int s = gt % kPieces;
  char* dst = base + at + 16 * s;
#pragma unroll
  for (int t0 = 0; t0 < kC; t0 += kRows) {
    const int t = t0 + gt / kPieces;
    if (t < n) *reinterpret_cast<uint4*>(dst + t * rb) = *reinterpret_cast<const uint4*>(src + t * ld + 8 * s);
  }
}

// The prep kernel's output: the n rows of the chunk (local tokens lt0..) as records: W, U, P, then
// the floats.
template <typename TAct, typename L>
__device__ __forceinline__ void store_records(const ChunkParams& p, unsigned char* smem, int64_t lt0, int n, int hv,
                                              int tid) {
  constexpr int V = L::kVS;
  const TAct* s16 = reinterpret_cast<const TAct*>(smem);
  const ChunkVecs cv = chunk_vecs(reinterpret_cast<float*>(smem + static_cast<size_t>(L::k16) * 2) + L::kVec, 0);
  const int64_t rb = chunk_record_bytes(V, sizeof(TAct));
  char* base = static_cast<char*>(p.prep) + (static_cast<int64_t>(hv) * p.prep_rows + lt0) * rb;
  store_pieces<kK / 8>(base, rb, 0, s16 + L::kW, kLdK, n, tid);
  store_pieces<V / 8>(base, rb, kK * sizeof(TAct), s16 + L::kU, L::kLdV, n, tid);
  store_pieces<kC / 8>(base, rb, (kK + V) * sizeof(TAct), s16 + L::kP, kLdL, n, tid);
  if (tid < n)
    *reinterpret_cast<uint4*>(base + tid * rb + (kK + V + kC) * sizeof(TAct)) =
        make_uint4(__float_as_uint(cv.G[tid]), __float_as_uint(cv.nq[tid]), __float_as_uint(cv.nk[tid]), 0u);
}

// Split form, the producer group (128 threads gt): the cp.async of chunk ci's raw q and k and its
// records (the block's value columns of U; the floats as loaded, kRecF) into buffer buf, committed
// as one group; zeros past n. finish_chunk completes the buffer once the group has landed.
template <typename TAct, typename L>
__device__ __forceinline__ void issue_chunk(const ChunkParams& p, const ChunkSrc<TAct>& src, unsigned char* smem,
                                            int buf, int64_t lt0, int n, int hv, int v0, int gt) {
  constexpr int VS = L::kVS;
  TAct* s16 = reinterpret_cast<TAct*>(smem);
  int64_t* crow = chunk_rows(smem, L::kRowsAt, buf);
  if (p.fused && gt < kC) crow[gt] = gt < n ? token_row(p, lt0 + gt) : 0;
  const int64_t rb = chunk_record_bytes(p.V, sizeof(TAct));
  const char* rec = prep_at<TAct>(p, hv, lt0);
  stage_qk<TAct, L>(src, s16, buf, lt0, n, gt);
  constexpr int64_t e = sizeof(TAct);
  copy_rows<kK / 8>(s16 + L::kW + buf * kC * kLdK, kLdK, rec, rb, n, gt);                          // W
  copy_rows<VS / 8>(s16 + L::kU + buf * kC * L::kLdV, L::kLdV, rec + (kK + v0) * e, rb, n, gt);  // U's columns
  copy_rows<kC / 8>(s16 + L::kP + buf * kC * kLdL, kLdL, rec + (kK + p.V) * e, rb, n, gt);       // P
  if (gt < kC) {  // the floats after the 16-bit rows
    float* f = reinterpret_cast<float*>(smem + static_cast<size_t>(L::k16) * 2) + L::kRecF + (buf * kC + gt) * 4;
    mma::cp_async16(f, rec + (gt < n ? gt : 0) * rb + (kK + p.V + kC) * sizeof(TAct), gt < n);
  }
  mma::cp_async_commit();
}

// The chunk's vectors from its loaded floats, once every producer thread's group of the chunk has
// landed (the caller waited for its own): rows past n zero, their decay the last token's (as the
// producers' gates give them).
template <typename L>
__device__ __forceinline__ void finish_chunk(unsigned char* smem, int buf, int n, int gt) {
  mma::bar_sync(kProd, kGroupThreads);  // every thread's copies of the chunk
  float* sf = reinterpret_cast<float*>(smem + static_cast<size_t>(L::k16) * 2);
  if (gt < kC) {
    const float4 f = *reinterpret_cast<const float4*>(sf + L::kRecF + (buf * kC + (gt < n ? gt : n - 1)) * 4);
    const ChunkVecs cv = chunk_vecs(sf + L::kVec, buf);
    cv.G[gt] = f.x;
    cv.nq[gt] = gt < n ? f.y : 0.f;
    cv.nk[gt] = gt < n ? f.z : 0.f;
  }
}

// The prep kernel's static shared memory (scan_tmp, s_at), and its blocks per SM: 3 at V = 128
// (sm_90: 233472 bytes of shared memory per SM, 1 KB of it reserved per block).
using PrepScan = cub::BlockScan<long long, kGroupThreads>;
constexpr size_t kPrepStatic = sizeof(PrepScan::TempStorage) + 2 * sizeof(long long);
static_assert(3 * (PrepLayout<128>::kBytes + kPrepStatic + 1024) <= 233472, "3 prep blocks per SM at V = 128");

// The prep kernel: block (x, value head): the x-th chunk, in order, of the chunk kernel's sequences
// (usable, non-padding; fused: of at least chunk_from tokens with every token row in the buffer),
// prepared for every value column (shared memory: PrepLayout<V>) and stored as records. Blocks past
// the last chunk, and every block of a batch whose offsets decrease (the chunk kernel's producers
// then prepare each chunk themselves, chunk.cuh), do nothing.
//   grid = (ceil(limit / kC) + n, HV), block = kGroupThreads
template <typename TAct, int V>
__global__ void __launch_bounds__(kGroupThreads, 3) chunk_prep_kernel(const ChunkParams p) {
  using L = PrepLayout<V>;
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, hv = blockIdx.y, h = hv / p.r;
  pdl_start();
  const GroupMeta& g = p.group[0];
  if (!ordered_offsets(g)) return;
  // This block's sequence and chunk: the chunk counts of 128 sequences at a time, scanned.
  __shared__ PrepScan::TempStorage scan_tmp;
  __shared__ long long s_at[2];  // sequence, chunk in it
  if (tid == 0) s_at[0] = -1;
  long long before = 0;  // chunks of the sequences already scanned
  for (int64_t i0 = 0; i0 < g.n; i0 += kGroupThreads) {
    const int64_t i = i0 + tid;
    long long nch = 0;
    if (i < g.n) {
      const SeqInfo s = resolve_seq(p, g, i, p.fused);
      if (s.tr.len > 0 && !s.pad && !(p.fused && s.tr.len < p.chunk_from)) nch = (s.tr.len + kC - 1) / kC;
    }
    long long excl = 0, total = 0;
    PrepScan(scan_tmp).ExclusiveSum(nch, excl, total);
    const long long x = static_cast<long long>(blockIdx.x) - before;
    if (x >= excl && x < excl + nch) {
      s_at[0] = i;
      s_at[1] = x - excl;
    }
    before += total;
    __syncthreads();  // s_at; scan_tmp free again
    if (s_at[0] >= 0 || static_cast<long long>(blockIdx.x) < before) break;
  }
  if (s_at[0] < 0) return;  // past the last chunk
  const SeqInfo si = resolve_seq(p, g, s_at[0], p.fused);
  const int64_t x = s_at[1];
  const int64_t lt0 = si.tr.begin + x * kC;
  const int n = static_cast<int>(si.tr.len - x * kC < kC ? si.tr.len - x * kC : kC);
  if (p.fused) {  // a token row outside the buffer makes the sequence padding (nothing to read)
    const bool bad = tid < n && global_row(g, lt0 + tid, p.src.num_actual_tokens) < 0;
    if (__syncthreads_or(bad)) return;
  }
  float A, dtb;
  head_decay(p, p.gates, hv, A, dtb);
  stage_chunk<TAct, L>(p, chunk_src<TAct>(p, h, hv, 0), smem, 0, lt0, n, tid, kProd);
  prep_chunk<TAct, L>(p, smem, 0, n, A, dtb, warp, lane, tid);
  mma::bar_sync(kProd, kGroupThreads);
  store_records<TAct, L>(p, smem, lt0, n, hv, tid);
}

}  // namespace gdn::cuda::chunk
