// src/cuda/chunk/chunk.cuh — gated_delta_rule_chunked on tensor cores (mma.sync, sm_80+): chunks of
// 64 tokens in the WY/UT form of the CPU backend (src/cpu/chunked.cpp), with S kept transposed
// (H = S^T, K x V) so that every product is a plain matrix product:
//   L[i][j] = beta_i exp(G_i - G_j) k^_i . k^_j  (j < i),  T = (I + L)^-1
//   W = T diag(beta exp(G)) k^,  U = T diag(beta) v,   delta = U - W H,
//   o = diag(exp(G)) q^ H + P delta,  P[i][j] = exp(G_i - G_j) q^_i . k^_j  (j <= i),
//   H' = exp(G_last) H + k^T diag(exp(G_last - G)) delta.
// A block is (value-column slice of VS, value head, sequence), two warp groups in a pipeline over
// the sequence's chunks, two chunks in flight (shared-memory buffers 0 and 1; the small form's one
// buffer: the groups take turns):
//   producers (warps 0-3, chunk_prep.cuh): what does not depend on the state — gates, norms, P, L,
//     T's blocks and [W | U] — for chunk c + 1 while
//   consumers (warps 4-7, here; VS = 128: warps 4-11, two per row index, one half of the columns
//     each): delta, o and the state update of chunk c, with H's slice in
//     registers (warp w: rows 32w..32w+31, mma accumulators) and its 16-bit copy in shared memory
//     as the next chunk's operand; then they stage chunk c + 2's inputs into c's buffer (the raw q,
//     k, v, a, b, stage_chunk; gdn_attention: q, k, v from conv_rows.cu's buffer), so that the producers,
//     the longer chain, never wait for a load (the consumers stage chunks 0 and 1 first). With
//     tensor maps (ChunkMaps, 9.x devices) a whole chunk's q, k and v are three TMA copies issued
//     by one consumer thread, which the producers wait for on the buffer's mbarrier.
// Split form (ChunkParams::prep, chunk_split.cuh): the prep kernel has written every chunk's key
// side beforehand (W, P, the vectors and T's blocks); the producers only issue the loads of a
// chunk's records and raw q, k, v into the buffer the consumers released (three buffers,
// SplitLayout), two chunks' loads in flight while the consumers work; a third group, the solvers
// (warps 8-11), takes each chunk once landed, solves U for the block's columns in place of v and
// hands the chunk over, so that neither the issue of the loads nor the solve waits for the other;
// the chain per chunk is the consumers' alone.
// The l2 norms, beta and the decays are row and column scalings in float32 of products of the raw
// 16-bit inputs (no normalised copy is stored). T is never formed: producer warp b inverts the
// 16 x 16 diagonal block D_b = (I + L_bb)^-1 (float32 forward substitution) and forms
// M_bm = -D_b L_bm; then each producer warp solves (I + L) [W | U] = diag(c) [k | v] for its slice
// of the columns, Y_b = D_b diag(c_b) X_b + sum_{m<b} M_bm Y_m. Products take 16-bit inputs (the
// activation dtype) and accumulate in float32, as FLA's chunk kernel does; outputs and the state
// are rounded once.
#pragma once
#include "cuda/chunk/chunk_split.cuh"

