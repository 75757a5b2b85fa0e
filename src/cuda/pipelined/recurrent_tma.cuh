// src/cuda/pipelined/recurrent_tma.cuh — the primitive recurrence (gated_delta_rule_recurrent) on sm_90 as a
// producer/consumer pipeline: state tiles and the first tokens' inputs arrive in shared memory by
// bulk copies (cp.async.bulk, the Tensor Memory Accelerator) while consumer warps compute.
//   grid  = min(items, resident blocks) persistent blocks; block b takes items b, b + grid, ...
//   item  = kItemRows rows (8 x passes) of one (sequence, value head): contiguous bytes of a dense
//           "vk" slot; items ordered (sequence, value head, row tile)
//   block = kConsumers consumer warps + 1 producer warp (+ 1 conv warp, fused); S stages of shared
//           memory in a ring
// recurrent_kernel's one-warp blocks each resolve their sequence, load their rows, wait, compute and
// exit: the warp holds no bytes in flight during the metadata round trip and the compute, and a
// register holds 4 (float32) or 2 (16-bit) bytes of state. Here the producer warp resolves 32 items
// at once (lane u: item k0 + u; its sequence metadata, gate inputs, -exp(A_log), dt_bias, stage and
// copy sources), then issues them in order, one lane at a time: wait for the stage to be free
// (empty barrier), write the item's metadata there, post the expected bytes on its full barrier
// (mbarrier transaction count) and start the copies: the state tile from the read slot (L2
// evict-first) and q, k and the tile's v values of the sequence's first kTok tokens. Consumer warp
// c takes the block's items c, c + kConsumers, ...: waits for the stage, then per pass of 8 rows
// reads the rows into registers (16 lanes per row, 4 rows per lane group, each lane's K-elements in
// 16-byte chunks spread over the group so that every store instruction writes whole sectors), runs
// every token of the sequence (the first token's k^, q^ and gates computed once per item; tokens past
// kTok read straight from global memory), stores o and the states from registers, and frees the
// stage (all 32 lanes arrive on its empty barrier); float32 verify states leave through the stage's
// tile by bulk stores instead (kTmaBulkTok). Float32 across tokens (docs/contract.md §6); the same
// operations as recur_token.
// kFused: gdn_attention's whole step (conv + gates + norms + recurrence + conv pool + z) in the same
// pipeline. Items are then ordered (sequence, key head, value head, row tile) and a block takes
// whole (sequence, key head) groups (groups b, b + grid, ...); the stage holds only the state tile
// and the metadata. The block has one consumer warp fewer and a conv warp (kTmaConvWarps: more
// of them take alternate groups, as many consumers fewer): it resolves 32 of the
// block's groups at once and computes, up to kGroupBufs - 1 groups ahead of the consumers, the conv
// of all of a group's channels (the key head's q and k, its r value heads' v) for the sequence's
// first kTok (4 >= W - 1) tokens into a group buffer in shared memory (activation dtype: the conv
// output is rounded to it anyway; a ring of kGroupBufs, each freed by a barrier every item of its
// group arrives on) and writes their conv pool rows: it is the windows' only reader, since tokens
// past kTok take no window tap. Its own warp, so that neither the producer's copies nor the
// consumers wait for the conv's round trips (when the producer computed it, it delayed the
// copies). From a consumer's first item of a sequence longer than
// kTok on, an out-of-line copy of its loop (tma_consume_long) takes its items: it computes the later
// tokens' conv from the qkvz rows (conv_tok.cuh). Consumer warps copy z first. Batches
// whose blocks hold at most kGroupBufs groups start with a conv prologue instead (tma_conv.cuh:
// every group of the block convolved by all warps but the producer, which issues only its first
// copies meanwhile; the conv warp then copies z), and every fused block takes each group's items
// rotated by its index (TmaGrid::rot). The host side is in
// tma_launch.cuh.
#pragma once
#include "cuda/pipelined/tma_conv.cuh"

