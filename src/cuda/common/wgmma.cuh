// src/cuda/common/wgmma.cuh — warpgroup MMA (wgmma, Hopper sm_90a) as inline PTX: shared-memory matrix
// descriptors, the K-major operand tile layouts they describe (128-byte swizzle, and no swizzle), the
// fences and async groups, and m64nNk16 (N = 64, 128) with bf16 / fp16 inputs (A from shared memory or
// registers, B from shared memory) and float32 accumulators in registers. The sm_80 primitives
// (mma.sync, ldmatrix) are in mma.cuh.
//
// ---- Where this code exists (build) ----
// wgmma belongs to the architecture-specific target sm_90a: PTX for plain sm_90 (or sm_80) cannot hold
// it, and sm_90a code runs on compute capability 9.0 devices only (H100, H200, H20, GH200; not on
// Blackwell). nvcc defines __CUDA_ARCH_FEAT_SM90_ALL in the sm_90a device pass only; GDN_WGMMA_ENABLED
// below is 1 there and 0 in every other pass (host, sm_80, sm_90). In those passes the wrappers
// compile to __trap(), so a kernel using them still builds in a multi-architecture compile; its host
// side must launch it only on a 9.0 device, and only from a translation unit compiled for sm_90a.
// Project decision: the default CMAKE_CUDA_ARCHITECTURES stays "80;90" (the sm_90 PTX keeps the
// library loadable on later GPUs). Translation units with wgmma kernels are compiled in a target of
// their own whose CUDA_ARCHITECTURES is 90a (tests/CMakeLists.txt does this for test_cuda_wgmma.cu),
// so a default build has them without a user setting anything; dispatch checks major == 9, minor == 0.
// Compiling the whole library with CMAKE_CUDA_ARCHITECTURES "80;90a" also works, but its 9.x code then
// loads on 9.0 devices only.
//
// ---- Shared-memory matrix descriptor (64 bits; PTX ISA "Matrix Descriptor Format" of wgmma) ----
//   bits  0-13  start address of the operand in the shared window, in 16-byte units: (addr & 0x3FFFF) >> 4
//   bits 16-29  leading byte offset (LBO) >> 4
//   bits 32-45  stride byte offset (SBO) >> 4
//   bits 49-51  base offset: 0 when the swizzle pattern starts on its own boundary (1024 bytes for the
//               128-byte swizzle: tiles here are 1024-byte aligned, so always 0); unused without swizzle
//   bits 62-63  swizzle: 0 none (interleave), 1 128-byte, 2 64-byte, 3 32-byte
//   other bits  zero
// In the units of the operand: a "core matrix" is 8 rows x 16 bytes (8 x 8 16-bit elements). For a
// K-major operand (rows = M of A or N of B, each row's K elements contiguous, which is what
// imm-trans = 0 selects):
//   no swizzle: each core matrix is 128 contiguous bytes (row r of it at 16 r); LBO = distance between
//     the two core matrices that are adjacent along K (one k16 step spans two), SBO = distance between
//     core matrices adjacent along M/N (rows 8i.. and 8i+8..).
//   128-byte swizzle: rows are 128 bytes (64 16-bit elements of K) apart, 8 rows form a 1024-byte atom,
//     SBO = distance between 8-row atoms (1024 when they are packed), LBO unused (set to 16 bytes, i.e.
//     field value 1). Address model: the unswizzled address (start + row offset + 16-byte chunk) with
//     bits 4-6 XORed with bits 7-9, so 16-byte chunk j of row r holds logical chunk j ^ (r % 8) (the
//     pattern TMA's CU_TENSOR_MAP_SWIZZLE_128B writes for a box 128 bytes wide). As the XOR acts on the
//     whole address, a k16 step inside the atom is the start address plus 32 bytes per step.
//
// ---- Tile layouts used here (16-bit elements; byte offsets from the tile base) ----
//   sw128 (K-major, 128-byte swizzle), `rows` x `kdim` (rows % 8 == 0, kdim % 16 == 0): K is split into
//     blocks of 64 elements (the last one padded); block b is a rows x 128-byte slab at b * rows * 128;
//     in it, element (r, k) is at r * 128 + (((k % 64) / 8) ^ (r % 8)) * 16 + (k % 8) * 2.
//     The tile base must be 1024-byte aligned. k16 step s: start = base + (s / 4) rows 128 + (s % 4) 32,
//     LBO 16, SBO 1024.
//   sw128 M/N-major (the MN index contiguous; imm-trans-a / imm-trans-b = 1, 16-bit types only):
//     an `mn` x `kdim` operand stored as the sw128 tile of its transpose, kdim rows of the MN index:
//     element (m, k) at sw128_offset(kdim, k, m). That is the canonical MN-major layout of the
//     128-byte swizzle (8 elements per 16-byte chunk, 8 chunks per 128-byte row of one K index,
//     8 such rows a 1024-byte atom): 64-element MN blocks LBO = kdim * 128 bytes apart, 8-row K
//     groups SBO = 1024 apart; k16 step s: start = base + 2048 s. It is what a TMA copy with the
//     128-byte swizzle writes for a box of kdim rows (say tokens) of 64 contiguous elements (say
//     the key dimension): the same tile serves as the K-major operand of a product over the
//     columns and as the M/N-major operand of a product over the rows.
//   interleave (K-major, no swizzle), `rows` x `kdim` (rows % 8 == 0, kdim % 16 == 0): core matrix
//     (r / 8, k / 8) at ((r / 8) * (kdim / 8) + k / 8) * 128, element (r, k) at + (r % 8) * 16 + (k % 8) * 2.
//     k16 step s: start = base + 256 s, LBO 128, SBO kdim * 16. Base 16-byte aligned.
//
// ---- Accumulator fragment of m64nNk16 (float D, 64 x N, N/2 floats per thread) ----
// Warp w of the warpgroup (thread t = 128-thread index, w = t / 32, lane l = t % 32) holds rows
// 16 w .. 16 w + 15. Float i of a thread: row = 16 w + l / 4 + 8 ((i / 2) % 2), col = 8 (i / 4) +
// 2 (l % 4) + (i % 2). So each 8-column slice is the m16n8 C fragment of mma.sync (mma.cuh), slices in
// order of i / 4; floats 2j, 2j + 1 are adjacent columns of one row (a float2 store).
//
// ---- The wrappers and the rules around them ----
//   fence()             wgmma.fence: orders this warpgroup's earlier register accesses before the next
//                       wgmma that reads/writes those registers. Needed before the first wgmma and after
//                       any other instruction touched the accumulators or a register A fragment (wgmmas of
//                       the same shape chaining into the same accumulators need none between them).
//   commit()            wgmma.commit_group: closes the wgmmas issued since the last commit into a group.
//   wait<N>()           wgmma.wait_group N: waits until at most N groups are pending. The accumulators of a
//                       pending wgmma must not be read or written, nor its smem operands overwritten.
//   fence_operand(d)    an empty asm that the compiler must assume changes d: keeps it from moving
//                       accumulator reads/writes across the wgmma calls and the wait (around fence()
//                       before issuing, and after wait<>).
//   fence_proxy_async() fence.proxy.async.shared::cta: wgmma reads shared memory through the async proxy;
//                       operands written with ordinary stores need this fence by each writing thread, then
//                       a barrier, before the wgmma is issued (TMA-written operands need none).
//   mma<T, N, kTA, kTB>(d, desc_a, desc_b, accumulate)   wgmma.mma_async m64nNk16 .f32 accumulators, A
//                       and B from shared memory (scales +1): D = A B^T + D when accumulate, D = A B^T
//                       when not (the input D is ignored); `accumulate` is a runtime predicate.
//                       T = __nv_bfloat16 or __half; A is 64 x 16, B is N x 16, each K-major, or
//                       M-major (kTA: imm-trans-a = 1) / N-major (kTB: imm-trans-b = 1).
//   mma_rs<T, N, kTB>(d, a, desc_b, accumulate)   the same with A from registers: a is this thread's
//                       A fragment of the 64 x 16 step (a_row / a_col; acc_to_a makes it from a k16
//                       slice of an accumulator). The registers of a must not change until the wait
//                       that covers the wgmma: give each step its own array.
// fence, commit, wait and mma are executed by all 128 threads of a warpgroup (warps 4g .. 4g + 3 of the
// block), converged; fence_proxy_async and fence_operand are per thread; the descriptor,
// layout and fragment functions are plain arithmetic (host and device).
// Order of use: store the operands (st.shared), fence_proxy_async, barrier; set the accumulators,
// fence_operand, fence; mma ... (one per k16 step); commit; wait<0> (or wait<N> with later groups in
// flight); fence_operand; read the accumulators. tests/test_cuda_wgmma.cu does exactly this.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "mma.cuh"  // smem_u32
#include "tma.cuh"  // fence_proxy_async

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GDN_WGMMA_ENABLED 1
#else
#define GDN_WGMMA_ENABLED 0
#endif

