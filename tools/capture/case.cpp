// Golden/capture cases: build an op's arguments from a file, run, compare (see case.h).
#include "capture/case.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <utility>

#include "capture/check.h"

namespace gdn::capture {
namespace {

using nlohmann::json;

constexpr uint8_t kPadByte = 0x5a;

// A working copy of one argument: dense, except that pools may carry `pad` extra elements per
// slot (dim-0 stride = dense slot size + pad).
struct Work {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  int64_t pad = 0;
  std::vector<uint8_t> bytes;

  int64_t inner() const {
    int64_t n = 1;
    for (size_t d = 1; d < shape.size(); ++d) n *= shape[d];
    return n;
  }
  int64_t rows() const { return shape.empty() ? 1 : shape[0]; }
  size_t stride0_bytes() const { return static_cast<size_t>(inner() + pad) * dtype_size(dtype); }
  size_t row_bytes() const { return static_cast<size_t>(inner()) * dtype_size(dtype); }

  static Work from(const HostTensor& t, int64_t pad) {
    Work w;
    w.dtype = t.dtype;
    w.shape = t.shape;
    w.pad = t.shape.empty() ? 0 : pad;
    w.bytes.assign(w.stride0_bytes() * static_cast<size_t>(w.rows()), kPadByte);
    for (int64_t r = 0; r < w.rows(); ++r)
      std::copy_n(t.bytes.data() + r * w.row_bytes(), w.row_bytes(),
                  w.bytes.data() + r * w.stride0_bytes());
    return w;
  }

  TensorView view() {
    TensorView v;
    v.data = bytes.empty() ? nullptr : bytes.data();
    v.dtype = dtype;
    v.ndim = static_cast<int>(shape.size());
    int64_t st = 1;
    for (int d = v.ndim - 1; d >= 0; --d) {
      v.shape[d] = shape[d];
      v.stride[d] = d == 0 ? inner() + pad : st;
      st *= shape[d];
    }
    return v;
  }

  HostTensor dense() const {
    HostTensor t = make_host_tensor(dtype, shape);
    for (int64_t r = 0; r < rows(); ++r)
      std::copy_n(bytes.data() + r * stride0_bytes(), row_bytes(), t.bytes.data() + r * row_bytes());
    return t;
  }

  bool pad_intact() const {
    for (int64_t r = 0; r < rows(); ++r)
      for (size_t b = row_bytes(); b < stride0_bytes(); ++b)
        if (bytes[r * stride0_bytes() + b] != kPadByte) return false;
    return true;
  }
};

// Params access: absent keys keep the default; a present key of the wrong type is an error.
class Params {
 public:
  Params(const json& p, std::string where) : p_(p), where_(std::move(where)) {}

  Status integer(const char* key, int64_t* out, bool required = false) const {
    auto it = p_.find(key);
    if (it == p_.end() || it->is_null())
      return required ? Status::Error(where_ + ": params." + key + " is required") : Status::Ok();
    if (!it->is_number_integer())
      return Status::Error(where_ + ": params." + key + " must be an integer, got " + it->dump());
    *out = it->get<int64_t>();
    return Status::Ok();
  }
  Status optional_integer(const char* key, std::optional<int64_t>* out) const {
    int64_t v = 0;
    if (!has(key)) return Status::Ok();
    GDN_RETURN_IF_ERROR(integer(key, &v));
    *out = v;
    return Status::Ok();
  }
  Status real(const char* key, std::optional<double>* out) const {
    auto it = p_.find(key);
    if (it == p_.end() || it->is_null()) return Status::Ok();
    if (!it->is_number())
      return Status::Error(where_ + ": params." + key + " must be a number, got " + it->dump());
    *out = it->get<double>();
    return Status::Ok();
  }
  Status boolean(const char* key, bool* out) const {
    auto it = p_.find(key);
    if (it == p_.end() || it->is_null()) return Status::Ok();
    if (!it->is_boolean())
      return Status::Error(where_ + ": params." + key + " must be a boolean, got " + it->dump());
    *out = it->get<bool>();
    return Status::Ok();
  }
  Status string(const char* key, std::string* out) const {
    auto it = p_.find(key);
    if (it == p_.end() || it->is_null()) return Status::Ok();
    if (!it->is_string())
      return Status::Error(where_ + ": params." + key + " must be a string, got " + it->dump());
    *out = it->get<std::string>();
    return Status::Ok();
  }
  // A parameter the library fixes: accepted only at that value.
  Status fixed(const char* key, const std::string& expected) const {
    std::string v = expected;
    GDN_RETURN_IF_ERROR(string(key, &v));
    if (v != expected)
      return Status::Error(where_ + ": params." + key + " = '" + v + "' is not supported (only '" +
                           expected + "')");
    return Status::Ok();
  }
  Status fixed(const char* key, double expected) const {
    std::optional<double> v;
    GDN_RETURN_IF_ERROR(real(key, &v));
    if (v && std::fabs(*v - expected) > 1e-12 * std::fabs(expected))
      return Status::Error(where_ + ": params." + key + " = " + std::to_string(*v) +
                           " is not supported (the library uses " + std::to_string(expected) + ")");
    return Status::Ok();
  }
  bool has(const char* key) const { return p_.contains(key) && !p_.at(key).is_null(); }

