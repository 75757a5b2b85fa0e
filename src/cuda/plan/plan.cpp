// The CUDA backend's planner (plan.h): every kernel choice of the backend, in one place.
#include "cuda/plan/plan.h"

#include <cstring>

namespace gdn::cuda::plan {
namespace {

constexpr const char* kNames[] = {"auto", "lean", "lean_more", "lean_staged",
                                  "pipelined", "register_small", "register_mid", "register_large",
                                  "packed", "deferred", "deferred_small", "deferred_lean",
                                  "deferred_lean8", "deferred_lean16", "deferred_lean_alg", "chunk_vs32",
                                  "chunk_vs64", "chunk_vs128", "chunk_split", "chunk_small", "chunk_split_small",
                                  "step_pipelined", "step_pipelined_prologue", "step_cluster", "step_cluster_lean",
                                  "step_two_launches"};
static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<int>(Path::kCount), "a name per path");

struct Ctx {
  const Problem& p;
  const Facts& f;
  const Tuning& t;
  int sms;
  bool ge(int64_t work, int thr) const { return at_least(work, thr, t, sms); }
  bool le(int64_t work, int thr) const { return at_most(work, thr, t, sms); }
};

// --- primitive recurrence -------------------------------------------------------------------

// The lean kernel's form with more resident blocks, for a grid of `blocks` blocks.
bool lean_more(const Ctx& c, int64_t blocks) {
  const int64_t wave = int64_t{c.f.lean_blocks_per_sm(c.p.spec)} * c.sms;  // the base form's blocks at once
  if (c.le(blocks, c.t.lean_more_hi)) return c.p.spec || !c.le(blocks, c.t.lean_more_lo);
  return (c.p.spec || c.p.state_bytes == 4) && blocks > wave && blocks <= c.t.lean_more_waves * wave;
}

bool lean_staged(const Ctx& c) {
  return c.p.lean_staged_ok && c.p.one_token() && c.ge(c.p.seqheads(), c.t.lean_staged_min);
}

// The lean kernel where the batch takes it by default.
bool lean_chosen(const Ctx& c) {
  const Problem& p = c.p;
  const int64_t sh = p.seqheads();
  const bool verify = p.spec && p.multi_token(), one = p.one_token();
  if (p.state_bytes == 4) return verify || (one && (c.le(sh, c.t.lean_f32_mid_lo) || c.ge(sh, c.t.lean_f32_mid_hi)));
  if (verify) return c.le(sh, c.t.lean_16_verify_max);
  return one && (c.le(sh, c.t.lean_16_max) || lean_staged(c) ||
                 (c.ge(sh, c.t.lean_16_band_lo) && c.le(sh, c.t.lean_16_band_hi)));
}

// The pipelined kernel: its instance (tokens staged per item) and blocks, or tok = 0.
Plan pipelined(const Ctx& c, bool forced) {
  const Problem& p = c.p;
  Plan pl;
  pl.path = Path::kPipelined;
  if (!p.pipelined_ok) return pl;
  const int64_t sh = p.seqheads();
  if (!forced && !c.ge(sh, p.state_bytes == 4 ? c.t.pipelined_min_f32 : c.t.pipelined_min_16)) return pl;
  if (!forced && p.state_bytes == 4 && p.multi_token() && c.ge(sh, c.t.pipelined_f32_verify_lo) &&
      !c.ge(sh, c.t.pipelined_f32_verify_hi))
    return pl;  // float32 verify in the register kernel's window
  const int tok = p.one_token() ? 1 : (p.tokens <= 4 * p.nseq || forced) ? 4 : 0;
  if (tok == 0) return pl;
  const int64_t blocks = c.f.pipelined_blocks(tok);
  if (blocks <= 0) return pl;
  const int64_t work = p.nseq * p.HV * p.pipelined_tiles;
  pl.tok = tok;
  pl.blocks = work < blocks ? work : blocks;
  return pl;
}

Plan plan_recurrent(const Ctx& c, Path force) {
  const Problem& p = c.p;
  const bool sixteen = p.state_bytes == 2;
  // gate forms other than the default: the paths with gate-form instances (takes_gate_forms); the
  // batches of the others take the choice that follows them
  auto forms_ok = [&](Path path) { return !p.gate_forms || takes_gate_forms(path); };
  const bool mid_ok = forms_ok(Path::kRegisterMid) && sixteen && p.K > 64 && p.K <= 128;  // 16-bit, K padded to 128
  const bool packed_ok = forms_ok(Path::kPacked) && sixteen && p.K == 128 && p.dense;
  Plan pl;
  const bool small = c.le(p.seqheads(), sixteen ? c.t.register_small_16 : c.t.register_small_f32);
  auto lean = [&](bool more, bool staged) {
    pl.path = staged ? Path::kLeanStaged : more ? Path::kLeanMore : Path::kLean;
    return pl;
  };
  // forced paths, where they can run
  switch (force) {
    case Path::kLean:
      if (p.lean_ok) return lean(false, false);
      break;
    case Path::kLeanMore:
      if (p.lean_ok) return lean(true, false);
      break;
    case Path::kLeanStaged:
      if (p.lean_ok && p.lean_staged_ok) return lean(false, true);
      break;
    case Path::kPipelined:
      if (Plan t = pipelined(c, true); t.tok) return t;
      break;
    case Path::kRegisterSmall:
    case Path::kRegisterLarge:
      pl.path = force;
      return pl;
    case Path::kRegisterMid:
    case Path::kPacked:
      if (force == Path::kRegisterMid ? mid_ok : packed_ok) {
        pl.path = force;
        return pl;
      }
      break;
    default:
      break;
  }
  // the planner's choice
  if (p.lean_ok && lean_chosen(c)) return lean(lean_more(c, p.lean_blocks), lean_staged(c));
  if (Plan t = pipelined(c, false); t.tok) return t;
  const int64_t sh = p.seqheads();
  if (small) {
    pl.path = Path::kRegisterSmall;
  } else if (mid_ok && c.le(sh, c.t.register_mid_16) && p.multi_token()) {
    pl.path = Path::kRegisterMid;
  } else if (packed_ok && !p.verify_cols) {
    pl.path = Path::kPacked;  // verify batches with several state columns measured faster in the register kernel
  } else {
    pl.path = Path::kRegisterLarge;
  }
  return pl;
}

// --- gdn_attention's step -------------------------------------------------------------------

Plan step_pipelined(const Ctx& c, bool forced, int prologue) {  // prologue: -1 by the batch, 0 off, 1 on
  const Problem& p = c.p;
  Plan pl;
  pl.path = Path::kStepPipelined;
  pl.per_token = p.per_token_verify;
  if (!p.pipelined_ok) return pl;
  const int64_t groups = p.groups();
  const int min = !p.multi_token() ? c.t.step_pipelined_min_one
                  : p.state_bytes == 2 ? c.t.step_pipelined_min_16
                                       : c.t.step_pipelined_min_f32;
  if (!forced && !c.ge(groups, min)) return pl;
  if (!(p.tokens <= 4 * p.nseq || forced)) return pl;  // 4 >= W - 1 staged tokens
  const int64_t resident = c.f.pipelined_blocks(4);
  if (resident <= 0) return pl;
  pl.tok = 4;
  pl.blocks = groups < resident ? groups : resident;
  // the prologue: every group of a block convolved before most copies start, where the block's
  // groups fit its group buffers (one-token and multi-token batches alike)
  const bool fits = (groups + pl.blocks - 1) / pl.blocks <= p.pipelined_group_bufs;
  const bool pre = p.pipelined_group_bufs > 0 && (prologue == 1 || (prologue < 0 && fits));
  if (pre) pl.path = Path::kStepPipelinedPrologue;
  return pl;
}

Plan step_cluster(const Ctx& c, int lean) {  // lean: -1 by the batch, 0 plain lanes, 1 lean lanes
  const Problem& p = c.p;
  Plan pl;
  pl.path = Path::kStepTwoLaunches;
  pl.per_token = p.per_token_verify;
  if (!p.cluster_ok) return pl;
  bool use_lean = false;
  if (p.state_bytes == 4 && p.K == 128 && p.dense) {
    const bool fits = p.cluster_blocks <= 8 || c.le(p.groups(), c.t.step_cluster_lean_groups);
    use_lean = lean == 1 || (lean < 0 && fits);
  }
  if (!c.f.cluster_resident(use_lean)) return pl;
  pl.path = use_lean ? Path::kStepClusterLean : Path::kStepCluster;
  pl.overlap = c.le(p.seqheads(), c.t.step_cluster_overlap_seqheads);
  return pl;
}

Plan plan_step(const Ctx& c, Path force) {
  switch (force) {
    case Path::kStepPipelined:
    case Path::kStepPipelinedPrologue:
      if (Plan t = step_pipelined(c, true, force == Path::kStepPipelinedPrologue ? 1 : 0); t.tok) return t;
      break;
    case Path::kStepCluster:
    case Path::kStepClusterLean:
      if (Plan t = step_cluster(c, force == Path::kStepClusterLean ? 1 : 0); t.path != Path::kStepTwoLaunches)
        return t;
      break;
    case Path::kStepTwoLaunches: {
      Plan t;
      t.path = Path::kStepTwoLaunches;
      return t;
    }
    default:
      break;
  }
  if (Plan t = step_pipelined(c, false, -1); t.tok) return t;
  return step_cluster(c, -1);
}

}  // namespace

