// src/cuda/recurrent.cuh — gated delta rule, token by token, for decode, verify and short
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
#pragma once
#include "cuda/conv_channel.cuh"
#include "cuda/fused_step.cuh"
#include "cuda/rec_common.cuh"
#include "cuda/recurrent.h"
#include "cuda/recurrent_lean.cuh"
#include "cuda/recurrent_packed.cuh"
#include "cuda/tma_launch.cuh"

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
  float acc = c.bias;
#pragma unroll
  for (int j = 0; j < kMaxW; ++j)
    if (j < p.conv.W) acc += c.w[j] * u[j];
  if (p.conv.silu) acc = silu(acc);
  return round_to<TAct>(acc);  // the conv output is stored in the activation dtype
}

template <typename TAct, typename TState, int KP, bool kFused, bool kDense, int kForm>
__global__ void __launch_bounds__(RecTraits<TState, kFused, kForm>::kThreads,
                                  RecTraits<TState, kFused, kForm>::kMinBlocks)
    recurrent_kernel(const __grid_constant__ RecurrentParams p) {
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
  if (tr.len == 0) return;

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

  const float A = -expf(p.A_log(hv)), dtb = p.dt_bias(hv);
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
    run_tokens<TAct, TState, KP, kRows, kThreads, L, G, R, EPL, kDense, kTB>(p, g, i, tr, s, row0, lrow0, h, hv, A,
                                                                             dtb, tid, ln, s_stage);
  }
  if (!g.spec)
#pragma unroll
    for (int j = 0; j < R; ++j)
      if (row0 + j * G < p.V) store_row<TState, KP, EPL, kDense>(p, si.slot0, hv, row0 + j * G, ln, s[j]);
}

// The planner's view of a launch and the device's answers to its questions (plan/plan.h).
template <typename TAct, typename TS, int KP>
class KernelFacts final : public plan::Facts {
 public:
  KernelFacts(const RecurrentParams& p, int64_t nseq, bool fused, int dev, int sms)
      : p_(p), nseq_(nseq), fused_(fused), dev_(dev), sms_(sms) {}
  int sms() const override { return sms_; }
  int64_t pipelined_blocks(int kTok) const override {
    return fused_ ? cuda::pipelined_blocks<TAct, TS, KP, true>(dev_, kTok)
                  : cuda::pipelined_blocks<TAct, TS, KP, false>(dev_, kTok);
  }
  bool cluster_resident(bool lean) const override {
    using Tr = RecTraits<TS, true, kFormLarge>;
    const bool dense = kHasVec<TS, KP / Tr::kLanes> && !p_.kv_layout && p_.state_vec && p_.K == KP;
    return dense ? fused_step_resident<TAct, TS, KP, true>(p_, nseq_, lean)
                 : fused_step_resident<TAct, TS, KP, false>(p_, nseq_, lean);
  }
  int lean_blocks_per_sm(bool spec) const override { return cuda::lean_blocks_per_sm<TS>(spec); }

 private:
  const RecurrentParams& p_;
  int64_t nseq_;
  bool fused_;
  int dev_, sms_;
};

template <typename TAct, typename TS, int KP>
plan::Problem plan_problem(const RecurrentParams& p, int64_t nseq, bool fused) {
  plan::Problem pb;
  pb.step = fused;
  pb.state_bytes = static_cast<int>(sizeof(TS));
  pb.K = p.K, pb.V = p.V, pb.H = p.H, pb.HV = p.HV, pb.r = p.r;
  pb.nseq = nseq;
  pb.tokens = fused ? p.src.num_actual_tokens : batch_tokens(p);
  pb.spec = p.group[0].n > 0 ? p.group[0].spec : p.group[1].spec;
  for (const GroupMeta& g : p.group) pb.verify_cols |= g.n > 0 && g.spec && g.cols > 1;
  pb.dense = !p.kv_layout && p.state_vec;
  pb.pipelined_ok = fused ? pipelined_ok<TAct, TS, KP, true>(p, nseq) : pipelined_ok<TAct, TS, KP, false>(p, nseq);
  if (fused) {
    pipelined_problem<TAct, TS, KP, true>(p, pb);
    pb.cluster_ok = step_cluster_ok<StepTraits<TS>>(p);
    pb.cluster_blocks = step_cluster_blocks<StepTraits<TS>>(p);
    pb.per_token_verify = p.per_token_verify();
  } else {
    pipelined_problem<TAct, TS, KP, false>(p, pb);
    if constexpr (KP == 128) lean_problem<TAct, TS>(p, nseq, pb.spec, pb);
  }
  return pb;
}

// The device's compute capability and SM count, queried once per device.
inline Status device_of(int* dev, int* major, int* sms) {
  constexpr int kMaxDev = 64;
  static int majors[kMaxDev], counts[kMaxDev];  // 0: not yet queried
  GDN_CUDA_CHECK(cudaGetDevice(dev));
  if (*dev >= 0 && *dev < kMaxDev && counts[*dev] > 0) {
    *major = majors[*dev], *sms = counts[*dev];
    return Status::Ok();
  }
  GDN_CUDA_CHECK(cudaDeviceGetAttribute(major, cudaDevAttrComputeCapabilityMajor, *dev));
  GDN_CUDA_CHECK(cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, *dev));
  if (*dev >= 0 && *dev < kMaxDev) majors[*dev] = *major, counts[*dev] = *sms;  // same values from any thread
  return Status::Ok();
}

