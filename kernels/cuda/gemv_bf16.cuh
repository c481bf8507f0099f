// The bf16 GEMV's inner loop, shared by MatMul's GEMV (kernels.cu) and the
// grouped expert kernels (grouped_experts.cu), so that an expert computed in
// a grouped launch gives bit for bit what ExpertFfn's GEMV gives (nvcc only).
#ifndef MOESERVE_KERNELS_CUDA_GEMV_BF16_CUH_
#define MOESERVE_KERNELS_CUDA_GEMV_BF16_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_math.cuh"

namespace moeserve::kernels::cuda {

// Rows of x a warp accumulates at a time: the weight row is streamed once
// per kGemvRows tokens, so decode (m <= 8) reads each weight exactly once.
inline constexpr int kGemvRows = 8;

// Whether the 16-byte path applies to x [m, k] times W [n, k] (whole
// matrices: every row is then aligned too).
__device__ __forceinline__ bool GemvBf16Vectorized(const float* x,
                                                   const uint16_t* w,
                                                   int64_t k) {
  return (k % 8 == 0) && (reinterpret_cast<uintptr_t>(w) % 16 == 0) &&
         (reinterpret_cast<uintptr_t>(x) % 16 == 0);
}

// One warp (lane = its lane) computes out[r * ldo] = x[r, :] . wj + b for
// r < m, with fp32 accumulation: lane-strided partial sums, then a warp sum.
// wj: one row of W (k bf16). The same summation order for any m.
__device__ __forceinline__ void GemvBf16Column(const float* x, int64_t m,
                                               int64_t k, const uint16_t* wj,
                                               bool vec, float b, int lane,
                                               float* out, int64_t ldo) {
  for (int64_t r0 = 0; r0 < m; r0 += kGemvRows) {
    const int rows = static_cast<int>(m - r0 < kGemvRows ? m - r0 : kGemvRows);
    float acc[kGemvRows];
#pragma unroll
    for (int r = 0; r < kGemvRows; ++r) acc[r] = 0.f;
    const float* xr = x + r0 * k;
    // 8 bf16 (16 bytes) a lane when aligned; scalar tail otherwise.
    int64_t start = 0;
    if (vec) {
      for (int64_t i = lane * 8; i < k; i += 32 * 8) {
        const uint4 pk = *reinterpret_cast<const uint4*>(wj + i);
        float wf[8];
        const uint32_t words[4] = {pk.x, pk.y, pk.z, pk.w};
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          wf[2 * t] = __uint_as_float(words[t] << 16);
          wf[2 * t + 1] = __uint_as_float(words[t] & 0xffff0000u);
        }
#pragma unroll
        for (int r = 0; r < kGemvRows; ++r) {
          if (r < rows) {
            const float4 a = *reinterpret_cast<const float4*>(xr + r * k + i);
            const float4 c =
                *reinterpret_cast<const float4*>(xr + r * k + i + 4);
            acc[r] += a.x * wf[0] + a.y * wf[1] + a.z * wf[2] + a.w * wf[3] +
                      c.x * wf[4] + c.y * wf[5] + c.z * wf[6] + c.w * wf[7];
          }
        }
      }
      start = k;
    }
    for (int64_t i = start + lane; i < k; i += 32) {
      const float wv = Bf16(wj[i]);
#pragma unroll
      for (int r = 0; r < kGemvRows; ++r) {
        if (r < rows) acc[r] += xr[r * k + i] * wv;
      }
    }
#pragma unroll
    for (int r = 0; r < kGemvRows; ++r) {
      const float s = WarpSum(acc[r]);
      if (lane == 0 && r < rows) out[(r0 + r) * ldo] = s + b;
    }
  }
}

}  // namespace moeserve::kernels::cuda

#endif  // MOESERVE_KERNELS_CUDA_GEMV_BF16_CUH_
