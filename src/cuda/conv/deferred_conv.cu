// gdn_attention's causal conv in the deferred-commit mode (docs/contract.md §7) on CUDA. One thread
// per (sequence, channel) of both groups, as conv.cu: the sequence's committed window (rows 0..W-2 of
// its slot; zeros without an initial state) with the replayed conv-log rows slid in (rows 0, 1, ... or
// the accepted path's, ending at an entry outside the log), then the step's tokens: a chain (window ++
// tokens) or, for verify sequences with token parents, each token's window the W-1 inputs before it
// on its root-to-token path (from the committed window past the root). The outputs, summed as
// conv_channel does (window_conv) and rounded to the activation dtype, go to the workspace rows that
// the deferred recurrence reads as q, k and v; the channels past D copy each token's a and b there.
// Verify sequences store the committed window before their tokens and log each token's input (rows
// < log_cols of conv_log_out); non-spec ones store the window after their last token (or the
// committed one when they have none). Padding sequences (an unusable slot, a token outside
// [0, num_actual_tokens)) write nothing. Extra block rows copy z (copy_z).
//   grid = (<= ceil((D + 2 HV) / 128), sequences of both groups [+ block rows for z]), block = 128
#include "common/seq_rules.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/rec_common.cuh"
#include "cuda/conv/conv.h"
#include "cuda/conv/conv_channel.cuh"

