// Dequantising int4 GEMV (LaunchGemvInt4, LaunchMatMulInt4; see launchers.h
// for the format and quant_gemv.cuh for the block shape): int4 experts (a
// quantized draft, or an int4 checkpoint's experts with fp16 scales and zero
// points), one expert or a layer's experts per launch. A decode step is
// bound by weight reads, and int4 reads a quarter of the bytes of bf16.
//
// Vector path (group % 32 == 0, nibbles 16-byte aligned): a lane loads 16
// bytes (32 columns, one group) of each of its weight rows per step, the
// next step's already in flight; a 32-bit word (8 columns, nibble t = column
// t) is split into its even and odd nibbles (two LOP3), each byte then turned
// into the float 2^23 + u by one PRMT into the mantissa of 2^23 (the
// exponent-magic trick) and (u - z) = (2^23 + u) - (2^23 + z) is exact; the
// 32 products with x (read from shared memory) are summed in column order and
// scaled once: acc += part * scale. The layout is the blob's own (no
// repacking): x is indexed by column, so the even/odd split costs nothing.
// Scalar path (other groups, unaligned nibbles): a lane takes a byte (two
// columns) at a time, weight = (u - z) * scale.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/quant_gemv.cuh"

namespace moeserve::kernels::cuda {
namespace {

constexpr int kR = kQuantRowsPerWarp;
constexpr float kMagic = 8388608.f;  // 2^23: its ulp is 1.

// A scale, bf16 or fp16 bits, as float: exact either way.
__device__ __forceinline__ float Scale(uint16_t bits, bool f16) {
  return f16 ? __half2float(__ushort_as_half(bits)) : Bf16(bits);
}

// 2^23 + (byte b of `nibbles`), where every byte of `nibbles` is <= 15.
__device__ __forceinline__ float Magic(uint32_t nibbles, int b) {
  return __uint_as_float(__byte_perm(nibbles, 0x4B000000u, 0x7440u | b));
}

// One weight row: its nibbles, scales and zeros (null: z = 8).
struct Int4Row {
  const uint8_t* q;
  const uint16_t* s;
  const uint8_t* z;
};

__device__ __forceinline__ Int4Row RowOf(uintptr_t base, const Int4GemvSpec& p,
                                         int64_t j) {
  const bool in_a = j < p.split;
  const int64_t row = in_a ? j : j - p.split;
  const int64_t q = in_a ? p.a.q : p.b.q;
  const int64_t s = in_a ? p.a.scales : p.b.scales;
  const int64_t z = in_a ? p.a.zeros : p.b.zeros;
  const int64_t groups = p.k / p.group;
  Int4Row r;
  r.q = reinterpret_cast<const uint8_t*>(base + q) + row * (p.k / 2);
  r.s = reinterpret_cast<const uint16_t*>(base + s) + row * groups;
  r.z = p.zeros ? reinterpret_cast<const uint8_t*>(base + z) + row * groups
                : nullptr;
  return r;
}

// One step of a lane on the vector path: the 16 bytes of vector v of each of
// its rows and their group's scale bits and zero point (sz = scale | zero <<
// 16), loaded a step ahead of their use.
struct Int4Step {
  uint4 q[kR];
  uint32_t sz[kR];
};

__device__ __forceinline__ Int4Step LoadInt4Step(const Int4Row (&row)[kR],
                                                 int64_t v, uint32_t group) {
  Int4Step st;
  const uint32_t g = static_cast<uint32_t>(v * 32) / group;
#pragma unroll
  for (int i = 0; i < kR; ++i) {
    st.q[i] = __ldg(reinterpret_cast<const uint4*>(row[i].q) + v);
    const uint32_t z = row[i].z != nullptr ? __ldg(row[i].z + g) : 8u;
    st.sz[i] = __ldg(row[i].s + g) | (z << 16);
  }
  return st;
}

// blockIdx.y: the group; blockIdx.z: M of its rows; blockIdx.x: tiles of
// kQuantRowsPerBlock weight rows, grid-strided. x staged `chunk` columns at
// a time in rows of `stride` floats.
template <int M>
__global__ void __launch_bounds__(kQuantThreads)
    GemvInt4Kernel(QuantGroupTable table, Int4GemvSpec p, const float* x,
                   float* out, int64_t chunk, int stride) {
  const int g = blockIdx.y;
  const int count = table.count[g];
  const int r0 = static_cast<int>(blockIdx.z) * M;
  if (r0 >= count) return;  // The whole block.
  const int rows = min(M, count - r0);
  const int64_t first = static_cast<int64_t>(table.begin[g]) + r0;
  const float* xg = x + first * p.k;
  const uintptr_t base = table.base[g];
  extern __shared__ float4 quant_smem[];
  float* xs = reinterpret_cast<float*>(quant_smem);
  const int lane = threadIdx.x & 31;
  const bool vec = p.group % 32 == 0 && (base + p.a.q) % 16 == 0 &&
                   (p.split == p.n || (base + p.b.q) % 16 == 0);
  const uint32_t group = static_cast<uint32_t>(p.group);
  const int64_t tiles = (p.n + kQuantRowsPerBlock - 1) / kQuantRowsPerBlock;
  // All of k in one chunk (decode): x is staged once for every tile of the
  // block (tiles grid-strided: gridDim.x may be below `tiles`).
  const bool one_chunk = p.k <= chunk;
  bool staged = false;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t j0 = tile * kQuantRowsPerBlock + (threadIdx.x >> 5) * kR;
    // Rows past n compute row n - 1 again and are not written: no branch.
    Int4Row row[kR];
#pragma unroll
    for (int i = 0; i < kR; ++i) row[i] = RowOf(base, p, min(j0 + i, p.n - 1));
    float acc[kR][M];
#pragma unroll
    for (int i = 0; i < kR; ++i) {
#pragma unroll
      for (int t = 0; t < M; ++t) acc[i][t] = 0.f;
    }
    for (int64_t c0 = 0; c0 < p.k; c0 += chunk) {
      const int cw = static_cast<int>(min(chunk, p.k - c0));
      if (vec) {
        const int64_t vbase = c0 / 32, vend = (c0 + cw) / 32;
        int64_t v = vbase + lane;
        // The first weights are in flight while x is staged.
        Int4Step cur;
        if (v < vend) cur = LoadInt4Step(row, v, group);
        if (!(one_chunk && staged)) {
          __syncthreads();  // The previous chunk is consumed.
          QuantStageX<M>(xg, p.k, rows, c0, cw, stride, xs);
          __syncthreads();
          staged = true;
        }
        for (; v < vend; v += 32) {
          Int4Step nxt;
          const bool more = v + 32 < vend;
          if (more) nxt = LoadInt4Step(row, v + 32, group);
          float sc[kR], mz[kR];
#pragma unroll
          for (int i = 0; i < kR; ++i) {
            sc[i] =
                Scale(static_cast<uint16_t>(cur.sz[i] & 0xffffu), p.f16_scales);
            mz[i] = kMagic + static_cast<float>(cur.sz[i] >> 16);
          }
          // Column (v - vbase) * 32 of the chunk: QuantPad gives 36 a vector.
          const float* xv = xs + static_cast<int>(v - vbase) * 36;
          float part[kR][M];
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            float w[kR][8];
#pragma unroll
            for (int i = 0; i < kR; ++i) {
              const uint32_t word = q == 0   ? cur.q[i].x
                                    : q == 1 ? cur.q[i].y
                                    : q == 2 ? cur.q[i].z
                                             : cur.q[i].w;
              const uint32_t lo = word & 0x0f0f0f0fu;
              const uint32_t hi = (word >> 4) & 0x0f0f0f0fu;
#pragma unroll
              for (int b = 0; b < 4; ++b) {
                w[i][2 * b] = __fsub_rn(Magic(lo, b), mz[i]);
                w[i][2 * b + 1] = __fsub_rn(Magic(hi, b), mz[i]);
              }
            }
#pragma unroll
            for (int t = 0; t < M; ++t) {
              const float4 a =
                  *reinterpret_cast<const float4*>(xv + t * stride + 8 * q);
              const float4 c =
                  *reinterpret_cast<const float4*>(xv + t * stride + 8 * q + 4);
              const float xe[8] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
#pragma unroll
              for (int i = 0; i < kR; ++i) {
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                  part[i][t] = (q == 0 && e == 0)
                                   ? __fmul_rn(xe[0], w[i][0])
                                   : __fmaf_rn(xe[e], w[i][e], part[i][t]);
                }
              }
            }
          }
#pragma unroll
          for (int i = 0; i < kR; ++i) {
#pragma unroll
            for (int t = 0; t < M; ++t) {
              acc[i][t] = __fmaf_rn(part[i][t], sc[i], acc[i][t]);
            }
          }
          if (more) cur = nxt;
        }
      } else {
        if (!(one_chunk && staged)) {
          __syncthreads();  // The previous chunk is consumed.
          QuantStageX<M>(xg, p.k, rows, c0, cw, stride, xs);
          __syncthreads();
          staged = true;
        }
        for (int64_t b = c0 / 2 + lane; b < (c0 + cw) / 2; b += 32) {
          const int c =
              static_cast<int>(2 * b - c0);  // Even: c, c + 1 pad alike.
          const uint32_t gi = static_cast<uint32_t>(2 * b) / group;
#pragma unroll
          for (int i = 0; i < kR; ++i) {
            const uint32_t byte = row[i].q[b];
            const float s = Scale(row[i].s[gi], p.f16_scales);
            const int z = row[i].z != nullptr ? row[i].z[gi] : 8;
            const float mz = kMagic + static_cast<float>(z);
            const float w0 = __fmul_rn(
                __fsub_rn(__uint_as_float(0x4B000000u | (byte & 0xfu)), mz), s);
            const float w1 = __fmul_rn(
                __fsub_rn(__uint_as_float(0x4B000000u | (byte >> 4)), mz), s);
#pragma unroll
            for (int t = 0; t < M; ++t) {
              const float* xr = xs + t * stride + QuantPad(c);
              acc[i][t] = __fmaf_rn(xr[1], w1, __fmaf_rn(xr[0], w0, acc[i][t]));
            }
          }
        }
      }
    }
    QuantWriteRows<kR, M>(acc, lane, rows, j0, p.n, out + first * p.n, p.n);
  }
}

}  // namespace

