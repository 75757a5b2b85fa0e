// wgmma with A from registers (src/cuda/common/wgmma.cuh: mma_rs, a_row / a_col, acc_to_a) against a
// double-precision reference on the host. Compiled for sm_90a only (tests/CMakeLists.txt); the device
// cases skip without a compute capability 9.0 device.
//   Cuda/CudaWgmmaRs.MatchesReference/<type>_N<N>_<B layout>_k<steps>: one warpgroup computes
//     D[64 x N] = C + A[64 x 16 steps] B[N x 16 steps]^T with `steps` chained m64nNk16, each thread's
//     A fragment of each step loaded from global memory through a_row / a_col (one register array
//     a step), B in shared memory K-major (128-byte swizzle) or N-major (the swizzled tile of its
//     transpose, imm-trans-b), every other 16-bit word of the tile NaN. bf16 and fp16, N = 64 and
//     128, 1 and 4 steps; the accumulate predicate true on every step, and false on the first
//     (the accumulators hold C, which must vanish); random values in [-2, 2) and small integers.
//   Cuda/CudaWgmmaRs.AccumulatorFeedsTheNextProduct/<type>_N<N>: X[64 x 64] = A1 B1^T (A and B from
//     shared memory), then D[64 x N] = X B2^T with X's four k16 slices as register A fragments
//     (acc_to_a): what a kernel does to multiply a product it holds in registers without a trip
//     through shared memory. A1, B1 in {-1, 0, 1} (X integers of at most 64 in magnitude, exact in
//     both 16-bit types), B2 multiples of 1/4 up to 2: D exact.
//   CudaWgmmaRsHost.AFragmentCoversTheStepOnce: a_row / a_col name each element of a 64 x 16 step
//     once, and slice s of the accumulator fragment (acc_row / acc_col) has register j's row and
//     columns (what acc_to_a relies on).
// Tolerance as test_cuda_wgmma.cu: integer data exact; random data |D - ref| <= 1e-5 sum |terms|.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cuda/common/wgmma.cuh"
#include "wgmma_test_util.cuh"