namespace gdn::cuda {

// The producer warp: resolves 32 items at once (lane u: the block's item k0 + u: its metadata, gate
// inputs, stage and copy sources), then issues them in order, one lane at a time. hold: waits for
// the fused step's conv prologue (named barrier 2) after its first tg.early copies.
template <typename TAct, typename TS, int KP, int kTok, bool kFused, bool kForms = false>
__device__ __forceinline__ void tma_produce(const RecurrentParams& p, TmaGrid tg, int nk, uint8_t* stages,
                                            uint64_t* full, uint64_t* empty, bool hold, int lane) {
  using Lay = TmaLayout<TAct, TS, KP, kTok, kFused>;
  const uint64_t pol = evict_first_policy();
  for (int k0 = 0; k0 < nk; k0 += 32) {
    const int k = k0 + lane;
    const TmaItem<TAct, kTok> it =
        k < nk ? resolve_item<TAct, TS, KP, kTok, kFused, false, kForms>(p, tg, k) : TmaItem<TAct, kTok>{};
    const TmaMeta<kTok>& m = it.m;
    const int st = k % tg.stages;
    const uint32_t phase = static_cast<uint32_t>(k / tg.stages) & 1u;
    const int nb = nk - k0 < 32 ? nk - k0 : 32;
    // Issues this lane's item: waits for its stage, writes the metadata there, posts the bytes and
    // starts the copies.
    auto issue = [&]() {
      mbar_wait(&empty[st], phase ^ 1u);  // the first round passes at once
      uint8_t* sb = stages + st * Lay::kStage;
      *reinterpret_cast<TmaMeta<kTok>*>(sb + Lay::kOffMeta) = m;
      mbar_arrive_tx(&full[st], it.bytes);
      if (it.tile) {
        bulk_load_hint(sb, it.tile, Lay::kTile, &full[st], pol);  // evict-first: each tile is read once
      }
#pragma unroll
      for (int t = 0; t < Lay::kStaged; ++t) {
        if (t >= it.ntok) break;
        bulk_load(sb + Lay::kOffQ + t * Lay::kQK, it.q[t], Lay::kQK, &full[st]);
        bulk_load(sb + Lay::kOffK + t * Lay::kQK, it.k[t], Lay::kQK, &full[st]);
        bulk_load(sb + Lay::kOffV + t * Lay::kV, it.v[t], Lay::kV, &full[st]);
      }
    };
    // fused prologue (hold): its first tg.early items at once, the rest once the prologue's conv is
    // done (its scratch: the last stage, which they do not reach)
    const int sync_at = hold && k0 == 0 ? (tg.early < nb ? tg.early : nb) : -1;  // -1: no wait in this batch
    auto wait_prologue = [&]() {
      bar_sync(2, Lay::kThreads);
    };
    for (int u = 0; u < nb; ++u) {
      if (u == sync_at) wait_prologue();
      if (lane == u) issue();
      __syncwarp();
    }
    if (sync_at == nb) wait_prologue();
  }
}

// One item of a consumer warp (stage sb holds its tile and metadata): every token, in passes of
// kPassRows rows. Fused: q, k, v of the first kTok tokens from the group buffer; tokens past them
// (kLong: a sequence longer than kTok) convolved here from the qkvz rows. kForms: the gates in the
// forms of p.gates (the gate-form instance; the producer loaded a and b in their own dtypes).
template <typename TAct, typename TS, int KP, int kTok, bool kFused, bool kLong, bool kForms = false>
__device__ __forceinline__ void tma_item(const RecurrentParams& p, TmaGrid tg, int k, const uint8_t* sb,
                                         const TAct* gbuf, int lane) {
  using Lay = TmaLayout<TAct, TS, KP, kTok, kFused>;
  constexpr int L = Lay::kLanes, G = Lay::kGroups, R = Lay::kRowsPerLane, EPL = Lay::EPL, CH = Lay::kChunk;
  const int ln = lane % L, grp = lane / L;
  const TmaMeta<kTok>& m = *reinterpret_cast<const TmaMeta<kTok>*>(sb + Lay::kOffMeta);
  const int flags = m.flags, hv = m.hv, h = hv / p.r;
  const GateForm f = kForms ? p.gates : GateForm{};
  const GroupMeta& g = p.group[m.gi];
  const rules::TokenRange tr{m.begin, m.len};
  const int64_t out_rows = kFused ? p.src.num_actual_tokens : g.limit;
  auto state_row = [&](int64_t slot, int vi) {
    return static_cast<TS*>(p.state) + slot * p.state_slot_stride + (static_cast<int64_t>(hv) * p.V + vi) * KP;
  };
  // The pass's rows of a state into `slot` (warp-uniform call; tok: a verify token's state, else
  // the final one): straight from the lanes, or (a verify token's, kTmaBulkTok) through the stage's tile,
  // which the pass no longer reads, by one bulk store of its contiguous kPassRows rows.
  auto put_state = [&](int64_t slot, int ps, int lr0, int row0, const float(&s)[R][EPL], bool tok) {
    if (kTmaBulkTok<TS> && tok) {
      TS* tile = reinterpret_cast<TS*>(const_cast<uint8_t*>(sb));
#pragma unroll
      for (int j = 0; j < R; ++j) store_chunks<L, CH, TS, EPL, true>(tile + (lr0 + j * G) * KP, ln, s[j]);
      fence_proxy_async();
      __syncwarp();
      if (lane == 0) {
        bulk_store(state_row(slot, m.x * Lay::kItemRows + ps * Lay::kPassRows), tile + ps * Lay::kPassRows * KP,
                   Lay::kPassRows * KP * static_cast<int>(sizeof(TS)));
        bulk_store_wait_read();  // the tile may be written again
      }
      __syncwarp();
    } else {
#pragma unroll
      for (int j = 0; j < R; ++j) store_chunks<L, CH>(state_row(slot, row0 + j * G), ln, s[j]);
    }
  };
  // fused: the group buffer's token tt, and where local token t's conv taps are
  auto gbuf_tok = [&](int tt) {
    if constexpr (kFused) return tma_group_buf<KP, kTok>(gbuf, (k / tg.group_items) % Lay::kGroupBufs, tt);
    else return gbuf;
  };
  auto cpos = [&](int64_t t) {
    return conv_pos<TAct>(p, m.slot0, m.base, (flags & kTmaInit) || g.spec, tr.begin, t);
  };
  if (!(flags & kTmaSkip)) {
    const int ntok = static_cast<int>(tr.len < kTok ? tr.len : kTok);
    const float A = m.A, dtb = m.dtb;
    // q and k of token tt < ntok: from the stage, or (fused) from the group buffer
    auto first_qk = [&](int tt, float(&kr)[EPL], float(&qr)[EPL]) {
      if constexpr (kFused) {
        const TAct* b = gbuf_tok(tt);
        load_chunks<L, CH>(b, ln, qr);
        load_chunks<L, CH>(b + KP, ln, kr);
      } else {
        load_chunks<L, CH>(reinterpret_cast<const TAct*>(sb + Lay::kOffQ + tt * Lay::kQK), ln, qr);
        load_chunks<L, CH>(reinterpret_cast<const TAct*>(sb + Lay::kOffK + tt * Lay::kQK), ln, kr);
      }
    };
    // The first token's k^, q^ and gates, once for all passes.
    float kr0[EPL], qr0[EPL];
    TokenGates g0{};
    if (!(flags & kTmaPad)) {
      first_qk(0, kr0, qr0);
      g0 = prep_regs<L, EPL>(m.a[0], m.b[0], A, dtb, p.scale, kr0, qr0, f);
    }
    // 16-bit state, an item of one token with its state in the stage (decode, or a verify sequence
    // of one token): all of the item's rows at once, each row read from the stage twice (for S k^,
    // then for the update and o) instead of held in registers, so that the 8 rows of a lane group
    // are in flight together without spills (the 2 x 4-row passes below are latency-bound; 8 rows
    // held in registers spill). The operations of recur_rows, in its order.
    // v: from the stage, or (fused) the group buffer.
    if constexpr ((kFused || kTok == 1) && sizeof(TS) == 2) {
      if (!(flags & kTmaPad) && (flags & kTmaInit) && tr.len == 1) {
        constexpr int RS = Lay::kItemRows / G;  // rows of the item per lane group
        const int64_t dst = g.spec ? m.col_slot[0] : m.slot0;  // -1: no state stored (verify_slot)
        const TS* tile = reinterpret_cast<const TS*>(sb);
        const TAct* sv = kFused ? gbuf_tok(0) + 2 * KP + (hv - h * p.r) * p.V + m.x * Lay::kItemRows
                                : reinterpret_cast<const TAct*>(sb + Lay::kOffV);
        float dot[RS], ov[RS];
#pragma unroll
        for (int j = 0; j < RS; ++j) {
          float sr[EPL];
          load_chunks<L, CH>(tile + (grp + j * G) * KP, ln, sr);
          dot[j] = 0.f;
#pragma unroll
          for (int e = 0; e < EPL; ++e) {
            sr[e] *= g0.decay;  // S = exp(g) S
            dot[j] += sr[e] * kr0[e];
          }
        }
        rows_sum<L, RS, true>(dot, ln);
        asm volatile("" ::: "memory");  // the rows are read from the stage again, not kept
#pragma unroll
        for (int j = 0; j < RS; ++j) {
          float sr[EPL];
          load_chunks<L, CH>(tile + (grp + j * G) * KP, ln, sr);
          const float d = g0.beta * (to_float(sv[grp + j * G]) - dot[j]);  // d = beta (v - S k^)
          ov[j] = 0.f;
#pragma unroll
          for (int e = 0; e < EPL; ++e) {
            sr[e] *= g0.decay;
            sr[e] += d * kr0[e];      // S += d k^T
            ov[j] += sr[e] * qr0[e];  // o = S q^
          }
          if (dst >= 0) store_chunks<L, CH>(state_row(dst, m.x * Lay::kItemRows + grp + j * G), ln, sr);
        }
        const float mine = pick_row<L, RS, true>(ov, ln);
        if (ln < RS)
          static_cast<TAct*>(p.o)[m.row[0] * p.o_rs + static_cast<int64_t>(hv) * p.V + m.x * Lay::kItemRows + grp +
                                  ln * G] = from_float<TAct>(mine);
        return;
      }
    }
#pragma unroll 1
    for (int ps = 0; ps < Lay::kPasses; ++ps) {
      const int lr0 = ps * Lay::kPassRows + grp;                // item-local row of the group's row 0
      const int row0 = m.x * Lay::kItemRows + lr0;              // its value index
      if (flags & kTmaPad) {
        zero_outputs<TAct, R, G>(p, g, tr, out_rows, hv, row0, ln);
        continue;
      }
      float s[R][EPL];
#pragma unroll
      for (int j = 0; j < R; ++j) {
        if (flags & kTmaInit) load_chunks<L, CH>(reinterpret_cast<const TS*>(sb) + (lr0 + j * G) * KP, ln, s[j]);
        else
#pragma unroll
          for (int e = 0; e < EPL; ++e) s[j][e] = 0.f;
      }
      // fused: items of a sequence longer than kTok go through the kLong copy
      const int64_t nt = kFused && !kLong ? ntok : tr.len;
      for (int64_t t = 0; t < nt; ++t) {
        float kr[EPL], qr[EPL], vv[R];
        TokenGates gates = g0;
        int64_t row;
        if (t < ntok) {
          const int tt = static_cast<int>(t);
          row = m.row[tt];
          if constexpr (kFused) {
            const TAct* bv = gbuf_tok(tt) + 2 * KP + (hv - h * p.r) * p.V;
#pragma unroll
            for (int j = 0; j < R; ++j) vv[j] = to_float(bv[row0 + j * G]);
          } else {
            const TAct* sv = reinterpret_cast<const TAct*>(sb + Lay::kOffV + tt * Lay::kV);
#pragma unroll
            for (int j = 0; j < R; ++j) vv[j] = to_float(sv[lr0 + j * G]);
          }
          if (tt == 0) {
#pragma unroll
            for (int e = 0; e < EPL; ++e) kr[e] = kr0[e], qr[e] = qr0[e];
          } else {
            first_qk(tt, kr, qr);
            gates = prep_regs<L, EPL>(m.a[tt], m.b[tt], A, dtb, p.scale, kr, qr, f);
          }
        } else if constexpr (kFused) {  // past the first tokens (kLong only; else nt == ntok): conv and gates here
          if constexpr (!kLong) __builtin_unreachable();
          row = global_row(g, tr.begin + t, out_rows);
          const TAct* ba = static_cast<const TAct*>(p.src.ba) + row * p.src.ba_rs;
          conv_qk<TAct, L, CH, EPL>(p, g, cpos(t), h, ln, kr, qr);
          conv_v<TAct, L, R, G>(p, g, cpos(t), hv, row0, lane, vv);
          gates = prep_regs<L, EPL>(to_float(ba[p.src.proj.a_col(hv)]), to_float(ba[p.src.proj.b_col(hv)]), A, dtb,
                                    p.scale, kr, qr);
        } else {  // past the staged tokens: straight from global memory
          row = global_row(g, tr.begin + t, out_rows);
          const TokenSrc<TAct> x = token_src<TAct, KP, kForms>(p, row, h, hv, static_cast<int64_t>(hv) * p.V);
          load_chunks<L, CH>(x.q, ln, qr);
          load_chunks<L, CH>(x.k, ln, kr);
#pragma unroll
          for (int j = 0; j < R; ++j) vv[j] = to_float(x.v[row0 + j * G]);
          gates = prep_regs<L, EPL>(x.a, x.b, A, dtb, p.scale, kr, qr, f);
        }
        const float mine = recur_rows<L, G, R, EPL, true>(s, kr, qr, gates, [&](int j) { return vv[j]; }, ln);
        if (ln < R)
          static_cast<TAct*>(p.o)[row * p.o_rs + static_cast<int64_t>(hv) * p.V + row0 + ln * G] =
              from_float<TAct>(mine);
        const int64_t slot = t < ntok ? m.col_slot[t] : verify_slot(p, g, m.i, t);  // -1: none
        if (slot >= 0) put_state(slot, ps, lr0, row0, s, true);
      }
      if (!g.spec) put_state(m.slot0, ps, lr0, row0, s, false);
    }
  }
}
// Where a consumer warp is in its items: item k, its stage and the parity of the stage's use.
struct ConsumerPos {
  int k, st;
  uint32_t phase;
};

// A consumer warp's items from c on (the block's items warp, warp + kConsumers, ...). Fused and not
// kLong: returns at the first item of a sequence longer than kTok (its stage still held), which
// the kLong copy (tma_consume_long) then takes with every item after it: so the loop of decode and
// verify batches carries neither the late tokens' conv nor a call.
template <typename TAct, typename TS, int KP, int kTok, bool kFused, bool kLong, bool kForms = false>
__device__ __forceinline__ ConsumerPos tma_consume_from(const RecurrentParams& p, TmaGrid tg, int nk,
                                                        const uint8_t* stages, uint64_t* full, uint64_t* empty,
                                                        const TAct* gbuf, uint64_t* gdone, uint64_t* gready,
                                                        int lane, ConsumerPos c) {
  using Lay = TmaLayout<TAct, TS, KP, kTok, kFused>;
  int st = c.st;
  uint32_t phase = c.phase;
  for (int k = c.k; k < nk; k += Lay::kConsumers) {
    mbar_wait(&full[st], phase);
    if constexpr (kFused) {  // the group buffer is written
      const int gq = k / tg.group_items;
      mbar_wait(&gready[gq % Lay::kGroupBufs], static_cast<uint32_t>(gq / Lay::kGroupBufs) & 1u);
    }
    const uint8_t* sb = stages + st * Lay::kStage;
    if constexpr (kFused && !kLong)
      if (reinterpret_cast<const TmaMeta<kTok>*>(sb + Lay::kOffMeta)->len > kTok) return ConsumerPos{k, st, phase};
    tma_item<TAct, TS, KP, kTok, kFused, kLong, kForms>(p, tg, k, sb, gbuf, lane);
    if constexpr (kFused) mbar_arrive(&gdone[(k / tg.group_items) % Lay::kGroupBufs]);  // done with the buffer
    mbar_arrive(&empty[st]);  // every lane: its reads of the stage are done
    st += Lay::kConsumers;
    if (st >= tg.stages) st -= tg.stages, phase ^= 1u;
  }
  return ConsumerPos{nk, st, phase};
}
template <typename TAct, typename TS, int KP, int kTok>
__device__ __noinline__ ConsumerPos tma_consume_long(const RecurrentParams& p, TmaGrid tg, int nk,
                                                     const uint8_t* stages, uint64_t* full, uint64_t* empty,
                                                     const TAct* gbuf, uint64_t* gdone, uint64_t* gready, int lane,
                                                     ConsumerPos c) {
  return tma_consume_from<TAct, TS, KP, kTok, true, true>(p, tg, nk, stages, full, empty, gbuf, gdone, gready, lane, c);
}

// A consumer warp: z first (fused), then its items.
template <typename TAct, typename TS, int KP, int kTok, bool kFused, bool kForms = false>
__device__ __forceinline__ void tma_consume(const RecurrentParams& p, TmaGrid tg, int nk, const uint8_t* stages,
                                            uint64_t* full, uint64_t* empty, const TAct* gbuf, uint64_t* gdone,
                                            uint64_t* gready, int warp, int lane) {
  using Lay = TmaLayout<TAct, TS, KP, kTok, kFused>;
  if constexpr (kFused)  // z: every row below num_actual_tokens, spread over the grid's consumer warps
                         // (TmaGrid::zc: by the conv warps instead, after their groups)
    if (!tg.zc) copy_z<TAct, Lay::kConsumers * 32>(p.src, p.z, p.z_rs, blockIdx.x, gridDim.x);
  ConsumerPos c{warp, warp, 0u};  // stages: a multiple of kConsumers (host)
  c = tma_consume_from<TAct, TS, KP, kTok, kFused, false, kForms>(p, tg, nk, stages, full, empty, gbuf, gdone, gready,
                                                                  lane, c);
  if constexpr (kFused)
    if (c.k < nk) tma_consume_long<TAct, TS, KP, kTok>(p, tg, nk, stages, full, empty, gbuf, gdone, gready, lane, c);
  if (lane == 0) bulk_store_wait();
}

// kForms (the primitive op only): the gate-form instance, which also takes the other gate and norm
// forms of ops.h (RecurrentParams::gates, by the math of gates.cuh), as recurrent_kernel's; the
// other instances take the default form only.
template <typename TAct, typename TS, int KP, int kTok, bool kFused, bool kForms = false>
__global__ void __launch_bounds__(TmaLayout<TAct, TS, KP, kTok, kFused>::kThreads, kTmaMb)
    recurrent_tma_kernel(const __grid_constant__ RecurrentParams p, const TmaGrid tg) {
  static_assert(!(kFused && kForms), "gdn_attention's step computes its gates in the default form");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  pdl_start();
  using Lay = TmaLayout<TAct, TS, KP, kTok, kFused>;
  extern __shared__ __align__(16) uint8_t tma_smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(tma_smem);
  uint64_t* empty = full + Lay::kMaxStages;
  uint64_t* gdone = empty + Lay::kMaxStages;  // fused: group buffers' barriers (free / written)
  uint64_t* gready = gdone + Lay::kGroupBufs;
  TAct* gbuf = reinterpret_cast<TAct*>(tma_smem + Lay::kBarBytes);
  uint8_t* stages = tma_smem + Lay::kHead;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < tg.stages; ++s) {
      mbar_init(&full[s], 1);   // the producer's arrive (plus the copies' bytes)
      mbar_init(&empty[s], 32);  // the consumer warp's 32 lanes
    }
    for (int s = 0; s < Lay::kGroupBufs; ++s) {
      mbar_init(&gdone[s], 32 * tg.group_items);  // every consumer lane of every item of the group
      mbar_init(&gready[s], 32);                  // every lane of the conv warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  int nk;
  if constexpr (kFused) {  // whole groups: b, b + grid, ...
    const int groups = static_cast<int>((p.group[0].n + p.group[1].n) * p.H);
    nk = (groups - static_cast<int>(blockIdx.x) + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x) *
         tg.group_items;
  } else {
    const int items = static_cast<int>((p.group[0].n + p.group[1].n) * p.HV * tg.tiles);
    nk = (items - static_cast<int>(blockIdx.x) + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x);
  }
  int pre = 0;  // fused: the block's first groups convolved by all but the producer (tma_conv_prologue)
  if constexpr (kFused)
    if (tg.pre > 0 && warp != Lay::kConsumers) {
      pre = tma_conv_prologue<TAct, TS, KP, kTok>(p, tg, nk, gbuf, gready, stages + (tg.stages - 1) * Lay::kStage,
                                                  warp > Lay::kConsumers,
                                                  (warp < Lay::kConsumers ? warp : warp - 1) * 32 + lane,
                                                  (Lay::kConsumers + Lay::kConvWarps) * 32, lane);
      bar_arrive(2, Lay::kThreads);
    }
  if (warp == Lay::kConsumers) {
    tma_produce<TAct, TS, KP, kTok, kFused, kForms>(p, tg, nk, stages, full, empty, kFused && tg.pre > 0, lane);
  } else if (warp < Lay::kConsumers) {
    tma_consume<TAct, TS, KP, kTok, kFused, kForms>(p, tg, nk, stages, full, empty, gbuf, gdone, gready, warp, lane);
  } else if constexpr (kFused) {
    const int cw = warp - Lay::kConsumers - 1;
    if (p.per_token_verify())  // the conv warp's per-token instance
      tma_conv_warp<TAct, TS, KP, kTok, true>(p, tg, nk, gbuf, gdone, gready, cw, Lay::kConvWarps, pre, lane);
    else
      tma_conv_warp<TAct, TS, KP, kTok, false>(p, tg, nk, gbuf, gdone, gready, cw, Lay::kConvWarps, pre, lane);
    if (tg.zc) copy_z<TAct, 32>(p.src, p.z, p.z_rs, blockIdx.x, gridDim.x, 0);  // z by the conv warp instead
  }
#else
  __trap();  // launched only where the device runs sm_90 code (checked on the host)
#endif
}

}  // namespace gdn::cuda
