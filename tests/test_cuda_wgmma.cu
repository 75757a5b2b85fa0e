// The wgmma primitives (src/cuda/common/wgmma.cuh) against a double-precision reference on the host.
// Compiled for sm_90a only (its own target in tests/CMakeLists.txt); the device cases skip without a
// compute capability 9.0 device, the host cases (descriptor bits, layouts, fragment map) always run.
//   Cuda/CudaWgmma.MatchesReference/<type>_N<N>_<layout>_k<steps>: one warpgroup (one block of 128
//     threads) computes D[64 x N] = A[64 x 16 steps] B[N x 16 steps]^T (+ C) with `steps` chained
//     wgmma.mma_async m64nNk16 (k16 step s reads K columns 16 s .. 16 s + 15 through its own pair of
//     descriptors), A and B K-major in shared memory, written with plain stores through the layout's
//     offset function (128-byte swizzle, or no swizzle), all remaining 16-bit words of the tiles NaN;
//     and with A M-major or B N-major (imm-trans-a / -b; stored as the 128-byte-swizzled tile of its
//     transpose, the other operand K-major swizzled).
//     bf16 and fp16, N = 64 and 128, 1, 2, 4 and 8 steps (8: two 64-column K blocks of the swizzled
//     tile). Each case runs five launches:
//       accumulate  D = C + A B^T, C loaded into the accumulators through acc_row / acc_col, every
//                   step with the accumulate predicate true;
//       overwrite   the predicate false on the first step (the accumulators hold C, which must vanish);
//       groups      as accumulate, each step committed as its own group, then wait<1>, wait<0>;
//     the first two with random 16-bit values in [-2, 2) and with small integers (k / 4, |k| <= 8).
//   Tolerance: integer data is exact in float32 whatever the order or rounding of the accumulation
//   (every partial sum is a multiple of 1/16 below 2^10), so D must equal the reference exactly. Random
//   data: the products of two 16-bit values are exact in float32, the sums round: |D - ref| <=
//   1e-5 (|C| + sum_k |a b|) per element (float32 accumulation over at most 8 chained k16 steps stays
//   near 1e-7 of that sum; a misplaced element or a wrong fragment map is of the order of one product,
//   about 1e-2 of it). The largest error seen is printed.
//   CudaWgmmaHost.*: the descriptor's bit fields, the layouts' offsets (one slot per element, the
//   128-byte swizzle equal to the address-bit XOR form), each step's descriptor addressing the
//   layout's elements (K-major, and M/N-major from the canonical layout's strides), the fragment map
//   covering 64 x N once.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cuda/common/wgmma.cuh"
#include "wgmma_test_util.cuh"

