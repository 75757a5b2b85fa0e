// src/validate_util.h — the pieces of host-side argument validation (docs/contract.md §5) shared by the
// validators of the five ops. Private to src/validate*.cpp.
//
// Every message has one shape:
//   "<op>: <arg> must be <expected>, got <what was given>"
// where <expected> names the dims symbolically and, where known, by value
// ("v must be float32 [T, HV, V] = [5, 4, 16] (the dtype of q), got float32 [5, 4, 8]"; a size
// not yet fixed is written "*"), and <what was given> is TensorView::describe().
// Nothing here reads memory through a data pointer.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>

#include "gdn/ops.h"

namespace gdn {
namespace validate_detail {

constexpr int64_t kAnySize = -1;  // a size the expectation leaves free

// One expected dimension: its symbolic name and its value (kAnySize: free).
struct Dim {
  const char* name;
  int64_t value;
};

// The dtypes one argument accepts.
struct DTypeRule {
  enum Kind { kActivation, kAnyFloat, kIndex, kBool, kFloat32, kSameAs, kSameOrFloat32 };
  Kind kind;
  DType same = DType::kFloat32;  // kSameAs: the dtype of `same_name`
  const char* same_name = nullptr;

  bool accepts(DType t) const;
  std::string text() const;  // "float32, bfloat16 or float16", "int32 or int64", ...
  std::string note() const;  // " (the dtype of x)" for kSameAs, else ""
};

inline DTypeRule activation_dtype() { return {DTypeRule::kActivation}; }
inline DTypeRule any_float_dtype() { return {DTypeRule::kAnyFloat}; }
inline DTypeRule index_dtype() { return {DTypeRule::kIndex}; }
inline DTypeRule bool_dtype() { return {DTypeRule::kBool}; }
inline DTypeRule float32_dtype() { return {DTypeRule::kFloat32}; }
inline DTypeRule same_dtype_as(const char* name, const TensorView& t) {
  return {DTypeRule::kSameAs, t.dtype, name};
}
inline DTypeRule like_q_or_float32(const char* name, const TensorView& t) {
  return {DTypeRule::kSameOrFloat32, t.dtype, name};
}

enum class Presence { kRequired, kOptional };

// describe(), safe for any ndim, with the device spelled out for CPU tensors too when asked.
std::string describe_view(const TensorView& t, bool with_device = false);
// "[T, D] = [6, 8]", "[T, D] = [*, 8]", or "[T, D]" when no size is known.
std::string dims_text(std::initializer_list<Dim> dims);
std::string number_text(double x);

class Validator {
 public:
  explicit Validator(const char* op) : op_(op) {}

  const char* op() const { return op_; }
  Status fail(const std::string& message) const;  // "<op>: <message>"
  // "<op>: <name> must be <expected>, got <describe(t)>"
  Status must(const char* name, const std::string& expected, const TensorView& t) const;

  // Checks one tensor argument: presence (an absent optional passes), sizes >= 0, dtype, rank and
  // the known sizes, then layout() — the first tensor checked fixes the device of the call.
  Status tensor(const char* name, const TensorView& t, const DTypeRule& dtype, std::initializer_list<Dim> dims,
                Presence presence = Presence::kRequired);
  // Device agreement, a valid device, dense dims 1.., a data pointer when there are elements.
  Status layout(const char* name, const TensorView& t);
  // "<name> must be <shape> with <dim_name> > 0, got ..." unless t.shape[d] > 0.
  Status positive(const char* name, const TensorView& t, int d, const char* shape, const char* dim_name) const;

  Status activation(Activation a) const;
  Status spec_layout(SpecConvLayout l, const char* name = "spec_layout") const;
  Status state_layout(StateLayout l) const;
  Status scale(const std::optional<double>& s) const;
  // weight [D, W]: 2 <= W <= 5.
  Status conv_width(const char* name, const TensorView& weight) const;

 private:
  const char* op_;
  bool have_device_ = false;
  const char* device_name_ = nullptr;  // the tensor whose device the others must share
  Device device_ = Device::kCPU;
  int device_index_ = 0;
};

// The state_indices / num_accepted_tokens pair of the primitive ops: both-or-neither for the
// verify form ([n, cols] with [n]); [n] alone is non-speculative. Checks both tensors and sets
// *n, *cols (cols = 1 for the 1-D form) and *verify.
Status check_slots_pair(Validator& v, const TensorView& state_indices, const TensorView& num_accepted_tokens,
                        int64_t* n, int64_t* cols, bool* verify);

// Whether the bytes two views span (from their data pointers to their last elements) intersect.
bool overlaps(const TensorView& a, const TensorView& b);
// A parameter vector the conv kernels load as vectors ([D], stride 1): an error where it is present
// and strided.
Status contiguous_vector(const Validator& v, const char* name, const TensorView& t);

// The tensors an op writes must not overlap one another (docs/contract.md §5): the first pair that
// does, as an error naming both; Ok if none.
Status disjoint(const Validator& v, std::initializer_list<std::pair<const char*, const TensorView*>> written);
// No written tensor overlaps a tensor the op only reads (it would read outputs as inputs).
Status apart_from_inputs(const Validator& v, std::initializer_list<std::pair<const char*, const TensorView*>> written,
                         std::initializer_list<std::pair<const char*, const TensorView*>> read);

// a * b + c in int64, false on overflow.
bool mul_add(int64_t a, int64_t b, int64_t c, int64_t* out);

}  // namespace validate_detail
}  // namespace gdn
