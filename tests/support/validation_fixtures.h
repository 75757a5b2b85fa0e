// validation_fixtures.h — small VALID argument sets of every op on poisoned host buffers, for the
// validation and check_metadata tests. A test breaks one thing and checks the message and that the
// op entry changes no byte of any buffer.
#pragma once
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "gdn/ops.h"

namespace gdn_test {

// Owns host buffers (dense views over them) and can prove that none changed since a snapshot.
class BufferPool {
 public:
  // A buffer of `extra_rows` more rows than the shape needs, filled with a byte pattern.
  gdn::TensorView make(gdn::DType dtype, std::initializer_list<int64_t> shape, int64_t extra_rows = 0) {
    int64_t rows = 0, row = 1;  // dim 0, and the product of the other dims
    bool first = true;
    for (int64_t s : shape) {
      if (first) rows = s; else row *= s;
      first = false;
    }
    const size_t bytes = static_cast<size_t>((rows + extra_rows) * row) * gdn::dtype_size(dtype);
    auto buf = std::make_unique<std::vector<unsigned char>>(bytes + 1);
    for (size_t i = 0; i < buf->size(); ++i) (*buf)[i] = static_cast<unsigned char>(0x3c + 7 * i);
    gdn::TensorView v = gdn::make_view(buf->data(), dtype, shape);
    bufs_.push_back(std::move(buf));
    return v;
  }
  // An int32 / int64 / bool tensor holding `values` (row-major).
  gdn::TensorView ints(gdn::DType dtype, std::initializer_list<int64_t> shape, std::vector<int64_t> values) {
    gdn::TensorView v = make(dtype, shape);
    for (size_t i = 0; i < values.size(); ++i) set(v, static_cast<int64_t>(i), values[i]);
    return v;
  }
  static void set(const gdn::TensorView& v, int64_t flat, int64_t value) {
    if (v.dtype == gdn::DType::kInt32) v.ptr<int32_t>()[flat] = static_cast<int32_t>(value);
    if (v.dtype == gdn::DType::kInt64) v.ptr<int64_t>()[flat] = value;
    if (v.dtype == gdn::DType::kBool) v.ptr<bool>()[flat] = value != 0;
  }
  void snapshot() {
    saved_.clear();
    for (const auto& b : bufs_) saved_.push_back(*b);
  }
  bool unchanged() const {
    if (saved_.size() != bufs_.size()) return false;
    for (size_t i = 0; i < bufs_.size(); ++i) {
      if (std::memcmp(saved_[i].data(), bufs_[i]->data(), saved_[i].size()) != 0) return false;
    }
    return true;
  }

