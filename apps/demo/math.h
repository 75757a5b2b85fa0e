// apps/demo/math.h — the few dense kernels the demo model needs around gdn_attention, on the host.
//
// Every kernel computes each row on its own, in a fixed order: a row's result does not depend on
// how many rows are in the batch, where the row sits, or how the work is split over threads. The
// lossless check relies on it (a verify row and a plain decode row with the same prefix must give
// the same logits). The library is built with -ffp-contract=off for the same reason.
#pragma once
#include <cstdint>

namespace gdn::demo {

// Worker threads used by matmul (1 = run on the calling thread). Set once, before running.
void set_math_threads(int n);
int math_threads();

// y[n, out] = x[n, in] @ w[in, out]; w is stored input-major (the transpose of torch's Linear).
// Each y element is the sum over k = 0..in-1 of x[i, k] * w[k, o], accumulated in k order.
void matmul(const float* x, int64_t n, int64_t in, const float* w, int64_t out, float* y);

// y[i] = x[i] / sqrt(mean(x[i]^2) + eps) * weight, for n rows of `dim` (y may alias x).
void rms_norm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* y);

// Qwen3-Next's gated norm, per vector of `dim`: y = rms_norm(x) * weight * silu(z).
void gated_rms_norm(const float* x, const float* z, const float* weight, int64_t n, int64_t dim, float eps,
                    float* y);

// y += x over n elements.
void add_inplace(float* y, const float* x, int64_t n);

// Index of the largest value, the lowest index on ties; -1 when any value is NaN.
int32_t argmax(const float* x, int64_t n);

}  // namespace gdn::demo
