// Causal depthwise conv1d on CUDA: varlen prefill, decode and verify (rolling and per-token), and
// the conv-pool update + z copy that follow the fused gdn_attention recurrence when it runs as two
// launches (GPUs without thread-block clusters, or clusters too large).
// One thread per (sequence, channel), looping over channels when the batch is large; the per-channel
// work (conv_channel.cuh) reads the window before it writes, so the in-place update needs no sync.
//   grid = (<= ceil(D / 128), sequences [+ block rows for z]), block = 128
#include "common/seq_rules.h"
#include "cuda/common/dispatch.h"
#include "cuda/conv/conv.h"
#include "cuda/conv/conv_channel.cuh"

namespace gdn::cuda {
namespace {

constexpr int kConvThreads = 128;

template <typename TAct, int W, bool kFused>
__global__ void __launch_bounds__(kConvThreads) conv_kernel(const __grid_constant__ ConvParams p) {
  pdl_start();
  const int64_t nseq = p.group[0].n + p.group[1].n;
  if (kFused && blockIdx.y >= nseq) {
    copy_z_wide<TAct, kConvThreads>(p.src, p.z, p.z_rs, (blockIdx.y - nseq) * gridDim.x + blockIdx.x,
                                    (gridDim.y - nseq) * gridDim.x);
    return;
  }
  const SeqRef sq = seq_ref(p, blockIdx.y);
  const GroupMeta& g = p.group[sq.gi];
  const int64_t i = sq.i;
  const auto tr = rules::token_range(g.qsl(i), g.qsl(i + 1), g.limit);
  if (tr.len == 0) return;
  const ConvRef& cv = p.conv;
  const int64_t slot0 = g.slots(i, 0);
  const int64_t acc = g.spec ? rules::accepted(g.num_accepted(i), g.cols) : 1;
  const int64_t state_slot = g.spec ? g.slots(i, acc - 1) : slot0;  // column a-1 must be usable
  bool pad = !rules::slot_valid(slot0, cv.num_slots, p.has_null, p.null_id) ||
             !rules::slot_valid(state_slot, cv.num_slots, p.has_null, p.null_id);
  if constexpr (kFused) {  // a token outside the buffer makes its sequence padding
    bool bad = rules::runs_past(g.qsl(i), g.qsl(i + 1), g.limit);
    for (int64_t t = threadIdx.x; t < tr.len; t += kConvThreads) {
      const int64_t r = g.token_indx.present() ? g.token_indx(tr.begin + t) : tr.begin + t;
      bad |= r < 0 || r >= p.src.num_actual_tokens;
    }
    pad = __syncthreads_or(bad) || pad;
  }
  const bool init = g.has_init ? g.has_init[i * g.has_init_stride] != 0 : true;
  const ConvSeq s = make_conv_seq(g, i, tr, slot0, acc, state_slot, p.conv_per_token, init, kFused, W);
  TAct* y = static_cast<TAct*>(p.y);
  for (int64_t c = blockIdx.x * static_cast<int64_t>(kConvThreads) + threadIdx.x; c < cv.D;
       c += static_cast<int64_t>(gridDim.x) * kConvThreads) {
    if (!pad) {
      conv_channel<TAct, W, kFused>(cv, p.src, g, s, c, y, p.y_rs, p.has_null, p.null_id);
    } else if constexpr (!kFused) {
      for (int64_t t = 0; t < tr.len; ++t) y[(tr.begin + t) * p.y_rs + c] = TAct(0.f);
    }
  }
}

template <typename TAct, bool kFused>
Status launch_w(const ConvParams& p, cudaStream_t stream) {
  // fused: extra block rows copy z
  const dim3 grid = conv_seq_grid(p.conv.D, kConvThreads, p.group[0].n + p.group[1].n,
                                  kFused ? p.src.num_actual_tokens * p.src.proj.HV : 0);
  if (grid.y == 0) return Status::Ok();
  Launch launch(grid, kConvThreads, 0, stream);
  return with_conv_width(p.conv.W, [&](auto w) { return launch(conv_kernel<TAct, decltype(w)::value, kFused>, p); });
}

}  // namespace

Status launch_conv(const ConvParams& p, DType act, bool fused, cudaStream_t stream) {
  switch (act) {
    case DType::kFloat32: return fused ? launch_w<float, true>(p, stream) : launch_w<float, false>(p, stream);
    case DType::kBFloat16:
      return fused ? launch_w<__nv_bfloat16, true>(p, stream) : launch_w<__nv_bfloat16, false>(p, stream);
    case DType::kFloat16: return fused ? launch_w<__half, true>(p, stream) : launch_w<__half, false>(p, stream);
    default: return Status::Error(std::string("unsupported activation dtype ") + dtype_name(act));
  }
}

}  // namespace gdn::cuda
