// What compute-sanitizer's racecheck makes of a producer-consumer hand-off through named barriers,
// the pattern of the chunk kernel's warps (docs/design.md, "Sanitizers"): warp 0 writes a shared
// buffer and arrives on barrier 1; warp 1 waits on barrier 1 (bar.sync), reads, arrives on barrier 2;
// warp 0 waits on barrier 2 before it writes again. The PTX ISA orders the writes before the reads
// (bar.arrive makes a thread's prior memory accesses performed relative to the threads of the
// barrier when it completes), and the result is always right, yet racecheck reports hazards here.
//   nvcc -arch=sm_90 -o racecheck_arrive tools/sanitizer/racecheck_arrive.cu
//   compute-sanitizer --tool racecheck ./racecheck_arrive
#include <cstdio>

__device__ __forceinline__ void bar_sync(int id, int n) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void bar_arrive(int id, int n) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory");
}

__global__ void handoff(float* out) {
  __shared__ float buf[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float acc = 0.f;
  for (int it = 0; it < 8; ++it) {
    if (warp == 0) {
      if (it > 0) bar_sync(2, 64);  // the buffer is free again
      buf[lane] = static_cast<float>(it + lane);
      bar_arrive(1, 64);  // the buffer is full
    } else {
      bar_sync(1, 64);
      acc += buf[(lane + 1) & 31];
      bar_arrive(2, 64);
    }
  }
  if (warp == 0) bar_sync(2, 64);  // the last release
  if (warp == 1) out[lane] = acc;
}

int main() {
  float* d = nullptr;
  if (cudaMalloc(&d, 32 * sizeof(float)) != cudaSuccess) return 1;
  handoff<<<1, 64>>>(d);
  float h[32];
  cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  int bad = 0;
  for (int l = 0; l < 32; ++l) bad += h[l] != 8.f * ((l + 1) & 31) + 28.f;
  std::printf("%s\n", bad ? "wrong result" : "right result");
  return bad != 0;
}