template <typename TAct, typename TS>
Status launch_recurrent(const RecurrentParams& p, bool fused, plan::Override force, cudaStream_t stream,
                        bool* one_launch) {
  *one_launch = false;
  const int64_t nseq = p.group[0].n + p.group[1].n;
  if (nseq == 0) return Status::Ok();  // (fused: the caller's conv kernel copies z)
  int dev = 0, major = 0, sms = 0;
  GDN_RETURN_IF_ERROR(device_of(&dev, &major, &sms));
  auto go = [&](auto kp_tag) -> Status {
    constexpr int KP = decltype(kp_tag)::value;
    const KernelFacts<TAct, TS, KP> facts(p, nseq, fused, dev, sms);
    const plan::Problem pb = plan_problem<TAct, TS, KP>(p, nseq, fused);
    const plan::Plan pl = plan::plan_launch(pb, major, facts, force);
    auto run = [&](auto fused_tag, auto form_tag) -> Status {
      constexpr bool kF = decltype(fused_tag)::value;
      constexpr int kFm = decltype(form_tag)::value;
      using Tr = RecTraits<TS, kF, kFm>;
      constexpr int EPL = KP / Tr::kLanes;
      const bool dense = kHasVec<TS, EPL> && !p.kv_layout && p.state_vec && p.K == KP;
      if constexpr (kF) {
        if (pl.path == plan::Path::kStepCluster || pl.path == plan::Path::kStepClusterLean) {
          static_assert(RecTraits<TS, false>::kLanes == Tr::kLanes, "one dense decision for both fused forms");
          const Status st = dense ? launch_fused_step<TAct, TS, KP, true>(p, nseq, pl, stream)
                                  : launch_fused_step<TAct, TS, KP, false>(p, nseq, pl, stream);
          *one_launch = st.ok();
          return st;
        }
      }
      const dim3 grid(static_cast<unsigned>((p.V + Tr::kRows - 1) / Tr::kRows), static_cast<unsigned>(p.HV),
                      static_cast<unsigned>(nseq));
      return Launch(grid, Tr::kThreads, 0, stream)(dense ? recurrent_kernel<TAct, TS, KP, kF, true, kFm>
                                                         : recurrent_kernel<TAct, TS, KP, kF, false, kFm>,
                                                   p);
    };
    using T = std::true_type;
    using F = std::false_type;
    using Large = std::integral_constant<int, kFormLarge>;
    using Small = std::integral_constant<int, kFormSmall>;
    using Mid = std::integral_constant<int, kFormMid>;
    switch (pl.path) {
      case plan::Path::kStepPipelined:
      case plan::Path::kStepPipelinedPrologue: {
        const Status st = launch_pipelined<TAct, TS, KP, true>(p, pl, stream);
        *one_launch = st.ok();
        return st;
      }
      case plan::Path::kStepCluster:
      case plan::Path::kStepClusterLean:
      case plan::Path::kStepTwoLaunches:
        return run(T{}, Large{});
      case plan::Path::kLean:
      case plan::Path::kLeanMore:
      case plan::Path::kLeanStaged:
        if constexpr (KP == 128) return launch_lean<TAct, TS>(p, nseq, pb.spec, pl.path, stream);
        break;
      case plan::Path::kPipelined:
        return launch_pipelined<TAct, TS, KP, false>(p, pl, stream);
      case plan::Path::kRegisterSmall:
        return run(F{}, Small{});
      case plan::Path::kRegisterMid:
        if constexpr (sizeof(TS) == 2 && KP == 128) return run(F{}, Mid{});
        break;
      case plan::Path::kPacked:
        if constexpr (sizeof(TS) == 2 && KP == 128) {
          const dim3 grid(static_cast<unsigned>((p.V + PackedTraits::kRows - 1) / PackedTraits::kRows),
                          static_cast<unsigned>(p.HV), static_cast<unsigned>(nseq));
          return Launch(grid, PackedTraits::kThreads, 0, stream)(recurrent_packed_kernel<TAct, TS, KP>, p);
        }
        break;
      case plan::Path::kRegisterLarge:
        return run(F{}, Large{});
      default:
        break;
    }
    return Status::Error(std::string("internal: planned kernel ") + plan::path_name(pl.path) +
                         " has no instance for this launch");
  };
  if (p.K <= 32) return go(std::integral_constant<int, 32>{});
  if (p.K <= 64) return go(std::integral_constant<int, 64>{});
  if (p.K <= 128) return go(std::integral_constant<int, 128>{});
  if (p.K <= 256) return go(std::integral_constant<int, 256>{});
  return Status::Error("unsupported head_k_dim " + std::to_string(p.K) + " on CUDA: at most 256");
}

}  // namespace gdn::cuda