namespace gdn::cuda::wgmma {

// ---- descriptors ----

enum class Swizzle : uint32_t { kNone = 0, k128B = 1, k64B = 2, k32B = 3 };

// A byte address or byte offset as a descriptor field: 16-byte units of the low 18 bits.
__host__ __device__ constexpr uint64_t desc_field(uint32_t bytes) { return (bytes & 0x3FFFFu) >> 4; }

__host__ __device__ constexpr uint64_t make_desc(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes, Swizzle sw,
                                                 uint32_t base_offset = 0) {
  return desc_field(smem_addr) | desc_field(lbo_bytes) << 16 | desc_field(sbo_bytes) << 32 |
         static_cast<uint64_t>(base_offset & 7u) << 49 | static_cast<uint64_t>(sw) << 62;
}

// ---- K-major tile, 128-byte swizzle (layout in the top comment) ----

constexpr uint32_t kSw128RowBytes = 128;   // one row of a K block: 64 16-bit elements
constexpr uint32_t kSw128AtomBytes = 1024;  // 8 rows: the swizzle period, the tile base's alignment

__host__ __device__ constexpr uint32_t sw128_bytes(int rows, int kdim) {
  return static_cast<uint32_t>(rows) * kSw128RowBytes * static_cast<uint32_t>((kdim + 63) / 64);
}
// Byte offset of element (row, k) from the (1024-byte aligned) tile base.
__host__ __device__ constexpr uint32_t sw128_offset(int rows, int row, int k) {
  return static_cast<uint32_t>(k / 64) * static_cast<uint32_t>(rows) * kSw128RowBytes +
         static_cast<uint32_t>(row) * kSw128RowBytes +
         static_cast<uint32_t>(((k % 64) / 8) ^ (row % 8)) * 16u + static_cast<uint32_t>(k % 8) * 2u;
}
// The descriptor of k16 step `kstep` (elements 16 kstep .. 16 kstep + 15) of the tile at shared
// address tile_addr, all its rows (64 for A; N for B).
__host__ __device__ constexpr uint64_t sw128_desc(uint32_t tile_addr, int rows, int kstep) {
  return make_desc(tile_addr + static_cast<uint32_t>(kstep / 4) * static_cast<uint32_t>(rows) * kSw128RowBytes +
                       static_cast<uint32_t>(kstep % 4) * 32u,
                   16u, kSw128AtomBytes, Swizzle::k128B);
}

// The descriptor of k16 step `kstep` of an M/N-major operand stored as the sw128 tile of its
// transpose (kdim rows; its MN extent: 64 elements per 128-byte row, blocks of 64 kdim * 128 bytes
// apart).
__host__ __device__ constexpr uint64_t sw128_mn_desc(uint32_t tile_addr, int kdim, int kstep) {
  return make_desc(tile_addr + static_cast<uint32_t>(kstep) * 16u * kSw128RowBytes,
                   static_cast<uint32_t>(kdim) * kSw128RowBytes, kSw128AtomBytes, Swizzle::k128B);
}

// ---- K-major tile, no swizzle (core matrices, K-adjacent ones packed; layout in the top comment) ----

__host__ __device__ constexpr uint32_t interleave_bytes(int rows, int kdim) {
  return static_cast<uint32_t>(rows) * static_cast<uint32_t>(kdim) * 2u;
}
__host__ __device__ constexpr uint32_t interleave_offset(int kdim, int row, int k) {
  return static_cast<uint32_t>((row / 8) * (kdim / 8) + k / 8) * 128u + static_cast<uint32_t>(row % 8) * 16u +
         static_cast<uint32_t>(k % 8) * 2u;
}
__host__ __device__ constexpr uint64_t interleave_desc(uint32_t tile_addr, int kdim, int kstep) {
  return make_desc(tile_addr + static_cast<uint32_t>(kstep) * 256u, 128u, static_cast<uint32_t>(kdim) * 16u,
                   Swizzle::kNone);
}

// ---- accumulator fragment of m64nNk16 (float): thread t (0..127 in the warpgroup), float i ----

__host__ __device__ constexpr int acc_row(int t, int i) { return (t / 32) * 16 + (t % 32) / 4 + ((i / 2) % 2) * 8; }
__host__ __device__ constexpr int acc_col(int t, int i) { return (i / 4) * 8 + (t % 4) * 2 + (i % 2); }

// ---- A fragment in registers (m64k16; the mma.sync m16n8k16 A fragment per warp) ----
// Register j (0..3) of thread t holds two 16-bit values, h = 0 in the low half: row a_row(t, j),
// columns a_col(t, j, h) of the 64 x 16 step.
__host__ __device__ constexpr int a_row(int t, int j) { return (t / 32) * 16 + (t % 32) / 4 + (j % 2) * 8; }
__host__ __device__ constexpr int a_col(int t, int j, int h) { return (j / 2) * 8 + (t % 4) * 2 + h; }
// k16 slice S (columns 16 S .. 16 S + 15) of an m64nN accumulator as the A fragment of a following
// product, rounded to T: accumulator floats 8 S + 2 j, 8 S + 2 j + 1 sit at register j's row and
// columns (acc_row / acc_col against a_row / a_col).
template <typename T, int S, int NF>
__device__ __forceinline__ void acc_to_a(const float (&d)[NF], uint32_t (&a)[4]) {
  static_assert(S >= 0 && 8 * S + 8 <= NF, "slice inside the accumulator");
#pragma unroll
  for (int j = 0; j < 4; ++j) a[j] = mma::pack2<T>(d[8 * S + 2 * j], d[8 * S + 2 * j + 1]);
}

// ---- fences and groups ----

__device__ __forceinline__ void fence() {
#if GDN_WGMMA_ENABLED
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void commit() {
#if GDN_WGMMA_ENABLED
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
template <int N>
__device__ __forceinline__ void wait() {
  static_assert(N >= 0 && N <= 7, "wgmma.wait_group takes 0..7");
#if GDN_WGMMA_ENABLED
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#else
  __trap();
#endif
}
using cuda::fence_proxy_async;  // (tma.cuh)
template <int N>
__device__ __forceinline__ void fence_operand(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// ---- wgmma.mma_async m64nNk16, f32 += bf16/f16 x bf16/f16, A and B from shared memory ----

#define GDN_WGMMA_D32                                                                                   \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),       \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),           \
      "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),           \
      "+f"(d[30]), "+f"(d[31])
#define GDN_WGMMA_D64                                                                                 \
  GDN_WGMMA_D32, "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]),         \
      "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]),       \
      "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]),       \
      "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]),       \
      "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define GDN_WGMMA_R32                                                   \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define GDN_WGMMA_R64                                                                   \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                 \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "        \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "        \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
