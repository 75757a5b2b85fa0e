// src/cuda/pipelined/tma_item.cuh — what the pipelined kernels (recurrent_tma.cuh) resolve for one item of a
// block: where its sequence's tokens are, its slots, gate inputs and copy sources. The producer warp
// resolves 32 items at once (a lane each); the fused step's conv warp (tma_conv.cuh) resolves its
// groups' first items the same way.
#pragma once
#include "cuda/conv/conv_tok.cuh"
#include "cuda/pipelined/tma_layout.cuh"

namespace gdn::cuda {

// The block's item k: its metadata, state tile and (not fused) the sources of its staged tokens'
// q, k, v.
template <typename TAct, int kTok>
struct TmaItem {
  TmaMeta<kTok> m{};
  const void* tile = nullptr;
  const TAct *q[kTok], *k[kTok], *v[kTok];
  int ntok = 0;
  uint32_t bytes = 0;
};
// kConvOnly (fused: the conv warp and the prologue): only what the group's conv needs (sequence,
// tokens, slots, flags), not the gate inputs, A, dt_bias, verify slots nor the copy sources.
// kForms (not fused): the gate-form instance's (a and b in their own dtypes; A_log and dt_bias
// absent where the decay is given).
template <typename TAct, typename TS, int KP, int kTok, bool kFused, bool kConvOnly = false, bool kForms = false>
__device__ __forceinline__ TmaItem<TAct, kTok> resolve_item(const RecurrentParams& p, TmaGrid tg, int k) {
  using Lay = TmaLayout<TAct, TS, KP, kTok, kFused>;
  TmaItem<TAct, kTok> it;
  TmaMeta<kTok>& m = it.m;
  // items ordered (sequence, value head, row tile), fused (sequence, key head, value head of the
  // key head, row tile) in whole groups per block; fewer than 2^31 (host)
  uint32_t z;
  if constexpr (kFused) {
    const uint32_t gq = static_cast<uint32_t>(k) / tg.group_items;
    uint32_t w = k - gq * tg.group_items;
    w = (w + blockIdx.x) % tg.group_items;  // the blocks' concurrent tiles at spread offsets
    const uint32_t grp = blockIdx.x + gq * gridDim.x, j = w / tg.tiles;
    z = grp / p.H;
    m.x = static_cast<int>(w - j * tg.tiles);
    m.hv = static_cast<int>((grp - z * p.H) * p.r + j);
  } else {
    const uint32_t item = blockIdx.x + static_cast<uint32_t>(k) * gridDim.x;
    const uint32_t r = item / tg.tiles;
    z = r / p.HV;
    m.x = static_cast<int>(item - r * tg.tiles);
    m.hv = static_cast<int>(r - z * p.HV);
  }
  const SeqRef sq = seq_ref(p, z);
  m.gi = sq.gi;
  m.i = static_cast<int>(sq.i);
  const int hv = m.hv, h = hv / p.r;
  if constexpr (!kConvOnly) {
    const bool given = kForms && p.gates.decay_given;  // A_log and dt_bias absent
    m.A = given ? 0.f : p.A_log(hv);  // raw here: its exp below, after the other loads are requested
    m.dtb = given ? 0.f : p.dt_bias(hv);
  }
  const GroupMeta& g = p.group[m.gi];
  const SeqInfo si = resolve_seq(p, g, m.i, kFused);
  const int64_t out_rows = kFused ? p.src.num_actual_tokens : g.limit;
  // fused: a token outside the buffer makes its sequence padding
  const bool pad = si.pad || (kFused && !rows_in_buffer(g, si.tr.begin, si.tr.len, out_rows));
  // slot0 and base: where the fused step's conv window is (verify states go to col_slot)
  const ConvWindow cw = conv_window(g.spec, kFused && p.conv_per_token, si.slot0, si.read_slot, si.acc);
  m.begin = si.tr.begin, m.len = si.tr.len, m.slot0 = cw.slot, m.base = static_cast<int>(cw.base);
  m.flags = (si.tr.len == 0 ? kTmaSkip : pad ? kTmaPad : 0) | (si.init ? kTmaInit : 0);
  it.ntok = m.flags & (kTmaSkip | kTmaPad) ? 0 : static_cast<int>(si.tr.len < kTok ? si.tr.len : kTok);
  if constexpr (!kConvOnly) {
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
      m.row[t] = t < it.ntok ? global_row(g, si.tr.begin + t, out_rows) : 0;
      m.col_slot[t] = -1;
      if (t < it.ntok) m.col_slot[t] = verify_slot(p, g, m.i, t);
    }
    const int64_t v0 = static_cast<int64_t>(hv) * p.V + static_cast<int64_t>(m.x) * Lay::kItemRows;
#pragma unroll
    for (int t = 0; t < kTok; ++t)
      if (t < it.ntok) {
        if constexpr (kFused) {
          const TAct* ba = static_cast<const TAct*>(p.src.ba) + m.row[t] * p.src.ba_rs;
          m.a[t] = to_float(ba[p.src.proj.a_col(hv)]), m.b[t] = to_float(ba[p.src.proj.b_col(hv)]);
        } else {
          const TokenSrc<TAct> x = token_src<TAct, KP, kForms>(p, m.row[t], h, hv, v0);
          m.a[t] = x.a, m.b[t] = x.b;
          it.q[t] = x.q, it.k[t] = x.k, it.v[t] = x.v;
        }
      }
    m.A = -expf(m.A);
    if (it.ntok > 0 && si.init) it.tile = static_cast<const TS*>(p.state) + si.read_slot * p.state_slot_stride + v0 * KP;
    it.bytes = (it.tile ? Lay::kTile : 0) + (kFused ? 0 : it.ntok * (2 * Lay::kQK + Lay::kV));
  }
  return it;
}

}  // namespace gdn::cuda
