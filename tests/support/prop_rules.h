// tests/support/prop_rules.h — the state-movement rules of docs/contract.md §3 (and the contract's rules on
// invalid slots and clamping), written independently of the library, and a checker that classifies
// every element of a buffer as untouched / written / zero / exactly known. Test code only.
#pragma once
#include <functional>
#include <optional>

#include "prop_util.h"

namespace gdn::prop {

enum Cls : uint8_t {
  kUntouched = 0,  // bytes after == bytes before
  kWritten = 1,    // same value in both poison runs, finite
  kZero = 2,       // written as 0
  kExact = 3,      // equal to an expected value computed from the rules
};

inline bool slot_ok(int64_t s, int64_t num_slots, std::optional<int64_t> null_id) {
  return s >= 0 && s < num_slots && !(null_id && *null_id == s);
}

// Raw input bits of token t (of one sequence), conv channel c.
using InputFn = std::function<uint64_t(int64_t t, int64_t c)>;

// Conv pool [slots, R, D]: flat index of (slot, row, channel).
inline int64_t conv_at(const Buf& pool, int64_t slot, int64_t row, int64_t c) {
  return (slot * pool.dim(1) + row) * pool.dim(2) + c;
}

// Non-spec sequence: rows 0..W-2 of `slot` become the last W-1 raw inputs of window ++ tokens,
// window = rows 0..W-2 (init) or zeros. Zero-length or invalid-slot sequences change nothing.
inline void conv_rule_nonspec(Buf& exp, const Buf& before, int64_t slot, bool init, int64_t len, int64_t W,
                              const InputFn& u, std::optional<int64_t> null_id) {
  const int64_t D = before.dim(2);
  if (len <= 0 || !slot_ok(slot, before.dim(0), null_id)) return;
  for (int64_t j = 0; j < W - 1; ++j) {
    int64_t idx = len + j;  // index into window ++ tokens
    for (int64_t c = 0; c < D; ++c) {
      uint64_t v = idx < W - 1 ? (init ? before.bits(conv_at(before, slot, idx, c)) : 0)
                               : u(idx - (W - 1), c);
      exp.set_bits(conv_at(exp, slot, j, c), v);
    }
  }
}

// Verify, rolling: o = a-1 (a already clamped); rows 0..W-3+min(T,cols) of the column-0 slot hold
// [old rows o+1..o+W-2, u_0..u_{min(T,cols)-1}].
inline void conv_rule_rolling(Buf& exp, const Buf& before, int64_t slot0, int64_t a, int64_t T, int64_t cols,
                              int64_t W, const InputFn& u, std::optional<int64_t> null_id) {
  const int64_t D = before.dim(2);
  if (T <= 0 || !slot_ok(slot0, before.dim(0), null_id)) return;
  const int64_t o = a - 1, n = std::min(T, cols);
  for (int64_t j = 0; j < W - 2; ++j)
    for (int64_t c = 0; c < D; ++c) exp.set_bits(conv_at(exp, slot0, j, c), before.bits(conv_at(before, slot0, o + 1 + j, c)));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < D; ++c) exp.set_bits(conv_at(exp, slot0, W - 2 + t, c), u(t, c));
}

// Verify, per-token: window = rows 0..W-2 of slot[a-1]; after token t (t < min(T, cols), slot[t]
// valid) rows 0..W-2 of slot[t] hold the last W-1 inputs up to token t. Invalid slot[a-1]: padding.
inline void conv_rule_per_token(Buf& exp, const Buf& before, const std::vector<int64_t>& slots, int64_t a, int64_t T,
                                int64_t W, const InputFn& u, std::optional<int64_t> null_id) {
  const int64_t D = before.dim(2), cols = static_cast<int64_t>(slots.size()), ns = before.dim(0);
  if (T <= 0 || !slot_ok(slots[0], ns, null_id) || !slot_ok(slots[a - 1], ns, null_id)) return;
  auto seq = [&](int64_t idx, int64_t c) {  // window ++ tokens
    return idx < W - 1 ? before.bits(conv_at(before, slots[a - 1], idx, c)) : u(idx - (W - 1), c);
  };
  for (int64_t t = 0; t < std::min(T, cols); ++t) {
    if (!slot_ok(slots[t], ns, null_id)) continue;
    for (int64_t j = 0; j < W - 1; ++j)
      for (int64_t c = 0; c < D; ++c) exp.set_bits(conv_at(exp, slots[t], j, c), seq(t + 1 + j, c));
  }
}