const char* path_name(Path p) {
  const int i = static_cast<int>(p);
  return i >= 0 && i < static_cast<int>(Path::kCount) ? kNames[i] : "?";
}

bool parse_path(const char* s, Path* out) {
  for (int i = 0; i < static_cast<int>(Path::kCount); ++i)
    if (std::strcmp(s, kNames[i]) == 0) {
      *out = static_cast<Path>(i);
      return true;
    }
  return false;
}

bool is_step_path(Path p) { return p >= Path::kStepPipelined && p < Path::kCount; }
bool is_chunk_path(Path p) {
  return p == Path::kChunk32 || p == Path::kChunk64 || p == Path::kChunk128 || p == Path::kChunkSplit || p == Path::kChunkSmall ||
         p == Path::kChunkSplitSmall;
}
bool is_deferred_path(Path p) {
  return p == Path::kDeferred || p == Path::kDeferredSmall || p == Path::kDeferredLean ||
         p == Path::kDeferredLean8 || p == Path::kDeferredLean16 || p == Path::kDeferredLeanAlg;
}
bool takes_gate_forms(Path p) {
  switch (p) {
    case Path::kLean:
    case Path::kLeanMore:
    case Path::kLeanStaged:
    case Path::kPipelined:
    case Path::kRegisterSmall:
    case Path::kRegisterLarge:
      return true;
    default:
      return false;
  }
}

