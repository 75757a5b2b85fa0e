// apps/demo/batch.h — from an engine's schedule to gdn_attention metadata, and the slot pool.
//
// State bookkeeping (docs/contract.md §3), the way the engine keeps it for each request with block-table
// row slots[0..cols-1]:
//   * a prefill piece is a non-spec sequence on slots[0] (has_initial_state = false for the first
//     piece); afterwards the SSM state is in slots[0] and the conv window in rows 0..W-2 of slots[0];
//   * that is exactly where a verify with num_accepted_tokens a = 1 looks (column 0, rolling window
//     rows 0..W-2), so the first decode step may be a verify;
//   * a verify of T tokens with num_accepted_tokens a reads column a-1 and the rolling window rows
//     a-1..a+W-3 of slots[0], and stores the state after token t into column t; after m accepted
//     drafts the next step passes a = m + 1;
//   * a request whose last step left a = 1 has its state where a plain decode reads it (column 0,
//     rows 0..W-2), so a step without drafts may be a plain non-spec decode; with a > 1 and no
//     drafts it stays a verify of T = 1 (which moves the state back to column 0).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "demo/runner.h"

namespace gdn::demo {

enum class ItemKind { kPrefill, kDecode, kVerify };
const char* to_string(ItemKind k);

// One request's part of a step.
struct Item {
  int req = 0;
  ItemKind kind = ItemKind::kDecode;
  std::vector<int32_t> tokens;  // prefill: a piece of the prompt; decode: [x0]; verify: [x0, drafts...]
  bool has_init = true;         // prefill: false for the first piece
  int32_t accepted = 1;         // verify: num_accepted_tokens
  int32_t replay = 0;           // deferred commit: logged tokens to replay first (docs/contract.md §7)
  bool last_piece = false;      // prefill: the piece that completes the prompt
  // Token trees (deferred; tree.h): verify: per token its local parent (-1 for token 0; empty: a
  // chain); verify and decode: the log rows to replay, in order (empty: rows 0, 1, ...).
  std::vector<int32_t> parents, path;
};

struct PadOptions {
  bool enabled = false;         // pad steps without prefill as a CUDA-graph engine would
  int64_t row_multiple = 8;     // rows rounded up to this
};

struct BatchLayout {
  std::vector<int32_t> first_row;  // per item: global row of its first token
  int64_t pad_rows = 0, pad_sequences = 0;
};

// Global rows follow the items' order (spec and non-spec tokens interleave, so both token remaps
// are real); the non-spec group lists plain decodes first, then prefill pieces (the vLLM order).
// `slots(req)` is the request's block-table row (at least `cols` entries). deferred: one slot per
// request (cols 1), replay counts from the items (verify: num_accepted_tokens; decodes:
// non_spec_num_accepted_tokens; prefill pieces: 0). path_cols > 0 (deferred, token trees): the
// spec tokens' parents and both groups' accepted paths, rows of path_cols (the logs' log_cols).
Batch build_batch(const std::vector<Item>& items, const std::function<const std::vector<int32_t>&(int)>& slots,
                  int64_t cols, const PadOptions& pad, BatchLayout* layout, bool deferred = false,
                  int64_t path_cols = 0);

// Global rows whose logits a step needs: every verify row, every decode row, and the last row of a
// prompt's last piece; `owner` receives (item index, token index within the item) per row.
std::vector<int32_t> logit_rows(const std::vector<Item>& items, const BatchLayout& layout,
                                std::vector<std::pair<int, int>>* owner);

// A pool of state slots handed out a block-table row at a time (any free slots, not contiguous).
class SlotPool {
 public:
  void init(int64_t num_slots);
  bool allocate(int64_t count, std::vector<int32_t>* row);  // false when not enough are free
  void release(std::vector<int32_t>* row);
  int64_t free_count() const { return static_cast<int64_t>(free_.size()); }
  int64_t used() const { return num_slots_ - free_count(); }
  int64_t peak() const { return peak_; }
  int64_t num_slots() const { return num_slots_; }
  int64_t allocations() const { return allocations_; }
  int64_t releases() const { return releases_; }

 private:
  int64_t num_slots_ = 0, peak_ = 0, allocations_ = 0, releases_ = 0;
  std::vector<int32_t> free_;  // a stack: released slots are reused first
};

}  // namespace gdn::demo