namespace gdn::cuda::chunk {

// The chunks of one (value slice, value head, sequence) block, after the padding checks: layout L
// (Layout, or SplitLayout where kSplit: the producers load the prep kernel's records).
template <typename TAct, typename TState, typename L, bool kSplit>
__device__ __forceinline__ void run_chunks(const ChunkParams& p, const ChunkMaps& maps, unsigned char* smem,
                                           const SeqInfo& si, int h, int hv, int v0, TAct* o) {
  constexpr int VS = L::kVS, kLdV = L::kLdV, kB = L::kBufs;
  // a consumer warp's columns: all VS, or (kWide) one half of 64; kNV: its value n-tiles of 8 columns
  constexpr bool kWide = L::kWide;  // (SplitLayout: never)
  constexpr int kCW = cons_warps(VS), kNV = (kWide ? 64 : VS) / 8;
  constexpr int kPC = kGroupThreads + 32 * kCW;  // producers (or the split form's solvers) and consumers
  static_assert(VS % 16 == 0, "pairs of value n-tiles");
  static_assert(!kSplit || kCW == 4, "the split form: four consumer warps");
  TAct* s16 = reinterpret_cast<TAct*>(smem);
  float* sf = reinterpret_cast<float*>(smem + static_cast<size_t>(L::k16) * 2);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t len = si.tr.len, lt_begin = si.tr.begin;
  const int64_t nchunks = (len + kC - 1) / kC;
  auto chunk_len = [&](int64_t ci) { return static_cast<int>(len - ci * kC < kC ? len - ci * kC : kC); };
  auto buf_of = [](int64_t ci) { return static_cast<int>(static_cast<uint64_t>(ci) % kB); };
  const ChunkSrc<TAct> src = chunk_src<TAct>(p, h, hv, v0);
  // With tensor maps (where the launcher gives them, 9.x devices): a whole chunk's q, k and v
  // through TMA, completing on the buffer's mbarrier (its k-th full chunk: phase k); a sequence's
  // last, partial chunk by cp.async (its rows past the sequence zero, not the next tokens).
  const bool tma = !kSplit && maps.ok;
  uint64_t* tbar = nullptr;
  if constexpr (!kSplit) tbar = reinterpret_cast<uint64_t*>(smem + L::kBarAt);
  auto tma_chunk = [&](int64_t ci) { return tma && chunk_len(ci) == kC; };
  if (tma) {
    if (tid == 0) {
      for (int b = 0; b < kB; ++b) mbar_init(tbar + b, 1);  // one arrival: the thread that issues the copies
      mbar_init_fence();
    }
    __syncthreads();
  }

  if constexpr (kSplit) {
    if (warp >= 8) {  // solvers: chunk cj's U once its loads land, then its hand-over
      for (int64_t cj = 0; cj < nchunks; ++cj) {
        uint32_t a[10][4];  // T's blocks, fetched while the loads land
        load_frags(frag_at<TAct>(p, hv, blockIdx.z, lt_begin + cj * kC), lane, a);
        mma::bar_sync(kLanded + buf_of(cj), kThreads);
        finish_chunk<L>(smem, buf_of(cj), chunk_len(cj), tid - 2 * kGroupThreads);
        solve_u<TAct, L>(smem, a, buf_of(cj), warp - 8, lane);
        mma::bar_arrive(kFull + buf_of(cj), kPC);
      }
      return;
    }
  }
  if (warp < 4) {  // producers
    if constexpr (kSplit) {
      // Iteration ci: chunk ci - kLag, whose loads were issued kLag iterations ago, handed to the
      // solvers once landed; then chunk ci's loads issued into the buffer the consumers release
      // when they finish chunk ci - kB (the one before ci - kLag), kLag chunks in flight.
      constexpr int kLag = kB - 1;
      for (int64_t ci = 0; ci < nchunks + kLag; ++ci) {
        const int64_t cj = ci - kLag;
        if (cj >= 0) {
          mma::cp_async_wait<kLag - 1>();  // the groups up to cj's (one group per iteration)
          mma::bar_arrive(kLanded + buf_of(cj), kThreads);
        }
        if (ci < nchunks) {
          mma::bar_sync(kEmpty + buf_of(ci), kPC);
          issue_chunk<TAct, L>(p, src, smem, buf_of(ci), lt_begin + ci * kC, chunk_len(ci), hv, tid);
        } else {
          mma::cp_async_commit();  // an empty group: one group per iteration, as the wait counts
        }
      }
    } else {
      float A, dtb;
      head_decay(p, p.gates, hv, A, dtb);
      for (int64_t ci = 0; ci < nchunks; ++ci) {
        const int buf = buf_of(ci);
        mma::bar_sync(kEmpty + buf, kPC);  // the consumers staged chunk ci into buf
        if (tma_chunk(ci)) mbar_wait(tbar + buf, static_cast<uint32_t>(ci / kB) & 1u);
        prep_chunk<TAct, L>(p, smem, buf, chunk_len(ci), A, dtb, warp, lane, tid);
        if (tma) fence_proxy_async();  // U written over v, which a later TMA copy overwrites
        mma::bar_arrive(kFull + buf, kPC);
      }
    }
    return;
  }
  // Consumers: warp w owns token rows 16 w.. of a chunk and rows 32 w.. of H, over the columns vh..
  // (kWide: the warps 4 apart share their rows, one half of the columns each).
  const int w = (warp - 4) & 3, vh = kWide ? 64 * ((warp - 4) >> 2) : 0;
  // Consumers: chunk ci's inputs into buffer buf_of(ci), for the producers (kWide: warps 4-7 stage;
  // split: the producers load it, the consumers only release the buffer).
  auto stage = [&](int64_t ci) {
    if constexpr (!kSplit) {
      if (!kWide || vh == 0) {
        const bool by_tma = tma_chunk(ci);
        if (by_tma && tid == kGroupThreads) {
          const int buf = buf_of(ci), row = static_cast<int>(lt_begin + ci * kC);
          constexpr uint32_t kBytes = kC * (2 * kLdK + kLdV) * sizeof(TAct);
          mbar_arrive_tx(tbar + buf, kBytes);
          tensor_load_3d(s16 + L::kQ + buf * kC * kLdK, &maps.q, 0, h, row, tbar + buf);
          tensor_load_3d(s16 + L::kKr + buf * kC * kLdK, &maps.k, 0, h, row, tbar + buf);
          tensor_load_3d(s16 + L::kV + buf * kC * kLdV, &maps.v, v0, hv, row, tbar + buf);
        }
        stage_chunk<TAct, L>(p, src, smem, buf_of(ci), lt_begin + ci * kC, chunk_len(ci), tid - kGroupThreads,
                             kWide ? kStage : kCons, !by_tma);
      }
    }
    mma::bar_arrive(kEmpty + buf_of(ci), kPC);
  };

  const int gq = lane >> 2, cq = 2 * (lane & 3);
  TAct *sDel = s16 + L::kDel, *sDd = s16 + L::kDd, *sS = s16 + L::kS;
  float hacc[2][kNV][4];  // H rows kr = 32 w + 16 mt + gq (+8), columns 8 nt + cq (+1) of the slice
  TState* st = static_cast<TState*>(p.state) + si.slot0 * p.state_slot_stride + static_cast<int64_t>(hv) * p.V * p.K;
  auto state_at = [&](int kr, int vc) -> int64_t {
    return p.kv_layout ? static_cast<int64_t>(kr) * p.V + v0 + vc : static_cast<int64_t>(v0 + vc) * p.K + kr;
  };
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNV; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int kr = 32 * w + 16 * mt + gq + 8 * (e >> 1), vc = vh + 8 * nt + cq + (e & 1);
        hacc[mt][nt][e] = si.init ? to_float(st[state_at(kr, vc)]) : 0.f;
      }
  auto store_h16 = [&]() {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNV; ++nt) {
        const int kr = 32 * w + 16 * mt + gq, vc = vh + 8 * nt + cq;
        st2(sS + kr * kLdV + vc, hacc[mt][nt][0], hacc[mt][nt][1]);
        st2(sS + (kr + 8) * kLdV + vc, hacc[mt][nt][2], hacc[mt][nt][3]);
      }
  };
  store_h16();

  // Chunk ci: delta, o and the state update.
  auto consume = [&](int64_t ci) {
    const int buf = buf_of(ci), n = chunk_len(ci);
    const TAct* cqp = s16 + L::kQ + buf * kC * kLdK;
    const TAct* ckp = s16 + L::kKr + buf * kC * kLdK;
    TAct* const sW = s16 + L::kW + buf * kC * kLdK;
    TAct* const sU = s16 + L::kU + buf * kC * kLdV;
    const TAct* sP = s16 + L::kP + buf * kC * kLdL;
    const ChunkVecs cv = chunk_vecs(sf + L::kVec, buf);
    const int64_t* crow = chunk_rows(smem, L::kRowsAt, buf);
    // delta and its scaled copy (kWide: over U and W of the buffer), this warp's columns
    TAct* const dl = (kWide ? sU : sDel) + vh;
    TAct* const dd = (kWide ? sW : sDd) + vh;
    constexpr int kLdDd = kWide ? kLdK : kLdV;
    mma::bar_sync(kFull + buf, kPC);  // the chunk's inputs, and every consumer's H copy
    // delta = U - W H and the inter-chunk output q^ H (scaled by exp(G) below), this warp's rows.
    const int ri = 16 * w + gq;  // rows ri and ri + 8
    float accd[kNV][4], acco[kNV][4];
#pragma unroll
    for (int nt = 0; nt < kNV; ++nt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t u = *reinterpret_cast<const uint32_t*>(sU + (ri + 8 * r) * kLdV + vh + 8 * nt + cq);
        const TAct* e = reinterpret_cast<const TAct*>(&u);
        accd[nt][2 * r] = to_float(e[0]);
        accd[nt][2 * r + 1] = to_float(e[1]);
        acco[nt][2 * r] = acco[nt][2 * r + 1] = 0.f;
      }
#pragma unroll
    for (int kt = 0; kt < kK / 16; ++kt) {
      uint32_t aw[4], aq[4];
      mma::ldsm4(aw, mma::a_tile(sW, kLdK, 16 * w, 16 * kt, lane));
      mma::negate(aw);
      mma::ldsm4(aq, mma::a_tile(cqp, kLdK, 16 * w, 16 * kt, lane));
#pragma unroll
      for (int np = 0; np < kNV / 2; ++np) {
        uint32_t b[4];
        mma::ldsm4_t(b, mma::b_pair(sS, kLdV, 16 * kt, vh + 16 * np, lane));
        mma::mma16816<TAct>(accd[2 * np], aw, b[0], b[1]);
        mma::mma16816<TAct>(accd[2 * np + 1], aw, b[2], b[3]);
        mma::mma16816<TAct>(acco[2 * np], aq, b[0], b[1]);
        mma::mma16816<TAct>(acco[2 * np + 1], aq, b[2], b[3]);
      }
    }
    const float Gl = cv.G[kC - 1];
    if constexpr (kWide) mma::bar_sync(kPair + w, 64);  // both warps of these rows have read W's
    {
      float oi[2], di[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float Gi = cv.G[ri + 8 * r];
        oi[r] = expf(Gi) * cv.nq[ri + 8 * r];
        di[r] = expf(Gl - Gi) * cv.nk[ri + 8 * r];
      }
#pragma unroll
      for (int nt = 0; nt < kNV; ++nt) {
        const int c = 8 * nt + cq;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          acco[nt][2 * r] *= oi[r];
          acco[nt][2 * r + 1] *= oi[r];
          st2(dl + (ri + 8 * r) * kLdV + c, accd[nt][2 * r], accd[nt][2 * r + 1]);
          st2(dd + (ri + 8 * r) * kLdDd + c, accd[nt][2 * r] * di[r], accd[nt][2 * r + 1] * di[r]);
        }
      }
    }
    mma::bar_sync(kCons, 32 * kCW);  // every row of delta; every read of the old H copy done

    // o += P delta (token blocks up to this warp's), stored.
