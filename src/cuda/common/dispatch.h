// src/cuda/common/dispatch.h — host dispatch from the runtime dtypes of activations and SSM state,
// and from the conv width, to the kernels' template instances.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>
#include <type_traits>

#include "gdn/status.h"
#include "gdn/tensor.h"

namespace gdn::cuda {

// fn(act_tag, state_tag) with each tag's ::type the C++ type of the dtype (float, __nv_bfloat16, __half).
template <typename T>
struct Tag {
  using type = T;
};
template <typename F>
Status with_state(DType state, F fn) {
  switch (state) {
    case DType::kFloat32: return fn(Tag<float>{});
    case DType::kBFloat16: return fn(Tag<__nv_bfloat16>{});
    case DType::kFloat16: return fn(Tag<__half>{});
    default: return Status::Error(std::string("unsupported SSM state dtype ") + dtype_name(state));
  }
}
template <typename F>
Status with_dtypes(DType act, DType state, F fn) {
  auto on_act = [&](auto ta) { return with_state(state, [&](auto ts) { return fn(ta, ts); }); };
  switch (act) {
    case DType::kFloat32: return on_act(Tag<float>{});
    case DType::kBFloat16: return on_act(Tag<__nv_bfloat16>{});
    case DType::kFloat16: return on_act(Tag<__half>{});
    default: return Status::Error(std::string("unsupported activation dtype ") + dtype_name(act));
  }
}

// fn(std::integral_constant<int, W>{}) for the conv widths the conv kernels are instantiated for.
template <typename F>
Status with_conv_width(int W, F fn) {
  switch (W) {
    case 2: return fn(std::integral_constant<int, 2>{});
    case 3: return fn(std::integral_constant<int, 3>{});
    case 4: return fn(std::integral_constant<int, 4>{});
    case 5: return fn(std::integral_constant<int, 5>{});
    default: return Status::Error("unsupported conv width " + std::to_string(W) + ": supported {2, 3, 4, 5}");
  }
}

}  // namespace gdn::cuda