inline std::vector<uint8_t> cls_all(const Buf& b, uint8_t c) { return std::vector<uint8_t>(b.phys_elems(), c); }
// Marks the logical elements of dim-0 index i.
inline void mark_index(std::vector<uint8_t>& cls, const Buf& b, int64_t i, uint8_t c) {
  for (int64_t e = 0; e < b.row_elems(); ++e) cls[i * b.stride0() + e] = c;
}

// Logical elements of `live` (dim-0 indices or all) keep their values; everything else (including
// stride gaps) gets poison pattern `kind`.
inline Buf poisoned_copy(const Buf& src, const std::vector<uint8_t>& live, int kind) {
  Buf b = src;
  poison(b, kind);
  for (int64_t p = 0; p < b.phys_elems(); ++p)
    if (live[p]) b.set_bits_phys(p, src.bits_phys(p));
  return b;
}

inline std::string where(const Buf& b, int64_t p) {
  std::ostringstream s;
  int64_t i0 = p / b.stride0(), rest = p % b.stride0();
  s << "[" << i0;
  if (rest >= b.row_elems()) {
    s << "] stride gap +" << rest - b.row_elems();
    return s.str();
  }
  for (size_t d = 1; d < b.shape().size(); ++d) {
    int64_t inner = 1;
    for (size_t e = d + 1; e < b.shape().size(); ++e) inner *= b.shape()[e];
    s << ", " << rest / inner;
    rest %= inner;
  }
  s << "]";
  return s.str();
}

// Checks two poison runs of one buffer against its classification. `exact` (per run) is used where
// cls == kExact.
inline void check_buffer(const char* name, const Buf* before, const Buf* after, const std::vector<uint8_t>& cls,
                         const Buf* exact) {
  int reported = 0;
  const char* cname[] = {"untouched", "written", "written as zero", "equal to the rule's value"};
  for (int64_t p = 0; p < after[0].phys_elems() && reported < 6; ++p) {
    for (int k = 0; k < 2 && reported < 6; ++k) {
      bool ok = true;
      std::string why;
      uint64_t got = after[k].bits_phys(p);
      switch (cls[p]) {
        case kUntouched: ok = got == before[k].bits_phys(p); break;
        case kWritten:
          ok = got == after[1 - k].bits_phys(p) && std::isfinite(after[k].get_phys(p));
          if (got != after[1 - k].bits_phys(p)) why = " (differs between the two poison runs: not written or poison read)";
          break;
        case kZero: ok = after[k].get_phys(p) == 0.0; break;
        case kExact: ok = got == exact[k].bits_phys(p); break;
      }
      if (!ok) {
        ++reported;
        ADD_FAILURE() << name << where(after[k], p) << " must be " << cname[cls[p]] << why << "; poison run " << k
                      << ": before " << before[k].get_phys(p) << " (0x" << std::hex << before[k].bits_phys(p)
                      << "), after " << std::dec << after[k].get_phys(p) << " (0x" << std::hex << got << ")"
                      << (cls[p] == kExact ? ", expected " + std::to_string(exact[k].get_phys(p)) : std::string());
      }
    }
  }
  for (int k = 0; k < 2; ++k) EXPECT_TRUE(after[k].canaries_ok()) << name << ": write outside the buffer (run " << k << ")";
}

}  // namespace gdn::prop
