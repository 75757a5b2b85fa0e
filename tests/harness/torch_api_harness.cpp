// gdn_torch_api_harness IN.safetensors OUT.safetensors [cpu|cuda]
//
// Test tool for python/tests: runs one golden/capture case through the C++ API (gdn/ops.h, via
// tools/capture/runner.h) and writes every argument tensor after the call — the updated pools and
// the outputs y / o / core_attn_out / z, which start zero-filled — to OUT, named as the op's
// arguments. The torch tests make the same call through torch.ops.gdn and require identical
// bytes, so the binding is shown to pass every tensor, stride, default and optional unchanged.
// Scalars come from the case's params: activation, spec_layout, state_layout, scale (not for
// gdn_attention, whose torch schema has no scale: the default K^-1/2), null_block_id when given,
// log_tokens (default true). The deferred-commit tensors (docs/contract.md §7) are read when the
// case has them (in.verify_log, in.verify_log_out, ...; the golden cases do not).
// Exit status 0 on success, 1 when the op fails (its message on stderr), 2 for usage errors.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "capture/runner.h"
#include "capture/safetensors.h"
#include "gdn/ops.h"

namespace gdn::harness {
namespace {

using capture::HostTensor;
using capture::SafetensorsFile;

struct Case {
  SafetensorsFile file;
  std::map<std::string, HostTensor> tensors;  // argument name -> working copy (written out)
};

// A view of in.<name> (copied into the case's working tensors), or absent when the file lacks it.
Status input(Case& c, const std::string& name, TensorView* out, const std::string& file_name = "") {
  const HostTensor* t = c.file.find("in." + (file_name.empty() ? name : file_name));
  if (t == nullptr) {
    *out = TensorView();
    return Status::Ok();
  }
  c.tensors[name] = *t;
  return c.tensors[name].view(out);
}

Status output(Case& c, const std::string& name, DType dtype, std::vector<int64_t> shape, TensorView* out) {
  c.tensors[name] = capture::make_host_tensor(dtype, std::move(shape));  // zero-filled
  return c.tensors[name].view(out);
}

std::string param_str(const Case& c, const char* key, const char* fallback) {
  return c.file.params.contains(key) ? c.file.params[key].get<std::string>() : fallback;
}
int64_t param_int(const Case& c, const char* key) { return c.file.params.value(key, int64_t{0}); }
std::optional<int64_t> param_opt_int(const Case& c, const char* key) {
  if (!c.file.params.contains(key) || c.file.params[key].is_null()) return std::nullopt;
  return c.file.params[key].get<int64_t>();
}
std::optional<double> param_opt_double(const Case& c, const char* key) {
  if (!c.file.params.contains(key) || c.file.params[key].is_null()) return std::nullopt;
  return c.file.params[key].get<double>();
}

// The arguments both conv ops share: x, weight, bias, conv_state, query_start_loc, state_indices,
// y (zero-filled), activation, null_block_id.
template <typename Args>
Status conv_common(Case& c, Args* a) {
  for (auto [name, view] : {std::pair{"x", &a->x}, {"weight", &a->weight}, {"bias", &a->bias},
                            {"conv_state", &a->conv_state}, {"query_start_loc", &a->query_start_loc},
                            {"state_indices", &a->state_indices}})
    GDN_RETURN_IF_ERROR(input(c, name, view));
  GDN_RETURN_IF_ERROR(output(c, "y", a->x.dtype, {a->x.shape[0], a->x.shape[1]}, &a->y));
  GDN_RETURN_IF_ERROR(parse_activation(param_str(c, "activation", "silu"), &a->activation));
  a->null_block_id = param_opt_int(c, "null_block_id");
  return Status::Ok();
}

Status run_conv_fwd(Case& c, capture::Backend backend) {
  CausalConv1dFwdArgs a;
  GDN_RETURN_IF_ERROR(conv_common(c, &a));
  GDN_RETURN_IF_ERROR(input(c, "has_initial_state", &a.has_initial_state));
  return capture::run_on(backend, a);
}

Status run_conv_update(Case& c, capture::Backend backend) {
  CausalConv1dUpdateArgs a;
  GDN_RETURN_IF_ERROR(conv_common(c, &a));
  GDN_RETURN_IF_ERROR(input(c, "num_accepted_tokens", &a.num_accepted_tokens));
  GDN_RETURN_IF_ERROR(parse_spec_conv_layout(param_str(c, "spec_layout", "rolling"), &a.spec_layout));
  return capture::run_on(backend, a);
}

Status run_gated_delta_rule(Case& c, capture::Backend backend, bool chunked) {
  GatedDeltaRuleArgs a;
  for (auto [name, view] : {std::pair{"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"a", &a.a}, {"b", &a.b},
                            {"A_log", &a.A_log}, {"dt_bias", &a.dt_bias}, {"ssm_state", &a.ssm_state},
                            {"query_start_loc", &a.query_start_loc}, {"state_indices", &a.state_indices},
                            {"num_accepted_tokens", &a.num_accepted_tokens},
                            {"has_initial_state", &a.has_initial_state}, {"verify_log", &a.verify_log},
                            {"verify_log_out", &a.verify_log_out}, {"token_parents", &a.token_parents},
                            {"accepted_path", &a.accepted_path}}) {
    GDN_RETURN_IF_ERROR(input(c, name, view));
  }
  a.log_tokens = c.file.params.value("log_tokens", true);
  GDN_RETURN_IF_ERROR(output(c, "o", a.q.dtype, {a.q.shape[0], a.v.shape[1], a.v.shape[2]}, &a.o));
  GDN_RETURN_IF_ERROR(parse_state_layout(param_str(c, "state_layout", "vk"), &a.state_layout));
  a.scale = param_opt_double(c, "scale");
  a.null_block_id = param_opt_int(c, "null_block_id");
  return chunked ? capture::run_chunked_on(backend, a) : capture::run_recurrent_on(backend, a);
}

Status run_attention(Case& c, capture::Backend backend) {
  GdnAttentionArgs a;
  for (auto [name, view] :
       {std::pair{"projected_states_qkvz", &a.projected_states_qkvz}, {"projected_states_ba", &a.projected_states_ba},
        {"conv_state", &a.conv_state}, {"ssm_state", &a.ssm_state}, {"conv_weights", &a.conv_weights},
        {"conv_bias", &a.conv_bias}, {"A_log", &a.A_log}, {"dt_bias", &a.dt_bias},
        {"has_initial_state", &a.has_initial_state}, {"non_spec_query_start_loc", &a.non_spec_query_start_loc},
        {"non_spec_token_indx", &a.non_spec_token_indx}, {"spec_query_start_loc", &a.spec_query_start_loc},
        {"spec_token_indx", &a.spec_token_indx}, {"num_accepted_tokens", &a.num_accepted_tokens},
        {"verify_log", &a.verify_log}, {"verify_log_out", &a.verify_log_out}, {"conv_log", &a.conv_log},
        {"conv_log_out", &a.conv_log_out}, {"non_spec_num_accepted_tokens", &a.non_spec_num_accepted_tokens},
        {"spec_accepted_path", &a.spec_accepted_path}, {"non_spec_accepted_path", &a.non_spec_accepted_path},
        {"spec_token_parents", &a.spec_token_parents}}) {
    GDN_RETURN_IF_ERROR(input(c, name, view));
  }
  // The golden files name the slot tensors without vLLM's "_tensor" suffix.
  for (auto [name, view] : {std::pair{"non_spec_state_indices", &a.non_spec_state_indices_tensor},
                            {"spec_state_indices", &a.spec_state_indices_tensor}}) {
    const std::string full = std::string(name) + "_tensor";
    GDN_RETURN_IF_ERROR(input(c, full, view, c.file.find("in." + full) ? full : name));
  }
  a.num_k_heads = param_int(c, "num_k_heads");
  a.num_v_heads = param_int(c, "num_v_heads");
  a.head_k_dim = param_int(c, "head_k_dim");
  a.head_v_dim = param_int(c, "head_v_dim");
  a.num_prefills = param_int(c, "num_prefills");
  a.num_decodes = param_int(c, "num_decodes");
  a.num_spec_decodes = param_int(c, "num_spec_decodes");
  a.num_actual_tokens = param_int(c, "num_actual_tokens");
  a.tp_size = c.file.params.value("tp_size", int64_t{1});
  a.reorder_input = c.file.params.value("reorder_input", false);
  a.null_block_id = param_opt_int(c, "null_block_id");
  GDN_RETURN_IF_ERROR(parse_activation(param_str(c, "activation", "silu"), &a.activation));
  GDN_RETURN_IF_ERROR(parse_spec_conv_layout(param_str(c, "spec_conv_layout", "rolling"), &a.spec_conv_layout));
  const int64_t tp = a.tp_size > 0 ? a.tp_size : 1;
  const HostTensor* ref = c.file.find("out.core_attn_out");
  const int64_t rows = ref ? ref->shape[0] : a.projected_states_qkvz.shape[0];
  const DType dtype = a.projected_states_qkvz.dtype;
  GDN_RETURN_IF_ERROR(output(c, "core_attn_out", dtype, {rows, a.num_v_heads / tp, a.head_v_dim}, &a.core_attn_out));
  GDN_RETURN_IF_ERROR(output(c, "z", dtype, {rows, a.num_v_heads / tp, a.head_v_dim}, &a.z));
  return capture::run_on(backend, a);
}

int run(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: gdn_torch_api_harness IN.safetensors OUT.safetensors [cpu|cuda]\n");
    return 2;
  }
  capture::Backend backend = capture::Backend::kCPU;
  if (argc == 4) {
    Status s = capture::parse_backend(argv[3], &backend);
    if (!s.ok()) {
      std::fprintf(stderr, "gdn_torch_api_harness: %s\n", s.message().c_str());
      return 2;
    }
  }
  Case c;
  Status s = capture::read_safetensors(argv[1], &c.file);
  if (!s.ok()) {
    std::fprintf(stderr, "gdn_torch_api_harness: %s\n", s.message().c_str());
    return 2;
  }
  const std::string op = param_str(c, "op", "");
  if (op == "causal_conv1d_fwd") {
    s = run_conv_fwd(c, backend);
  } else if (op == "causal_conv1d_update") {
    s = run_conv_update(c, backend);
  } else if (op == "gated_delta_rule_recurrent" || op == "gated_delta_rule_chunked") {
    s = run_gated_delta_rule(c, backend, op == "gated_delta_rule_chunked");
  } else if (op == "gdn_attention") {
    s = run_attention(c, backend);
  } else {
    std::fprintf(stderr, "gdn_torch_api_harness: unknown op '%s' in %s\n", op.c_str(), argv[1]);
    return 2;
  }
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  SafetensorsFile out;
  out.tensors = c.tensors;
  s = capture::write_safetensors(argv[2], out);
  if (!s.ok()) {
    std::fprintf(stderr, "gdn_torch_api_harness: %s\n", s.message().c_str());
    return 2;
  }
  return 0;
}

}  // namespace
}  // namespace gdn::harness

int main(int argc, char** argv) { return gdn::harness::run(argc, argv); }
