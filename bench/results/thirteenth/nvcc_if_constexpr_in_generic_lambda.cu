// nvcc 13.0.88 (sm_90, -O3 -ptx): the kT = 4 instance of the generic lambda below compiles to no code
// (the PTX has no store of 2.0, 3.0 or 4.0); the same code compiled for the host runs correctly, and
// without the `if constexpr` block the device code is complete. bench/RESULTS.md step 73.
// nvcc -std=c++17 -O3 -arch=sm_90 -ptx nvcc_if_constexpr_in_generic_lambda.cu -o d.ptx; grep -c 1073741824 d.ptx  # 0
#include <cstdio>
#include <type_traits>
template <int kT> __device__ void work(float* out, int c) { for (int t = 0; t < kT; ++t) out[c * 8 + t] = t + 1.f; }
__global__ void k(float* out, int c0, int step, bool one, bool pair) {
  auto run = [&](auto tokens) {
    constexpr int kT = decltype(tokens)::value;
    int c = c0;
    if constexpr (kT == 1)
      for (; pair && c + step < 64; c += 2 * step) { work<kT>(out, c); work<kT>(out, c + step); }
    for (; c < 64; c += step) work<kT>(out, c);
  };
  if (one) run(std::integral_constant<int, 1>{});
  else run(std::integral_constant<int, 4>{});
}