int LaunchGemvInt4(const float* x, const Int4GemvSpec& spec,
                   const QuantGroup* groups, int64_t num_groups, float* out,
                   Strm stream) {
  return LaunchQuantGroups<Int4GemvSpec>(
      GemvInt4Kernel<1>, GemvInt4Kernel<2>, GemvInt4Kernel<4>,
      GemvInt4Kernel<8>, spec, groups, num_groups, x, out, stream);
}

int LaunchMatMulInt4(const float* x, int64_t m, int64_t k, const uint8_t* wq,
                     const uint16_t* scales, bool f16_scales,
                     const uint8_t* zeros, int64_t group, int64_t n, float* out,
                     Strm stream) {
  Int4GemvSpec spec;
  spec.k = k;
  spec.n = n;
  spec.split = n;
  spec.group = group;
  spec.f16_scales = f16_scales;
  spec.zeros = zeros != nullptr;
  // Absolute addresses: the group's base is 0.
  spec.a = {static_cast<int64_t>(reinterpret_cast<uintptr_t>(wq)),
            static_cast<int64_t>(reinterpret_cast<uintptr_t>(scales)),
            static_cast<int64_t>(reinterpret_cast<uintptr_t>(zeros))};
  const QuantGroup one{nullptr, 0, m};
  return LaunchGemvInt4(x, spec, &one, 1, out, stream);
}

}  // namespace moeserve::kernels::cuda