// One instruction: accumulators D (operands 0 .. N/2-1), then desc A, desc B, the accumulate flag,
// imm-trans-a, imm-trans-b (immediates).
#define GDN_WGMMA_ASM(SHAPE_TYPES, REGS, IA, IB, IP, ITA, ITB)                                          \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %" IP ", 0;\nwgmma.mma_async.sync.aligned." SHAPE_TYPES " " REGS \
  ", %" IA ", %" IB ", p, 1, 1, %" ITA ", %" ITB ";\n}\n"

template <typename T, bool kTA = false, bool kTB = false>
__device__ __forceinline__ void mma_m64n64k16(float (&d)[32], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "bf16 or fp16 inputs");
#if GDN_WGMMA_ENABLED
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(GDN_WGMMA_ASM("m64n64k16.f32.f16.f16", GDN_WGMMA_R32, "32", "33", "34", "35", "36")
                 : GDN_WGMMA_D32
                 : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)), "n"(kTA ? 1 : 0), "n"(kTB ? 1 : 0)
                 : "memory");
  } else {
    asm volatile(GDN_WGMMA_ASM("m64n64k16.f32.bf16.bf16", GDN_WGMMA_R32, "32", "33", "34", "35", "36")
                 : GDN_WGMMA_D32
                 : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)), "n"(kTA ? 1 : 0), "n"(kTB ? 1 : 0)
                 : "memory");
  }
