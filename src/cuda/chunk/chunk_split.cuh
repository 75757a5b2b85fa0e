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

namespace gdn::cuda::chunk {

// Record rows of value head hv from local token lt (16-byte aligned: K + V + kC is a multiple of 8).
template <typename TAct>
__device__ __forceinline__ const char* prep_at(const ChunkParams& p, int hv, int64_t lt) {
  const int64_t rb = chunk_record_bytes(p.V, sizeof(TAct));
  return static_cast<const char*>(p.prep) + (static_cast<int64_t>(hv) * p.prep_rows + lt) * rb;
}

// The prep kernel's output: the n rows of buffer 0's chunk (local tokens lt0..) as records.
template <typename TAct, typename L>
__device__ __forceinline__ void store_records(const ChunkParams& p, unsigned char* smem, int64_t lt0, int n, int hv,
                                              int tid) {
  constexpr int V = L::kVS, kPieces = (kK + V + kC) / 8 + 1;  // 16-byte pieces: W, U, P, the floats
  const TAct* s16 = reinterpret_cast<const TAct*>(smem);
  const ChunkVecs cv = chunk_vecs(reinterpret_cast<float*>(smem + static_cast<size_t>(L::k16) * 2) + L::kVec, 0);
  const int64_t rb = chunk_record_bytes(V, sizeof(TAct));
  char* base = static_cast<char*>(p.prep) + (static_cast<int64_t>(hv) * p.prep_rows + lt0) * rb;
  for (int e = tid; e < n * kPieces; e += kGroupThreads) {
    const int t = e / kPieces, s = e % kPieces;
    uint4 v;
    if (s < kK / 8) v = *reinterpret_cast<const uint4*>(s16 + L::kW + t * kLdK + 8 * s);
    else if (s < (kK + V) / 8) v = *reinterpret_cast<const uint4*>(s16 + L::kU + t * L::kLdV + 8 * (s - kK / 8));
    else if (s < kPieces - 1) v = *reinterpret_cast<const uint4*>(s16 + L::kP + t * kLdL + 8 * (s - (kK + V) / 8));
    else v = make_uint4(__float_as_uint(cv.G[t]), __float_as_uint(cv.nq[t]), __float_as_uint(cv.nk[t]), 0u);
    *reinterpret_cast<uint4*>(base + t * rb + 16 * s) = v;
  }
}

// cp.async of kPieces 16-byte pieces from element `at` of the chunk's n records (rec, rb bytes apart;
// zeros past n) into a tile of row stride ld.
template <int kPieces, typename TAct>
__device__ __forceinline__ void load_records(TAct* dst, int ld, const char* rec, int64_t rb, int64_t at, int n, int gt) {
  for (int e = gt; e < kC * kPieces; e += kGroupThreads) {
    const int t = e / kPieces, s = e % kPieces;
    const bool ok = t < n;
    mma::cp_async16(dst + t * ld + s * 8, reinterpret_cast<const TAct*>(rec + (ok ? t : 0) * rb) + at + s * 8, ok);
  }
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
  load_records<kK / 8>(s16 + L::kW + buf * kC * kLdK, kLdK, rec, rb, 0, n, gt);                // W
  load_records<VS / 8>(s16 + L::kU + buf * kC * L::kLdV, L::kLdV, rec, rb, kK + v0, n, gt);  // U's columns
  load_records<kC / 8>(s16 + L::kP + buf * kC * kLdL, kLdL, rec, rb, kK + p.V, n, gt);       // P
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

// The prep kernel: block (x, value head): the x-th chunk, in order, of the chunk kernel's sequences
// (usable, non-padding; fused: of at least chunk_from tokens with every token row in the buffer),
// prepared for every value column and stored as records. Blocks past the last chunk, and every
// block of a batch whose offsets decrease (the chunk kernel's producers then prepare each chunk
// themselves, chunk.cuh), do nothing.
//   grid = (ceil(limit / kC) + n, HV), block = kGroupThreads
template <typename TAct, int V>
__global__ void __launch_bounds__(kGroupThreads) chunk_prep_kernel(const ChunkParams p) {
  using L = Layout<V, true>;
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, hv = blockIdx.y, h = hv / p.r;
  pdl_start();
  const GroupMeta& g = p.group[0];
  if (!ordered_offsets(g)) return;
  // This block's sequence and chunk: the chunk counts of 128 sequences at a time, scanned.
  using Scan = cub::BlockScan<long long, kGroupThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
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
    Scan(scan_tmp).ExclusiveSum(nch, excl, total);
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
  stage_chunk<TAct, L>(p, chunk_src<TAct>(p, h, hv, 0), smem, 0, lt0, n, tid, kProd);
  float A, dtb;
  head_decay(p, p.gates, hv, A, dtb);
  prep_chunk<TAct, L>(p, smem, 0, n, A, dtb, warp, lane, tid);
  mma::bar_sync(kProd, kGroupThreads);
  store_records<TAct, L>(p, smem, lt0, n, hv, tid);
}

}  // namespace gdn::cuda::chunk
