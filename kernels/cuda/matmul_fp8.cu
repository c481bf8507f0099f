// Dequantising fp8 (e4m3fn) GEMV/GEMM (LaunchMatMulFp8, see launchers.h for
// the format): the experts of an FP8 checkpoint computed from their FP8
// bytes. A decode step is bound by weight reads, and fp8 reads half the bytes
// of bf16.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launchers.h"

namespace moeserve::kernels::cuda {
namespace {

constexpr int kBlock = 256;
// Rows of x per pass over a weight row, as the bf16 GEMV: decode (m <= 8)
// reads each weight byte once.
constexpr int kRows = 8;

// The four e4m3 codes of a 32-bit word (low byte first) as floats, exact
// (e4m3 -> fp16 is exact, NaN codes give NaN; fp16 -> fp32 is exact).
__device__ __forceinline__ void Decode4(uint32_t word, float w[4]) {
  const __half2 lo = __nv_cvt_fp8x2_to_halfraw2(
      static_cast<__nv_fp8x2_storage_t>(word & 0xffffu), __NV_E4M3);
  const __half2 hi = __nv_cvt_fp8x2_to_halfraw2(
      static_cast<__nv_fp8x2_storage_t>(word >> 16), __NV_E4M3);
  const float2 a = __half22float2(lo), b = __half22float2(hi);
  w[0] = a.x;
  w[1] = a.y;
  w[2] = b.x;
  w[3] = b.y;
}

__device__ __forceinline__ float Decode1(uint8_t code) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(
      static_cast<__nv_fp8_storage_t>(code), __NV_E4M3)));
}

// One warp per output column j (a weight row). Each weight is the CPU's
// dequantised value, decode(q) * scale rounded once (__fmul_rn: never fused
// into the accumulation). Vector path: a lane takes 16 columns (one uint4)
// at a time; 16 | tile_cols, so the 16 share one scale. Scalar path (any
// shape or alignment): a lane takes one column at a time.
__global__ void GemvFp8Kernel(const float* x, int64_t m, int64_t k,
                              const uint8_t* wq, const float* scales,
                              int64_t tile_rows, int64_t tile_cols, int64_t n,
                              float* out, bool vec) {
  const int lane = threadIdx.x & 31;
  const int64_t j =
      (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (j >= n) return;
  const uint8_t* wj = wq + j * k;
  const int64_t scale_cols = (k + tile_cols - 1) / tile_cols;
  const float* sj = scales + (j / tile_rows) * scale_cols;
  for (int64_t r0 = 0; r0 < m; r0 += kRows) {
    const int rows = static_cast<int>(m - r0 < kRows ? m - r0 : kRows);
    const float* xr = x + r0 * k;
    float acc[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] = 0.f;
    if (vec) {
      for (int64_t c0 = lane * 16; c0 < k; c0 += 32 * 16) {
        const uint4 pk = *reinterpret_cast<const uint4*>(wj + c0);
        const uint32_t words[4] = {pk.x, pk.y, pk.z, pk.w};
        const float s = sj[c0 / tile_cols];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          float wf[4];
          Decode4(words[q], wf);
#pragma unroll
          for (int t = 0; t < 4; ++t) wf[t] = __fmul_rn(wf[t], s);
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            if (r < rows) {
              const float4 a =
                  *reinterpret_cast<const float4*>(xr + r * k + c0 + 4 * q);
              acc[r] += a.x * wf[0] + a.y * wf[1] + a.z * wf[2] + a.w * wf[3];
            }
          }
        }
      }
    } else {
      for (int64_t c = lane; c < k; c += 32) {
        const float w = __fmul_rn(Decode1(wj[c]), sj[c / tile_cols]);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          if (r < rows) acc[r] += xr[r * k + c] * w;
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float sum = WarpSum(acc[r]);
      if (lane == 0 && r < rows) out[(r0 + r) * n + j] = sum;
    }
  }
}

}  // namespace

int LaunchMatMulFp8(const float* x, int64_t m, int64_t k, const uint8_t* wq,
                    const float* scales, int64_t tile_rows, int64_t tile_cols,
                    int64_t n, float* out, Strm stream) {
  if (m == 0 || n == 0) return cudaSuccess;
  // 16 | k keeps every weight row 16-byte aligned (with the base), and
  // 16 | tile_cols keeps each 16-column vector inside one scale tile.
  const bool vec = k % 16 == 0 && tile_cols % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(wq) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const int64_t threads = n * 32;
  GemvFp8Kernel<<<(threads + kBlock - 1) / kBlock, kBlock, 0, stream>>>(
      x, m, k, wq, scales, tile_rows, tile_cols, n, out, vec);
  return cudaGetLastError();
}

}  // namespace moeserve::kernels::cuda