#else
  __trap();
#endif
}

template <typename T, bool kTA = false, bool kTB = false>
__device__ __forceinline__ void mma_m64n128k16(float (&d)[64], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "bf16 or fp16 inputs");
#if GDN_WGMMA_ENABLED
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(GDN_WGMMA_ASM("m64n128k16.f32.f16.f16", GDN_WGMMA_R64, "64", "65", "66", "67", "68")
                 : GDN_WGMMA_D64
                 : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)), "n"(kTA ? 1 : 0), "n"(kTB ? 1 : 0)
                 : "memory");
  } else {
    asm volatile(GDN_WGMMA_ASM("m64n128k16.f32.bf16.bf16", GDN_WGMMA_R64, "64", "65", "66", "67", "68")
                 : GDN_WGMMA_D64
                 : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)), "n"(kTA ? 1 : 0), "n"(kTB ? 1 : 0)
                 : "memory");
  }
#else
  __trap();
#endif
}

// A from registers (operands: D, the four A registers, desc B, the accumulate flag, imm-trans-b).
#define GDN_WGMMA_RS_ASM(SHAPE_TYPES, REGS, A0, A1, A2, A3, IB, IP, ITB)                                  \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %" IP ", 0;\nwgmma.mma_async.sync.aligned." SHAPE_TYPES " " REGS      \
  ", {%" A0 ", %" A1 ", %" A2 ", %" A3 "}, %" IB ", p, 1, 1, %" ITB ";\n}\n"