DeferredPlan plan_deferred(const DeferredProblem& p, int cc_major, int sms, Override force) {
  const Tuning& t = tuning_for(cc_major);
  DeferredPlan pl;
  const bool forced = force.path == Path::kDeferred || force.path == Path::kDeferredSmall;
  const int64_t large = p.nseq * p.HV * ((p.V + kDeferredRows - 1) / kDeferredRows);
  const bool small = forced ? force.path == Path::kDeferredSmall
                            : at_most(large, t.deferred_small_blocks, t, sms > 0 ? sms : 1);
  pl.path = p.lean_ok && !forced ? Path::kDeferredLean : small ? Path::kDeferredSmall : Path::kDeferred;
  pl.rows = pl.path == Path::kDeferred ? kDeferredRows : kDeferredSmallRows;
  if (pl.path == Path::kDeferredLean && p.V % kDeferredLean16Rows == 0) {  // 16-row warps where V allows
    const int64_t warps8 = p.nseq * p.HV * (p.V / kDeferredSmallRows);
    const bool wide = force.path == Path::kDeferredLean16 || force.path == Path::kDeferredLeanAlg ||
                      (force.path != Path::kDeferredLean8 && !at_most(warps8, t.deferred_lean16_warps, t, sms > 0 ? sms : 1));
    if (wide) pl.rows = kDeferredLean16Rows;
    // the algebra on tensor cores (deferred_mma.cuh) for trees whose replay and nodes fit its chunk
    // (kDeferredAlgebraNodes each): the recurrence keeps chains (H100, N = 16-256, T = 1-4: the
    // algebra kernel 1.23-1.90x the recurrence's time) and the general kernel larger trees
    pl.algebra = wide && p.tree && p.V % kDeferredAlgRows == 0 && force.path != Path::kDeferredLean16 &&
                 (force.path == Path::kDeferredLeanAlg || p.nodes <= kDeferredAlgebraNodes);
  }
  if (p.tree && pl.path == Path::kDeferredLean && !pl.algebra) {  // trees: the general kernel then
    pl.path = small ? Path::kDeferredSmall : Path::kDeferred;
    pl.rows = small ? kDeferredSmallRows : kDeferredRows;
  }
  pl.grid_x = (p.V + pl.rows - 1) / pl.rows;
  pl.grid_y = p.HV;
  pl.grid_z = p.nseq;
  return pl;
}