 private:
  std::vector<std::unique_ptr<std::vector<unsigned char>>> bufs_;
  std::vector<std::vector<unsigned char>> saved_;
};

using gdn::DType;
constexpr DType kF32 = DType::kFloat32;
constexpr DType kI32 = DType::kInt32;

// causal_conv1d_fwd: T=6, D=8, W=4, n=3, 5 slots of 3 rows.
struct ConvFwdCase {
  BufferPool pool;
  gdn::CausalConv1dFwdArgs args;
  ConvFwdCase() {
    args.x = pool.make(kF32, {6, 8});
    args.weight = pool.make(kF32, {8, 4});
    args.bias = pool.make(kF32, {8});
    args.conv_state = pool.make(kF32, {5, 3, 8});
    args.query_start_loc = pool.ints(kI32, {4}, {0, 2, 5, 6});
    args.state_indices = pool.ints(kI32, {3}, {0, 3, -1});
    args.has_initial_state = pool.ints(DType::kBool, {3}, {1, 0, 1});
    args.y = pool.make(kF32, {6, 8});
  }
  gdn::Status validate() const { return gdn::validate(args); }
  gdn::Status run() const { return gdn::causal_conv1d_fwd(args); }
  gdn::Status check() const { return gdn::check_metadata(args); }
};

// causal_conv1d_update, verify with the rolling layout: T=5, D=8, W=3, n=2, cols=3, 6 slots of
// W-2+cols = 4 rows. decode(): the non-speculative form (state_indices [n], no num_accepted_tokens).
struct ConvUpdateCase {
  BufferPool pool;
  gdn::CausalConv1dUpdateArgs args;
  ConvUpdateCase() {
    args.x = pool.make(kF32, {5, 8});
    args.weight = pool.make(kF32, {8, 3});
    args.bias = pool.make(kF32, {8});
    args.conv_state = pool.make(kF32, {6, 4, 8});
    args.query_start_loc = pool.ints(kI32, {3}, {0, 3, 5});
    args.state_indices = pool.ints(kI32, {2, 3}, {0, 1, 2, 3, 4, 5});
    args.num_accepted_tokens = pool.ints(kI32, {2}, {1, 2});
    args.y = pool.make(kF32, {5, 8});
  }
  void decode() {
    args.state_indices = pool.ints(kI32, {2}, {1, 4});
    args.num_accepted_tokens = gdn::TensorView{};
  }
  gdn::Status validate() const { return gdn::validate(args); }
  gdn::Status run() const { return gdn::causal_conv1d_update(args); }
  gdn::Status check() const { return gdn::check_metadata(args); }
};

// gated delta rule: T=5, H=2, K=8, HV=4, V=4, n=2, 4 slots ("vk"). verify(): cols = 3.
// chunked = true runs the chunked entry instead of the recurrent one.
struct GdrCase {
  BufferPool pool;
  gdn::GatedDeltaRuleArgs args;
  bool chunked = false;
  explicit GdrCase(bool chunked_op = false) : chunked(chunked_op) {
    args.q = pool.make(kF32, {5, 2, 8});
    args.k = pool.make(kF32, {5, 2, 8});
    args.v = pool.make(kF32, {5, 4, 4});
    args.a = pool.make(kF32, {5, 4});
    args.b = pool.make(kF32, {5, 4});
    args.A_log = pool.make(kF32, {4});
    args.dt_bias = pool.make(kF32, {4});
    args.ssm_state = pool.make(kF32, {4, 4, 4, 8});
    args.query_start_loc = pool.ints(kI32, {3}, {0, 3, 5});
    args.state_indices = pool.ints(kI32, {2}, {1, 2});
    args.has_initial_state = pool.ints(DType::kBool, {2}, {1, 0});
    args.o = pool.make(kF32, {5, 4, 4});
  }
  void verify() {
    args.state_indices = pool.ints(kI32, {2, 3}, {0, 1, 2, 3, -1, -1});
    args.num_accepted_tokens = pool.ints(kI32, {2}, {2, 1});
  }
  gdn::Status validate() const { return chunked ? gdn::validate_chunked(args) : gdn::validate_recurrent(args); }
  gdn::Status run() const {
    return chunked ? gdn::gated_delta_rule_chunked(args) : gdn::gated_delta_rule_recurrent(args);
  }
  gdn::Status check() const { return gdn::check_metadata(args); }
};

// gdn_attention: H=2, HV=4 (r=2), K=8, V=4, tp=1, W=4 -> qkvz width 64, ba width 8, D=48.
// 8 rows, 7 actual tokens: non-spec 1 prefill (4 tokens) + 1 decode, spec 1 sequence of 2 tokens
// with cols = 3; 6 slots, conv rows W-2+cols = 5. Tokens interleave through the remaps.
struct AttentionCase {
  BufferPool pool;
  gdn::GdnAttentionArgs args;
  AttentionCase() {
    args.num_k_heads = 2;
    args.num_v_heads = 4;
    args.head_k_dim = 8;
    args.head_v_dim = 4;
    args.core_attn_out = pool.make(kF32, {8, 4, 4});
    args.z = pool.make(kF32, {8, 4, 4});
    args.projected_states_qkvz = pool.make(kF32, {8, 64});
    args.projected_states_ba = pool.make(kF32, {8, 8});
    args.conv_state = pool.make(kF32, {6, 5, 48});
    args.ssm_state = pool.make(kF32, {6, 4, 4, 8});
    args.conv_weights = pool.make(kF32, {48, 4});
    args.conv_bias = pool.make(kF32, {48});
    args.A_log = pool.make(kF32, {4});
    args.dt_bias = pool.make(kF32, {4});
    args.num_prefills = 1;
    args.num_decodes = 1;
    args.num_spec_decodes = 1;
    args.has_initial_state = pool.ints(DType::kBool, {2}, {0, 1});
    args.non_spec_query_start_loc = pool.ints(kI32, {3}, {0, 4, 5});
    args.non_spec_token_indx = pool.ints(kI32, {5}, {0, 1, 2, 3, 6});
    args.non_spec_state_indices_tensor = pool.ints(kI32, {2}, {0, 1});
    args.spec_query_start_loc = pool.ints(kI32, {2}, {0, 2});
    args.spec_token_indx = pool.ints(kI32, {2}, {4, 5});
    args.spec_state_indices_tensor = pool.ints(kI32, {1, 3}, {2, 3, 4});
    args.num_accepted_tokens = pool.ints(kI32, {1}, {1});
    args.num_actual_tokens = 7;
  }
  gdn::Status validate() const { return gdn::validate(args); }
  gdn::Status run() const { return gdn::gdn_attention(args); }
  gdn::Status check() const { return gdn::check_metadata(args); }
};

// The case must be valid before a test breaks it.
#define GDN_ASSERT_VALID(c)                                  \
  do {                                                       \
    const ::gdn::Status gdn_valid_ = (c).validate();         \
    ASSERT_TRUE(gdn_valid_.ok()) << gdn_valid_.message();    \
  } while (0)

// Validation rejects the case with a message holding every word, and the op entry rejects it
// too, changing no byte of any buffer.
template <typename Case>
void expect_rejected(Case& c, std::initializer_list<std::string> words) {
  const gdn::Status s = c.validate();
  ASSERT_FALSE(s.ok()) << "validation accepted the broken arguments";
  for (const std::string& w : words) EXPECT_THAT(s.message(), ::testing::HasSubstr(w));
  c.pool.snapshot();
  const gdn::Status r = c.run();
  EXPECT_FALSE(r.ok()) << "the op entry accepted the broken arguments";
  EXPECT_EQ(r.message(), s.message());
  EXPECT_TRUE(c.pool.unchanged()) << "a rejected call changed a buffer";
}

// check_metadata reports a violation with every word.
template <typename Case>
void expect_metadata_error(const Case& c, std::initializer_list<std::string> words) {
  const gdn::Status s = c.check();
  ASSERT_FALSE(s.ok()) << "check_metadata accepted the metadata";
  for (const std::string& w : words) EXPECT_THAT(s.message(), ::testing::HasSubstr(w));
}

}  // namespace gdn_test