 private:
  const json& p_;
  std::string where_;
};

// Holds the working tensors of one run and fills argument views from the file.
class Builder {
 public:
  Builder(const GoldenCase& c, const RunOptions& o) : c_(c), o_(o) {}

  // in.<arg> (or in.<alias>) -> *v; absent optional inputs leave *v absent.
  Status input(const std::string& arg, TensorView* v, bool required, bool pool = false,
               const std::string& alias = "") {
    std::string key = "in." + arg;
    const HostTensor* t = c_.file.find(key);
    if (!t && !alias.empty()) {
      key = "in." + alias;
      t = c_.file.find(key);
    }
    if (!t) {
      if (required) return Status::Error(c_.name + ": required input in." + arg + " is missing");
      *v = TensorView();
      return Status::Ok();
    }
    if (t->shape.size() > static_cast<size_t>(kMaxDims))
      return Status::Error(c_.name + ": " + key + " has more than 4 dimensions");
    used_.insert(key);
    auto it = work_.emplace(arg, Work::from(*t, pool ? o_.pool_slot_pad : 0)).first;
    inputs_[arg] = t;
    *v = it->second.view();
    return Status::Ok();
  }

  // An output filled with the fill value; dtype and shape from out.<name>, else the fallback.
  Status output(const std::string& name, const TensorView& like, std::vector<int64_t> fallback,
                TensorView* v) {
    const HostTensor* ex = c_.file.find("out." + name);
    HostTensor t = make_host_tensor(ex ? ex->dtype : like.dtype, ex ? ex->shape : fallback);
    if (t.shape.size() > static_cast<size_t>(kMaxDims) || t.shape.empty())
      return Status::Error(c_.name + ": output " + name + " shape " + t.describe() + " is invalid");
    fill_[name] = fill_bytes(t.dtype);
    const size_t es = dtype_size(t.dtype);
    for (size_t i = 0; i + es <= t.bytes.size(); i += es)
      std::copy_n(fill_[name].data(), es, t.bytes.data() + i);
    auto it = work_.emplace(name, Work::from(t, 0)).first;
    *v = it->second.view();
    return Status::Ok();
  }

  Status all_inputs_used() const {
    for (const auto& entry : c_.file.tensors) {
      const std::string& k = entry.first;
      if (k.rfind("in.", 0) == 0 && !used_.count(k))
        return Status::Error(c_.name + ": input " + k + " is not an argument of " + c_.op);
    }
    return Status::Ok();
  }

  std::vector<uint8_t> fill_bytes(DType t) const {
    std::vector<uint8_t> b(dtype_size(t));
    check::store_real(o_.fill, t, b.data());
    return b;
  }
  const HostTensor* in(const std::string& arg) const {
    auto it = inputs_.find(arg);
    return it == inputs_.end() ? nullptr : it->second;
  }
  const HostTensor* out(const std::string& name) const { return c_.file.find("out." + name); }
  const Work& work(const std::string& arg) const { return work_.at(arg); }
  const std::vector<uint8_t>& fill(const std::string& name) const { return fill_.at(name); }
  const GoldenCase& gcase() const { return c_; }

