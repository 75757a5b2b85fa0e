// src/common/attention_layout.h — where gdn_attention finds each conv channel, z element and gate
// input in its projection rows (docs/contract.md §2), for both projection layouts. Host and device.
#pragma once
#include <cstdint>

#include "common/seq_rules.h"
#include "gdn/ops.h"

namespace gdn::rules {

struct ProjLayout {
  // Per rank; D = 2 H K + HV V conv channels. 32-bit on purpose: every column index fits, and
  // 64-bit division is slow on the GPU.
  int H, HV, K, V, r, D;
  bool block;  // reorder_input: [q | k | v | z] and [b | a]; else per-key-head groups

  GDN_HD int group_width() const { return 2 * K + 2 * r * V; }
  // qkvz column of conv channel c (order [q heads, k heads, v heads]).
  GDN_HD int conv_col(int c) const {
    if (block) return c;
    const int hk = H * K;
    if (c < hk) return (c / K) * group_width() + c % K;
    if (c < 2 * hk) return ((c - hk) / K) * group_width() + K + (c - hk) % K;
    const int cv = c - 2 * hk, hv = cv / V;
    return (hv / r) * group_width() + 2 * K + (hv % r) * V + cv % V;
  }
  // qkvz column of z[hv, vi].
  GDN_HD int z_col(int hv, int vi) const {
    if (block) return 2 * H * K + HV * V + hv * V + vi;
    return (hv / r) * group_width() + 2 * K + r * V + (hv % r) * V + vi;
  }
  // ba columns of b[hv] and a[hv].
  GDN_HD int b_col(int hv) const { return block ? hv : (hv / r) * 2 * r + hv % r; }
  GDN_HD int a_col(int hv) const { return block ? HV + hv : (hv / r) * 2 * r + r + hv % r; }
};

// The per-rank layout of a gdn_attention call (head counts are global in its arguments).
inline ProjLayout proj_layout(const GdnAttentionArgs& a) {
  ProjLayout L;
  L.H = static_cast<int>(a.num_k_heads / a.tp_size);
  L.HV = static_cast<int>(a.num_v_heads / a.tp_size);
  L.K = static_cast<int>(a.head_k_dim);
  L.V = static_cast<int>(a.head_v_dim);
  L.r = L.HV / L.H;
  L.D = 2 * L.H * L.K + L.HV * L.V;
  L.block = a.reorder_input;
  return L;
}

}  // namespace gdn::rules
