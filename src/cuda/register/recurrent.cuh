// src/cuda/register/recurrent.cuh — gated delta rule, token by token, for decode, verify and short
// non-spec sequences (gated_delta_rule_recurrent / _chunked), and gdn_attention's fused step when
// it cannot be one launch (fused_step.cuh): then this kernel also computes the causal conv of the
// projections on the fly (reading the conv pool only) and conv.cu updates the pool and copies z.
//   grid  = (ceil(V / kRows), HV, sequences of both groups)
//   block = kWarps warps (RecTraits; lane mapping in rec_common.cuh); the block owns kRows rows of
//           one (sequence, value head) and keeps them in registers for the whole sequence.
// The sequence's metadata is read with independent loads (resolve_seq), so the state load waits
// on one dependent load at most. Per token, the block stages the token's raw q, k (K each), its
// kRows values of v, and a, b in shared memory, then every warp runs the recurrence for its rows.
// State is read once (column a-1 for verify), written after every verify token into column t,
// or once at the end for non-spec sequences.
// kForms (the primitive op only): the gate-form instance, which also takes the other gate and norm
// forms of ops.h (RecurrentParams::gates: the log-space decay given, beta given, no l2 norm; a and b
// in float32 or the activation dtype), by the math of gates.cuh; the other instances (and every other
// recurrence kernel) take the default form only.
#pragma once
#include "cuda/common/rec_common.cuh"
#include "cuda/conv/conv_channel.cuh"

