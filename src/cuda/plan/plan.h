// src/cuda/plan/plan.h — the CUDA backend's planner: from one launch's problem and the device to
// the kernel that runs it. Plain C++ (no CUDA headers): unit-tested on the CPU (tests/test_plan.cpp).
//
// The kernel families (docs/design.md says why each exists):
//   primitive recurrence (gated_delta_rule_recurrent, _chunked):
//     lean        one warp per 8 rows, nothing but the recurrence (decode and verify batches)
//     pipelined   persistent sm_90 blocks, state tiles through a TMA ring (large batches)
//     register    the general kernel: every shape, dtype, layout and metadata form
//     packed      16-bit state in packed pairs (large batches)
//   the lean, pipelined and register kernels (its small and large shapes) also have gate-form
//   instances, for every gate and norm form of ops.h (takes_gate_forms)
//   chunk kernel (gated_delta_rule_chunked): chunks of 64 tokens on tensor cores (prefill batches)
//   deferred commit (gated_delta_rule_recurrent with verify_log): the deferred kernel, by rows per block
//   gdn_attention's step (conv + gates + norms + recurrence + conv pool + z):
//     pipelined   the pipelined kernel with a conv warp (large batches)
//     cluster     thread-block clusters of one (sequence, key head), sm_90
//     two launches  the register kernel's fused form, then the conv kernel (everywhere else)
// A forced path (Override: tests, `gdn bench --path`) runs where it can run and falls back to the
// planner's own choice where it cannot.
#pragma once
#include <cstdint>

#include "cuda/plan/tuning.h"

namespace gdn::cuda::plan {

enum class Path : uint8_t {
  kAuto = 0,
  // primitive recurrence
  kLean,
  kLeanMore,    // more resident blocks, fewer registers
  kLeanStaged,  // 16-bit state: the block's rows staged through shared memory
  kPipelined,
  kRegisterSmall,
  kRegisterMid,  // 16-bit verify, K = 128
  kRegisterLarge,
  kPacked,  // 16-bit state, K = 128
  // the deferred-commit mode's kernel, by rows per block
  kDeferred,       // kDeferredRows rows (four warps)
  kDeferredSmall,  // kDeferredSmallRows rows (one warp)
  kDeferredLean,   // linear verify in the lean kernel's layout (deferred_lean.cuh)
  kDeferredLean8,   // forced only: the lean form's 8-row warps (each preparing its tokens)
  kDeferredLean16,  // forced only: the lean form's 16-row warps (the prep kernel's inputs where it runs)
  kDeferredLeanAlg,  // forced only: the algebra on tensor cores (deferred_mma.cuh) where it runs
  // the chunked op's chunk kernel, by value columns per block
  kChunk32,
  kChunk64,
  kChunk128,  // eight consumer warps over the value head's 128 columns (V a multiple of 128)
  kChunkSplit,  // the split form: prep kernel, then 32-column blocks that only load its records
  kChunkSmall,       // forced only: the producers' form of one buffer, 32 columns (ChunkParams::small)
  kChunkSplitSmall,  // forced only: the split form of two buffers
  // gdn_attention's step
  kStepPipelined,
  kStepPipelinedPrologue,  // the block's first groups convolved by all its warps before the copies
  kStepCluster,
  kStepClusterLean,  // float32 K = 128 state: the lean kernel's lane layout
  kStepTwoLaunches,
  kCount
};
const char* path_name(Path p);   // "lean", "pipelined", "step_cluster", ...; "auto"
bool parse_path(const char* s, Path* out);
bool is_step_path(Path p);       // a path of gdn_attention's step
bool is_chunk_path(Path p);      // a path of the chunk kernel (gated_delta_rule_chunked)
bool is_deferred_path(Path p);   // a path of the deferred-commit kernel
// Whether path p of the primitive recurrence has gate-form instances (Problem::gate_forms): lean,
// lean_more, lean_staged, pipelined, register_small and register_large. register_mid and packed
// have none: each serves a band of 16-bit batches of its own (small verify batches; one-token
// batches between the lean kernel's bands and the pipelined kernel's range), where the register
// kernel's large shape takes those forms instead, and instances of theirs would add code for those
// bands alone.
bool takes_gate_forms(Path p);

// Kernel choice forced by the caller (internal: tests and benchmarks). Default: the planner's.
struct Override {
  Path path = Path::kAuto;
};

// One launch, as the planner sees it (filled by the CUDA side from the kernels' parameters).
struct Problem {
  bool step = false;  // gdn_attention's step, else the primitive recurrence
  int state_bytes = 4;  // 4: float32 state, 2: bfloat16 / float16
  int K = 0, V = 0, H = 0, HV = 0, r = 1;
  int64_t nseq = 0;    // sequences of both groups
  int64_t tokens = 0;  // token rows of the batch (both groups)
  bool spec = false;   // the batch's (first) group is a verify group
  bool verify_cols = false;  // a verify group has more than one state column
  bool dense = false;  // "vk" state, 16-byte aligned rows (vector loads)
  // Primitive recurrence: gate or norm forms other than the default (the log-space decay or beta
  // given, no l2 norm, a or b in a dtype other than the activations'). The paths with gate-form
  // instances (takes_gate_forms) take them by the default form's rules; where the default form
  // would take one without (register_mid, packed), the choice that follows it in the planner's
  // order (the register kernel's large shape), and a forced path without them leaves the
  // planner's choice.
  bool gate_forms = false;
  // Whether each family can take the launch at all (shapes, alignment, metadata forms, sm_90 code):
  bool lean_ok = false;        // every group of the batch's kind, int32 metadata, no remap, K = 128
  bool pipelined_ok = false;   // K = 128 dense state, aligned inputs (and, step: conv pool, weights)
  bool cluster_ok = false;     // step: a cluster of (ceil(V / rows), r) blocks with one channel per thread
  bool per_token_verify = false;  // step: verify conv windows per draft slot (an instance of its own)
  bool lean_staged_ok = false;     // 16-bit state, V a multiple of the staged form's rows
  int64_t lean_blocks = 0;         // the lean kernel's grid (base form)
  int64_t pipelined_tiles = 0;     // the pipelined kernel's row tiles per (sequence, value head)
  int pipelined_group_bufs = 0;    // step: its group buffers where it has the conv prologue, else 0
  int64_t cluster_blocks = 0;      // step: blocks per cluster

