// The causal conv of gdn_attention's long prefills (the chunk kernel's sequences: non-spec, at least
// chunk_from tokens) into a [group 0's local tokens, D] buffer in the conv channel order, which the
// chunk kernel then reads as its q, k and v (docs/contract.md §3; the taps summed as conv_channel
// does). Token-parallel: a thread computes 8 adjacent channels (one 16-byte vector) of 8
// consecutive local tokens, from every input row the tokens' taps need (loaded first, all in
// flight; each converted to float once) and, for a sequence's first W - 1 tokens, its conv window in
// the pool; silu with the fast exponential and division (the outputs are rounded to 16 bits and feed
// only the chunk kernel's tensor-core products). 128 registers, four blocks per SM: more loads in
// flight per SM than 16 tokens per thread at 175 registers. Rows of other tokens (short sequences,
// padding, gaps between sequences) are left as they are; the conv pool and z are the conv kernel's
// (conv.cu), after the recurrences.
//   grid = (ceil(D / 1024), min(ceil(limit / 8), 65535)), block = 128 (a block row per tile of 8 tokens,
//   tiles past 65535 looped)
#include <algorithm>

#include "cuda/common/dispatch.h"
#include "cuda/common/rec_common.cuh"
#include "cuda/conv/conv.h"
#include "cuda/conv/conv_channel.cuh"