namespace {
namespace wg = gdn::cuda::wgmma;
using gdn::wgmma_test::check_product;
using gdn::wgmma_test::DevBuf;
using gdn::wgmma_test::from_bits;
using gdn::wgmma_test::launch_one_block;
using gdn::wgmma_test::to_bits;
using gdn::wgmma_test::upload;

constexpr int kM = gdn::wgmma_test::kRows;

// B (N x kdim) in shared memory: K-major sw128, or N-major (the sw128 tile of its transpose).
__host__ __device__ constexpr uint32_t b_bytes(bool kTB, int n, int kdim) {
  return kTB ? wg::sw128_bytes(kdim, n) : wg::sw128_bytes(n, kdim);
}
#if GDN_WGMMA_ENABLED
__device__ constexpr uint32_t b_offset(bool kTB, int n_rows, int kdim, int n, int k) {
  return kTB ? wg::sw128_offset(kdim, k, n) : wg::sw128_offset(n_rows, n, k);
}
__device__ constexpr uint64_t b_desc(bool kTB, uint32_t addr, int n_rows, int kdim, int step) {
  return kTB ? wg::sw128_mn_desc(addr, kdim, step) : wg::sw128_desc(addr, n_rows, step);
}
// The 1024-byte aligned start of the dynamic shared memory (status 2 where it is not).
__device__ unsigned char* aligned_smem(unsigned char* raw) {
  const uint32_t r = gdn::cuda::mma::smem_u32(raw);
  return raw + ((1024u - (r & 1023u)) & 1023u);
}
// Tile `bytes` of NaN words, then the n_rows x kdim elements of src (row-major) through b_offset.
__device__ void store_b(unsigned char* tile, uint32_t bytes, bool kTB, int n_rows, int kdim, const uint16_t* src) {
  const int t = threadIdx.x;
  for (uint32_t w = t; w < bytes / 2; w += 128) reinterpret_cast<uint16_t*>(tile)[w] = 0x7FFF;
  __syncthreads();
  for (int e = t; e < n_rows * kdim; e += 128)
    *reinterpret_cast<uint16_t*>(tile + b_offset(kTB, n_rows, kdim, e / kdim, e % kdim)) = src[e];
}
#endif

// status: 0 ok, 1 built without sm_90a code, 2 shared base misaligned.
template <typename T, int N, bool kTB, int STEPS>
__global__ void __launch_bounds__(128, 1)
    rs_kernel(const uint16_t* a, const uint16_t* b, const float* c, float* d, int overwrite, int* status) {
#if GDN_WGMMA_ENABLED
  extern __shared__ unsigned char smem_raw[];
  constexpr int kdim = 16 * STEPS;
  const int t = threadIdx.x;
  unsigned char* tile = aligned_smem(smem_raw);
  const uint32_t addr = gdn::cuda::mma::smem_u32(tile);
  if ((addr & 1023u) != 0) {
    if (t == 0) *status = 2;
    return;
  }
  store_b(tile, b_bytes(kTB, N, kdim), kTB, N, kdim, b);
  wg::fence_proxy_async();
  __syncthreads();
  uint32_t af[STEPS][4];  // one array a step: a wgmma in flight reads its registers
#pragma unroll
  for (int s = 0; s < STEPS; ++s)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint16_t* row = a + wg::a_row(t, j) * kdim + 16 * s;
      af[s][j] = static_cast<uint32_t>(row[wg::a_col(t, j, 0)]) | static_cast<uint32_t>(row[wg::a_col(t, j, 1)]) << 16;
    }
  float acc[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acc[i] = c[wg::acc_row(t, i) * N + wg::acc_col(t, i)];
  wg::fence_operand(acc);
  wg::fence();
#pragma unroll
  for (int s = 0; s < STEPS; ++s)
    wg::mma_rs<T, N, kTB>(acc, af[s], b_desc(kTB, addr, N, kdim, s), !(overwrite && s == 0));
  wg::commit();
  wg::wait<0>();
  wg::fence_operand(acc);
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[wg::acc_row(t, i) * N + wg::acc_col(t, i)] = acc[i];
#else
  if (threadIdx.x == 0) *status = 1;
#endif
}

// X = A1 B1^T (64 x 64, both K-major sw128 in shared memory), then D = X B2^T with X's slices as A.
template <typename T, int N>
__global__ void __launch_bounds__(128, 1)
    chain_kernel(const uint16_t* a1, const uint16_t* b1, const uint16_t* b2, float* d, int* status) {
#if GDN_WGMMA_ENABLED
  extern __shared__ unsigned char smem_raw[];
  const int t = threadIdx.x;
  unsigned char* ta = aligned_smem(smem_raw);
  unsigned char* tb1 = ta + wg::sw128_bytes(kM, 64);
  unsigned char* tb2 = tb1 + wg::sw128_bytes(64, 64);
  const uint32_t aa = gdn::cuda::mma::smem_u32(ta), ab1 = gdn::cuda::mma::smem_u32(tb1),
                 ab2 = gdn::cuda::mma::smem_u32(tb2);
  if ((aa & 1023u) != 0) {
    if (t == 0) *status = 2;
    return;
  }
  store_b(ta, wg::sw128_bytes(kM, 64), false, kM, 64, a1);  // (A1 K-major: the same layout as a K-major B)
  store_b(tb1, wg::sw128_bytes(64, 64), false, 64, 64, b1);
  store_b(tb2, wg::sw128_bytes(N, 64), false, N, 64, b2);
  wg::fence_proxy_async();
  __syncthreads();
  float x[32];
  wg::fence_operand(x);
  wg::fence();
#pragma unroll
  for (int s = 0; s < 4; ++s) wg::mma<T, 64>(x, wg::sw128_desc(aa, kM, s), wg::sw128_desc(ab1, 64, s), s > 0);
  wg::commit();
  wg::wait<0>();
  wg::fence_operand(x);
  uint32_t af[4][4];
  wg::acc_to_a<T, 0>(x, af[0]);
  wg::acc_to_a<T, 1>(x, af[1]);
  wg::acc_to_a<T, 2>(x, af[2]);
  wg::acc_to_a<T, 3>(x, af[3]);
  float acc[N / 2];
  wg::fence_operand(acc);
  wg::fence();
#pragma unroll
  for (int s = 0; s < 4; ++s) wg::mma_rs<T, N>(acc, af[s], wg::sw128_desc(ab2, N, s), s > 0);
  wg::commit();
  wg::wait<0>();
  wg::fence_operand(acc);
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[wg::acc_row(t, i) * N + wg::acc_col(t, i)] = acc[i];
#else
  if (threadIdx.x == 0) *status = 1;
#endif
}

// ---- host side ----

template <typename T, int N, bool kTB, int STEPS>
double run_rs(bool overwrite, bool integers, uint32_t seed) {
  constexpr int kdim = 16 * STEPS;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-2.0f, 2.0f);
  std::uniform_int_distribution<int> small(-8, 8);
  auto value = [&] { return integers ? small(rng) / 4.0f : uni(rng); };
  std::vector<uint16_t> a(kM * kdim), b(N * kdim);
  for (auto& x : a) x = to_bits<T>(value());
  for (auto& x : b) x = to_bits<T>(value());
  std::vector<float> c(kM * N), d(kM * N, std::nanf(""));
  for (float& x : c) x = 2.0f * value();
  std::vector<double> ref, scale;
  gdn::wgmma_test::product_ref<T>(a, b, overwrite ? nullptr : c.data(), N, kdim, ref, scale);
  DevBuf<uint16_t> da(a.size()), db(b.size());
  DevBuf<float> dc(c.size()), dd(d.size());
  DevBuf<int> status(1);
  upload(da, a);
  upload(db, b);
  upload(dc, c);
  upload(dd, d);
  launch_one_block(rs_kernel<T, N, kTB, STEPS>, b_bytes(kTB, N, kdim) + 1024, status, static_cast<const uint16_t*>(da.p),
         static_cast<const uint16_t*>(db.p), static_cast<const float*>(dc.p), dd.p, overwrite ? 1 : 0);
  EXPECT_EQ(cudaSuccess, cudaMemcpy(d.data(), dd.p, d.size() * 4, cudaMemcpyDeviceToHost));
  return check_product(d, ref, scale, N, integers);
}