ChunkPlan plan_chunked(const ChunkProblem& p, int cc_major, int sms, Override force) {
  ChunkPlan pl;
  if (!p.chunk_ok || p.nseq <= 0) return pl;
  const Tuning& t = tuning_for(cc_major);
  const bool vs64_ok = p.V % 64 == 0 && p.vs64_fits;
  const bool vs128_ok = p.V % 128 == 0 && p.vs128_fits && p.full_fits;
  pl.small = !p.full_fits;
  if (is_chunk_path(force.path)) {
    pl.chunk = true;
    pl.split = (force.path == Path::kChunkSplit || force.path == Path::kChunkSplitSmall) && p.split_ok;
    pl.small = pl.small || force.path == Path::kChunkSmall || force.path == Path::kChunkSplitSmall;
    pl.vs = force.path == Path::kChunk64 && vs64_ok ? 64 : 32;
    if (force.path == Path::kChunk128 && vs128_ok) pl.vs = 128;  // (vs128_ok: a full form)
    return pl;
  }
  if (!p.chunk_only) {
    if (force.path != Path::kAuto && !is_step_path(force.path) && !is_deferred_path(force.path))
      return pl;  // a recurrence path, forced
    if (p.tokens < int64_t{t.chunk_min_tokens} * p.nseq) return pl;
  }
  pl.chunk = true;
  const int n_sms = sms > 0 ? sms : 1;
  // The small forms: the split form wherever it runs (the producers' form of one buffer has its
  // groups take turns: forced on an H100, Qwen3-Next TP1, the split form took 0.48-0.59x its time
  // at 1 x 8192, 4 x 8192 and 64 x 256).
  pl.split = p.split_ok && (!p.full_fits || at_most(p.nseq * p.HV * (p.V / 32), t.chunk_split_blocks, t, n_sms));
  pl.vs = !pl.split && vs64_ok && at_least(p.nseq * p.HV * (p.V / 64), t.chunk_vs64_blocks, t, n_sms) ? 64 : 32;
  if (!pl.split && vs128_ok && at_least(p.nseq * p.HV * (p.V / 128), t.chunk_vs128_blocks, t, n_sms)) pl.vs = 128;
  return pl;
}

AttentionChunkPlan plan_attention_chunk(const AttentionChunkProblem& p, int cc_major, int sms, Override force) {
  AttentionChunkPlan pl;
  const Tuning& t = tuning_for(cc_major);
  if (!p.chunk_ok || p.prefills <= 0 || p.prefill_rows < t.chunk_min_tokens) return pl;
  if (force.path != Path::kAuto && !is_chunk_path(force.path) && !is_deferred_path(force.path)) return pl;
  ChunkProblem cp;
  cp.nseq = p.prefills;
  cp.tokens = p.prefill_rows;
  cp.HV = p.HV;
  cp.V = p.V;
  cp.chunk_ok = true;
  cp.vs64_fits = p.vs64_fits;
  cp.vs128_fits = p.vs128_fits;
  cp.split_ok = p.split_ok;
  cp.full_fits = p.full_fits;
  cp.chunk_only = true;  // the length test is the device's, per sequence
  const ChunkPlan c = plan_chunked(cp, cc_major, sms, force);
  pl.chunk = c.chunk;
  pl.vs = c.vs;
  pl.split = c.split;
  pl.small = c.small;
  pl.from = t.chunk_min_tokens;
  return pl;
}

Plan plan_launch(const Problem& p, int cc_major, const Facts& facts, Override force) {
  const Ctx c{p, facts, tuning_for(cc_major), facts.sms() > 0 ? facts.sms() : 1};
  Path f = force.path;
  if (f != Path::kAuto && (is_step_path(f) != p.step || is_chunk_path(f) || is_deferred_path(f)))
    f = Path::kAuto;  // another op's (or mode's) path
  return p.step ? plan_step(c, f) : plan_recurrent(c, f);
}

}  // namespace gdn::cuda::plan