namespace gdn::cuda {
namespace {

constexpr int kRowThreads = 128, kRowTokens = 8, kVec = 8;

// One sequence of group 0 as the conv needs it.
struct RowSeq {
  int64_t i = -1, begin = 0, end = 0;
  int64_t window = -1;  // element offset of rows 0..W-2 of its conv slot in the pool (-1: zeros, no initial state)
  bool chunk = false;   // a usable sequence of the chunk kernel
};

__device__ __forceinline__ RowSeq row_seq(const ConvParams& p, int64_t i) {
  const GroupMeta& g = p.group[0];
  RowSeq s;
  s.i = i;
  const rules::TokenRange tr = rules::token_range(g.qsl(i), g.qsl(i + 1), g.limit);
  s.begin = tr.begin;
  s.end = tr.begin + tr.len;
  const int64_t slot = g.slots(i, 0);
  // a sequence past the group's tokens is padding (docs/contract.md §3): its window is not read
  s.chunk = tr.len >= p.chunk_from && rules::slot_valid(slot, p.conv.num_slots, p.has_null, p.null_id) &&
            !rules::runs_past(g.qsl(i), g.qsl(i + 1), g.limit);
  const bool init = g.has_init ? g.has_init[i * g.has_init_stride] != 0 : true;
  if (s.chunk && init) s.window = slot * p.conv.slot_stride;
  return s;
}

// The global rows (global_row's answer: -1 for none) of local tokens u0 .. u0 + kN - 1, -1 outside
// [0, limit). A remapped group's token indices are all requested before any is used (their addresses
// clamped into the index vector), so the kN loads are in flight together, not one round trip each.
template <int kN, typename TIdx>
__device__ __forceinline__ void tile_rows_of(const GroupMeta& g, const TIdx* ix, int64_t u0, int64_t num_rows,
                                             int64_t (&r)[kN]) {
  TIdx v[kN];
#pragma unroll
  for (int s = 0; s < kN; ++s) {
    const int64_t u = u0 + s, uc = u < 0 ? 0 : u >= g.limit ? g.limit - 1 : u;
    v[s] = ix[uc * g.token_indx.row_stride];
  }
#pragma unroll
  for (int s = 0; s < kN; ++s) {
    const int64_t u = u0 + s, row = static_cast<int64_t>(v[s]);
    r[s] = u >= 0 && u < g.limit && row >= 0 && row < num_rows ? row : -1;
  }
}
template <int kN>
__device__ __forceinline__ void tile_rows(const GroupMeta& g, int64_t u0, int64_t num_rows, int64_t (&r)[kN]) {
  const IndexRef& ix = g.token_indx;
  if (ix.present() && ix.is64) return tile_rows_of<kN>(g, static_cast<const int64_t*>(ix.ptr), u0, num_rows, r);
  if (ix.present()) return tile_rows_of<kN>(g, static_cast<const int32_t*>(ix.ptr), u0, num_rows, r);
#pragma unroll
  for (int s = 0; s < kN; ++s) {
    const int64_t u = u0 + s;
    r[s] = u >= 0 && u < g.limit && u < num_rows ? u : -1;
  }
}

// The tile of local tokens j0 .. j0 + 7, channels c0 .. c0 + 7.
template <typename TAct, int W>
__device__ __forceinline__ void conv_tile(const ConvParams& p, int64_t j0, int c0) {
  const GroupMeta& g = p.group[0];
  const ConvRef& cv = p.conv;
  const int col = p.src.proj.conv_col(c0);  // 8 channels from c0: contiguous columns (runs of 8k)

  // Every input row the tile's taps may read: local tokens j0 - (W - 1) .. j0 + 7 (zeros outside
  // the buffer: such a sequence is padding for the chunk kernel, which writes zeros). Their global
  // rows first (tile_rows: every token index requested at once), then every row's load in flight.
  constexpr int kPos = kRowTokens + W - 1;
  int64_t r[kPos];
  tile_rows<kPos>(g, j0 - (W - 1), p.src.num_actual_tokens, r);
  uint4 x[kPos];
#pragma unroll
  for (int s = 0; s < kPos; ++s) {
    x[s] = make_uint4(0, 0, 0, 0);
    if (r[s] >= 0) x[s] = *reinterpret_cast<const uint4*>(static_cast<const TAct*>(p.src.qkvz) + r[s] * p.src.qkvz_rs + col);
  }
  float w[kVec][W], bias[kVec];
  const TAct* wt = static_cast<const TAct*>(cv.weight) + static_cast<int64_t>(c0) * cv.weight_rs;
  if (W == 4 && cv.weight_rs == 4 && (reinterpret_cast<uintptr_t>(wt) & 15) == 0) {
    // the 8 channels' taps are 64 contiguous bytes: four vectors, tap k of channel e at 4 e + k
    uint4 wv[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) wv[q] = reinterpret_cast<const uint4*>(wt)[q];
    const TAct* we = reinterpret_cast<const TAct*>(wv);
#pragma unroll
    for (int e = 0; e < kVec; ++e)
#pragma unroll
      for (int k = 0; k < W; ++k) w[e][k] = to_float(we[4 * e + k]);
  } else {
#pragma unroll
    for (int e = 0; e < kVec; ++e)
#pragma unroll
      for (int k = 0; k < W; ++k) w[e][k] = to_float(wt[e * cv.weight_rs + k]);
  }
  const TAct* bs = static_cast<const TAct*>(cv.bias);
  if (bs && (reinterpret_cast<uintptr_t>(bs + c0) & 15) == 0) {
    const uint4 bv = *reinterpret_cast<const uint4*>(bs + c0);
#pragma unroll
    for (int e = 0; e < kVec; ++e) bias[e] = to_float(reinterpret_cast<const TAct*>(&bv)[e]);
  } else {
#pragma unroll
    for (int e = 0; e < kVec; ++e) bias[e] = bs ? to_float(bs[c0 + e]) : 0.f;
  }

  // The sequence of j0: the last one beginning at or before it (offsets non-decreasing; otherwise
  // the chunk kernel takes none of these rows and any answer is harmless).
  int64_t lo = 0, hi = g.n - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (rules::clamp64(g.qsl(mid), 0, g.limit) <= j0) lo = mid;  // its begin, as token_range clamps it
    else hi = mid - 1;
  }
  TAct* y = static_cast<TAct*>(p.y);
  const TAct* pool = static_cast<const TAct*>(cv.state);
  // The tile's sequences in order (one, but where a sequence begins or ends inside the tile): the
  // input rows before the sequence replaced by its window (zeros without one) — rows a sequence
  // before it no longer needs —, then the conv of every tile token, stored for its tokens.
  for (RowSeq sq = row_seq(p, lo);; sq = row_seq(p, sq.i + 1)) {
    if (sq.chunk && sq.begin < j0 + kRowTokens && sq.end > j0) {
#pragma unroll
      for (int s = 0; s < kPos; ++s) {  // tap u before the sequence: row (W - 1) - (begin - u) of its window
        const int64_t back = sq.begin - (j0 - (W - 1) + s);
        if (back > 0 && back <= W - 1)
          x[s] = sq.window >= 0 ? *reinterpret_cast<const uint4*>(pool + sq.window + (W - 1 - back) * cv.D + c0)
                                : make_uint4(0, 0, 0, 0);
      }
      const int tb = static_cast<int>(sq.begin > j0 ? sq.begin - j0 : 0);
      const int te = static_cast<int>(sq.end < j0 + kRowTokens ? sq.end - j0 : kRowTokens);
      float f[kPos][kVec];  // input rows as floats, each converted once; W of them live at a time
      auto unpack = [&](int s) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) f[s][e] = to_float(reinterpret_cast<const TAct*>(&x[s])[e]);
      };
#pragma unroll
      for (int s = 0; s < W - 1; ++s) unpack(s);
#pragma unroll
      for (int t = 0; t < kRowTokens; ++t) {
        unpack(t + W - 1);
        float acc[kVec];  // tap k: local token j0 + t - (W - 1) + k
#pragma unroll
        for (int e = 0; e < kVec; ++e)
          acc[e] = conv_taps<W>(bias[e], 0, W, [&](int k) { return w[e][k]; }, [&](int k) { return f[t + k][e]; });
        if (t >= tb && t < te) {
          uint4 out;
          TAct* o = reinterpret_cast<TAct*>(&out);
#pragma unroll
          for (int e = 0; e < kVec; ++e) o[e] = from_float<TAct>(cv.silu ? silu_fast(acc[e]) : acc[e]);
          *reinterpret_cast<uint4*>(y + (j0 + t) * p.y_rs + c0) = out;
        }
      }
    }
    if (sq.end >= j0 + kRowTokens || sq.i + 1 >= g.n) break;
  }
}