 private:
  const GoldenCase& c_;
  const RunOptions& o_;
  std::map<std::string, Work> work_;  // node-based: views into it stay valid
  std::map<std::string, const HostTensor*> inputs_;
  std::map<std::string, std::vector<uint8_t>> fill_;
  std::set<std::string> used_;
};

std::vector<int64_t> shape_of(const TensorView& v) {
  return std::vector<int64_t>(v.shape, v.shape + std::max(v.ndim, 0));
}

bool is_f32(DType t) { return t == DType::kFloat32 || t == DType::kFloat64; }

// Everything an op needs after building: how to run it and what to compare.
struct Plan {
  std::function<Status(Backend)> run;
  DType act = DType::kFloat32;                // activation dtype (tolerance column)
  std::vector<std::string> row_outputs;       // y / o / core_attn_out
  std::string exact_output;                   // "z" or empty
  int64_t exact_rows = 0;                     // z rows written: [0, exact_rows)
  bool has_conv = false, has_ssm = false;
  std::vector<check::SequenceGroup> groups;
  int64_t row_bound = 0;                      // rows a token may land on
  int64_t num_ssm_slots = 0;
  std::optional<int64_t> null_block_id;
};

check::SequenceGroup group(const Builder& B, const std::string& qsl, const std::string& slots,
                           const std::string& accepted, const std::string& remap, int64_t n,
                           int64_t limit) {
  check::SequenceGroup g;
  g.qsl = check::to_indices(B.in(qsl));
  g.n = n >= 0 ? n : std::max<int64_t>(0, static_cast<int64_t>(g.qsl.size()) - 1);
  const HostTensor* s = B.in(slots);
  g.slots = check::to_indices(s);
  g.cols = s && s->shape.size() == 2 ? s->shape[1] : 0;
  if (!accepted.empty()) g.accepted = check::to_indices(B.in(accepted));
  const HostTensor* r = remap.empty() ? nullptr : B.in(remap);
  g.has_remap = r != nullptr;
  g.remap = check::to_indices(r);
  g.limit = r ? static_cast<int64_t>(g.remap.size()) : limit;
  return g;
}

Status build_conv(Builder& B, const Params& P, bool update, Plan* plan) {
  std::string act = "silu", layout = "rolling";
  GDN_RETURN_IF_ERROR(P.string("activation", &act));
  std::optional<int64_t> null_block;
  GDN_RETURN_IF_ERROR(P.optional_integer("null_block_id", &null_block));
  Activation activation;
  GDN_RETURN_IF_ERROR(parse_activation(act, &activation));
  auto common = [&](auto& a) -> Status {
    GDN_RETURN_IF_ERROR(B.input("x", &a.x, true));
    GDN_RETURN_IF_ERROR(B.input("weight", &a.weight, true));
    GDN_RETURN_IF_ERROR(B.input("bias", &a.bias, false));
    GDN_RETURN_IF_ERROR(B.input("conv_state", &a.conv_state, true, /*pool=*/true));
    GDN_RETURN_IF_ERROR(B.input("query_start_loc", &a.query_start_loc, true));
    GDN_RETURN_IF_ERROR(B.input("state_indices", &a.state_indices, true));
    GDN_RETURN_IF_ERROR(B.output("y", a.x, shape_of(a.x), &a.y));
    a.activation = activation;
    a.null_block_id = null_block;
    plan->act = a.x.dtype;
    plan->row_bound = a.y.shape[0];
    return Status::Ok();
  };
  plan->row_outputs = {"y"};
  plan->has_conv = true;
  plan->null_block_id = null_block;
  if (!update) {
    CausalConv1dFwdArgs a;
    GDN_RETURN_IF_ERROR(common(a));
    GDN_RETURN_IF_ERROR(B.input("has_initial_state", &a.has_initial_state, false));
    plan->groups = {group(B, "query_start_loc", "state_indices", "", "", -1, a.x.shape[0])};
    plan->run = [a](Backend b) { return run_on(b, a); };
    return Status::Ok();
  }
  CausalConv1dUpdateArgs a;
  GDN_RETURN_IF_ERROR(common(a));
  GDN_RETURN_IF_ERROR(B.input("num_accepted_tokens", &a.num_accepted_tokens, false));
  GDN_RETURN_IF_ERROR(P.string("spec_layout", &layout));
  GDN_RETURN_IF_ERROR(parse_spec_conv_layout(layout, &a.spec_layout));
  plan->groups = {group(B, "query_start_loc", "state_indices", "num_accepted_tokens", "", -1,
                        a.x.shape[0])};
  plan->run = [a](Backend b) { return run_on(b, a); };
  return Status::Ok();
}

Status build_gdr(Builder& B, const Params& P, bool chunked, Plan* plan) {
  GatedDeltaRuleArgs a;
  const std::pair<const char*, TensorView*> required[] = {
      {"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"a", &a.a}, {"b", &a.b}, {"A_log", &a.A_log},
      {"dt_bias", &a.dt_bias}};
  for (const auto& [name, view] : required) GDN_RETURN_IF_ERROR(B.input(name, view, true));
  GDN_RETURN_IF_ERROR(B.input("ssm_state", &a.ssm_state, true, /*pool=*/true));
  GDN_RETURN_IF_ERROR(B.input("query_start_loc", &a.query_start_loc, true));
  GDN_RETURN_IF_ERROR(B.input("state_indices", &a.state_indices, true));
  GDN_RETURN_IF_ERROR(B.input("num_accepted_tokens", &a.num_accepted_tokens, false));
  GDN_RETURN_IF_ERROR(B.input("has_initial_state", &a.has_initial_state, false));
  GDN_RETURN_IF_ERROR(B.output("o", a.q, shape_of(a.v), &a.o));
  std::string layout = "vk";
  GDN_RETURN_IF_ERROR(P.string("state_layout", &layout));
  GDN_RETURN_IF_ERROR(parse_state_layout(layout, &a.state_layout));
  GDN_RETURN_IF_ERROR(P.real("scale", &a.scale));
  GDN_RETURN_IF_ERROR(P.optional_integer("null_block_id", &a.null_block_id));
  GDN_RETURN_IF_ERROR(P.fixed("l2norm_eps", 1e-6));
  GDN_RETURN_IF_ERROR(P.fixed("softplus_threshold", 20.0));
  bool spec = a.num_accepted_tokens.present();
  GDN_RETURN_IF_ERROR(P.boolean("spec", &spec));
  if (spec != a.num_accepted_tokens.present())
    return Status::Error(B.gcase().name + ": params.spec = " + (spec ? "true" : "false") +
                         " but in.num_accepted_tokens is " +
                         (a.num_accepted_tokens.present() ? "present" : "absent"));
  plan->act = a.q.dtype;
  plan->row_outputs = {"o"};
  plan->has_ssm = true;
  plan->row_bound = a.o.shape[0];
  plan->num_ssm_slots = a.ssm_state.shape[0];
  plan->null_block_id = a.null_block_id;
  plan->groups = {group(B, "query_start_loc", "state_indices", "num_accepted_tokens", "", -1,
                        a.q.shape[0])};
  if (chunked) {
    plan->run = [a](Backend b) { return run_chunked_on(b, a); };
  } else {
    plan->run = [a](Backend b) { return run_recurrent_on(b, a); };
  }
  return Status::Ok();
}

Status build_attention(Builder& B, const Params& P, Plan* plan) {
  GdnAttentionArgs a;
  GDN_RETURN_IF_ERROR(P.integer("num_k_heads", &a.num_k_heads, true));
  GDN_RETURN_IF_ERROR(P.integer("num_v_heads", &a.num_v_heads, true));
  GDN_RETURN_IF_ERROR(P.integer("head_k_dim", &a.head_k_dim, true));
  GDN_RETURN_IF_ERROR(P.integer("head_v_dim", &a.head_v_dim, true));
  GDN_RETURN_IF_ERROR(P.integer("num_prefills", &a.num_prefills, true));
  GDN_RETURN_IF_ERROR(P.integer("num_decodes", &a.num_decodes, true));
  GDN_RETURN_IF_ERROR(P.integer("num_spec_decodes", &a.num_spec_decodes, true));
  GDN_RETURN_IF_ERROR(P.integer("num_actual_tokens", &a.num_actual_tokens, true));
  GDN_RETURN_IF_ERROR(P.integer("tp_size", &a.tp_size));
  GDN_RETURN_IF_ERROR(P.boolean("reorder_input", &a.reorder_input));
  GDN_RETURN_IF_ERROR(P.real("scale", &a.scale));
  GDN_RETURN_IF_ERROR(P.optional_integer("null_block_id", &a.null_block_id));
  std::string act = "silu";
  GDN_RETURN_IF_ERROR(P.string("activation", &act));
  GDN_RETURN_IF_ERROR(parse_activation(act, &a.activation));
  std::string conv_layout = "rolling";  // files that do not say were all written with the rolling line
  GDN_RETURN_IF_ERROR(P.string("spec_conv_layout", &conv_layout));
  GDN_RETURN_IF_ERROR(parse_spec_conv_layout(conv_layout, &a.spec_conv_layout));
  GDN_RETURN_IF_ERROR(P.fixed("ssm_state_layout", "vk"));
  GDN_RETURN_IF_ERROR(P.fixed("conv_state_layout", "slot,row,channel"));

  GDN_RETURN_IF_ERROR(B.input("projected_states_qkvz", &a.projected_states_qkvz, true));
  GDN_RETURN_IF_ERROR(B.input("projected_states_ba", &a.projected_states_ba, true));
  GDN_RETURN_IF_ERROR(B.input("conv_state", &a.conv_state, true, /*pool=*/true));
  GDN_RETURN_IF_ERROR(B.input("ssm_state", &a.ssm_state, true, /*pool=*/true));
  GDN_RETURN_IF_ERROR(B.input("conv_weights", &a.conv_weights, true));
  GDN_RETURN_IF_ERROR(B.input("conv_bias", &a.conv_bias, false));
  GDN_RETURN_IF_ERROR(B.input("A_log", &a.A_log, true));
  GDN_RETURN_IF_ERROR(B.input("dt_bias", &a.dt_bias, true));
  GDN_RETURN_IF_ERROR(B.input("has_initial_state", &a.has_initial_state, false));
  GDN_RETURN_IF_ERROR(B.input("non_spec_query_start_loc", &a.non_spec_query_start_loc, false));
  GDN_RETURN_IF_ERROR(B.input("non_spec_token_indx", &a.non_spec_token_indx, false));
  GDN_RETURN_IF_ERROR(B.input("non_spec_state_indices_tensor", &a.non_spec_state_indices_tensor,
                              false, false, "non_spec_state_indices"));
  GDN_RETURN_IF_ERROR(B.input("spec_query_start_loc", &a.spec_query_start_loc, false));
  GDN_RETURN_IF_ERROR(B.input("spec_token_indx", &a.spec_token_indx, false));
  GDN_RETURN_IF_ERROR(B.input("spec_state_indices_tensor", &a.spec_state_indices_tensor, false,
                              false, "spec_state_indices"));
  GDN_RETURN_IF_ERROR(B.input("num_accepted_tokens", &a.num_accepted_tokens, false));

  const int64_t tp = a.tp_size > 0 ? a.tp_size : 1;
  const std::vector<int64_t> out_shape = {a.projected_states_qkvz.shape[0], a.num_v_heads / tp,
                                          a.head_v_dim};
  GDN_RETURN_IF_ERROR(B.output("core_attn_out", a.projected_states_qkvz, out_shape, &a.core_attn_out));
  GDN_RETURN_IF_ERROR(B.output("z", a.projected_states_qkvz, out_shape, &a.z));

  const int64_t nat = a.num_actual_tokens;
  plan->act = a.projected_states_qkvz.dtype;
  plan->row_outputs = {"core_attn_out"};
  plan->exact_output = "z";
  plan->exact_rows = std::clamp<int64_t>(nat, 0, a.z.shape[0]);
  plan->has_conv = plan->has_ssm = true;
  plan->row_bound = std::clamp<int64_t>(nat, 0, a.core_attn_out.shape[0]);
  plan->num_ssm_slots = a.ssm_state.shape[0];
  plan->null_block_id = a.null_block_id;
  plan->groups = {
      group(B, "non_spec_query_start_loc", "non_spec_state_indices_tensor", "",
            "non_spec_token_indx", a.num_prefills + a.num_decodes, nat),
      group(B, "spec_query_start_loc", "spec_state_indices_tensor", "num_accepted_tokens",
            "spec_token_indx", a.num_spec_decodes, nat)};
  plan->run = [a](Backend b) { return run_on(b, a); };
  return Status::Ok();
}

Status build(Builder& B, const GoldenCase& c, Plan* plan) {
  Params P(c.file.params, c.name);
  if (c.op == "causal_conv1d_fwd") {
    GDN_RETURN_IF_ERROR(build_conv(B, P, false, plan));
  } else if (c.op == "causal_conv1d_update") {
    GDN_RETURN_IF_ERROR(build_conv(B, P, true, plan));
  } else if (c.op == "gated_delta_rule_recurrent") {
    GDN_RETURN_IF_ERROR(build_gdr(B, P, false, plan));
  } else if (c.op == "gated_delta_rule_chunked") {
    GDN_RETURN_IF_ERROR(build_gdr(B, P, true, plan));
  } else if (c.op == "gdn_attention") {
    GDN_RETURN_IF_ERROR(build_attention(B, P, plan));
  } else {
    return Status::Error(c.name + ": params.op must be one of causal_conv1d_fwd, "
                         "causal_conv1d_update, gated_delta_rule_recurrent, "
                         "gated_delta_rule_chunked, gdn_attention; got '" + c.op + "'");
  }
  return B.all_inputs_used();
}

OutputCheck pool_check(const Builder& B, const std::string& name, const std::vector<char>* slots,
                       double tol) {
  const Work& w = B.work(name);
  OutputCheck c = check::check_pool(name, w.dense(), *B.in(name), B.out(name),
                                    B.out(name + "_f64"), slots, tol);
  if (!w.pad_intact()) {
    c.pass = false;
    c.detail = name + ": the padding between slots (dim-0 stride " +
               std::to_string(w.inner() + w.pad) + ") was written" +
               (c.detail.empty() ? "" : "; " + c.detail);
  }
  return c;
}

}  // namespace

Status load_case(const std::string& path, GoldenCase* out) {
  GoldenCase c;
  c.path = path;
  c.name = std::filesystem::path(path).stem().string();
  GDN_RETURN_IF_ERROR(read_safetensors(path, &c.file));
  auto it = c.file.params.find("op");
  if (it == c.file.params.end() || !it->is_string())
    return Status::Error(path + ": params.op (a string) is missing");
  c.op = it->get<std::string>();
  *out = std::move(c);
  return Status::Ok();
}

CaseResult run_case(const GoldenCase& c, Backend backend, const RunOptions& options) {
  CaseResult r;
  r.name = c.name;
  r.op = c.op;
  r.backend = backend;
  Builder B(c, options);
  Plan plan;
  r.status = build(B, c, &plan);
  if (!r.status.ok()) return r;

  const auto t0 = std::chrono::steady_clock::now();
  r.status = plan.run(backend);
  r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!r.status.ok()) return r;