template <typename T, int N>
void run_chain(uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> tri(-1, 1), small(-8, 8);
  std::vector<uint16_t> a1(kM * 64), b1(64 * 64), b2(N * 64);
  for (auto& x : a1) x = to_bits<T>(float(tri(rng)));
  for (auto& x : b1) x = to_bits<T>(float(tri(rng)));
  for (auto& x : b2) x = to_bits<T>(small(rng) / 4.0f);
  std::vector<double> x(kM * 64, 0.0), ref(kM * N, 0.0), scale(kM * N, 0.0);
  for (int m = 0; m < kM; ++m)
    for (int j = 0; j < 64; ++j)
      for (int k = 0; k < 64; ++k) x[m * 64 + j] += double(from_bits<T>(a1[m * 64 + k])) * from_bits<T>(b1[j * 64 + k]);
  for (int m = 0; m < kM; ++m)
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < 64; ++k) {
        const double p = x[m * 64 + k] * from_bits<T>(b2[n * 64 + k]);
        ref[m * N + n] += p;
        scale[m * N + n] += std::fabs(p);
      }
  std::vector<float> d(kM * N, std::nanf(""));
  DevBuf<uint16_t> da1(a1.size()), db1(b1.size()), db2(b2.size());
  DevBuf<float> dd(d.size());
  DevBuf<int> status(1);
  upload(da1, a1);
  upload(db1, b1);
  upload(db2, b2);
  upload(dd, d);
  const size_t smem = wg::sw128_bytes(kM, 64) + wg::sw128_bytes(64, 64) + wg::sw128_bytes(N, 64) + 1024;
  launch_one_block(chain_kernel<T, N>, smem, status, static_cast<const uint16_t*>(da1.p), static_cast<const uint16_t*>(db1.p),
         static_cast<const uint16_t*>(db2.p), dd.p);
  EXPECT_EQ(cudaSuccess, cudaMemcpy(d.data(), dd.p, d.size() * 4, cudaMemcpyDeviceToHost));
  check_product(d, ref, scale, N, true);
}

struct Param {
  bool fp16;
  int n;
  bool n_major;
  int steps;
};
std::string param_name(const ::testing::TestParamInfo<Param>& i) {
  return std::string(i.param.fp16 ? "fp16" : "bf16") + "_N" + std::to_string(i.param.n) +
         (i.param.n_major ? "_Nmajor" : "_Kmajor") + "_k" + std::to_string(i.param.steps);
}

