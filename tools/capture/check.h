// tools/capture/check.h — pieces of case.cpp: element access, the write sets that docs/contract.md §3
// defines, and the per-output comparisons. Internal to tools/capture.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "capture/case.h"
#include "capture/safetensors.h"

namespace gdn::capture::check {

double load_real(const uint8_t* p, DType t);          // one float element as double
void store_real(double v, DType t, uint8_t* p);       // round to nearest even (NaN -> quiet NaN)
std::vector<int64_t> to_indices(const HostTensor* t);  // int32/int64/bool values; empty if absent

// One group of sequences sharing query_start_loc and slots (a primitive op's batch, or the
// non-spec / spec half of gdn_attention).
struct SequenceGroup {
  int64_t n = 0;                 // sequences
  std::vector<int64_t> qsl;      // [n+1]
  std::vector<int64_t> slots;    // [n] or [n, cols]
  int64_t cols = 0;              // 0: 1-D slots
  std::vector<int64_t> accepted; // num_accepted_tokens; non-empty = verify
  bool has_remap = false;
  std::vector<int64_t> remap;    // token -> global row
  int64_t limit = 0;             // query_start_loc values are clamped into [0, limit]
};

struct WriteSet {
  std::vector<char> rows;   // output rows written (values or zeros)
  std::vector<char> slots;  // SSM pool slots written
};

// Marks the output rows (global rows in [0, row_bound)) and the SSM slots the group writes.
void mark_writes(const SequenceGroup& g, int64_t row_bound, int64_t num_slots,
                 std::optional<int64_t> null_block_id, WriteSet* w);

// An output (y, o, core_attn_out, z): written rows vs the reference (tolerance, or bit-exact
// when `exact`), all other rows must hold `fill` (one element's bytes).
OutputCheck check_output(const std::string& name, const HostTensor& result,
                         const HostTensor* expected, const HostTensor* ref_f64,
                         const std::vector<char>& written_rows, const std::vector<uint8_t>& fill,
                         double tol, bool exact);

// A state pool. With `written_slots`: tolerance over the written slots (vs ref_f64, else
// expected), bit-identical to `input` elsewhere. Without: bit-exact against `expected`.
OutputCheck check_pool(const std::string& name, const HostTensor& result, const HostTensor& input,
                       const HostTensor* expected, const HostTensor* ref_f64,
                       const std::vector<char>* written_slots, double tol);

}  // namespace gdn::capture::check
