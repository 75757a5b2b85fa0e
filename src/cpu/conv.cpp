// Causal depthwise conv1d over a varlen batch, CPU reference (docs/contract.md §1, §3).
//   y_t[c] = act(bias[c] + sum_{j<W} w[c, j] * u_{t-W+1+j}[c])
// The inputs before token 0 come from the sequence's conv window. Conv state rows are copies of
// inputs: they are moved as raw bytes, never through float.
// Work items: (sequence, block of 64 channels), independent of each other.
#include <algorithm>
#include <cstring>

#include "common/seq_rules.h"
#include "cpu/backend.h"
#include "cpu/cpu_util.h"
#include "cpu/scratch.h"

namespace gdn::cpu {
namespace {

constexpr int64_t kChannelBlock = 64;

struct ConvCommon {
  const TensorView* x;
  const TensorView* weight;
  const TensorView* bias;
  const TensorView* conv_state;
  const TensorView* y;
  int64_t D, W;
  bool silu;
};

// Pointer to element [slot, row, c] of the conv pool.
template <typename Args>
ConvCommon conv_common(const Args& a) {
  return ConvCommon{&a.x, &a.weight, &a.bias, &a.conv_state, &a.y, a.x.shape[1], a.weight.shape[1],
                    a.activation == Activation::kSilu};
}

inline char* pool_at(const TensorView& pool, int64_t slot, int64_t row, int64_t c) {
  int64_t off = slot * pool.stride[0] + row * pool.shape[2] + c;
  return static_cast<char*>(pool.data) + off * static_cast<int64_t>(dtype_size(pool.dtype));
}
inline const char* x_at(const TensorView& x, int64_t row, int64_t c) {
  return static_cast<const char*>(x.data) + (row * x.stride[0] + c) * static_cast<int64_t>(dtype_size(x.dtype));
}

// Slides a window of W-1 raw rows (oldest first, row_bytes each) by one input row u.
inline void slide_window(char* window, int64_t W, int64_t row_bytes, const char* u) {
  std::memmove(window, window + row_bytes, static_cast<size_t>((W - 2) * row_bytes));
  std::memcpy(window + (W - 2) * row_bytes, u, row_bytes);
}

// One work item's buffers (a sequence's block of at most kChannelBlock channels, raw rows of es
// bytes): its window (W-1 rows) and the current input row; the rolling layout's line (line_rows
// rows); a token tree's window of one token and its path (W-1 rows and row pointers).
struct ConvBufs {
  char *win, *cur, *line, *wt;
  const char** before;
};
ConvBufs conv_bufs(Arena& ar, int64_t W, int64_t es, int64_t line_rows, bool tree) {
  const int64_t row = kChannelBlock * es;
  ConvBufs b;
  b.win = ar.take<char>(elems(W - 1, row));
  b.cur = ar.take<char>(row);
  b.line = ar.take<char>(elems(line_rows, row));
  b.wt = ar.take<char>(tree ? elems(W - 1, row) : 0);
  b.before = ar.take<const char*>(tree ? W - 1 : 0);
  return b;
}
ScratchNeed conv_need(int64_t n, int64_t D, int64_t W, DType act, int64_t line_rows, bool tree) {
  Arena m;
  conv_bufs(m, W, static_cast<int64_t>(dtype_size(act)), line_rows, tree);
  return {elems(n, (D + kChannelBlock - 1) / kChannelBlock), m.used()};
}

// One sequence, channels [c0, c1): window (W-1 rows of raw bytes, oldest first) ++ L tokens from
// x rows begin.. -> y rows; the window slides in place (afterwards it holds the last W-1 inputs).
// Token t's input row is read (into cur) before its output row is written and the window slides in
// its own buffer, so y may be x itself (in-place convolution). After token t,
// `store_rows(t, r)` returns where row r of the W-1 inputs ending at token t goes (nullptr:
// nowhere), and `keep(t, row)` sees token t's raw input (nb elements).
template <typename StoreFn, typename KeepFn>
void conv_sequence(const ConvCommon& p, char* window, char* cur, int64_t begin, int64_t len, int64_t c0, int64_t c1,
                   StoreFn store_rows, KeepFn keep) {
  const TensorView& x = *p.x;
  const int64_t es = static_cast<int64_t>(dtype_size(x.dtype));
  const int64_t W = p.W, nb = c1 - c0, row_bytes = nb * es;
  for (int64_t t = 0; t < len; ++t) {
    std::memcpy(cur, x_at(x, begin + t, c0), row_bytes);  // u_t, before y row t is written
    for (int64_t c = 0; c < nb; ++c) {
      const int64_t ch = c0 + c;
      float acc = p.bias->present() ? load_f(p.bias->data, p.bias->dtype, ch) : 0.f;
      for (int64_t j = 0; j < W - 1; ++j) {
        float w = load_f(p.weight->data, p.weight->dtype, ch * p.weight->stride[0] + j);
        acc += w * load_f(window + (j * nb + c) * es, x.dtype, 0);
      }
      acc += load_f(p.weight->data, p.weight->dtype, ch * p.weight->stride[0] + W - 1) * load_f(cur + c * es, x.dtype, 0);
      if (p.silu) acc = silu(acc);
      store_f(p.y->data, p.y->dtype, (begin + t) * p.y->stride[0] + ch, acc);
    }
    keep(t, cur);
    // The window slides: rows 0..W-2 now hold inputs t+1 .. t+W-1 of (window ++ tokens).
    slide_window(window, W, row_bytes, cur);
    for (int64_t r = 0; r < W - 1; ++r) {
      char* dst = store_rows(t, r);
      if (dst) std::memcpy(dst, window + r * row_bytes, row_bytes);
    }
  }
}
inline void keep_none(int64_t, const char*) {}

void zero_rows(const TensorView& y, int64_t begin, int64_t len, int64_t c0, int64_t c1) {
  for (int64_t t = 0; t < len; ++t)
    for (int64_t c = c0; c < c1; ++c) store_f(y.data, y.dtype, (begin + t) * y.stride[0] + c, 0.f);
}

// Copies rows [r0, r0 + W-1) of a pool slot, channels [c0, c1), into a window buffer (zeros for
// slot -1: no initial state).
void read_window(const TensorView& pool, int64_t slot, int64_t r0, int64_t W, int64_t c0, int64_t c1, char* win) {
  const int64_t es = static_cast<int64_t>(dtype_size(pool.dtype)), nb = c1 - c0;
  if (slot < 0) {
    std::memset(win, 0, static_cast<size_t>((W - 1) * nb * es));
    return;
  }
  for (int64_t r = 0; r < W - 1; ++r) std::memcpy(win + r * nb * es, pool_at(pool, slot, r0 + r, c0), nb * es);
}

}  // namespace

ScratchNeed conv_fwd_need(const CausalConv1dFwdArgs& a) {
  return conv_need(a.state_indices.shape[0], a.x.shape[1], a.weight.shape[1], a.x.dtype, 0, false);
}

Status causal_conv1d_fwd(const CausalConv1dFwdArgs& a) {
  Scratch sc(conv_fwd_need(a));
  return causal_conv1d_fwd_on(a, sc);
}

Status causal_conv1d_fwd_on(const CausalConv1dFwdArgs& a, Scratch& sc) {
  const ConvCommon p = conv_common(a);
  const int64_t n = a.state_indices.shape[0], num_slots = a.conv_state.shape[0];
  const int64_t nblocks = (p.D + kChannelBlock - 1) / kChannelBlock;
  const bool has_null = a.null_block_id.has_value();
  const int64_t null_id = a.null_block_id.value_or(0);
  parallel_for(n * nblocks, sc, [&](int64_t item, Arena& ar) {
    const int64_t i = item / nblocks, c0 = (item % nblocks) * kChannelBlock;
    const int64_t c1 = std::min(p.D, c0 + kChannelBlock);
    const auto tr = sequence_tokens(a.query_start_loc, i, a.x.shape[0]);
    if (tr.len == 0) return;
    const int64_t slot = load_index1(a.state_indices, i);
    if (!rules::slot_valid(slot, num_slots, has_null, null_id)) {
      zero_rows(a.y, tr.begin, tr.len, c0, c1);
      return;
    }
    const bool init = load_bool(a.has_initial_state, i, true);
    const ConvBufs b = conv_bufs(ar, p.W, static_cast<int64_t>(dtype_size(a.x.dtype)), 0, false);
    read_window(a.conv_state, init ? slot : -1, 0, p.W, c0, c1, b.win);
    conv_sequence(
        p, b.win, b.cur, tr.begin, tr.len, c0, c1,
        [&](int64_t t, int64_t r) -> char* { return t == tr.len - 1 ? pool_at(a.conv_state, slot, r, c0) : nullptr; },
        keep_none);
  });
  return Status::Ok();
}

namespace {
// The rolling layout's line: the window and up to cols tokens.
int64_t rolling_rows(const CausalConv1dUpdateArgs& a) {
  const bool rolling = a.num_accepted_tokens.present() && a.spec_layout == SpecConvLayout::kRolling;
  return rolling ? a.weight.shape[1] - 1 + a.state_indices.shape[1] : 0;
}
}  // namespace

ScratchNeed conv_update_need(const CausalConv1dUpdateArgs& a) {
  return conv_need(a.state_indices.shape[0], a.x.shape[1], a.weight.shape[1], a.x.dtype, rolling_rows(a), false);
}

Status causal_conv1d_update(const CausalConv1dUpdateArgs& a) {
  Scratch sc(conv_update_need(a));
  return causal_conv1d_update_on(a, sc);
}

Status causal_conv1d_update_on(const CausalConv1dUpdateArgs& a, Scratch& sc) {
  const ConvCommon p = conv_common(a);
  const bool spec = a.num_accepted_tokens.present();
  const int64_t n = a.state_indices.shape[0], num_slots = a.conv_state.shape[0];
  const int64_t cols = a.state_indices.ndim == 2 ? a.state_indices.shape[1] : 1;
  const int64_t nblocks = (p.D + kChannelBlock - 1) / kChannelBlock;
  const bool has_null = a.null_block_id.has_value();
  const int64_t null_id = a.null_block_id.value_or(0);
  auto slot_at = [&](int64_t i, int64_t col) {
    return a.state_indices.ndim == 2 ? load_index2(a.state_indices, i, col) : load_index1(a.state_indices, i);
  };
  auto valid = [&](int64_t s) { return rules::slot_valid(s, num_slots, has_null, null_id); };
  parallel_for(n * nblocks, sc, [&](int64_t item, Arena& ar) {
    const int64_t i = item / nblocks, c0 = (item % nblocks) * kChannelBlock;
    const int64_t c1 = std::min(p.D, c0 + kChannelBlock);
    const auto tr = sequence_tokens(a.query_start_loc, i, a.x.shape[0]);
    if (tr.len == 0) return;
    const int64_t slot0 = slot_at(i, 0);
    if (!valid(slot0)) {
      zero_rows(a.y, tr.begin, tr.len, c0, c1);
      return;
    }
    const ConvBufs b = conv_bufs(ar, p.W, static_cast<int64_t>(dtype_size(a.x.dtype)), rolling_rows(a), false);
    if (!spec) {  // plain decode / short non-spec sequence: window = rows 0..W-2, last W-1 inputs stored
      read_window(a.conv_state, slot0, 0, p.W, c0, c1, b.win);
      conv_sequence(
          p, b.win, b.cur, tr.begin, tr.len, c0, c1,
          [&](int64_t t, int64_t r) -> char* { return t == tr.len - 1 ? pool_at(a.conv_state, slot0, r, c0) : nullptr; },
          keep_none);
      return;
    }
    const int64_t acc = rules::accepted(load_index1(a.num_accepted_tokens, i), cols);
    if (!valid(slot_at(i, acc - 1))) {  // the state column a-1 is unusable: the sequence is padding
      zero_rows(a.y, tr.begin, tr.len, c0, c1);
      return;
    }
    if (a.spec_layout == SpecConvLayout::kRolling) {
      // Window = rows acc-1 .. acc+W-3 of the line; afterwards row r (r <= W-3+min(T,cols)) holds
      // input r+1 of (window ++ tokens).
      read_window(a.conv_state, slot0, acc - 1, p.W, c0, c1, b.win);
      const int64_t stored = std::min(tr.len, cols);
      const int64_t es = static_cast<int64_t>(dtype_size(a.x.dtype)), row_bytes = (c1 - c0) * es;
      // (window ++ the first `stored` tokens), raw: rows 1.. of it go to the line afterwards.
      char* const line = b.line;
      std::memcpy(line, b.win, static_cast<size_t>((p.W - 1) * row_bytes));
      conv_sequence(
          p, b.win, b.cur, tr.begin, tr.len, c0, c1, [](int64_t, int64_t) -> char* { return nullptr; },
          [&](int64_t t, const char* u) {
            if (t < stored) std::memcpy(line + (p.W - 1 + t) * row_bytes, u, row_bytes);
          });
      for (int64_t r = 0; r < p.W - 2 + stored; ++r)
        std::memcpy(pool_at(a.conv_state, slot0, r, c0), line + (r + 1) * row_bytes, row_bytes);
      return;
    }
    // Per-token layout: window from slot of column acc-1; after token t, slot of column t.
    const int64_t read_slot = slot_at(i, acc - 1);
    read_window(a.conv_state, read_slot, 0, p.W, c0, c1, b.win);
    conv_sequence(
        p, b.win, b.cur, tr.begin, tr.len, c0, c1,
        [&](int64_t t, int64_t r) -> char* {
          if (t >= cols) return nullptr;
          const int64_t s = slot_at(i, t);
          return valid(s) ? pool_at(a.conv_state, s, r, c0) : nullptr;
        },
        keep_none);
  });
  return Status::Ok();
}

// Deferred commit: per (sequence, channel block), the committed window (rows 0..W-2 of the slot)
// with the replayed inputs slid in, then the tokens (a chain: window ++ tokens; a tree: each
// token's window the W-1 inputs before it on its root-to-token path, from the window past the
// root), the same arithmetic as conv_sequence.
ScratchNeed deferred_conv_need(const DeferredConv& a) {
  return conv_need(a.slots.shape[0], a.x.shape[1], a.weight.shape[1], a.x.dtype, 0, a.parents.present());
}

Status deferred_conv_on(const DeferredConv& a, Scratch& sc) {
  const ConvCommon p{&a.x, &a.weight, &a.bias, &a.conv_state, &a.y, a.x.shape[1], a.weight.shape[1],
                     a.activation == Activation::kSilu};
  const int64_t n = a.slots.shape[0], num_slots = a.conv_state.shape[0], log_cols = a.log.shape[1];
  const int64_t nblocks = (p.D + kChannelBlock - 1) / kChannelBlock, W1 = p.W - 1;
  const int64_t es = static_cast<int64_t>(dtype_size(a.x.dtype));
  const bool has_null = a.null_block_id.has_value();
  const int64_t null_id = a.null_block_id.value_or(0);
  parallel_for(n * nblocks, sc, [&](int64_t item, Arena& ar) {
    const int64_t i = item / nblocks, c0 = (item % nblocks) * kChannelBlock;
    const int64_t c1 = std::min(p.D, c0 + kChannelBlock), row_bytes = (c1 - c0) * es;
    const auto tr = sequence_tokens(a.qsl, i, a.x.shape[0]);
    const int64_t slot = load_index1(a.slots, i);
    if (!rules::slot_valid(slot, num_slots, has_null, null_id)) {
      zero_rows(a.y, tr.begin, tr.len, c0, c1);
      return;
    }
    const bool init = load_bool(a.init, i, true);
    const ConvBufs b = conv_bufs(ar, p.W, es, 0, a.parents.present());
    char* const win = b.win;
    read_window(a.conv_state, init ? slot : -1, 0, p.W, c0, c1, win);
    auto log_row = [&](const TensorView& log, int64_t j) {
      return static_cast<char*>(log.data) + (slot * log.stride[0] + j * p.D + c0) * es;
    };
    const int64_t replay = init ? std::clamp<int64_t>(load_index1(a.replay, i), 0, log_cols) : 0;
    for (int64_t j = 0; j < replay; ++j) {
      const int64_t row = a.path.present() ? load_index2(a.path, i, j) : j;
      if (row < 0 || row >= log_cols) break;  // a path entry outside the log ends the replay
      slide_window(win, p.W, row_bytes, log_row(a.log, row));
    }
    auto store_window = [&](const char* w) {
      for (int64_t r = 0; r < W1; ++r) std::memcpy(pool_at(a.conv_state, slot, r, c0), w + r * row_bytes, row_bytes);
    };
    if (a.log_tokens || tr.len == 0) store_window(win);  // the committed window
    auto keep = [&](int64_t t, const char* u) {
      if (a.log_tokens && t < log_cols) std::memcpy(log_row(a.log_out, t), u, row_bytes);
    };
    if (!a.parents.present()) {
      conv_sequence(
          p, win, b.cur, tr.begin, tr.len, c0, c1,
          [&](int64_t t, int64_t r) -> char* {
            return !a.log_tokens && t == tr.len - 1 ? pool_at(a.conv_state, slot, r, c0) : nullptr;
          },
          keep);
      return;
    }
    for (int64_t t = 0; t < tr.len; ++t) {  // a tree: token t's window along its path
      const char** const before = b.before;  // its predecessors' inputs, nearest first
      int64_t nbefore = 0, u = t;
      for (int64_t k = 0; k < W1; ++k) {
        const int64_t par = load_index1(a.parents, tr.begin + u);
        if (par < 0 || par >= u) break;  // a root
        before[nbefore++] = x_at(a.x, tr.begin + par, c0);
        u = par;
      }
      std::memcpy(b.wt, win, static_cast<size_t>(W1 * row_bytes));
      for (int64_t e = nbefore - 1; e >= 0; --e) slide_window(b.wt, p.W, row_bytes, before[e]);
      conv_sequence(p, b.wt, b.cur, tr.begin + t, 1, c0, c1, [](int64_t, int64_t) -> char* { return nullptr; },
                    [&](int64_t, const char* x) { keep(t, x); });
    }
  });
  return Status::Ok();
}

}  // namespace gdn::cpu