template <typename TAct, int W>
__global__ void __launch_bounds__(kRowThreads, 4) conv_rows_kernel(const __grid_constant__ ConvParams p) {
  static_assert(sizeof(TAct) == 2, "16-bit activations (the chunk kernel's)");
  pdl_start();
  const int c0 = (blockIdx.x * kRowThreads + threadIdx.x) * kVec;
  if (c0 >= p.conv.D || p.group[0].n == 0) return;
  const int64_t tiles = (p.group[0].limit + kRowTokens - 1) / kRowTokens;
  for (int64_t tile = blockIdx.y; tile < tiles; tile += gridDim.y)  // more tiles than block rows past 65535
    conv_tile<TAct, W>(p, tile * kRowTokens, c0);
}

template <typename TAct>
Status launch_rows(const ConvParams& p, cudaStream_t stream) {
  const GroupMeta& g = p.group[0];
  if (g.n == 0 || g.limit == 0) return Status::Ok();
  const int64_t tiles = (g.limit + kRowTokens - 1) / kRowTokens;  // a block row each, up to gridDim.y's limit
  const dim3 grid(static_cast<unsigned>((p.conv.D + kRowThreads * kVec - 1) / (kRowThreads * kVec)),
                  static_cast<unsigned>(std::min<int64_t>(tiles, 65535)));
  Launch launch(grid, kRowThreads, 0, stream);
  return with_conv_width(p.conv.W, [&](auto w) { return launch(conv_rows_kernel<TAct, decltype(w)::value>, p); });
}

}  // namespace

Status launch_conv_rows(const ConvParams& p, DType act, cudaStream_t stream) {
  switch (act) {
    case DType::kBFloat16: return launch_rows<__nv_bfloat16>(p, stream);
    case DType::kFloat16: return launch_rows<__half>(p, stream);
    default: return Status::Error(std::string("conv rows: unsupported activation dtype ") + dtype_name(act));
  }
}

}  // namespace gdn::cuda