namespace {
namespace wg = gdn::cuda::wgmma;
using gdn::wgmma_test::DevBuf;
using gdn::wgmma_test::to_bits;
using gdn::wgmma_test::upload;

// kSw128MnA / kSw128MnB: A M-major / B N-major (stored as the sw128 tile of its transpose), the other
// operand K-major sw128.
enum class Layout { kSw128, kInterleave, kSw128MnA, kSw128MnB };
enum class Mode { kAccumulate, kOverwrite, kGroups };

constexpr int kM = gdn::wgmma_test::kRows;

// Operand b (false: A, true: B) of layout l is M/N-major.
__host__ __device__ constexpr bool mn_major(Layout l, bool b) {
  return l == (b ? Layout::kSw128MnB : Layout::kSw128MnA);
}
__host__ __device__ constexpr uint32_t tile_bytes(Layout l, bool b, int rows, int kdim) {
  return mn_major(l, b) ? wg::sw128_bytes(kdim, rows)
                        : l == Layout::kInterleave ? wg::interleave_bytes(rows, kdim) : wg::sw128_bytes(rows, kdim);
}
#if GDN_WGMMA_ENABLED  // (device code only: referenced by the kernel's sm_90a body)
__device__ constexpr uint32_t tile_offset(Layout l, bool b, int rows, int kdim, int row, int k) {
  return mn_major(l, b) ? wg::sw128_offset(kdim, k, row)
                        : l == Layout::kInterleave ? wg::interleave_offset(kdim, row, k) : wg::sw128_offset(rows, row, k);
}
__device__ constexpr uint64_t tile_desc(Layout l, bool b, uint32_t addr, int rows, int kdim, int step) {
  return mn_major(l, b) ? wg::sw128_mn_desc(addr, kdim, step)
                        : l == Layout::kInterleave ? wg::interleave_desc(addr, kdim, step) : wg::sw128_desc(addr, rows, step);
}
#endif
// Dynamic shared memory of a launch: both tiles and up to 1023 bytes to align the base to 1024.
constexpr size_t smem_bytes(Layout l, int n, int steps) {
  return tile_bytes(l, false, kM, 16 * steps) + tile_bytes(l, true, n, 16 * steps) + 1024;
}

// status: 0 ok, 1 built without sm_90a code (never launched then), 2 shared base misaligned.
// STEPS k16 steps, unrolled (straight-line wgmmas, as the kernels will issue them).
template <typename T, int N, Layout L, int STEPS>
__global__ void __launch_bounds__(128, 1)
    wgmma_kernel(const uint16_t* a, const uint16_t* b, const float* c, float* d, int mode, int* status) {
#if GDN_WGMMA_ENABLED
  extern __shared__ unsigned char smem_raw[];
  const int t = threadIdx.x;
  constexpr int kdim = 16 * STEPS;
  const uint32_t raw = gdn::cuda::mma::smem_u32(smem_raw);
  unsigned char* const tile_a = smem_raw + ((1024u - (raw & 1023u)) & 1023u);
  unsigned char* const tile_b = tile_a + tile_bytes(L, false, kM, kdim);
  const uint32_t addr_a = gdn::cuda::mma::smem_u32(tile_a), addr_b = gdn::cuda::mma::smem_u32(tile_b);
  if ((addr_a & 1023u) != 0 || (addr_b & 1023u) != 0) {
    if (t == 0) *status = 2;
    return;
  }
  // every 16-bit word NaN, then the elements through the layout's offsets
  const uint32_t words = (tile_bytes(L, false, kM, kdim) + tile_bytes(L, true, N, kdim)) / 2;
  for (uint32_t w = t; w < words; w += 128) reinterpret_cast<uint16_t*>(tile_a)[w] = 0x7FFF;
  __syncthreads();
  for (int e = t; e < kM * kdim; e += 128)
    *reinterpret_cast<uint16_t*>(tile_a + tile_offset(L, false, kM, kdim, e / kdim, e % kdim)) = a[e];
  for (int e = t; e < N * kdim; e += 128)
    *reinterpret_cast<uint16_t*>(tile_b + tile_offset(L, true, N, kdim, e / kdim, e % kdim)) = b[e];
  wg::fence_proxy_async();  // the plain stores above, visible to the async proxy (wgmma's reads)
  __syncthreads();

  constexpr bool kTA = mn_major(L, false), kTB = mn_major(L, true);
  float acc[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acc[i] = c[wg::acc_row(t, i) * N + wg::acc_col(t, i)];
  wg::fence_operand(acc);
  if (mode == static_cast<int>(Mode::kGroups)) {
    wg::fence();  // (inside each branch: a branch between the fence and the wgmma makes ptxas add one)
#pragma unroll
    for (int s = 0; s < STEPS; ++s) {
      wg::mma<T, N, kTA, kTB>(acc, tile_desc(L, false, addr_a, kM, kdim, s), tile_desc(L, true, addr_b, N, kdim, s),
                              true);
      wg::commit();
    }
    wg::wait<1>();  // the last step's group may still be running here
  } else {
    const bool overwrite = mode == static_cast<int>(Mode::kOverwrite);
    wg::fence();
#pragma unroll
    for (int s = 0; s < STEPS; ++s)
      wg::mma<T, N, kTA, kTB>(acc, tile_desc(L, false, addr_a, kM, kdim, s), tile_desc(L, true, addr_b, N, kdim, s),
                              !(overwrite && s == 0));
    wg::commit();
  }
  wg::wait<0>();
  wg::fence_operand(acc);
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[wg::acc_row(t, i) * N + wg::acc_col(t, i)] = acc[i];
#else
  if (threadIdx.x == 0) *status = 1;
#endif
}

// ---- host side ----

struct Param {
  bool fp16;
  int n;
  Layout layout;
  int steps;
};
std::string param_name(const ::testing::TestParamInfo<Param>& i) {
  const char* l = i.param.layout == Layout::kSw128       ? "_sw128"
                  : i.param.layout == Layout::kSw128MnA  ? "_sw128_Mmajor"
                  : i.param.layout == Layout::kSw128MnB  ? "_sw128_Nmajor"
                                                         : "_noswizzle";
  return std::string(i.param.fp16 ? "fp16" : "bf16") + "_N" + std::to_string(i.param.n) + l + "_k" +
         std::to_string(i.param.steps);
}
std::vector<Param> params() {
  std::vector<Param> v;
  for (bool fp16 : {false, true})
    for (int n : {64, 128})
      for (Layout l : {Layout::kSw128, Layout::kInterleave, Layout::kSw128MnA, Layout::kSw128MnB})
        for (int steps : {1, 2, 4, 8}) v.push_back({fp16, n, l, steps});
  return v;
}

// One launch of one case and mode; checks every element of D. Returns the largest error seen relative
// to the element's absolute sum.
template <typename T, int N, Layout L, int STEPS>
double run_case(Mode mode, bool integers, uint32_t seed) {
  const int kdim = 16 * STEPS;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-2.0f, 2.0f);
  std::uniform_int_distribution<int> small(-8, 8);
  auto value = [&] { return integers ? small(rng) / 4.0f : uni(rng); };
  std::vector<uint16_t> a(kM * kdim), b(N * kdim);
  for (auto& x : a) x = to_bits<T>(value());
  for (auto& x : b) x = to_bits<T>(value());
  std::vector<float> c(kM * N), d(kM * N, std::nanf(""));
  for (float& x : c) x = integers ? small(rng) / 4.0f : 2.0f * uni(rng);
  std::vector<double> ref, scale;
  gdn::wgmma_test::product_ref<T>(a, b, mode != Mode::kOverwrite ? c.data() : nullptr, N, kdim, ref, scale);

  DevBuf<uint16_t> da(a.size()), db(b.size());
  DevBuf<float> dc(c.size()), dd(d.size());
  DevBuf<int> status(1);
  upload(da, a);
  upload(db, b);
  upload(dc, c);
  upload(dd, d);
  gdn::wgmma_test::launch_one_block(wgmma_kernel<T, N, L, STEPS>, smem_bytes(L, N, STEPS), status,
                                    static_cast<const uint16_t*>(da.p), static_cast<const uint16_t*>(db.p),
                                    static_cast<const float*>(dc.p), dd.p, static_cast<int>(mode));
  EXPECT_EQ(cudaSuccess, cudaMemcpy(d.data(), dd.p, d.size() * 4, cudaMemcpyDeviceToHost));
  return gdn::wgmma_test::check_product(d, ref, scale, N, integers);
}

template <typename T, int N, Layout L, int STEPS>
void run_all() {
  const uint32_t seed = 1000u * STEPS + N + 7u * static_cast<uint32_t>(L) + (std::is_same_v<T, __half> ? 3 : 0);
  double worst = 0;
  for (bool integers : {true, false})
    for (Mode mode : {Mode::kAccumulate, Mode::kOverwrite}) {
      SCOPED_TRACE(std::string(integers ? "integers" : "random") +
                   (mode == Mode::kAccumulate ? " accumulate" : " overwrite first step"));
      const uint32_t case_seed = seed + (integers ? 11u : 0u) + static_cast<uint32_t>(mode);
      worst = std::max(worst, run_case<T, N, L, STEPS>(mode, integers, case_seed));
    }
  {
    SCOPED_TRACE("random, one commit group per step");
    worst = std::max(worst, run_case<T, N, L, STEPS>(Mode::kGroups, false, seed + 29));
  }
  std::printf("    largest |D - ref| / sum|terms|: %.3g\n", worst);
}

template <typename T, int N, Layout L>
void dispatch_steps(int steps) {
  switch (steps) {
    case 1: return run_all<T, N, L, 1>();
    case 2: return run_all<T, N, L, 2>();
    case 4: return run_all<T, N, L, 4>();
    case 8: return run_all<T, N, L, 8>();
    default: FAIL() << "no kernel for " << steps << " steps";
  }
}
template <typename T, int N>
void dispatch_layout(const Param& p) {
  switch (p.layout) {
    case Layout::kSw128: return dispatch_steps<T, N, Layout::kSw128>(p.steps);
    case Layout::kInterleave: return dispatch_steps<T, N, Layout::kInterleave>(p.steps);
    case Layout::kSw128MnA: return dispatch_steps<T, N, Layout::kSw128MnA>(p.steps);
    case Layout::kSw128MnB: return dispatch_steps<T, N, Layout::kSw128MnB>(p.steps);
  }
}
template <typename T>
void dispatch(const Param& p) {
  if (p.n == 64)
    dispatch_layout<T, 64>(p);
  else
    dispatch_layout<T, 128>(p);
}

class CudaWgmma : public ::testing::TestWithParam<Param> {};

TEST_P(CudaWgmma, MatchesReference) {
  const std::string skip = gdn::wgmma_test::no_sm90a_device();
  if (!skip.empty()) GTEST_SKIP() << skip;
  if (GetParam().fp16)
    dispatch<__half>(GetParam());
  else
    dispatch<__nv_bfloat16>(GetParam());
}
INSTANTIATE_TEST_SUITE_P(Cuda, CudaWgmma, ::testing::ValuesIn(params()), param_name);

// ---- host-only checks of the header's pure functions ----

TEST(CudaWgmmaHost, DescriptorBitFields) {
  // start 0x1A400 (>> 4 = 0x1A40), LBO 16 (1), SBO 1024 (0x40), base offset 5, 128-byte swizzle (1)
  const uint64_t d = wg::make_desc(0x1A400u, 16u, 1024u, wg::Swizzle::k128B, 5u);
  EXPECT_EQ(d & 0x3FFFu, 0x1A40u);
  EXPECT_EQ((d >> 16) & 0x3FFFu, 1u);
  EXPECT_EQ((d >> 32) & 0x3FFFu, 0x40u);
  EXPECT_EQ((d >> 49) & 7u, 5u);
  EXPECT_EQ(d >> 62, 1u);
  EXPECT_EQ(d, 0x4000000000011A40ull | (0x40ull << 32) | (5ull << 49));
  EXPECT_EQ(d & 0x3FF1C000C000C000ull, 0u) << "reserved bits (14-15, 30-31, 46-48, 52-61) set";
  // only the low 18 bits of an address count; no swizzle = 0 in bits 62-63
  EXPECT_EQ(wg::make_desc(0x41230u, 128u, 2048u, wg::Swizzle::kNone), 0x123ull | (8ull << 16) | (128ull << 32));
  // a k16 step of the swizzled layout moves the start by 32 bytes inside the 128-byte row, then by a
  // whole K block (rows * 128 bytes) every 4 steps
  EXPECT_EQ(wg::sw128_desc(0x2000u, 64, 1) - wg::sw128_desc(0x2000u, 64, 0), 2u);
  EXPECT_EQ(wg::sw128_desc(0x2000u, 64, 5) - wg::sw128_desc(0x2000u, 64, 0), (64u * 128u + 32u) >> 4);
  EXPECT_EQ(wg::interleave_desc(0x2000u, 64, 3) - wg::interleave_desc(0x2000u, 64, 0), 3u * 256u >> 4);
}

TEST(CudaWgmmaHost, Sw128LayoutIsTheAddressBitXor) {
  for (int rows : {64, 128})
    for (int kdim : {16, 64, 128}) {
      const uint32_t bytes = wg::sw128_bytes(rows, kdim);
      std::vector<int> seen(bytes / 2, 0);
      for (int r = 0; r < rows; ++r)
        for (int k = 0; k < kdim; ++k) {
          const uint32_t off = wg::sw128_offset(rows, r, k);
          ASSERT_LT(off, bytes);
          ASSERT_EQ(off % 2, 0u);
          ++seen[off / 2];
          // unswizzled: row-major 128-byte rows per K block; swizzled: bits 4-6 ^= bits 7-9
          const uint32_t plain = (k / 64) * rows * 128u + r * 128u + (k % 64) * 2u;
          EXPECT_EQ(off, plain ^ (((plain >> 7) & 7u) << 4)) << r << " " << k;
        }
      for (int s : seen) ASSERT_LE(s, 1) << "two elements in one slot";
    }
}

TEST(CudaWgmmaHost, InterleaveLayoutOneSlotPerElement) {
  for (int rows : {64, 128})
    for (int kdim : {16, 32, 64, 128}) {
      std::vector<int> seen(wg::interleave_bytes(rows, kdim) / 2, 0);
      for (int r = 0; r < rows; ++r)
        for (int k = 0; k < kdim; ++k) ++seen[wg::interleave_offset(kdim, r, k) / 2];
      for (int s : seen) ASSERT_EQ(s, 1);
      // a core matrix (8 rows x 8 elements) is 128 contiguous bytes
      EXPECT_EQ(wg::interleave_offset(kdim, 7, 7) - wg::interleave_offset(kdim, 0, 0), 126u);
      EXPECT_EQ(wg::interleave_offset(kdim, 0, 8), 128u);                              // LBO
      EXPECT_EQ(wg::interleave_offset(kdim, 8, 0), static_cast<uint32_t>(kdim) * 16u);  // SBO
    }
}

// A descriptor's start address, LBO and SBO in bytes, and its swizzle field.
struct DescFields {
  uint32_t start, lbo, sbo, sw;
};
DescFields desc_fields(uint64_t desc) {
  return {static_cast<uint32_t>(desc & 0x3FFFu) << 4, static_cast<uint32_t>((desc >> 16) & 0x3FFFu) << 4,
          static_cast<uint32_t>((desc >> 32) & 0x3FFFu) << 4, static_cast<uint32_t>(desc >> 62)};
}

// Where the hardware reads element (r, k) of a k16 slice (r < rows, k < 16) of a K-major operand, from
// the descriptor's fields alone: rows r % 8 of an 8-row group at 16 bytes (no swizzle) or 128 bytes
// (128-byte swizzle) apart, groups SBO apart; the two 8-element halves of the slice LBO apart (no
// swizzle) or adjacent 16-byte chunks (swizzle); then, with the 128-byte swizzle, address bits 4-6 XOR
// bits 7-9. Each step's descriptor must point every element at the slot the layout's offset function
// gives it (the test kernel stores there).
uint32_t model_address(uint64_t desc, int r, int k) {
  const DescFields d = desc_fields(desc);
  const uint32_t rr = r % 8, group = r / 8, half = k / 8, kk = k % 8;
  if (d.sw == 0) return d.start + rr * 16u + group * d.sbo + half * d.lbo + kk * 2u;
  EXPECT_EQ(d.sw, 1u);
  const uint32_t a = d.start + rr * 128u + group * d.sbo + half * 16u + kk * 2u;
  return a ^ (((a >> 7) & 7u) << 4);
}

TEST(CudaWgmmaHost, DescriptorsAddressTheLayoutsElements) {
  const uint32_t base = 0x2400;  // 1024-byte aligned
  for (int rows : {64, 128})
    for (int steps : {1, 2, 4, 8}) {
      const int kdim = 16 * steps;
      for (int s = 0; s < steps; ++s)
        for (int r = 0; r < rows; ++r)
          for (int k = 0; k < 16; ++k) {
            ASSERT_EQ(model_address(wg::sw128_desc(base, rows, s), r, k), base + wg::sw128_offset(rows, r, 16 * s + k))
                << "sw128 rows " << rows << " step " << s << " (" << r << ", " << k << ")";
            ASSERT_EQ(model_address(wg::interleave_desc(base, kdim, s), r, k),
                      base + wg::interleave_offset(kdim, r, 16 * s + k))
                << "no swizzle rows " << rows << " kdim " << kdim << " step " << s << " (" << r << ", " << k << ")";
          }
    }
}

// The same for an M/N-major operand, from the canonical MN-major layout of the 128-byte swizzle: MN
// element m at 2 (m % 8) bytes in its 16-byte chunk, chunks (m / 8) % 8 of a 128-byte row, 64-element
// blocks LBO apart; K element k in row k % 8 of an 8-row group, groups SBO apart; then address bits
// 4-6 XOR bits 7-9.
uint32_t model_mn_address(uint64_t desc, int m, int k) {
  const DescFields d = desc_fields(desc);
  EXPECT_EQ(d.sw, 1u);
  const uint32_t a =
      d.start + (m % 8) * 2u + ((m / 8) % 8) * 16u + (m / 64) * d.lbo + (k % 8) * 128u + (k / 8) * d.sbo;
  return a ^ (((a >> 7) & 7u) << 4);
}

TEST(CudaWgmmaHost, MnMajorDescriptorsAddressTheTransposedTile) {
  const uint32_t base = 0x6000;  // 1024-byte aligned
  for (int mn : {64, 128})
    for (int steps : {1, 2, 4, 8}) {
      const int kdim = 16 * steps;
      for (int s = 0; s < steps; ++s)
        for (int m = 0; m < mn; ++m)
          for (int k = 0; k < 16; ++k)
            ASSERT_EQ(model_mn_address(wg::sw128_mn_desc(base, kdim, s), m, k),
                      base + wg::sw128_offset(kdim, 16 * s + k, m))
                << "mn " << mn << " steps " << steps << " step " << s << " (" << m << ", " << k << ")";
    }
  // the fields: LBO = the 64-element blocks' distance (kdim rows of 128 bytes), SBO = 1024
  const DescFields d = desc_fields(wg::sw128_mn_desc(base, 64, 3));
  EXPECT_EQ(d.start, base + 3u * 2048u);
  EXPECT_EQ(d.lbo, 64u * 128u);
  EXPECT_EQ(d.sbo, 1024u);
}

TEST(CudaWgmmaHost, AccumulatorFragmentCoversTheTileOnce) {
  for (int n : {64, 128}) {
    std::vector<int> seen(kM * n, 0);
    for (int t = 0; t < 128; ++t)
      for (int i = 0; i < n / 2; ++i) {
        const int r = wg::acc_row(t, i), c = wg::acc_col(t, i);
        ASSERT_TRUE(r >= 0 && r < kM && c >= 0 && c < n);
        ++seen[r * n + c];
        EXPECT_EQ(r / 16, t / 32) << "warp w holds rows 16w..16w+15";
        if (i % 2 == 1) {
          EXPECT_EQ(r, wg::acc_row(t, i - 1));
          EXPECT_EQ(c, wg::acc_col(t, i - 1) + 1);
        }
      }
    for (int s : seen) ASSERT_EQ(s, 1);
  }
  // thread 37 (warp 1, lane 5): floats 0..3 at rows 17, 17, 25, 25, columns 2, 3, 2, 3; float 4 at column 10
  EXPECT_EQ(wg::acc_row(37, 0), 17);
  EXPECT_EQ(wg::acc_col(37, 1), 3);
  EXPECT_EQ(wg::acc_row(37, 2), 25);
  EXPECT_EQ(wg::acc_col(37, 4), 10);
}

}  // namespace