template <typename T, bool kTB = false>
__device__ __forceinline__ void mma_rs_m64n64k16(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b,
                                                 bool accumulate) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "bf16 or fp16 inputs");
#if GDN_WGMMA_ENABLED
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(GDN_WGMMA_RS_ASM("m64n64k16.f32.f16.f16", GDN_WGMMA_R32, "32", "33", "34", "35", "36", "37", "38")
                 : GDN_WGMMA_D32
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)),
                   "n"(kTB ? 1 : 0)
                 : "memory");
  } else {
    asm volatile(GDN_WGMMA_RS_ASM("m64n64k16.f32.bf16.bf16", GDN_WGMMA_R32, "32", "33", "34", "35", "36", "37", "38")
                 : GDN_WGMMA_D32
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)),
                   "n"(kTB ? 1 : 0)
                 : "memory");
  }
#else
  __trap();
#endif
}

template <typename T, bool kTB = false>
__device__ __forceinline__ void mma_rs_m64n128k16(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b,
                                                  bool accumulate) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "bf16 or fp16 inputs");
#if GDN_WGMMA_ENABLED
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(GDN_WGMMA_RS_ASM("m64n128k16.f32.f16.f16", GDN_WGMMA_R64, "64", "65", "66", "67", "68", "69", "70")
                 : GDN_WGMMA_D64
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)),
                   "n"(kTB ? 1 : 0)
                 : "memory");
  } else {
    asm volatile(GDN_WGMMA_RS_ASM("m64n128k16.f32.bf16.bf16", GDN_WGMMA_R64, "64", "65", "66", "67", "68", "69", "70")
                 : GDN_WGMMA_D64
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)),
                   "n"(kTB ? 1 : 0)
                 : "memory");
  }
#else
  __trap();
#endif
}

#undef GDN_WGMMA_RS_ASM
#undef GDN_WGMMA_ASM
#undef GDN_WGMMA_R64
#undef GDN_WGMMA_R32
#undef GDN_WGMMA_D64
#undef GDN_WGMMA_D32

// N = 64 or 128: d has N / 2 floats. kTA / kTB: A M-major / B N-major.
template <typename T, int N, bool kTA = false, bool kTB = false>
__device__ __forceinline__ void mma(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  static_assert(N == 64 || N == 128, "m64n64k16 or m64n128k16");
  if constexpr (N == 64) {
    mma_m64n64k16<T, kTA, kTB>(d, desc_a, desc_b, accumulate);
  } else {
    mma_m64n128k16<T, kTA, kTB>(d, desc_a, desc_b, accumulate);
  }
}

// A from registers; N = 64 or 128: d has N / 2 floats. kTB: B N-major.
template <typename T, int N, bool kTB = false>
__device__ __forceinline__ void mma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b, bool accumulate) {
  static_assert(N == 64 || N == 128, "m64n64k16 or m64n128k16");
  if constexpr (N == 64) {
    mma_rs_m64n64k16<T, kTB>(d, a, desc_b, accumulate);
  } else {
    mma_rs_m64n128k16<T, kTB>(d, a, desc_b, accumulate);
  }
}

}  // namespace gdn::cuda::wgmma
