// gdn_attention's deferred-commit mode on CUDA (docs/contract.md §7, "In gdn_attention"), as the CPU
// backend composes it: the conv of both groups (conv/deferred_conv.cu) into a workspace of
// [q | k | v | a | b] rows per local token, with the committed or final conv windows, the conv log and
// z; then the deferred recurrence (deferred.cuh) of each group over those rows, its outputs at the
// tokens' rows of core_attn_out. Three launches in stream order; the workspace (common/workspace.h)
// is taken before the first and returned after the last, so an allocation failure writes nothing.
#include <algorithm>

#include "cuda/common/dispatch.h"
#include "cuda/common/workspace.h"
#include "cuda/conv/conv.h"
#include "cuda/deferred/chunk_plan.h"
#include "cuda/deferred/deferred.h"
#include "cuda/deferred/deferred_prep.cuh"

namespace gdn::cuda {

size_t deferred_prep_bytes(const DeferredParams& p, plan::Override force) {
  if (!p.log_tokens || p.K != 128 || p.kv_layout || p.group[0].n <= 0) return 0;
  int dev = 0, major = 0, sms = 0;
  if (!device_of(&dev, &major, &sms).ok()) return 0;  // the launch reports the device's error
  plan::DeferredProblem pb;
  pb.nseq = p.group[0].n;
  pb.HV = p.HV;
  pb.V = p.V;
  pb.lean_ok = true;  // where the lean form does not apply, the buffer is not read
  pb.tree = p.parents.present();
  pb.nodes = p.log_cols;
  const plan::DeferredPlan pl = plan::plan_deferred(pb, major, sms, force);
  if (pl.rows != plan::kDeferredLean16Rows) return 0;
  return DeferredPrep::bytes(p.group[0].limit, p.H, p.HV);
}

Status launch_deferred_any(const DeferredParams& p, DType act, DType state, plan::Override force,
                           cudaStream_t stream) {
  return with_dtypes(act, state, [&](auto ta, auto ts) {
    return launch_deferred<typename decltype(ta)::type, typename decltype(ts)::type>(p, force, stream);
  });
}

Status deferred_attention(const GdnAttentionArgs& a, const RecurrentParams& rp, plan::Override force,
                          cudaStream_t stream) {
  const DType act = a.projected_states_qkvz.dtype;
  const int64_t es = static_cast<int64_t>(dtype_size(act));
  const rules::ProjLayout& L = rp.src.proj;
  DeferredConvParams cp;
  static_cast<StepParams&>(cp) = rp;
  cp.group[0].num_accepted = index_ref(a.non_spec_num_accepted_tokens);  // absent: no replay
  cp.log_in = a.conv_log.data;
  cp.log_out = a.conv_log_out.data;
  cp.log_in_rs = a.conv_log.stride[0];
  cp.log_out_rs = a.conv_log_out.stride[0];
  cp.log_cols = a.conv_log.shape[1];
  cp.path[0] = index_ref(a.non_spec_accepted_path);
  cp.path[1] = index_ref(a.spec_accepted_path);
  cp.parents = index_ref(a.spec_token_parents);
  cp.y_rs = static_cast<int64_t>(L.D) + 2 * L.HV;  // [q | k | v (D) | a (HV) | b (HV)]
  const int64_t rows0 = cp.group[0].n > 0 ? cp.group[0].limit : 0, rows1 = cp.group[1].n > 0 ? cp.group[1].limit : 0;
  cp.ws_row0[1] = rows0;
  const size_t conv_bytes = (static_cast<size_t>((rows0 + rows1) * cp.y_rs * es) + 255) / 256 * 256;
  size_t prep_bytes = 0;  // the lean form's prepared inputs, one group at a time (deferred_prep_bytes)
  for (int gi = 0; gi < 2; ++gi) {
    DeferredParams q;
    static_cast<RecurrentParams&>(q) = rp;
    q.group[0] = cp.group[gi];
    q.log_tokens = gi == 1;
    q.log_cols = a.verify_log.shape[1];  // the planner's tree size, as at the launch below
    if (gi == 1) q.parents = index_ref(a.spec_token_parents);
    prep_bytes = std::max(prep_bytes, deferred_prep_bytes(q, force));
  }
  const size_t bytes = std::max<size_t>(conv_bytes + prep_bytes, 256);
  int dev = 0;
  GDN_CUDA_CHECK(cudaGetDevice(&dev));
  return with_workspace(dev, bytes, stream, [&](void* ws) -> Status {
    cp.y = ws;
    GDN_RETURN_IF_ERROR(launch_deferred_conv(cp, act, stream));
    for (int gi = 0; gi < 2; ++gi) {  // the non-spec sequences commit their tokens, the verify ones log them
      DeferredParams p;
      static_cast<RecurrentParams&>(p) = rp;
      p.group[0] = cp.group[gi];
      p.group[0].spec = false;  // the sequence's one slot: column 0
      p.group[1] = GroupMeta{};
      p.n0 = p.group[0].n;
      char* const base = static_cast<char*>(ws) + cp.ws_row0[gi] * cp.y_rs * es;
      p.src.q = base;
      p.src.k = base + static_cast<int64_t>(L.H) * L.K * es;
      p.src.v = base + 2 * static_cast<int64_t>(L.H) * L.K * es;
      p.src.q_rs = p.src.k_rs = p.src.v_rs = p.src.a_rs = p.src.b_rs = cp.y_rs;
      p.a.ptr = base + static_cast<int64_t>(L.D) * es;
      p.a.stride = 1;
      p.a.dtype = float_code(act);
      p.b = p.a;
      p.b.ptr = base + (static_cast<int64_t>(L.D) + L.HV) * es;
      p.log_in = static_cast<const float*>(a.verify_log.data);
      p.log_out = static_cast<float*>(a.verify_log_out.data);
      p.log_in_rs = a.verify_log.stride[0];
      p.log_out_rs = a.verify_log_out.stride[0];
      p.log_cols = a.verify_log.shape[1];
      p.path = cp.path[gi];
      p.parents = gi == 1 ? cp.parents : IndexRef{};
      p.log_tokens = gi == 1;
      p.out_rows = a.num_actual_tokens;
      if (deferred_prep_bytes(p, force) > 0) {
        p.prep = reinterpret_cast<float*>(static_cast<char*>(ws) + conv_bytes);
        p.prep_rows = p.group[0].limit;
      }
      GDN_RETURN_IF_ERROR(launch_deferred_any(p, act, a.ssm_state.dtype, force, stream));
    }
    return Status::Ok();
  });
}

}  // namespace gdn::cuda
