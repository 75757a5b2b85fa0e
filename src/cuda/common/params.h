// src/cuda/common/params.h — the kernels' parameter structs, filled once on the host, passed by value.
#pragma once
#include <cstdint>
#include <type_traits>

#include "common/attention_layout.h"
#include "cuda/common/cuda_util.cuh"

namespace gdn::cuda {

// One group of sequences: all non-spec sequences, or all verify sequences.
struct GroupMeta {
  IndexRef qsl;           // [n+1], local token offsets
  IndexRef slots;         // [n] or [n, cols]
  IndexRef num_accepted;  // [n] (verify) or absent
  const uint8_t* has_init = nullptr;  // [n] bool or absent (= all true)
  int64_t has_init_stride = 1;
  IndexRef token_indx;    // local token -> global row, absent = identity
  int64_t n = 0, cols = 1, limit = 0;  // limit: bound of local token indices
  bool spec = false;
};

// Where token inputs come from: q/k/v/a/b tensors (primitive op) or, fused, the conv of the
// projections (gdn_attention).
struct TokenSource {
  const void *q = nullptr, *k = nullptr, *v = nullptr, *a = nullptr, *b = nullptr;  // act dtype
  int64_t q_rs = 0, k_rs = 0, v_rs = 0, a_rs = 0, b_rs = 0;                        // row strides
  const void* qkvz = nullptr;  // [rows, H (2K + 2rV)]
  int64_t qkvz_rs = 0;
  const void* ba = nullptr;    // [rows, 2 HV]
  int64_t ba_rs = 0;
  rules::ProjLayout proj{};
  int64_t num_actual_tokens = 0;
};

// Conv pool [slots, rows, D] and weights [D, W] (act dtype).
struct ConvRef {
  void* state = nullptr;
  int64_t slot_stride = 0, rows = 0, num_slots = 0, D = 0;
  const void* weight = nullptr;
  int64_t weight_rs = 0;
  const void* bias = nullptr;
  int W = 4;
  bool silu = true;
};

// What the recurrent and the conv kernels share: the two groups of sequences, their token inputs,
// the conv pool and weights, the null slot and (gdn_attention) the z copy. gdn_attention fills it
// once for both of its kernels.
struct StepParams {
  GroupMeta group[2];
  int64_t n0 = 0;  // blockIdx.z < n0: group 0, else group 1
  TokenSource src;  // conv: x in src.q with row stride src.q_rs (primitive), or the projections (fused)
  ConvRef conv;     // recurrent: fused only (read-only there)
  bool has_null = false;
  bool conv_per_token = false;  // verify conv windows per draft slot (docs/contract.md §3), else the rolling line
  int64_t null_id = 0;
  void* z = nullptr;  // gdn_attention only: z copy
  int64_t z_rs = 0;
  // gdn_attention with the chunk kernel beside its step: when group 0's offsets are non-decreasing
  // (ordered_offsets), its sequences of at least chunk_from tokens are the chunk kernel's (their conv
  // by conv_rows.cu), and the two-launch step skips them.
  int64_t chunk_from = INT64_MAX;
  // The launch has verify sequences with per-token conv windows: the one-launch steps then run
  // their per-token instances.
  __host__ __device__ bool per_token_verify() const { return conv_per_token && group[1].n > 0; }
};

// Sequence z of a launch (group 0's sequences first, then group 1's): its group and its index there.
struct SeqRef {
  int gi;
  int64_t i;
};
__device__ __forceinline__ SeqRef seq_ref(const StepParams& p, int64_t z) {
  const int gi = z < p.n0 ? 0 : 1;
  return SeqRef{gi, gi ? z - p.n0 : z};
}

// The gate and norm forms of ops.h (GatedDeltaRuleArgs): the decay computed from a
// (g = -exp(A_log) softplus(a + dt_bias)) or a itself the log-space decay (decay_given); beta =
// sigmoid(b) or b itself (beta_given); q and k l2-normalised or used as given (l2norm false).
struct GateForm {
  bool decay_given = false, beta_given = false, l2norm = true;
};

struct RecurrentParams : StepParams {
  FloatRef A_log, dt_bias;  // absent where gates.decay_given
  void* state = nullptr;  // [slots, HV, V, K] or [slots, HV, K, V]
  int64_t state_slot_stride = 0, num_slots = 0;
  bool kv_layout = false, state_vec = false;
  void* o = nullptr;  // [rows, HV, V]
  int64_t o_rs = 0;
  int H = 0, HV = 0, K = 0, V = 0, r = 1;
  float scale = 1.f;
  bool early_meta = false;  // the register kernels read the metadata before pdl_start() (metadata_ready_early)
  // The primitive ops' gate and norm forms and the dtypes of a and b (FloatRef codes: 0 float32,
  // 1 bfloat16, 2 float16); gdn_attention: the defaults, a and b in the activation dtype. The
  // gate-form instances of the register, lean and pipelined kernels, the chunk kernel and the deferred
  // kernel read them; every other recurrence kernel and instance runs the defaults only
  // (default_gate_form), and the planner sends it nothing else (plan::takes_gate_forms).
  // (Bytes that fit in the struct's tail padding: its size, and so the kernels' parameter offsets,
  // are those of the default form's fields alone.)
  GateForm gates;
  uint8_t a_dtype = 1, b_dtype = 1;
};
static_assert(sizeof(GateForm) == 3, "three flags");
// FloatRef's dtype code of an activation type.
template <typename T>
constexpr int act_code() {
  return std::is_same_v<T, float> ? 0 : std::is_same_v<T, __half> ? 2 : 1;
}
// Whether p's gates are the default forms with a and b in the activation dtype TAct (what every
// recurrence kernel takes; other forms only the gate-form instances).
template <typename TAct>
inline bool default_gate_form(const RecurrentParams& p) {
  return !p.gates.decay_given && !p.gates.beta_given && p.gates.l2norm && p.a_dtype == act_code<TAct>() &&
         p.b_dtype == act_code<TAct>();
}
// The primitive op's tokens (both groups' local token bounds), and whether a batch of nseq sequences
// has on average 2 or more of them per sequence (verify-like: the planner's problem, launch.cuh).
inline int64_t batch_tokens(const RecurrentParams& p) { return p.group[0].limit + p.group[1].limit; }
inline bool multi_token(const RecurrentParams& p, int64_t nseq) { return batch_tokens(p) >= 2 * nseq; }

struct ConvParams : StepParams {
  void* y = nullptr;  // [rows, D] (primitive only)
  int64_t y_rs = 0;
};

}  // namespace gdn::cuda