#pragma unroll
    for (int kt = 0; kt < 4; ++kt)
      if (kt <= w) {
        uint32_t pf[4];
        mma::ldsm4(pf, mma::a_tile(sP, kLdL, 16 * w, 16 * kt, lane));
#pragma unroll
        for (int np = 0; np < kNV / 2; ++np) {
          uint32_t b[4];
          mma::ldsm4_t(b, mma::b_pair(dl, kLdV, 16 * kt, 16 * np, lane));
          mma::mma16816<TAct>(acco[2 * np], pf, b[0], b[1]);
          mma::mma16816<TAct>(acco[2 * np + 1], pf, b[2], b[3]);
        }
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int t = ri + 8 * r;
      if (t < n) {
        TAct* orow = o + (p.fused ? crow[t] : lt_begin + ci * kC + t) * p.o_rs;
#pragma unroll
        for (int nt = 0; nt < kNV; ++nt) st2(orow + vh + 8 * nt + cq, acco[nt][2 * r], acco[nt][2 * r + 1]);
      }
    }
    // H = exp(G_last) H + k^T (diag(exp(G_last - G) / |k|) delta), this warp's rows; its 16-bit copy.
    const float eg = expf(Gl);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNV; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) hacc[mt][nt][e] *= eg;
#pragma unroll
    for (int kt = 0; kt < 4; ++kt) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        uint32_t a[4];
        mma::ldsm4_t(a, mma::at_tile(ckp, kLdK, 16 * kt, 32 * w + 16 * mt, lane));