namespace gdn::cuda {
namespace {

constexpr int kDeferredConvThreads = 128;

// A block's sequence (not padding): its group and index there, slot, tokens, replay, and where its
// local tokens' workspace rows start.
struct DeferredSeq {
  const GroupMeta* g;
  int64_t i, slot, n_rep, ws0;
  rules::TokenRange tr;
  IndexRef path;
  bool init, log_tokens, tree;
};

// qkvz column `col` of the sequence's token t (its row exists: the sequence is not padding).
template <typename TAct>
__device__ __forceinline__ TAct token_input(const DeferredConvParams& p, const DeferredSeq& s, int64_t t, int col) {
  const int64_t row = global_row(*s.g, s.tr.begin + t, p.src.num_actual_tokens);
  return static_cast<const TAct*>(p.src.qkvz)[row * p.src.qkvz_rs + col];
}

// Conv channel c of sequence s: the window and its replay, the committed or final pool rows, the
// tokens' outputs into the workspace and their inputs into the log.
template <typename TAct, int W>
__device__ void deferred_channel(const DeferredConvParams& p, const DeferredSeq& s, int64_t c) {
  const ConvRef& cv = p.conv;
  TAct* const pool = static_cast<TAct*>(cv.state) + s.slot * cv.slot_stride + c;              // row r at r D
  const TAct* const log_in = static_cast<const TAct*>(p.log_in) + s.slot * p.log_in_rs + c;  // row j at j D
  TAct* const log_out = static_cast<TAct*>(p.log_out) + s.slot * p.log_out_rs + c;
  TAct win[W - 1];  // oldest first
#pragma unroll
  for (int j = 0; j < W - 1; ++j) win[j] = s.init ? pool[j * cv.D] : TAct(0.f);
  for (int64_t j = 0; j < s.n_rep; ++j) {
    const int64_t row = s.path.present() ? s.path(s.i, j) : j;
    if (row < 0 || row >= p.log_cols) break;  // a path entry outside the log ends the replay
    slide_window<TAct, W>(win, log_in[row * cv.D]);
  }
  if (s.log_tokens || s.tr.len == 0)
#pragma unroll
    for (int j = 0; j < W - 1; ++j) pool[j * cv.D] = win[j];  // the committed window
  float w[W];
#pragma unroll
  for (int j = 0; j < W; ++j) w[j] = to_float(static_cast<const TAct*>(cv.weight)[c * cv.weight_rs + j]);
  const float bias = cv.bias ? to_float(static_cast<const TAct*>(cv.bias)[c]) : 0.f;
  const int col = p.src.proj.conv_col(static_cast<int>(c));
  TAct* const y = static_cast<TAct*>(p.y) + (s.ws0 + s.tr.begin) * p.y_rs + c;  // token t at t y_rs
  for (int64_t t = 0; t < s.tr.len; ++t) {
    const TAct xt = token_input<TAct>(p, s, t, col);
    float out;
    if (s.tree) {  // the committed window with t's nearest W-1 ancestors slid in, farthest first
      TAct before[W - 1];  // nearest first
      int nb = 0;
      int64_t u = t;
#pragma unroll
      for (int k = 0; k < W - 1; ++k) {
        before[k] = TAct(0.f);
        if (nb == k) {  // not yet past a root
          const int64_t par = p.parents(s.tr.begin + u);
          if (par >= 0 && par < u) {  // else u is a root
            before[k] = token_input<TAct>(p, s, par, col);
            nb = k + 1;
            u = par;
          }
        }
      }
      TAct wt[W - 1];
#pragma unroll
      for (int j = 0; j < W - 1; ++j) wt[j] = win[j];
#pragma unroll
      for (int k = W - 2; k >= 0; --k)
        if (k < nb) slide_window<TAct, W>(wt, before[k]);
      out = window_conv<TAct, W>(w, bias, wt, xt, cv.silu);
    } else {
      out = window_conv<TAct, W>(w, bias, win, xt, cv.silu);
      slide_window<TAct, W>(win, xt);
    }
    y[t * p.y_rs] = from_float<TAct>(out);
    if (s.log_tokens && t < p.log_cols) log_out[t * cv.D] = xt;
  }
  if (!s.log_tokens && s.tr.len > 0)
#pragma unroll
    for (int j = 0; j < W - 1; ++j) pool[j * cv.D] = win[j];  // the last W-1 inputs of (window ++ tokens)
}

// Workspace channel D + e: a of value head e (e < HV) or b of e - HV, copied for every token.
template <typename TAct>
__device__ void deferred_gates(const DeferredConvParams& p, const DeferredSeq& s, int e) {
  const rules::ProjLayout& L = p.src.proj;
  const TAct* const ba = static_cast<const TAct*>(p.src.ba) + (e < L.HV ? L.a_col(e) : L.b_col(e - L.HV));
  TAct* const y = static_cast<TAct*>(p.y) + (s.ws0 + s.tr.begin) * p.y_rs + L.D + e;
  for (int64_t t = 0; t < s.tr.len; ++t)
    y[t * p.y_rs] = ba[global_row(*s.g, s.tr.begin + t, p.src.num_actual_tokens) * p.src.ba_rs];
}

template <typename TAct, int W>
__global__ void __launch_bounds__(kDeferredConvThreads)
    deferred_conv_kernel(const __grid_constant__ DeferredConvParams p) {
  pdl_start();
  const int64_t nseq = p.group[0].n + p.group[1].n;
  if (blockIdx.y >= nseq) {
    copy_z_wide<TAct, kDeferredConvThreads>(p.src, p.z, p.z_rs, (blockIdx.y - nseq) * gridDim.x + blockIdx.x,
                                            (gridDim.y - nseq) * gridDim.x);
    return;
  }
  const SeqRef sq = seq_ref(p, blockIdx.y);
  const GroupMeta& g = p.group[sq.gi];
  DeferredSeq s;
  s.g = &g;
  s.i = sq.i;
  s.tr = rules::token_range(g.qsl(s.i), g.qsl(s.i + 1), g.limit);
  s.slot = g.slots(s.i, 0);
  bool bad = rules::runs_past(g.qsl(s.i), g.qsl(s.i + 1), g.limit);  // a token outside the buffer: padding
  for (int64_t t = threadIdx.x; t < s.tr.len; t += kDeferredConvThreads)
    bad |= global_row(g, s.tr.begin + t, p.src.num_actual_tokens) < 0;
  if (__syncthreads_or(bad) || !rules::slot_valid(s.slot, p.conv.num_slots, p.has_null, p.null_id)) return;
  s.init = g.has_init ? g.has_init[s.i * g.has_init_stride] != 0 : true;
  s.n_rep = s.init && g.num_accepted.present() ? rules::clamp64(g.num_accepted(s.i), 0, p.log_cols) : 0;
  s.path = p.path[sq.gi];
  s.log_tokens = sq.gi == 1;
  s.tree = s.log_tokens && p.parents.present();
  s.ws0 = p.ws_row0[sq.gi];
  const int64_t nch = p.conv.D + 2 * p.src.proj.HV;
  for (int64_t c = blockIdx.x * static_cast<int64_t>(kDeferredConvThreads) + threadIdx.x; c < nch;
       c += static_cast<int64_t>(gridDim.x) * kDeferredConvThreads) {
    if (c < p.conv.D) deferred_channel<TAct, W>(p, s, c);
    else deferred_gates<TAct>(p, s, static_cast<int>(c - p.conv.D));
  }
}

template <typename TAct>
Status launch_act(const DeferredConvParams& p, cudaStream_t stream) {
  // channels: the conv's D, then each value head's a and b
  const dim3 grid = conv_seq_grid(p.conv.D + 2 * p.src.proj.HV, kDeferredConvThreads, p.group[0].n + p.group[1].n,
                                  p.src.num_actual_tokens * p.src.proj.HV);
  if (grid.y == 0) return Status::Ok();
  Launch launch(grid, kDeferredConvThreads, 0, stream);
  return with_conv_width(p.conv.W, [&](auto w) { return launch(deferred_conv_kernel<TAct, decltype(w)::value>, p); });
}

}  // namespace

Status launch_deferred_conv(const DeferredConvParams& p, DType act, cudaStream_t stream) {
  switch (act) {
    case DType::kFloat32: return launch_act<float>(p, stream);
    case DType::kBFloat16: return launch_act<__nv_bfloat16>(p, stream);
    case DType::kFloat16: return launch_act<__half>(p, stream);
    default: return Status::Error(std::string("unsupported activation dtype ") + dtype_name(act));
  }
}

}  // namespace gdn::cuda
