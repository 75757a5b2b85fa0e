// Schedule -> gdn_attention metadata, and the slot pool (see batch.h).
#include "demo/batch.h"

#include <algorithm>

namespace gdn::demo {
namespace {

int64_t next_pow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// One row of an accepted path: the item's path (or rows 0, 1, ...), then -1 (ends a replay).
void push_path(const std::vector<int32_t>& path, int64_t path_cols, std::vector<int32_t>* out) {
  for (int64_t c = 0; c < path_cols; ++c) {
    const size_t k = static_cast<size_t>(c);
    out->push_back(path.empty() ? static_cast<int32_t>(c) : k < path.size() ? path[k] : -1);
  }
}

}  // namespace

const char* to_string(ItemKind k) {
  switch (k) {
    case ItemKind::kPrefill: return "prefill";
    case ItemKind::kDecode: return "decode";
    case ItemKind::kVerify: return "verify";
  }
  return "?";
}

Batch build_batch(const std::vector<Item>& items, const std::function<const std::vector<int32_t>&(int)>& slots,
                  int64_t cols, const PadOptions& pad, BatchLayout* layout, bool deferred, int64_t path_cols) {
  Batch b;
  b.cols = cols;
  b.deferred = deferred;
  b.path_cols = deferred ? path_cols : 0;
  const std::vector<int32_t> kNoPath;
  layout->first_row.assign(items.size(), 0);
  layout->pad_rows = layout->pad_sequences = 0;
  int32_t row = 0;
  bool any_prefill = false;
  for (size_t i = 0; i < items.size(); ++i) {
    layout->first_row[i] = row;
    for (int32_t t : items[i].tokens) b.tokens.push_back(t);
    row += static_cast<int32_t>(items[i].tokens.size());
    any_prefill |= items[i].kind == ItemKind::kPrefill;
  }
  b.num_actual_tokens = row;

  // Non-spec group: plain decodes first, then prefill pieces.
  for (ItemKind kind : {ItemKind::kDecode, ItemKind::kPrefill}) {
    for (size_t i = 0; i < items.size(); ++i) {
      const Item& it = items[i];
      if (it.kind != kind) continue;
      for (size_t t = 0; t < it.tokens.size(); ++t) b.ns_indx.push_back(layout->first_row[i] + static_cast<int32_t>(t));
      b.ns_qsl.push_back(static_cast<int32_t>(b.ns_indx.size()));
      b.ns_slots.push_back(slots(it.req)[0]);
      b.ns_has_init.push_back(it.has_init ? 1 : 0);
      b.ns_replay.push_back(kind == ItemKind::kDecode ? it.replay : 0);
      if (b.path_cols > 0) push_path(kind == ItemKind::kDecode ? it.path : kNoPath, b.path_cols, &b.ns_path);
      (kind == ItemKind::kDecode ? b.num_decodes : b.num_prefills) += 1;
    }
  }
  // Spec group: verify sequences with their block-table rows.
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    if (it.kind != ItemKind::kVerify) continue;
    for (size_t t = 0; t < it.tokens.size(); ++t) b.sp_indx.push_back(layout->first_row[i] + static_cast<int32_t>(t));
    b.sp_qsl.push_back(static_cast<int32_t>(b.sp_indx.size()));
    const std::vector<int32_t>& row_slots = slots(it.req);
    for (int64_t c = 0; c < cols; ++c) b.sp_slots.push_back(row_slots[c]);
    b.sp_accepted.push_back(deferred ? it.replay : it.accepted);
    if (b.path_cols > 0) {
      for (size_t t = 0; t < it.tokens.size(); ++t)
        b.sp_parents.push_back(it.parents.empty() ? static_cast<int32_t>(t) - 1 : it.parents.at(t));
      push_path(it.path, b.path_cols, &b.sp_path);
    }
  }

  b.rows = b.num_actual_tokens;
  if (!pad.enabled || any_prefill) return b;
  // A decode-only step, as a CUDA-graph engine replays it: sequence counts padded to a captured
  // size with empty sequences on slot -1 (PAD_SLOT_ID), rows padded past num_actual_tokens.
  if (b.num_spec() > 0) {
    for (int64_t i = b.num_spec(), n = next_pow2(b.num_spec()); i < n; ++i) {
      b.sp_qsl.push_back(b.sp_qsl.back());
      for (int64_t c = 0; c < cols; ++c) b.sp_slots.push_back(-1);
      b.sp_accepted.push_back(1);
      if (b.path_cols > 0) push_path(kNoPath, b.path_cols, &b.sp_path);
      ++layout->pad_sequences;
    }
  }
  if (b.num_decodes > 0) {
    for (int64_t i = b.num_decodes, n = next_pow2(b.num_decodes); i < n; ++i) {
      b.ns_qsl.push_back(b.ns_qsl.back());
      b.ns_slots.push_back(-1);
      b.ns_has_init.push_back(1);
      b.ns_replay.push_back(0);
      if (b.path_cols > 0) push_path(kNoPath, b.path_cols, &b.ns_path);
      ++b.num_decodes;
      ++layout->pad_sequences;
    }
  }
  const int64_t m = std::max<int64_t>(1, pad.row_multiple);
  b.rows = (b.num_actual_tokens + m - 1) / m * m;
  layout->pad_rows = b.rows - b.num_actual_tokens;
  return b;
}

std::vector<int32_t> logit_rows(const std::vector<Item>& items, const BatchLayout& layout,
                                std::vector<std::pair<int, int>>* owner) {
  std::vector<int32_t> rows;
  owner->clear();
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    const int n = static_cast<int>(it.tokens.size());
    if (it.kind == ItemKind::kPrefill) {
      if (!it.last_piece) continue;
      rows.push_back(layout.first_row[i] + n - 1);
      owner->emplace_back(static_cast<int>(i), n - 1);
      continue;
    }
    for (int t = 0; t < n; ++t) {
      rows.push_back(layout.first_row[i] + t);
      owner->emplace_back(static_cast<int>(i), t);
    }
  }
  return rows;
}

void SlotPool::init(int64_t num_slots) {
  num_slots_ = num_slots;
  peak_ = allocations_ = releases_ = 0;
  free_.clear();
  for (int64_t s = num_slots - 1; s >= 0; --s) free_.push_back(static_cast<int32_t>(s));
}

bool SlotPool::allocate(int64_t count, std::vector<int32_t>* row) {
  if (count > free_count()) return false;
  row->clear();
  for (int64_t i = 0; i < count; ++i) {
    row->push_back(free_.back());
    free_.pop_back();
  }
  ++allocations_;
  peak_ = std::max(peak_, used());
  return true;
}

void SlotPool::release(std::vector<int32_t>* row) {
  for (auto it = row->rbegin(); it != row->rend(); ++it) free_.push_back(*it);
  if (!row->empty()) ++releases_;
  row->clear();
}

}  // namespace gdn::demo