  int64_t seqheads() const { return nseq * HV; }
  int64_t groups() const { return nseq * H; }
  bool one_token() const { return tokens <= nseq; }
  bool multi_token() const { return tokens >= 2 * nseq; }
};

// What the planner asks of the device's kernels: queried and cached per device by the CUDA side,
// faked in the tests.
class Facts {
 public:
  virtual ~Facts() = default;
  virtual int sms() const = 0;
  // Resident blocks, on the whole device, of the pipelined kernel instance for kTok staged tokens
  // (1 or 4); 0 where that instance cannot run (no sm_90 code, shared memory, ring shape).
  virtual int64_t pipelined_blocks(int kTok) const = 0;
  // Whether a cluster of the step kernel (lean lanes or not) can be resident.
  virtual bool cluster_resident(bool lean) const = 0;
  // Resident blocks per SM of the lean kernel's base form (verify instance or not).
  virtual int lean_blocks_per_sm(bool spec) const = 0;
};

struct Plan {
  Path path = Path::kRegisterLarge;  // never kAuto
  int tok = 0;                // pipelined: tokens staged per item (1 or 4)
  int64_t blocks = 0;         // pipelined: persistent blocks
  bool per_token = false;     // step kernels: the per-token conv window instance
  bool overlap = true;        // programmatic overlap with the stream's previous kernel
};

// The kernel for p on a device of compute capability cc_major; nseq > 0.
Plan plan_launch(const Problem& p, int cc_major, const Facts& facts, Override force = {});

// The chunked op: the chunk kernel where it can run and the batch is prefill-like (at least
// chunk_min_tokens tokens per sequence on average), else the recurrence (plan_launch). vs: value
// columns per block, 128 once those blocks fill more than half the device (chunk_vs128_blocks), else
// 64 once the blocks of that split fill it, else 32 (more blocks).
struct ChunkProblem {
  int64_t nseq = 0, tokens = 0;
  int HV = 0, V = 0;
  bool chunk_ok = false;  // K = 128, V a multiple of 32, 16-bit aligned activations, sm_80+, shared memory
  bool vs64_fits = true;   // the 64-column block's shared memory fits the device
  bool vs128_fits = true;  // the 128-column block's (a full form only)
  bool chunk_only = false;  // the chunk kernel whatever the batch (gdn_attention: the device tests the lengths)
  bool split_ok = false;    // the prep kernel takes V and fits the device (chunk_fit)
  bool full_fits = true;    // the forms of two (split: three) buffers fit the device, else the small forms
};
// split: the prep kernel first (parallel over chunks and value heads), then blocks of 32 columns
// that only load its records, where few blocks would walk long sequences (chunk_split_blocks).
// small: the forms of fewer buffers (where the full forms do not fit, or forced).
struct ChunkPlan {
  bool chunk = false;
  int vs = 32;
  bool split = false;
  bool small = false;
};
ChunkPlan plan_chunked(const ChunkProblem& p, int cc_major, int sms, Override force = {});

// gdn_attention: whether its prefills take the chunk kernel beside the step (which then runs in two
// launches): where the kernel can run and a prefill may reach chunk_min_tokens tokens (the batch's
// non-spec token rows beyond one per decode). On the device, each non-spec sequence of at least
// `from` tokens is the chunk kernel's, the others the step's. A forced step path keeps every
// sequence in the step; a forced chunk path (value split) takes the prefills that can.
struct AttentionChunkProblem {
  int64_t prefills = 0, prefill_rows = 0;  // num_prefills; non-spec token rows minus num_decodes
  int HV = 0, V = 0;
  bool chunk_ok = false;  // as ChunkProblem, for the projections, the conv pool and core_attn_out
  bool vs64_fits = true;
  bool vs128_fits = true;
  bool split_ok = false;
  bool full_fits = true;
};
struct AttentionChunkPlan {
  bool chunk = false;
  int vs = 32;
  bool split = false;
  bool small = false;
  int64_t from = 0;  // chunk kernel: non-spec sequences of at least this many tokens
};
AttentionChunkPlan plan_attention_chunk(const AttentionChunkProblem& p, int cc_major, int sms, Override force = {});

// The deferred-commit mode (gated_delta_rule_recurrent with verify_log): the lean form
// (deferred/deferred_lean.cuh: one warp per kDeferredSmallRows rows, no shared memory) wherever it
// applies (lean_ok: K = 128, dense "vk" state, aligned q / k), with kDeferredLean16Rows rows per
// warp above deferred_lean16_warps warps, chains through the recurrence; there token trees of at
// most kDeferredAlgebraNodes nodes (verify_log's columns) go through the algebra on tensor cores
// (deferred_mma.cuh, V a multiple of kDeferredAlgRows; a tree that does not fit its chunk goes to
// the general kernel after it); other trees and every other shape to
// the general kernel (deferred/deferred.cuh: trees, every shape) in one of two block sizes,
// kDeferredRows rows of a (sequence, value head) per block (four warps sharing a chunk's staged
// inputs and key products) or kDeferredSmallRows (one warp). The four-warp form unless its grid
// would leave most SMs idle: at most deferred_small_blocks blocks (scaled by the SM count), where
// the one-warp form's four times as many blocks spread further. A forced path runs where it can
// (the lean form where lean_ok).
constexpr int kDeferredRows = 32, kDeferredSmallRows = 8, kDeferredLean16Rows = 16;
constexpr int64_t kDeferredAlgebraNodes = 8;  // replay and step within the algebra's 16-node chunk
constexpr int kDeferredAlgRows = 64;           // state rows per block of the algebra kernel (V a multiple)
struct DeferredProblem {
  int64_t nseq = 0;
  int HV = 0, V = 0;
  bool lean_ok = false;  // K = 128, dense "vk" state, aligned q / k
  bool tree = false;     // token_parents: the lean form only through the algebra
  int64_t nodes = 0;     // a tree's most nodes per sequence (verify_log's columns)
};
struct DeferredPlan {
  Path path = Path::kDeferred;
  int rows = kDeferredRows;      // state rows per block
  bool algebra = false;          // the lean form's 16-row warps through the algebra (deferred_mma.cuh)
  int64_t grid_x = 0, grid_y = 0, grid_z = 0;  // (ceil(V / rows), HV, nseq)
};
DeferredPlan plan_deferred(const DeferredProblem& p, int cc_major, int sms, Override force = {});

// Batch-size comparisons scaled by the device's SM count against the table's reference card.
inline bool at_least(int64_t work, int threshold, const Tuning& t, int sms) {
  return work * t.ref_sms >= int64_t{threshold} * sms;
}
inline bool at_most(int64_t work, int threshold, const Tuning& t, int sms) {
  return work * t.ref_sms <= int64_t{threshold} * sms;
}

}  // namespace gdn::cuda::plan
