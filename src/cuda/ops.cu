// CUDA backend entry points: fill the kernels' parameter structs from validated arguments and
// launch on the caller's stream. One function per op; kernels in conv.cu and recurrent_*.cu.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "cuda/backend.h"
#include "cuda/chunk/chunk.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/workspace.h"
#include "cuda/conv/conv.h"
#include "cuda/deferred/deferred.h"
#include "cuda/launch/launch.h"

namespace gdn::cuda {
namespace {

GroupMeta group_meta(const TensorView& qsl, const TensorView& slots, const TensorView& num_acc,
                     const TensorView& has_init, const TensorView& token_indx, int64_t limit) {
  GroupMeta g;
  g.qsl = index_ref(qsl);
  g.slots = index_ref(slots);
  g.num_accepted = index_ref(num_acc);
  if (has_init.present()) {
    g.has_init = static_cast<const uint8_t*>(has_init.data);
    g.has_init_stride = has_init.stride[0];
  }
  g.token_indx = index_ref(token_indx);
  g.n = slots.present() ? slots.shape[0] : 0;
  g.cols = slots.ndim == 2 ? slots.shape[1] : 1;
  g.limit = limit;
  g.spec = num_acc.present();
  return g;
}

ConvRef conv_ref(const TensorView& state, const TensorView& weight, const TensorView& bias, Activation act) {
  ConvRef c;
  c.state = state.data;
  c.slot_stride = state.stride[0];
  c.rows = state.shape[1];
  c.num_slots = state.shape[0];
  c.D = state.shape[2];
  c.weight = weight.data;
  c.weight_rs = weight.stride[0];
  c.bias = bias.present() ? bias.data : nullptr;
  c.W = static_cast<int>(weight.shape[1]);
  c.silu = act == Activation::kSilu;
  return c;
}

// Runs fn with the tensors' device current, restoring the caller's afterwards.
template <typename F>
Status on_device(int device, F fn) {
  int cur = 0;
  GDN_CUDA_CHECK(cudaGetDevice(&cur));
  if (cur != device) GDN_CUDA_CHECK(cudaSetDevice(device));
  Status s = fn();
  if (cur != device) cudaSetDevice(cur);
  return s;
}

// fused: gdn_attention's step; *one_launch: the conv pool and z were done by the same launch.
Status launch_recurrent_any(const RecurrentParams& p, DType act, DType state, bool fused, plan::Override force,
                            cudaStream_t stream, bool* one_launch) {
  return with_dtypes(act, state, [&](auto ta, auto ts) {
    return launch_recurrent<typename decltype(ta)::type, typename decltype(ts)::type>(p, fused, force, stream,
                                                                                       one_launch);
  });
}

void fill_state(RecurrentParams& p, const TensorView& state, StateLayout layout) {
  p.state = state.data;
  p.state_slot_stride = state.stride[0];
  p.num_slots = state.shape[0];
  p.kv_layout = layout == StateLayout::kKV;
  const size_t es = dtype_size(state.dtype);
  p.state_vec = aligned16(state.data, state.stride[0], es);
}

Status supports_k(const char* op, int64_t K) {
  if (K >= 1 && K <= 256) return Status::Ok();
  return Status::Error(std::string(op) + ": unsupported on CUDA: head_k_dim " + std::to_string(K) +
                       ", supported 1..256 (64, 128 and 256 at full speed)");
}
Status supports_grid(const char* op, int64_t nseq, int64_t HV) {
  if (nseq <= 65535 && HV <= 65535) return Status::Ok();
  return Status::Error(std::string(op) + ": unsupported on CUDA: more than 65535 sequences or value heads, got " +
                       std::to_string(nseq) + " sequences, " + std::to_string(HV) + " value heads");
}

}  // namespace

bool available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

Status supports(const CausalConv1dFwdArgs& a) { return supports_grid("causal_conv1d_fwd", a.state_indices.shape[0], 1); }
Status supports(const CausalConv1dUpdateArgs& a) {
  return supports_grid("causal_conv1d_update", a.state_indices.shape[0], 1);
}
Status supports_recurrent(const GatedDeltaRuleArgs& a) {
  GDN_RETURN_IF_ERROR(supports_k("gated_delta_rule_recurrent", a.q.shape[2]));
  return supports_grid("gated_delta_rule_recurrent", a.state_indices.shape[0], a.v.shape[1]);
}
Status supports(const GdnAttentionArgs& a) {
  GDN_RETURN_IF_ERROR(supports_k("gdn_attention", a.head_k_dim));
  // + 1024: the conv kernel's extra block rows for the z copy
  return supports_grid("gdn_attention", a.num_prefills + a.num_decodes + a.num_spec_decodes + 1024,
                       a.num_v_heads / a.tp_size);
}

// The primitive conv ops: one group, x in src.q, y written.
template <typename Args>
Status run_primitive_conv(const Args& a, const GroupMeta& g, bool per_token, void* stream) {
  ConvParams p;
  p.group[0] = g;
  p.n0 = g.n;
  p.src.q = a.x.data;
  p.src.q_rs = a.x.stride[0];
  p.conv = conv_ref(a.conv_state, a.weight, a.bias, a.activation);
  p.y = a.y.data;
  p.y_rs = a.y.stride[0];
  p.conv_per_token = per_token;
  p.has_null = a.null_block_id.has_value();
  p.null_id = a.null_block_id.value_or(0);
  return on_device(a.x.device_index, [&] { return launch_conv(p, a.x.dtype, false, static_cast<cudaStream_t>(stream)); });
}

Status causal_conv1d_fwd(const CausalConv1dFwdArgs& a, void* stream) {
  GDN_RETURN_IF_ERROR(supports(a));
  return run_primitive_conv(a, group_meta(a.query_start_loc, a.state_indices, TensorView{}, a.has_initial_state,
                                          TensorView{}, a.x.shape[0]),
                            false, stream);
}

Status causal_conv1d_update(const CausalConv1dUpdateArgs& a, void* stream) {
  GDN_RETURN_IF_ERROR(supports(a));
  return run_primitive_conv(a, group_meta(a.query_start_loc, a.state_indices, a.num_accepted_tokens, TensorView{},
                                          TensorView{}, a.x.shape[0]),
                            a.spec_layout == SpecConvLayout::kPerToken, stream);
}

namespace {

// The primitive recurrence's parameters from the op's arguments (every gate and norm form).
void fill_primitive(RecurrentParams& p, const GatedDeltaRuleArgs& a) {
  p.group[0] = group_meta(a.query_start_loc, a.state_indices, a.num_accepted_tokens, a.has_initial_state, TensorView{},
                          a.q.shape[0]);
  p.n0 = p.group[0].n;
  p.src.q = a.q.data; p.src.q_rs = a.q.stride[0];
  p.src.k = a.k.data; p.src.k_rs = a.k.stride[0];
  p.src.v = a.v.data; p.src.v_rs = a.v.stride[0];
  p.src.a = a.a.data; p.src.a_rs = a.a.stride[0];
  p.src.b = a.b.data; p.src.b_rs = a.b.stride[0];
  p.A_log = float_ref(a.A_log);
  p.dt_bias = float_ref(a.dt_bias);
  p.gates.decay_given = !a.A_log.present();
  p.gates.beta_given = !a.beta_sigmoid;
  p.gates.l2norm = a.qk_l2norm;
  p.a_dtype = float_code(a.a.dtype);
  p.b_dtype = float_code(a.b.dtype);
  fill_state(p, a.ssm_state, a.state_layout);
  p.o = a.o.data;
  p.o_rs = a.o.stride[0];
  p.H = static_cast<int>(a.q.shape[1]);
  p.K = static_cast<int>(a.q.shape[2]);
  p.HV = static_cast<int>(a.v.shape[1]);
  p.V = static_cast<int>(a.v.shape[2]);
  p.r = p.HV / p.H;
  p.scale = static_cast<float>(a.scale.value_or(1.0 / std::sqrt(static_cast<double>(p.K))));
  p.has_null = a.null_block_id.has_value();
  p.null_id = a.null_block_id.value_or(0);
}

// The deferred-commit mode (deferred/deferred.h): one slot per sequence, replay counts in
// num_accepted (group 0 is not a verify group), the logs, the tree and the gate inputs.
void fill_deferred(DeferredParams& p, const GatedDeltaRuleArgs& a) {
  p.group[0].spec = false;
  p.log_in = static_cast<const float*>(a.verify_log.data);
  p.log_out = static_cast<float*>(a.verify_log_out.data);
  p.log_in_rs = a.verify_log.stride[0];
  p.log_out_rs = a.verify_log_out.stride[0];
  p.log_cols = a.verify_log.shape[1];
  p.path = index_ref(a.accepted_path);
  p.parents = index_ref(a.token_parents);
  p.log_tokens = a.log_tokens;
  p.a = float_ref(a.a);
  p.b = float_ref(a.b);
  p.a.stride = p.b.stride = 1;  // element (row, hv) at row * src.a_rs + hv
}

// The chunk kernel's own limits: 16-bit activations, K = 128, V a multiple of 32, sm_80+, its
// shared memory on the device.
bool chunk_kernel_fits(DType act, int64_t K, int64_t V, int cc_major, int device) {
  return cc_major >= 8 && (act == DType::kBFloat16 || act == DType::kFloat16) && K == 128 && V % 32 == 0 &&
         chunk_fit(act, V, device_props(device).smem_optin).any;
}

// Whether the chunk kernel can take the call on a device of compute capability cc_major.
bool chunk_ok(const GatedDeltaRuleArgs& a, int cc_major) {
  const DType t = a.q.dtype;
  if (!chunk_kernel_fits(t, a.q.shape[2], a.v.shape[2], cc_major, a.q.device_index)) return false;
  if (a.k.dtype != t || a.v.dtype != t || a.o.dtype != t || a.num_accepted_tokens.present()) return false;
  if (a.a.dtype == DType::kFloat64 || a.b.dtype == DType::kFloat64) return false;  // gate words of 2 or 4 bytes
  return aligned16(a.q.data, a.q.stride[0], 2) && aligned16(a.k.data, a.k.stride[0], 2) &&
         aligned16(a.v.data, a.v.stride[0], 2) && aligned16(a.o.data, a.o.stride[0], 2);
}

Status launch_chunk_any(const ChunkParams& p, DType act, DType state, cudaStream_t stream) {
  const bool bf = act == DType::kBFloat16;
  switch (state) {
    case DType::kFloat32: return bf ? launch_chunk<__nv_bfloat16, float>(p, stream) : launch_chunk<__half, float>(p, stream);
    case DType::kBFloat16:
      return bf ? launch_chunk<__nv_bfloat16, __nv_bfloat16>(p, stream) : launch_chunk<__half, __nv_bfloat16>(p, stream);
    case DType::kFloat16: return bf ? launch_chunk<__nv_bfloat16, __half>(p, stream) : launch_chunk<__half, __half>(p, stream);
    default: return Status::Error(std::string("unsupported state dtype ") + dtype_name(state));
  }
}

// Whether the chunk kernel can take gdn_attention's long prefills (as chunk_ok: K = 128, V a multiple
// of 32, 16-bit activations, 16-byte aligned rows of the projections, the conv pool and
// core_attn_out).
bool attention_chunk_ok(const GdnAttentionArgs& a, const rules::ProjLayout& L, int cc_major) {
  const TensorView& x = a.projected_states_qkvz;
  return chunk_kernel_fits(x.dtype, L.K, L.V, cc_major, x.device_index) && aligned16(x.data, x.stride[0], 2) &&
         aligned16(a.conv_state.data, a.conv_state.stride[0], 2) && L.D % 8 == 0 &&
         aligned16(a.core_attn_out.data, a.core_attn_out.stride[0], 2);
}

}  // namespace

Status supports_chunked(const GatedDeltaRuleArgs& a) {
  GDN_RETURN_IF_ERROR(supports_k("gated_delta_rule_chunked", a.q.shape[2]));
  return supports_grid("gated_delta_rule_chunked", a.state_indices.shape[0], a.v.shape[1]);
}

Status gated_delta_rule_recurrent(const GatedDeltaRuleArgs& a, void* stream, plan::Override force) {
  GDN_RETURN_IF_ERROR(supports_recurrent(a));
  if (a.verify_log.present()) {
    DeferredParams p;
    fill_primitive(p, a);
    fill_deferred(p, a);
    return on_device(a.q.device_index, [&] {
      p.early_meta = a.metadata_ready_early && pdl_enabled();
      const auto s = static_cast<cudaStream_t>(stream);
      const size_t prep = deferred_prep_bytes(p, force);
      if (prep == 0) return launch_deferred_any(p, a.q.dtype, a.ssm_state.dtype, force, s);
      int dev = 0;
      GDN_CUDA_CHECK(cudaGetDevice(&dev));
      return with_workspace(dev, prep, s, [&](void* ws) {
        p.prep = static_cast<float*>(ws);
        p.prep_rows = p.group[0].limit;
        return launch_deferred_any(p, a.q.dtype, a.ssm_state.dtype, force, s);
      });
    });
  }
  RecurrentParams p;
  fill_primitive(p, a);
  return on_device(a.q.device_index, [&] {
    p.early_meta = a.metadata_ready_early && pdl_enabled();
    bool one_launch = false;
    return launch_recurrent_any(p, a.q.dtype, a.ssm_state.dtype, false, force, static_cast<cudaStream_t>(stream),
                                &one_launch);
  });
}

// The chunk kernel (chunk/chunk.cuh) for prefill batches, else the recurrence (validated as non-spec
// only; it computes the same recurrence). Every gate and norm form takes either, as the default form
// does (the recurrence kernels' gate-form instances).
Status gated_delta_rule_chunked(const GatedDeltaRuleArgs& a, void* stream, plan::Override force) {
  GDN_RETURN_IF_ERROR(supports_chunked(a));
  ChunkParams p;
  fill_primitive(p, a);
  return on_device(a.q.device_index, [&] {
    int dev = 0, major = 0, sms = 0;
    GDN_RETURN_IF_ERROR(device_of(&dev, &major, &sms));
    plan::ChunkProblem cp;
    cp.nseq = p.group[0].n;
    cp.tokens = a.q.shape[0];
    cp.HV = p.HV;
    cp.V = p.V;
    cp.chunk_ok = chunk_ok(a, major);
    const ChunkFit fit = chunk_fit(a.q.dtype, p.V, device_props(dev).smem_optin);
    cp.full_fits = fit.full;
    cp.vs64_fits = fit.vs64;
    cp.vs128_fits = fit.vs128;
    cp.split_ok = fit.split;
    const plan::ChunkPlan pl = plan::plan_chunked(cp, major, sms, force);
    p.early_meta = a.metadata_ready_early && pdl_enabled();
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (!pl.chunk) {
      bool one_launch = false;
      return launch_recurrent_any(p, a.q.dtype, a.ssm_state.dtype, false, force, s, &one_launch);
    }
    p.vs = pl.vs;
    p.small = pl.small;
    if (!pl.split || p.group[0].limit == 0) return launch_chunk_any(p, a.q.dtype, a.ssm_state.dtype, s);
    p.prep_rows = p.group[0].limit;  // the split form's records
    const size_t prep_bytes =
        static_cast<size_t>(chunk_prep_bytes(p.prep_rows, p.group[0].n, p.HV, dtype_size(a.q.dtype)));
    return with_workspace(dev, prep_bytes, s, [&](void* ws) {
      p.prep = ws;
      return launch_chunk_any(p, a.q.dtype, a.ssm_state.dtype, s);
    });
  });
}

// conv + gates + l2 norm + recurrence for every sequence of both groups, reading the conv pool;
// the conv pool update and the z copy in the same launch (thread-block clusters, sm_90+) or in a
// second one (conv.cu). The deferred-commit mode: deferred/deferred_attention.cu.
Status gdn_attention(const GdnAttentionArgs& a, void* stream, plan::Override force) {
  GDN_RETURN_IF_ERROR(supports(a));
  const rules::ProjLayout L = rules::proj_layout(a);
  const int64_t n_ns = a.num_prefills + a.num_decodes, n_sp = a.num_spec_decodes;
  auto limit = [&](const TensorView& indx) { return indx.present() ? indx.shape[0] : a.num_actual_tokens; };
  StepParams step;  // what both kernels read
  step.group[0] = group_meta(a.non_spec_query_start_loc, a.non_spec_state_indices_tensor, TensorView{},
                             a.has_initial_state, a.non_spec_token_indx, limit(a.non_spec_token_indx));
  step.group[1] = group_meta(a.spec_query_start_loc, a.spec_state_indices_tensor, a.num_accepted_tokens,
                             TensorView{}, a.spec_token_indx, limit(a.spec_token_indx));
  step.group[0].n = n_ns;
  step.group[1].n = n_sp;
  step.n0 = n_ns;
  step.src.qkvz = a.projected_states_qkvz.data;
  step.src.qkvz_rs = a.projected_states_qkvz.stride[0];
  step.src.ba = a.projected_states_ba.data;
  step.src.ba_rs = a.projected_states_ba.stride[0];
  step.src.proj = L;
  step.src.num_actual_tokens = a.num_actual_tokens;
  step.conv = conv_ref(a.conv_state, a.conv_weights, a.conv_bias, a.activation);
  // A slot must exist in both pools to be used.
  step.conv.num_slots = std::min(a.conv_state.shape[0], a.ssm_state.shape[0]);
  step.has_null = a.null_block_id.has_value();
  step.null_id = a.null_block_id.value_or(0);
  step.conv_per_token = a.spec_conv_layout == SpecConvLayout::kPerToken;
  step.z = a.z.data;
  step.z_rs = a.z.stride[0];

  RecurrentParams rp;
  static_cast<StepParams&>(rp) = step;
  rp.A_log = float_ref(a.A_log);
  rp.dt_bias = float_ref(a.dt_bias);
  rp.a_dtype = rp.b_dtype = float_code(a.projected_states_qkvz.dtype);  // the default gate form (a, b from src.ba)
  fill_state(rp, a.ssm_state, StateLayout::kVK);
  rp.o = a.core_attn_out.data;
  rp.o_rs = a.core_attn_out.stride[0];
  rp.H = static_cast<int>(L.H);
  rp.HV = static_cast<int>(L.HV);
  rp.K = static_cast<int>(L.K);
  rp.V = static_cast<int>(L.V);
  rp.r = static_cast<int>(L.r);
  rp.scale = static_cast<float>(a.scale.value_or(1.0 / std::sqrt(static_cast<double>(L.K))));
  if (a.verify_log.present())  // the deferred-commit mode: its conv, then its recurrence per group
    return on_device(a.projected_states_qkvz.device_index, [&] {
      rp.early_meta = a.metadata_ready_early && pdl_enabled();
      return deferred_attention(a, rp, force, static_cast<cudaStream_t>(stream));
    });

  ConvParams cp;
  static_cast<StepParams&>(cp) = step;
  const DType act = a.projected_states_qkvz.dtype;
  return on_device(a.projected_states_qkvz.device_index, [&] {
    int dev = 0, major = 0, sms = 0;
    GDN_RETURN_IF_ERROR(device_of(&dev, &major, &sms));
    plan::AttentionChunkProblem ap;
    ap.prefills = a.num_prefills;
    ap.prefill_rows = step.group[0].limit - a.num_decodes;
    ap.HV = rp.HV;
    ap.V = rp.V;
    ap.chunk_ok = n_ns > 0 && attention_chunk_ok(a, L, major);
    const ChunkFit fit = chunk_fit(act, rp.V, device_props(dev).smem_optin);
    ap.full_fits = fit.full;
    ap.vs64_fits = fit.vs64;
    ap.vs128_fits = fit.vs128;
    ap.split_ok = fit.split;
    const plan::AttentionChunkPlan chunk = plan::plan_attention_chunk(ap, major, sms, force);
    rp.early_meta = a.metadata_ready_early && pdl_enabled();
    auto s = static_cast<cudaStream_t>(stream);
    bool one_launch = false;
    if (chunk.chunk) {  // the long prefills: their conv into a buffer, then the chunk kernel; the rest in the step
      rp.chunk_from = cp.chunk_from = chunk.from;  // what each launch below reads of the split
      const int64_t rows = step.group[0].limit;
      // [group 0's local tokens, D] (the conv's output), then the split form's records
      const size_t conv_bytes = (static_cast<size_t>(rows * L.D) * dtype_size(act) + 255) / 256 * 256;
      const size_t prep_bytes =
          chunk.split ? static_cast<size_t>(chunk_prep_bytes(rows, rp.group[0].n, rp.HV, dtype_size(act))) : 0;
      return with_workspace(dev, conv_bytes + prep_bytes, s, [&](void* ws) -> Status {
        GDN_RETURN_IF_ERROR(launch_recurrent_any(rp, act, a.ssm_state.dtype, true,
                                                 plan::Override{plan::Path::kStepTwoLaunches}, s, &one_launch));
        ConvParams rows_p = cp;
        rows_p.y = ws;
        rows_p.y_rs = L.D;
        GDN_RETURN_IF_ERROR(launch_conv_rows(rows_p, act, s));
        ChunkParams kp;
        static_cast<RecurrentParams&>(kp) = rp;
        kp.fused = true;
        kp.src.q = ws;
        kp.src.q_rs = L.D;
        kp.vs = chunk.vs;
        kp.small = chunk.small;
        if (chunk.split) {
          kp.prep = static_cast<char*>(ws) + conv_bytes;
          kp.prep_rows = rows;
        }
        GDN_RETURN_IF_ERROR(launch_chunk_any(kp, act, a.ssm_state.dtype, s));
        return launch_conv(cp, act, true, s);
      });
    }
    GDN_RETURN_IF_ERROR(launch_recurrent_any(rp, act, a.ssm_state.dtype, true, force, s, &one_launch));
    return one_launch ? Status::Ok() : launch_conv(cp, act, true, s);
  });
}

}  // namespace gdn::cuda