namespace gdn::cuda {

// Fused conv, per block: the conv channels a block needs (q and k of its key head, v of its rows)
// with their weights, bias and qkvz column, staged once in shared memory.
template <typename TAct>
struct ConvChannel {
  float w[kMaxW];
  float bias;
  int ch;   // conv channel, -1 when padding (past K or V)
  int col;  // qkvz column
};

// y = act(bias + sum_j w[j] * tap_j), tap_j = input t+j of (window ++ tokens), rounded to TAct.
// The taps are loaded together (unrolled to kMaxW, predicated on W), then summed in tap order.
template <typename TAct>
__device__ __forceinline__ float conv_token(const RecurrentParams& p, const GroupMeta& g, const ConvChannel<TAct>& c,
                                            int64_t begin, int64_t t, ConvWindow win, bool init) {
  const int W1 = p.conv.W - 1;
  const TAct* cs = static_cast<const TAct*>(p.conv.state) + win.slot * p.conv.slot_stride + c.ch;
  const TAct* x = static_cast<const TAct*>(p.src.qkvz) + c.col;
  float u[kMaxW];
#pragma unroll
  for (int j = 0; j < kMaxW; ++j) {
    u[j] = 0.f;
    if (j < p.conv.W) {
      const int64_t idx = t + j;
      if (idx < W1) {
        if (init) u[j] = to_float(cs[(win.base + idx) * p.conv.D]);
      } else {
        const int64_t row = global_row(g, begin + idx - W1, p.src.num_actual_tokens);
        u[j] = to_float(x[row * p.src.qkvz_rs]);
      }
    }
  }
  float acc = conv_taps<kMaxW>(c.bias, 0, p.conv.W, [&](int j) { return c.w[j]; }, [&](int j) { return u[j]; });
  if (p.conv.silu) acc = silu(acc);
  return round_to<TAct>(acc);  // the conv output is stored in the activation dtype
}

template <typename TAct, typename TState, int KP, bool kFused, bool kDense, int kForm, bool kForms = false>
__global__ void __launch_bounds__(RecTraits<TState, kFused, kForm>::kThreads,
                                  RecTraits<TState, kFused, kForm>::kMinBlocks)
    recurrent_kernel(const __grid_constant__ RecurrentParams p) {
  static_assert(!(kFused && kForms), "gdn_attention's step computes its gates in the default form");
  using Tr = RecTraits<TState, kFused, kForm>;
  constexpr int L = Tr::kLanes, G = Tr::kGroups, R = Tr::kRowsPerLane, EPL = KP / L;
  constexpr int kRows = Tr::kRows, kThreads = Tr::kThreads;
  static_assert(KP % L == 0, "K padded to whole lane groups");
  constexpr int kCh = kFused ? 2 * KP + kRows : 1;  // fused: [q channels | k channels | v rows]
  __shared__ ConvChannel<TAct> s_ch[kCh];
  constexpr int kTB = Tr::kTokens;  // tokens staged at once
  __shared__ TokenStage<KP, kRows, kTB> s_stage;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, ln = lane % L;
  const int hv = blockIdx.y, h = hv / p.r;
  // Row of this lane group's step j: row0 + j * G; its block-local index: lrow0 + j * G.
  const int lrow0 = warp * Tr::kRowsPerWarp + lane / L;
  const int row0 = blockIdx.x * kRows + lrow0;
  const SeqRef sq = seq_ref(p, blockIdx.z);
  const GroupMeta& g = p.group[sq.gi];
  const int64_t i = sq.i;
  const int64_t out_rows = kFused ? p.src.num_actual_tokens : g.limit;
  const SeqInfo si = start_seq(p, g, i, kFused);  // pdl_start() here
  const auto tr = si.tr;
  if (tr.len == 0 || (kFused && !g.spec && tr.len >= p.chunk_from && ordered_offsets(g))) return;  // the chunk kernel's

  // The state rows, requested before anything else (both slots are in the pool, so the loads are
  // safe even if a token row later makes the sequence padding).
  float s[R][EPL];
#pragma unroll
  for (int j = 0; j < R; ++j) {
#pragma unroll
    for (int e = 0; e < EPL; ++e) s[j][e] = 0.f;
    if (!si.pad && si.init && row0 + j * G < p.V)
      load_row<TState, KP, EPL, kDense>(p, si.read_slot, hv, row0 + j * G, ln, s[j]);
  }
  bool pad = si.pad;
  if (kFused) {  // a token outside the buffer makes its sequence padding
    bool bad_row = false;
    for (int64_t t = tid; t < tr.len; t += kThreads) bad_row |= global_row(g, tr.begin + t, out_rows) < 0;
    pad = __syncthreads_or(bad_row) || pad;
  }
  if (pad) {
    zero_outputs<TAct, R, G>(p, g, tr, out_rows, hv, row0, ln);
    return;
  }

  float A, dtb;
  head_decay(p, kForms ? p.gates : GateForm{}, hv, A, dtb);
  const ConvWindow win = conv_window(g.spec, p.conv_per_token, si.slot0, si.read_slot, si.acc);  // fused
  if constexpr (kFused) {
    const auto& PL = p.src.proj;
    for (int c = tid; c < kCh; c += kThreads) {
      ConvChannel<TAct> ch;
      if (c < 2 * KP) {  // q (c < KP) or k channel kc of key head h
        const int kc = c < KP ? c : c - KP;
        ch.ch = kc < p.K ? (c < KP ? 0 : PL.H * PL.K) + h * p.K + kc : -1;
      } else {
        const int vi = blockIdx.x * kRows + (c - 2 * KP);
        ch.ch = vi < p.V ? 2 * PL.H * PL.K + hv * p.V + vi : -1;
      }
      ch.col = ch.ch >= 0 ? PL.conv_col(ch.ch) : 0;
      const TAct* w = static_cast<const TAct*>(p.conv.weight) + static_cast<int64_t>(ch.ch) * p.conv.weight_rs;
#pragma unroll
      for (int j = 0; j < kMaxW; ++j) ch.w[j] = (ch.ch >= 0 && j < p.conv.W) ? to_float(w[j]) : 0.f;
      ch.bias = (ch.ch >= 0 && p.conv.bias) ? to_float(static_cast<const TAct*>(p.conv.bias)[ch.ch]) : 0.f;
      s_ch[c] = ch;
    }
  }
  if constexpr (kFused) {
    for (int64_t t = 0; t < tr.len; ++t) {
      const int64_t row = global_row(g, tr.begin + t, out_rows);
      __syncthreads();  // the previous token's shared inputs are consumed
      for (int c = tid; c < kCh; c += kThreads) {
        const ConvChannel<TAct>& ch = s_ch[c];
        const float y = ch.ch >= 0 ? conv_token<TAct>(p, g, ch, tr.begin, t, win, si.init) : 0.f;
        if (c < KP) s_stage.q[0][c] = y;
        else if (c < 2 * KP) s_stage.k[0][c - KP] = y;
        else s_stage.v[0][c - 2 * KP] = y;
      }
      if (tid < 2) {
        const TAct* ba = static_cast<const TAct*>(p.src.ba) + row * p.src.ba_rs;
        s_stage.ab[0][tid] = to_float(ba[tid == 0 ? p.src.proj.a_col(hv) : p.src.proj.b_col(hv)]);
      }
      __syncthreads();
      const float mine =
          recur_token<L, G, R, EPL>(s, s_stage.q[0], s_stage.k[0], s_stage.v[0], lrow0, p.V - row0, s_stage.ab[0][0],
                                    s_stage.ab[0][1], A, dtb, p.scale, ln);
      emit_token<TAct, TState, KP, R, EPL, G, kDense>(p, g, i, t, row, hv, row0, ln, mine, s);
    }
  } else {
    run_tokens<TAct, TState, KP, kRows, kThreads, L, G, R, EPL, kDense, kTB, kForms>(p, g, i, tr, s, row0, lrow0, h,
                                                                                     hv, A, dtb, tid, ln, s_stage);
  }
  if (!g.spec)
#pragma unroll
    for (int j = 0; j < R; ++j)
      if (row0 + j * G < p.V) store_row<TState, KP, EPL, kDense>(p, si.slot0, hv, row0 + j * G, ln, s[j]);
}

}  // namespace gdn::cuda