  const bool act_f32 = is_f32(plan.act);
  const double out_tol = act_f32 ? 1e-5 : 1e-2;
  check::WriteSet ws;
  ws.rows.assign(static_cast<size_t>(std::max<int64_t>(plan.row_bound, 0)), 0);
  ws.slots.assign(static_cast<size_t>(std::max<int64_t>(plan.num_ssm_slots, 0)), 0);
  for (const check::SequenceGroup& g : plan.groups)
    check::mark_writes(g, plan.row_bound, plan.num_ssm_slots, plan.null_block_id, &ws);

  for (const std::string& name : plan.row_outputs)
    r.outputs.push_back(check::check_output(name, B.work(name).dense(), B.out(name),
                                            B.out(name + "_f64"), ws.rows, B.fill(name), out_tol,
                                            /*exact=*/false));
  if (!plan.exact_output.empty()) {
    std::vector<char> rows(static_cast<size_t>(plan.exact_rows), 1);
    const std::string& name = plan.exact_output;
    r.outputs.push_back(check::check_output(name, B.work(name).dense(), B.out(name), nullptr, rows,
                                            B.fill(name), 0, /*exact=*/true));
  }
  if (plan.has_conv) r.outputs.push_back(pool_check(B, "conv_state", nullptr, 0));
  if (plan.has_ssm) {
    const double tol = is_f32(B.work("ssm_state").dtype) && act_f32 ? 1e-5 : 1e-2;
    r.outputs.push_back(pool_check(B, "ssm_state", &ws.slots, tol));
  }
  r.pass = true;
  for (const OutputCheck& o : r.outputs) r.pass = r.pass && o.pass;
  return r;
}

std::vector<std::string> list_case_files(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".safetensors" && it->is_regular_file(ec))
      files.push_back(it->path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace gdn::capture