template <typename T, int N, bool kTB, int STEPS>
void run_all(const Param& p) {
  const uint32_t seed = 100u * STEPS + N + (kTB ? 7u : 0u) + (p.fp16 ? 3u : 0u);
  double worst = 0;
  for (bool integers : {true, false})
    for (bool overwrite : {false, true}) {
      SCOPED_TRACE(std::string(integers ? "integers" : "random") + (overwrite ? ", overwrite first step" : ", accumulate"));
      worst = std::max(worst, run_rs<T, N, kTB, STEPS>(overwrite, integers, seed + (integers ? 11u : 0u) + overwrite));
    }
  std::printf("    largest |D - ref| / sum|terms|: %.3g\n", worst);
}
template <typename T, int N, bool kTB>
void by_steps(const Param& p) {
  if (p.steps == 1)
    run_all<T, N, kTB, 1>(p);
  else
    run_all<T, N, kTB, 4>(p);
}
template <typename T, int N>
void by_layout(const Param& p) {
  if (p.n_major)
    by_steps<T, N, true>(p);
  else
    by_steps<T, N, false>(p);
}
template <typename T>
void by_n(const Param& p) {
  if (p.n == 64)
    by_layout<T, 64>(p);
  else
    by_layout<T, 128>(p);
}

class CudaWgmmaRs : public ::testing::TestWithParam<Param> {};

TEST_P(CudaWgmmaRs, MatchesReference) {
  const std::string skip = gdn::wgmma_test::no_sm90a_device();
  if (!skip.empty()) GTEST_SKIP() << skip;
  if (GetParam().fp16)
    by_n<__half>(GetParam());
  else
    by_n<__nv_bfloat16>(GetParam());
}

TEST_P(CudaWgmmaRs, AccumulatorFeedsTheNextProduct) {
  const Param& p = GetParam();
  if (p.n_major || p.steps != 1) GTEST_SKIP() << "one case per type and N (the B layout and steps are fixed)";
  const std::string skip = gdn::wgmma_test::no_sm90a_device();
  if (!skip.empty()) GTEST_SKIP() << skip;
  const uint32_t seed = 31u + p.n + (p.fp16 ? 1u : 0u);
  if (p.fp16)
    p.n == 64 ? run_chain<__half, 64>(seed) : run_chain<__half, 128>(seed);
  else
    p.n == 64 ? run_chain<__nv_bfloat16, 64>(seed) : run_chain<__nv_bfloat16, 128>(seed);
}

std::vector<Param> params() {
  std::vector<Param> v;
  for (bool fp16 : {false, true})
    for (int n : {64, 128})
      for (bool n_major : {false, true})
        for (int steps : {1, 4}) v.push_back({fp16, n, n_major, steps});
  return v;
}
INSTANTIATE_TEST_SUITE_P(Cuda, CudaWgmmaRs, ::testing::ValuesIn(params()), param_name);

TEST(CudaWgmmaRsHost, AFragmentCoversTheStepOnce) {
  std::vector<int> seen(kM * 16, 0);
  for (int t = 0; t < 128; ++t)
    for (int j = 0; j < 4; ++j)
      for (int h = 0; h < 2; ++h) {
        const int r = wg::a_row(t, j), c = wg::a_col(t, j, h);
        ASSERT_TRUE(r >= 0 && r < kM && c >= 0 && c < 16) << "thread " << t << " register " << j;
        ++seen[r * 16 + c];
        for (int s = 0; s < 4; ++s) {  // accumulator float 8 s + 2 j + h: the same row, column 16 s + c
          EXPECT_EQ(wg::acc_row(t, 8 * s + 2 * j + h), r) << "thread " << t << " slice " << s << " register " << j;
          EXPECT_EQ(wg::acc_col(t, 8 * s + 2 * j + h), 16 * s + c) << "thread " << t << " slice " << s;
        }
      }
  for (int e = 0; e < kM * 16; ++e) EXPECT_EQ(seen[e], 1) << "element (" << e / 16 << ", " << e % 16 << ")";
}

}  // namespace
