// src/cuda/pipelined/tma_conv.cuh — the conv warp of the pipelined fused step (recurrent_tma.cuh, kFused):
// per (sequence, key head) group of its block, the conv of the group's channels for the sequence's
// first kTok tokens into a shared-memory group buffer, and their conv pool rows; group_conv.cuh
// holds the per-chunk arithmetic.
#pragma once
#include "cuda/conv/conv_tok.cuh"
#include "cuda/pipelined/tma_item.cuh"
#include "cuda/common/tma.cuh"

namespace gdn::cuda {

// The conv of a group (m: its first item's metadata): what group_conv.cuh (short sequences) and
// group_conv_long need.
template <typename TAct, int KP, int kTok>
__device__ __forceinline__ GroupConv group_conv_of(const RecurrentParams& p, const TmaMeta<kTok>& m) {
  const GroupMeta& g = p.group[m.gi];
  const auto& PL = p.src.proj;
  const int h = m.hv / p.r, rv = p.r * PL.V;
  GroupConv gc;
  gc.q0 = h * PL.K, gc.k0 = PL.H * PL.K + h * PL.K, gc.v0 = 2 * PL.H * PL.K + h * rv;  // first conv channels
  gc.KP = KP, gc.chunks = (2 * KP + rv) / gc_ch<TAct>();
  gc.slot0 = m.slot0, gc.base = m.base, gc.begin = m.begin, gc.i = m.i;
  gc.per_token = g.spec && p.conv_per_token;
  gc.len = static_cast<int>(m.len < kTok ? m.len : kTok);
  gc.nt = g.spec ? (gc.len < g.cols ? gc.len : static_cast<int>(g.cols)) : gc.len;
  gc.window = (m.flags & kTmaInit) || g.spec;
  return gc;
}

// Broadcast of lane u's item metadata (the fields group_conv_warp reads).
template <int kTok>
__device__ __forceinline__ TmaMeta<kTok> meta_of_lane(const TmaMeta<kTok>& m, int u) {
  TmaMeta<kTok> b{};
  auto sh64 = [&](int64_t x) { return static_cast<int64_t>(__shfl_sync(0xffffffffu, static_cast<long long>(x), u)); };
  b.begin = sh64(m.begin), b.len = sh64(m.len), b.slot0 = sh64(m.slot0);
  b.base = __shfl_sync(0xffffffffu, m.base, u), b.flags = __shfl_sync(0xffffffffu, m.flags, u);
  b.gi = __shfl_sync(0xffffffffu, m.gi, u), b.i = __shfl_sync(0xffffffffu, m.i, u);
  b.hv = __shfl_sync(0xffffffffu, m.hv, u);
  return b;
}

// A longer sequence's group (> kTok tokens, a prefill in a mixed batch): chunk by chunk, the first
// kTok tokens into the group buffer; gready once written (every lane arrives), then the pool rows.
template <typename TAct, int KP, int kTok>
__device__ __noinline__ void group_conv_long(const RecurrentParams& p, const TmaMeta<kTok>& m, TAct* buf,
                                             uint64_t* ready, int lane) {
  constexpr int kRow = tma_group_row(KP), CH = gc_ch<TAct>();
  const GroupMeta& g = p.group[m.gi];
  const GroupConv gc = group_conv_of<TAct, KP, kTok>(p, m);
  for (int t = 0; t < kTok; ++t) {
    const ConvPos<TAct> cp = conv_pos<TAct>(p, m.slot0, m.base, gc.window, m.begin, t);
    for (int cc = lane; cc < gc.chunks; cc += 32) {
      const int c = cc * CH;  // [q | k | v] index
      float y[CH];
      conv_chunk<TAct, CH>(p, g, cp, gc.channel(c), y);
#pragma unroll
      for (int e = 0; e < CH; ++e) buf[t * kRow + c + e] = from_float<TAct>(y[e]);  // exact: y is rounded
    }
  }
  mbar_arrive(ready);
  __syncwarp();  // every lane's window reads are done
  const rules::TokenRange tr{m.begin, m.len};
  // the window's slot m.slot0 (either layout) and first row m.base = acc - 1 (rolling) or 0
  const ConvSeq cs = make_conv_seq(g, m.i, tr, m.slot0, m.base + 1, m.slot0, p.conv_per_token,
                                   (m.flags & kTmaInit) != 0, true, p.conv.W);
  pool_update<TAct>(p, g, cs, gc.q0, KP, lane);  // K == KP (host)
  pool_update<TAct>(p, g, cs, gc.k0, KP, lane);
  pool_update<TAct>(p, g, cs, gc.v0, p.r * p.src.proj.V, lane);
}

// Chunk cc of a short group's conv: its inputs requested at once, its conv outputs into the group
// buffer and its new pool rows from the same registers.
template <typename TAct, int KP, int kTok, int kW, bool kPT = false>
__device__ __forceinline__ void group_conv_chunk(const RecurrentParams& p, const GroupMeta& g, const GroupConv& gc,
                                                 const int64_t (&xr)[kTok], const GcSlots<kTok, kPT>& ts, int cc,
                                                 TAct* buf) {
  constexpr int kRow = tma_group_row(KP), CH = gc_ch<TAct>();
  using C = GcChunk<TAct, kTok>;
  C in;
  gc_load_global<TAct, kTok, kW>(p, gc, xr, gc.channel(cc * CH), in);
  TAct* const pool = static_cast<TAct*>(p.conv.state) + gc.channel(cc * CH);
  TAct* col = pool + gc.slot0 * p.conv.slot_stride;
  gc_finish<TAct, kTok, kW, kPT>(
      p, g, gc, in, cc * CH, buf, kRow, ts,
      [&](int row, const typename C::Vec& v) { *reinterpret_cast<typename C::Vec*>(col + row * p.conv.D) = v; },
      [&](int64_t slot, int row, const typename C::Vec& v) {
        *reinterpret_cast<typename C::Vec*>(pool + slot * p.conv.slot_stride + row * p.conv.D) = v;
      });
}

// A short group's conv (len <= kTok: every decode and verify sequence) in one pass, a lane's chunks
// lane, lane + 32, ...: every input of a chunk requested at once (group_conv.cuh), then its conv
// outputs into the group buffer and its new pool rows from the same registers. kW = 4 (the common
// layout, TmaGrid::conv_w4): the width is a constant, so no predicated taps and a shorter
// instruction stream (the conv warp's code misses the instruction cache
// under the state stream).
// kT: the tokens the code handles (kTok, or 1 for a group of a one-token sequence: fewer loads and
// branches, and a shorter instruction stream — the prologue runs cold from the instruction cache).
template <typename TAct, int KP, int kTok, int kW, int kT = kTok, bool kPT = false>
__device__ __forceinline__ void group_conv_short(const RecurrentParams& p, const TmaMeta<kTok>& m, TAct* buf,
                                                 int lane) {
  const GroupMeta& g = p.group[m.gi];
  const GroupConv gc = group_conv_of<TAct, KP, kTok>(p, m);
  int64_t xr[kT];
  gc_rows<kT>(p, g, gc, xr);
  const GcSlots<kT, kPT> ts = gc_token_slots<kT, kPT>(p, g, gc);
  for (int cc = lane; cc < gc.chunks; cc += 32) group_conv_chunk<TAct, KP, kT, kW, kPT>(p, g, gc, xr, ts, cc, buf);
}

// A short verify group whose conv windows are per draft slot: group_conv_short's per-token
// instances, out of line (fewer spills in the conv warp's loop).
template <typename TAct, int KP, int kTok>
__device__ __noinline__ void group_conv_per_token(const RecurrentParams& p, const TmaMeta<kTok>& m, TAct* buf, int lane,
                                                  bool w4) {
  if (w4 && m.len <= 1) group_conv_short<TAct, KP, kTok, 4, 1, true>(p, m, buf, lane);
  else if (w4) group_conv_short<TAct, KP, kTok, 4, kTok, true>(p, m, buf, lane);
  else group_conv_short<TAct, KP, kTok, 0, kTok, true>(p, m, buf, lane);
}

// Fused: the metadata of the block's group gq (its first item) for its conv: only what the conv
// needs.
template <typename TAct, typename TS, int KP, int kTok>
__device__ __forceinline__ TmaMeta<kTok> resolve_group(const RecurrentParams& p, TmaGrid tg, int gq) {
  return resolve_item<TAct, TS, KP, kTok, true, true>(p, tg, gq * tg.group_items).m;
}

// Fused, a conv warp for group gq of its block (m: the metadata of its first item): waits until
// every item of the group that used the buffer before is done (gdone), computes the conv of the
// group's channels for the first kTok tokens into the group buffer and writes their conv pool rows
// (group_conv_short, or group_conv_long for a longer sequence), and every lane arrives on gready
// (consumers wait on it before reading the buffer). Inline in the conv warp's loop: the metadata
// stays in registers.
// kPT: the batch's verify windows are per draft slot (tma_conv_warp's instance of its own).
template <typename TAct, int KP, int kTok, bool kPT>
__device__ __forceinline__ void group_conv_warp(const RecurrentParams& p, const TmaMeta<kTok>& m, int gq, int bufs,
                                                bool w4, TAct* gbuf, uint64_t* gdone, uint64_t* gready, int lane) {
  const int gs = gq % bufs;
  mbar_wait(&gdone[gs], (static_cast<uint32_t>(gq / bufs) & 1u) ^ 1u);  // the first round passes at once
  TAct* buf = tma_group_buf<KP, kTok>(gbuf, gs);
  if (!(m.flags & (kTmaSkip | kTmaPad))) {
    if (m.len > kTok) return group_conv_long<TAct, KP, kTok>(p, m, buf, &gready[gs], lane);
    if (kPT && p.group[m.gi].spec) {  // per-token verify windows
      group_conv_per_token<TAct, KP, kTok>(p, m, buf, lane, w4);
    } else if (w4 && m.len <= 1) {
      group_conv_short<TAct, KP, kTok, 4, 1>(p, m, buf, lane);
    } else if (w4) {
      group_conv_short<TAct, KP, kTok, 4>(p, m, buf, lane);
    } else {
      group_conv_short<TAct, KP, kTok, 0>(p, m, buf, lane);
    }
  }
  mbar_arrive(&gready[gs]);
}

// Fused, conv warp cw of ncw: resolves 32 of its groups at once (groups cw, cw + ncw, ... from the
// first one the prologue left; lane u: the first item of its group j0 + u), then computes them in
// order (group_conv_warp), up to kGroupBufs - 1 groups ahead of the consumers.
template <typename TAct, typename TS, int KP, int kTok, bool kPT>
__device__ __noinline__ void tma_conv_warp(const RecurrentParams& p, TmaGrid tg, int nk, TAct* gbuf, uint64_t* gdone,
                                           uint64_t* gready, int cw, int ncw, int pre, int lane) {
  using Lay = TmaLayout<TAct, TS, KP, kTok, true>;
  const int ng = nk / tg.group_items;
  for (int j0 = pre; cw + j0 * ncw < ng; j0 += 32) {  // pre > 0: one conv warp (host)
    const int mine = cw + (j0 + lane) * ncw;
    TmaMeta<kTok> m{};
    if (mine < ng) m = resolve_group<TAct, TS, KP, kTok>(p, tg, mine);
    for (int u = 0; u < 32 && cw + (j0 + u) * ncw < ng; ++u)
      group_conv_warp<TAct, KP, kTok, kPT>(p, meta_of_lane<kTok>(m, u), cw + (j0 + u) * ncw, Lay::kGroupBufs,
                                      tg.conv_w4 != 0, gbuf, gdone, gready, lane);
  }
}

// Fused, one conv warp (TmaGrid::pre > 0): the conv of the block's first groups (at most tg.pre,
// up to the first sequence longer than kTok) by every warp but the producer, which issues only its
// first tg.early state copies meanwhile, so that the conv's loads do not queue behind the ring fill
// and the consumers' first items do not wait for a lone conv warp.
// The conv warp resolves the groups' first items into `scratch` (the ring's last stage, which those
// first copies do not reach), then the threads take (group, chunk) pairs; the conv warp then marks
// the groups' buffers written (gready). Returns how many groups it did: the conv warp goes on from
// there. tid: 0 .. nthreads - 1 over the warps taking part (the consumers and the conv warp); named
// barrier 1 joins them.
template <typename TAct, typename TS, int KP, int kTok>
__device__ __noinline__ int tma_conv_prologue(const RecurrentParams& p, TmaGrid tg, int nk, TAct* gbuf,
                                              uint64_t* gready, uint8_t* scratch, bool conv_warp, int tid,
                                              int nthreads, int lane) {
  using Lay = TmaLayout<TAct, TS, KP, kTok, true>;
  static_assert(Lay::kGroupBufs <= 32 && Lay::kGroupBufs * sizeof(TmaMeta<kTok>) + 16 <= Lay::kStage,
                "a lane per group; the scratch fits a stage");
  TmaMeta<kTok>* meta = reinterpret_cast<TmaMeta<kTok>*>(scratch);
  int* s_pre = reinterpret_cast<int*>(scratch + Lay::kGroupBufs * sizeof(TmaMeta<kTok>));
  if (conv_warp) {
    const int ng = nk / tg.group_items, cnt = ng < tg.pre ? ng : tg.pre;  // tg.pre <= kGroupBufs <= 32
    TmaMeta<kTok> m{};
    if (lane < cnt) {
      m = resolve_group<TAct, TS, KP, kTok>(p, tg, lane);
      meta[lane] = m;
    }
    const unsigned longs = __ballot_sync(0xffffffffu, lane < cnt && m.len > kTok && !(m.flags & (kTmaSkip | kTmaPad)));
    if (lane == 0) *s_pre = longs && __ffs(longs) - 1 < cnt ? __ffs(longs) - 1 : cnt;
  }
  bar_sync(1, nthreads);
  const int pre = *s_pre;
  const int chunks = (2 * KP + p.r * p.src.proj.V) / gc_ch<TAct>();
  for (int task = tid; task < pre * chunks; task += nthreads) {
    const int gq = task / chunks, cc = task - gq * chunks;
    const TmaMeta<kTok>& m = meta[gq];
    if (m.flags & (kTmaSkip | kTmaPad)) continue;
    const GroupMeta& g = p.group[m.gi];
    const GroupConv gc = group_conv_of<TAct, KP, kTok>(p, m);
    TAct* buf = tma_group_buf<KP, kTok>(gbuf, gq);  // gq < kGroupBufs: the group's buffer
    if (tg.conv_w4 && gc.len <= 1) {  // a one-token sequence: the one-token code (group_conv_short)
      int64_t xr1[1];
      gc_rows<1>(p, g, gc, xr1);
      if (gc.per_token) group_conv_chunk<TAct, KP, 1, 4, true>(p, g, gc, xr1, gc_token_slots<1, true>(p, g, gc), cc, buf);
      else group_conv_chunk<TAct, KP, 1, 4>(p, g, gc, xr1, GcSlots<1, false>{}, cc, buf);
      continue;
    }
    int64_t xr[kTok];
    gc_rows<kTok>(p, g, gc, xr);
    if (gc.per_token) {
      const GcSlots<kTok, true> ts = gc_token_slots<kTok, true>(p, g, gc);
      if (tg.conv_w4) group_conv_chunk<TAct, KP, kTok, 4, true>(p, g, gc, xr, ts, cc, buf);
      else group_conv_chunk<TAct, KP, kTok, 0, true>(p, g, gc, xr, ts, cc, buf);
    } else if (tg.conv_w4) {
      group_conv_chunk<TAct, KP, kTok, 4>(p, g, gc, xr, GcSlots<kTok, false>{}, cc, buf);
    } else {
      group_conv_chunk<TAct, KP, kTok, 0>(p, g, gc, xr, GcSlots<kTok, false>{}, cc, buf);
    }
  }
  fence_proxy_async();  // the scratch's generic accesses before the stages' bulk copies
  bar_sync(1, nthreads);
  if (conv_warp)
    for (int gq = 0; gq < pre; ++gq) mbar_arrive(&gready[gq]);
  return pre;
}

}  // namespace gdn::cuda
