// Host kernels of the demo model. matmul splits output columns over a small persistent pool of
// threads; every element is still accumulated in k order, so the split never changes a result.
#include "demo/math.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gdn::demo {
namespace {

// A fixed set of workers that run part p of n of one job at a time; the caller runs part 0.
class Pool {
 public:
  ~Pool() { resize(1); }
  int size() const { return static_cast<int>(workers_.size()) + 1; }
  void resize(int n) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
      ++generation_;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
    stop_ = false;
    const uint64_t start = generation_;
    for (int p = 1; p < n; ++p) workers_.emplace_back([this, p, start] { loop(p, start); });
  }
  void run(const std::function<void(int, int)>& job) {
    const int n = size();
    if (n == 1) return job(0, 1);
    {
      std::lock_guard<std::mutex> lk(mu_);
      job_ = &job;
      pending_ = n - 1;
      ++generation_;
    }
    cv_.notify_all();
    job(0, n);
    std::unique_lock<std::mutex> lk(mu_);
    done_.wait(lk, [this] { return pending_ == 0; });
    job_ = nullptr;
  }

 private:
  void loop(int part, uint64_t seen) {
    for (;;) {
      const std::function<void(int, int)>* job = nullptr;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      (*job)(part, size());
      std::lock_guard<std::mutex> lk(mu_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_, done_;
  const std::function<void(int, int)>* job_ = nullptr;
  int pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

Pool& pool() {
  static Pool p;
  return p;
}

constexpr int64_t kRowBlock = 4;
constexpr int64_t kColBlock = 64;

// Columns [c0, c1) of y for all rows.
void matmul_cols(const float* x, int64_t n, int64_t in, const float* w, int64_t out, float* y, int64_t c0,
                 int64_t c1) {
  float acc[kRowBlock][kColBlock];
  // Column blocks outside: a [in, 64] slice of w stays in cache while every row block uses it.
  for (int64_t o0 = c0; o0 < c1; o0 += kColBlock) {
    const int64_t ob = std::min(kColBlock, c1 - o0);
    for (int64_t i0 = 0; i0 < n; i0 += kRowBlock) {
      const int64_t rb = std::min(kRowBlock, n - i0);
      for (int64_t r = 0; r < rb; ++r)
        for (int64_t j = 0; j < ob; ++j) acc[r][j] = 0.0f;
      for (int64_t k = 0; k < in; ++k) {
        const float* wr = w + k * out + o0;
        for (int64_t r = 0; r < rb; ++r) {
          const float xv = x[(i0 + r) * in + k];
          float* a = acc[r];
          for (int64_t j = 0; j < ob; ++j) a[j] = a[j] + xv * wr[j];  // acc += x[i,k] w[k,o]
        }
      }
      for (int64_t r = 0; r < rb; ++r)
        for (int64_t j = 0; j < ob; ++j) y[(i0 + r) * out + o0 + j] = acc[r][j];
    }
  }
}

}  // namespace

void set_math_threads(int n) { pool().resize(std::max(1, n)); }
int math_threads() { return pool().size(); }

void matmul(const float* x, int64_t n, int64_t in, const float* w, int64_t out, float* y) {
  if (n <= 0) return;
  const int parts = pool().size();
  // Small products are not worth waking the workers.
  if (parts == 1 || n * in * out < (int64_t{1} << 16) || out < 2 * kColBlock) {
    return matmul_cols(x, n, in, w, out, y, 0, out);
  }
  pool().run([&](int p, int np) {
    const int64_t blocks = (out + kColBlock - 1) / kColBlock;
    const int64_t b0 = blocks * p / np, b1 = blocks * (p + 1) / np;
    matmul_cols(x, n, in, w, out, y, b0 * kColBlock, std::min(out, b1 * kColBlock));
  });
}

void rms_norm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * dim;
    float ss = 0.0f;
    for (int64_t c = 0; c < dim; ++c) ss += xi[c] * xi[c];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
    float* yi = y + i * dim;
    for (int64_t c = 0; c < dim; ++c) yi[c] = xi[c] * inv * weight[c];
  }
}

void gated_rms_norm(const float* x, const float* z, const float* weight, int64_t n, int64_t dim, float eps,
                    float* y) {
  rms_norm(x, weight, n, dim, eps, y);
  for (int64_t e = 0; e < n * dim; ++e) {
    const float g = z[e] / (1.0f + std::exp(-z[e]));  // silu(z)
    y[e] *= g;
  }
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t e = 0; e < n; ++e) y[e] += x[e];
}

int32_t argmax(const float* x, int64_t n) {
  int32_t best = -1;
  for (int64_t e = 0; e < n; ++e) {
    if (std::isnan(x[e])) return -1;
    if (best < 0 || x[e] > x[best]) best = static_cast<int32_t>(e);
  }
  return best;
}

}  // namespace gdn::demo
