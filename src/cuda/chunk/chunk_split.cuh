// src/cuda/chunk/chunk_split.cuh — the chunk kernel's split form (chunk.h, ChunkParams::prep): a prep
// kernel computes, for every (chunk, value head) in parallel, the key side of what the producer
// group would (chunk_prep.cuh: the gates, norms, P, L, T's blocks and W) and writes it as records
// and T blocks (chunk.h); the chunk kernel's producers then load a chunk's records and raw q, k and
// v, and its solvers solve U for the block's value columns from the T blocks (solve_u), the
// producers staying free to issue the next loads. A long sequence's chain is then
// the consumers' alone, and the key side is done once per value head instead of once per value
// slice. The records and blocks hold the same 16-bit and float values the producers would have
// computed, and U is solved by the same products in the same order, so both forms give the same
// bytes.
#pragma once
#include <cub/block/block_scan.cuh>

#include "cuda/chunk/chunk_prep.cuh"
#include "cuda/chunk/chunk_prep_layout.cuh"

namespace gdn::cuda::chunk {

// Record rows of value head hv from local token lt (16-byte aligned: K + kC is a multiple of 8).
template <typename TAct>
__device__ __forceinline__ const char* prep_at(const ChunkParams& p, int hv, int64_t lt) {
  const int64_t rb = chunk_record_bytes(sizeof(TAct));
  return static_cast<const char*>(p.prep) + (static_cast<int64_t>(hv) * p.prep_rows + lt) * rb;
}
// The T blocks of value head hv's chunk of local tokens lt0.. of sequence i (chunk.h).
template <typename TAct>
__device__ __forceinline__ uint4* frag_at(const ChunkParams& p, int hv, int64_t i, int64_t lt0) {
  char* base = static_cast<char*>(p.prep) + chunk_records_bytes(p.prep_rows, p.HV, sizeof(TAct));
  const int64_t at = static_cast<int64_t>(hv) * chunk_frag_slots(p.prep_rows, p.group[0].n) + i + lt0 / kC;
  return reinterpret_cast<uint4*>(base + at * chunk_frag_bytes());
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

// The prep kernel's output: the n rows of the chunk (local tokens lt0.. of sequence i) as records
// (W, P, then the floats), and its T blocks D_b diag(beta) and M_bm as the A fragments the
// solvers load (block j: warp j % 4's ldmatrix, each lane's four registers).
template <typename TAct, typename L>
__device__ __forceinline__ void store_records(const ChunkParams& p, unsigned char* smem, int64_t i, int64_t lt0, int n,
                                              int hv, int tid) {
  const TAct* s16 = reinterpret_cast<const TAct*>(smem);
  const ChunkVecs cv = chunk_vecs(reinterpret_cast<float*>(smem + static_cast<size_t>(L::k16) * 2) + L::kVec, 0);
  const int64_t rb = chunk_record_bytes(sizeof(TAct));
  char* base = static_cast<char*>(p.prep) + (static_cast<int64_t>(hv) * p.prep_rows + lt0) * rb;
  store_pieces<kK / 8>(base, rb, 0, s16 + L::kW, kLdK, n, tid);
  store_pieces<kC / 8>(base, rb, kK * sizeof(TAct), s16 + L::kP, kLdL, n, tid);
  if (tid < n)
    *reinterpret_cast<uint4*>(base + tid * rb + (kK + kC) * sizeof(TAct)) =
        make_uint4(__float_as_uint(cv.G[tid]), __float_as_uint(cv.nq[tid]), __float_as_uint(cv.nk[tid]), 0u);
  uint4* frag = frag_at<TAct>(p, hv, i, lt0);
  const int lane = tid & 31;
  for (int j = tid >> 5; j < 10; j += 4) {  // Dv_0..3, then M_10, M_20, M_21, M_30, M_31, M_32
    uint32_t r[4];
    mma::ldsm4(r, mma::a_tile(s16 + (j < 4 ? L::kDv + j * 16 * kLdB : L::kM + (j - 4) * 16 * kLdB), kLdB, 0, 0, lane));
    frag[j * 32 + lane] = make_uint4(r[0], r[1], r[2], r[3]);
  }
}

// Split form, the producer group (128 threads gt): the cp.async of chunk ci's raw q, k and v (the
// block's value columns, into U's tile, where solve_u turns them into U) and its records into
// buffer buf, committed as one group; zeros past n. The solvers complete the buffer once the group
// has landed (finish_chunk, solve_u).
template <typename TAct, typename L>
__device__ __forceinline__ void issue_chunk(const ChunkParams& p, const ChunkSrc<TAct>& src, unsigned char* smem,
                                            int buf, int64_t lt0, int n, int hv, int gt) {
  constexpr int VS = L::kVS;
  TAct* s16 = reinterpret_cast<TAct*>(smem);
  int64_t* crow = chunk_rows(smem, L::kRowsAt, buf);
  if (p.fused && gt < kC) crow[gt] = gt < n ? token_row(p, lt0 + gt) : 0;
  const int64_t rb = chunk_record_bytes(sizeof(TAct));
  const char* rec = prep_at<TAct>(p, hv, lt0);
  stage_qk<TAct, L>(src, s16, buf, lt0, n, gt);
  constexpr int64_t e = sizeof(TAct);
  copy_rows<VS / 8>(s16 + L::kU + buf * kC * L::kLdV, L::kLdV, reinterpret_cast<const char*>(src.v + lt0 * src.v_rs),
                    src.v_rs * e, n, gt);                                                  // v's columns
  copy_rows<kK / 8>(s16 + L::kW + buf * kC * kLdK, kLdK, rec, rb, n, gt);              // W
  copy_rows<kC / 8>(s16 + L::kP + buf * kC * kLdL, kLdL, rec + kK * e, rb, n, gt);     // P
  if (gt < kC) {  // the floats after the 16-bit rows
    float* f = reinterpret_cast<float*>(smem + static_cast<size_t>(L::k16) * 2) + L::kRecF + (buf * kC + gt) * 4;
    mma::cp_async16(f, rec + (gt < n ? gt : 0) * rb + (kK + kC) * e, gt < n);
  }
  mma::cp_async_commit();
}

// Split form, the solvers (warps 8-11): lane's four registers of each of a chunk's ten T blocks
// (frag: the prep kernel's A fragments, frag_at).
__device__ __forceinline__ void load_frags(const uint4* frag, int lane, uint32_t (&a)[10][4]) {
#pragma unroll
  for (int j = 0; j < 10; ++j) {
    const uint4 f = __ldg(frag + j * 32 + lane);
    a[j][0] = f.x;
    a[j][1] = f.y;
    a[j][2] = f.z;
    a[j][3] = f.w;
  }
}
// Solver warp w (one 8-column tile of the block's value columns per warp: VS = 32): U = T diag(beta)
// v in place of v in buffer buf, block row by block row as prep_chunk solves it (U_b = D_b diag(beta)
// v_b + sum_{m<b} M_bm U_m, the same products in the same order), from the chunk's T blocks a. The
// warp's reads of v_b come before its writes of U_b; no other warp touches its columns.
template <typename TAct, typename L>
__device__ __forceinline__ void solve_u(unsigned char* smem, const uint32_t (&a)[10][4], int buf, int w, int lane) {
  static_assert(L::kVS == 32, "one column tile per solver warp");
  TAct* y = reinterpret_cast<TAct*>(smem) + L::kU + buf * kC * L::kLdV + 8 * w;
  constexpr int ld = L::kLdV;
  const int gq = lane >> 2, cq2 = 2 * (lane & 3);
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    uint32_t bx[2];
    mma::ldsm2_t(bx, mma::b_single(y, ld, 16 * b, 0, lane));
    mma::mma16816<TAct>(acc, a[b], bx[0], bx[1]);
#pragma unroll
    for (int m = 0; m < 3; ++m)
      if (m < b) {
        uint32_t by[2];
        mma::ldsm2_t(by, mma::b_single(y, ld, 16 * m, 0, lane));
        mma::mma16816<TAct>(acc, a[4 + b * (b - 1) / 2 + m], by[0], by[1]);
      }
    __syncwarp();  // every lane's reads of v_b before U_b goes there
    st2(y + (16 * b + gq) * ld + cq2, acc[0], acc[1]);
    st2(y + (16 * b + gq + 8) * ld + cq2, acc[2], acc[3]);
    __syncwarp();
  }
}

// The chunk's vectors from its loaded floats, by the solvers (thread gt) once every producer
// thread's group of the chunk has landed (kLanded): rows past n zero, their decay the last token's
// (as the producers' gates give them).
template <typename L>
__device__ __forceinline__ void finish_chunk(unsigned char* smem, int buf, int n, int gt) {
  float* sf = reinterpret_cast<float*>(smem + static_cast<size_t>(L::k16) * 2);
  if (gt < kC) {
    const float4 f = *reinterpret_cast<const float4*>(sf + L::kRecF + (buf * kC + (gt < n ? gt : n - 1)) * 4);
    const ChunkVecs cv = chunk_vecs(sf + L::kVec, buf);
    cv.G[gt] = f.x;
    cv.nq[gt] = gt < n ? f.y : 0.f;
    cv.nk[gt] = gt < n ? f.z : 0.f;
  }
}

// The prep kernel's static shared memory (scan_tmp, s_at), and its blocks per SM: 4 (sm_90: 233472
// bytes of shared memory per SM, 1 KB of it reserved per block).
using PrepScan = cub::BlockScan<long long, kGroupThreads>;
constexpr size_t kPrepStatic = sizeof(PrepScan::TempStorage) + 2 * sizeof(long long);
static_assert(4 * (PrepLayout::kBytes + kPrepStatic + 1024) <= 233472, "4 prep blocks per SM");

// The prep kernel: block (x, value head): the x-th chunk, in order, of the chunk kernel's sequences
// (usable, non-padding; fused: of at least chunk_from tokens with every token row in the buffer),
// its key side prepared (shared memory: PrepLayout) and stored as records and T blocks. Blocks past
// the last chunk, and every block of a batch whose offsets decrease (the chunk kernel's producers
// then prepare each chunk themselves, chunk.cuh), do nothing.
//   grid = (ceil(limit / kC) + n, HV), block = kGroupThreads
template <typename TAct>
__global__ void __launch_bounds__(kGroupThreads, 4) chunk_prep_kernel(const ChunkParams p) {
  using L = PrepLayout;
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
  store_records<TAct, L>(p, smem, s_at[0], lt0, n, hv, tid);
}

}  // namespace gdn::cuda::chunk