#pragma unroll
        for (int np = 0; np < kNV / 2; ++np) {
          uint32_t b[4];
          mma::ldsm4_t(b, mma::b_pair(dd, kLdDd, 16 * kt, 16 * np, lane));
          mma::mma16816<TAct>(hacc[mt][2 * np], a, b[0], b[1]);
          mma::mma16816<TAct>(hacc[mt][2 * np + 1], a, b[2], b[3]);
        }
      }
    }
    store_h16();
  };
  // Iteration ci: chunk ci (from 0), then chunk ci + kB's inputs into its buffer (the non-split form's
  // consumers write the buffer, so first every consumer's reads of it must be done; the split form's
  // only release it, each after its own reads).
  for (int64_t ci = -kB; ci < nchunks; ++ci) {
    if (ci >= 0) consume(ci);
    if (ci + kB < nchunks) {
      if (!kSplit && ci >= 0) {
        if (tma) fence_proxy_async();  // delta written over U, which the TMA copy overwrites
        mma::bar_sync(kCons, 32 * kCW);
      }
      stage(ci + kB);
    }
  }

  // The final state, rounded once.
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNV; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int kr = 32 * w + 16 * mt + gq + 8 * (e >> 1), vc = vh + 8 * nt + cq + (e & 1);
        st[state_at(kr, vc)] = from_float<TState>(hacc[mt][nt][e]);
      }
}

