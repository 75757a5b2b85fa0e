// src/common/seq_rules.h — the per-sequence rules of docs/contract.md §3 as small host/device functions,
// shared by every backend so that padding, clamping and slot validity mean the same everywhere.
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define GDN_HD __host__ __device__ __forceinline__
#else
#define GDN_HD inline
#endif

namespace gdn::rules {

// A slot is usable when it lies in the pool and is not the null block.
GDN_HD bool slot_valid(int64_t slot, int64_t num_slots, bool has_null, int64_t null_id) {
  return slot >= 0 && slot < num_slots && !(has_null && slot == null_id);
}

GDN_HD int64_t clamp64(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : (x > hi ? hi : x); }

// Sequence i covers tokens [lo, hi) of its group; both ends clamped into [0, limit], a decreasing
// pair is empty. In gdn_attention a sequence with a token at or past limit (its group's token
// space: num_actual_tokens without a remap, the remap's length with one) is padding: runs_past.
struct TokenRange {
  int64_t begin;
  int64_t len;
};
GDN_HD TokenRange token_range(int64_t lo, int64_t hi, int64_t limit) {
  lo = clamp64(lo, 0, limit);
  hi = clamp64(hi, 0, limit);
  return TokenRange{lo, hi > lo ? hi - lo : 0};
}

GDN_HD bool runs_past(int64_t lo, int64_t hi, int64_t limit) { return hi > lo && hi > limit; }

// num_accepted_tokens clamped into [1, cols].
GDN_HD int64_t accepted(int64_t a, int64_t cols) { return clamp64(a, 1, cols); }

// A log-space decay as the chunk forms sum it within a chunk: clamped below at -1000 (a decay of 0
// in float32 either way: exp(-104) is already below its smallest value), so that a decay of -inf,
// or a chunk's sum past float's range, stays finite (-inf - -inf would be NaN); NaN stays NaN.
GDN_HD float chunk_log_decay(float g) { return g < -1000.f ? -1000.f : g; }

// Softplus with the threshold of the reference implementations.
GDN_HD float softplus(float x) { return x > 20.f ? x : log1pf(expf(x)); }

}  // namespace gdn::rules
