// Dequantising int4 GEMV/GEMM (LaunchMatMulInt4, see launchers.h for the
// format): int4 experts (a quantized draft, or an int4 checkpoint's experts
// with fp16 scales and zero points). A decode step is bound by weight reads,
// and int4 reads a quarter of the bytes of bf16.
#include <cuda_fp16.h>
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

// Value of nibble `t` (0..7) of a 32-bit word less the zero point z: low
// nibble first. Exact (a small integer).
__device__ __forceinline__ float Nibble(uint32_t word, int t, int z) {
  return static_cast<float>(static_cast<int>((word >> (4 * t)) & 0xfu) - z);
}

// A scale, bf16 or fp16 bits, as float: exact either way.
__device__ __forceinline__ float Scale(uint16_t bits, bool f16) {
  return f16 ? __half2float(__ushort_as_half(bits)) : Bf16(bits);
}

// One warp per output column j (a weight row). Vector path: a lane takes 32
// columns (16 bytes, one uint4) at a time; 32 | group, so the 32 columns share
// one scale and zero point, and the partial dot product of x with (u - z)
// is scaled once. Scalar path (any alignment): a lane takes one byte (two
// columns) at a time. zeros null: z = 8 (symmetric).
__global__ void GemvInt4Kernel(const float* x, int64_t m, int64_t k,
                               const uint8_t* wq, const uint16_t* scales,
                               bool f16, const uint8_t* zeros, int64_t group,
                               int64_t n, float* out, bool vec) {
  const int lane = threadIdx.x & 31;
  const int64_t j =
      (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (j >= n) return;
  const uint8_t* wj = wq + j * (k / 2);
  const uint16_t* sj = scales + j * (k / group);
  const uint8_t* zj = zeros != nullptr ? zeros + j * (k / group) : nullptr;
  for (int64_t r0 = 0; r0 < m; r0 += kRows) {
    const int rows = static_cast<int>(m - r0 < kRows ? m - r0 : kRows);
    const float* xr = x + r0 * k;
    float acc[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] = 0.f;
    if (vec) {
      for (int64_t c0 = lane * 32; c0 < k; c0 += 32 * 32) {
        const uint4 pk = *reinterpret_cast<const uint4*>(wj + c0 / 2);
        const uint32_t words[4] = {pk.x, pk.y, pk.z, pk.w};
        const int z = zj != nullptr ? zj[c0 / group] : 8;
        float part[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) part[r] = 0.f;
          // 8 columns (one word) at a time keeps the register count low.
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          float wf[8];
#pragma unroll
          for (int t = 0; t < 8; ++t) wf[t] = Nibble(words[q], t, z);
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            if (r < rows) {
              const float4* xv =
                  reinterpret_cast<const float4*>(xr + r * k + c0 + 8 * q);
              const float4 a = xv[0], b = xv[1];
              part[r] += a.x * wf[0] + a.y * wf[1] + a.z * wf[2] + a.w * wf[3] +
                         b.x * wf[4] + b.y * wf[5] + b.z * wf[6] + b.w * wf[7];
            }
          }
        }
        const float s = Scale(sj[c0 / group], f16);
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[r] += part[r] * s;
      }
    } else {
      for (int64_t c = 2 * lane; c < k; c += 64) {
        const uint32_t byte = wj[c / 2];
        const float s = Scale(sj[c / group], f16);
        const int z = zj != nullptr ? zj[c / group] : 8;
        const float w0 = Nibble(byte, 0, z) * s, w1 = Nibble(byte, 1, z) * s;
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          if (r < rows) acc[r] += xr[r * k + c] * w0 + xr[r * k + c + 1] * w1;
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

int LaunchMatMulInt4(const float* x, int64_t m, int64_t k, const uint8_t* wq,
                     const uint16_t* scales, bool f16_scales,
                     const uint8_t* zeros, int64_t group, int64_t n, float* out,
                     Strm stream) {
  if (m == 0 || n == 0) return cudaSuccess;
  // k % group == 0 and 32 | group make every weight row a whole number of
  // 16-byte vectors; the bases decide.
  const bool vec = group % 32 == 0 &&
                   reinterpret_cast<uintptr_t>(wq) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const int64_t threads = n * 32;
  GemvInt4Kernel<<<(threads + kBlock - 1) / kBlock, kBlock, 0, stream>>>(
      x, m, k, wq, scales, f16_scales, zeros, group, n, out, vec);
  return cudaGetLastError();
}

}  // namespace moeserve::kernels::cuda