// kSplit: the split form's instance (VS = 32, bfloat16; ChunkParams::prep set; kSplitThreads); a
// batch whose offsets decrease (the prep kernel wrote nothing) runs the producers' form in the same
// shared memory, without the solvers.
// kSmall: the layouts of fewer buffers (ChunkParams::small).
template <int VS, bool kSmall>
using ProducerLayout = Layout<VS, kSmall ? 1 : 2>;
template <int VS, bool kSmall>
using LoadLayout = SplitLayout<VS, kSmall ? 2 : 3>;
template <typename TAct, typename TState, int VS, bool kSplit, bool kSmall>
__global__ void __launch_bounds__(block_threads(kSplit, VS), 1)
    chunk_kernel(const ChunkParams p, const __grid_constant__ ChunkMaps maps) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = threadIdx.x;
  const int v0 = blockIdx.x * VS, hv = blockIdx.y, h = hv / p.r;
  pdl_start();
  const SeqInfo si = resolve_seq(p, p.group[0], blockIdx.z, p.fused);
  const int64_t len = si.tr.len, lt_begin = si.tr.begin;
  if (len == 0) return;
  const bool ordered = (p.fused || kSplit) ? ordered_offsets(p.group[0]) : true;
  // fused: short sequences, and every sequence of a batch whose offsets decrease, are the step's
  if (p.fused && (len < p.chunk_from || !ordered)) return;
  TAct* o = static_cast<TAct*>(p.o) + static_cast<int64_t>(hv) * p.V + v0;
  bool pad = si.pad;
  if (p.fused) {  // a token outside the buffer makes its sequence padding
    bool bad = false;
    for (int64_t t = tid; t < len; t += blockDim.x) bad |= global_row(p.group[0], lt_begin + t, p.src.num_actual_tokens) < 0;
    pad = __syncthreads_or(bad) || pad;
  }
  if (pad) {  // padding: zero outputs, no state read or written
    for (int64_t e = tid; e < len * (VS / 8); e += blockDim.x) {
      const int64_t r = p.fused ? global_row(p.group[0], lt_begin + e / (VS / 8), p.src.num_actual_tokens)
                                : lt_begin + e / (VS / 8);
      if (r >= 0) *reinterpret_cast<uint4*>(o + r * p.o_rs + (e % (VS / 8)) * 8) = make_uint4(0, 0, 0, 0);
    }
    return;
  }
  if constexpr (kSplit) {
    if (ordered) {
      run_chunks<TAct, TState, LoadLayout<VS, kSmall>, true>(p, maps, smem, si, h, hv, v0, o);
      return;
    }
    if (tid >= kThreads) return;  // (no solvers in the producers' form)
  }
  run_chunks<TAct, TState, ProducerLayout<VS, kSmall>, false>(p, maps, smem, si, h, hv, v0, o);
}

}  // namespace gdn::cuda::chunk
