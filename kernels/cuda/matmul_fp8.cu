// Dequantising fp8 (e4m3fn) GEMV (LaunchGemvFp8, LaunchMatMulFp8; see
// launchers.h for the format and quant_gemv.cuh for the block shape): the
// experts of an FP8 checkpoint computed from their FP8 bytes, one expert or a
// layer's experts per launch. A decode step is bound by weight reads, and fp8
// reads half the bytes of bf16.
//
// Each weight is the CPU's dequantised value, decode(q) * scale rounded once
// (__fmul_rn: never fused into the accumulation). Vector path (16 | k,
// 16 | tile_cols, bytes 16-byte aligned): a lane loads 16 bytes (16 columns,
// one scale) of each of its weight rows per step, the next step's already in
// flight; e4m3 pairs -> half2 (exact) -> float2. Scalar path (any shape): a
// lane takes one column at a time.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/quant_gemv.cuh"

namespace moeserve::kernels::cuda {
namespace {

constexpr int kR = kQuantRowsPerWarp;

// The four e4m3 codes of a 32-bit word (low byte first) as floats, exact
// (e4m3 -> fp16 is exact, NaN codes give NaN; fp16 -> fp32 is exact).
__device__ __forceinline__ void Decode4(uint32_t word, float* w) {
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

// One weight row: its bytes, its row of the scale grid and the tile width.
struct Fp8Row {
  const uint8_t* q;
  const float* s;
  uint32_t tile_cols;
};

__device__ __forceinline__ Fp8Row RowOf(uintptr_t base, const Fp8GemvSpec& p,
                                        int64_t j) {
  const bool in_a = j < p.split;
  const Fp8PartRef& part = in_a ? p.a : p.b;
  const int64_t row = in_a ? j : j - p.split;
  const int64_t scale_cols = (p.k + part.tile_cols - 1) / part.tile_cols;
  Fp8Row r;
  r.q = reinterpret_cast<const uint8_t*>(base + part.q) + row * p.k;
  r.s = reinterpret_cast<const float*>(base + part.scales) +
        (row / part.tile_rows) * scale_cols;
  // Above 2^31 one tile covers any row this kernel can be given.
  r.tile_cols = static_cast<uint32_t>(
      part.tile_cols < (int64_t{1} << 31) ? part.tile_cols : int64_t{1} << 31);
  return r;
}

// One step of a lane on the vector path: the 16 bytes of vector v of each of
// its rows and their scale, loaded a step ahead of their use.
struct Fp8Step {
  uint4 q[kR];
  float s[kR];
};

__device__ __forceinline__ Fp8Step LoadFp8Step(const Fp8Row (&row)[kR],
                                               int64_t v) {
  Fp8Step st;
#pragma unroll
  for (int i = 0; i < kR; ++i) {
    st.q[i] = __ldg(reinterpret_cast<const uint4*>(row[i].q) + v);
    st.s[i] =
        __ldg(row[i].s + static_cast<uint32_t>(v * 16) / row[i].tile_cols);
  }
  return st;
}

// blockIdx.y: the group; blockIdx.z: M of its rows; blockIdx.x: tiles of
// kQuantRowsPerBlock weight rows, grid-strided. x staged `chunk` columns at
// a time in rows of `stride` floats.
template <int M>
__global__ void __launch_bounds__(kQuantThreads)
    GemvFp8Kernel(QuantGroupTable table, Fp8GemvSpec p, const float* x,
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
  const bool vec =
      p.k % 16 == 0 && p.a.tile_cols % 16 == 0 && (base + p.a.q) % 16 == 0 &&
      (p.split == p.n || (p.b.tile_cols % 16 == 0 && (base + p.b.q) % 16 == 0));
  const int64_t tiles = (p.n + kQuantRowsPerBlock - 1) / kQuantRowsPerBlock;
  // All of k in one chunk (decode): x is staged once for every tile of the
  // block (tiles grid-strided: gridDim.x may be below `tiles`).
  const bool one_chunk = p.k <= chunk;
  bool staged = false;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t j0 = tile * kQuantRowsPerBlock + (threadIdx.x >> 5) * kR;
    // Rows past n compute row n - 1 again and are not written: no branch.
    Fp8Row row[kR];
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
        const int64_t vbase = c0 / 16, vend = (c0 + cw) / 16;
        int64_t v = vbase + lane;
        // The first weights are in flight while x is staged.
        Fp8Step cur;
        if (v < vend) cur = LoadFp8Step(row, v);
        if (!(one_chunk && staged)) {
          __syncthreads();  // The previous chunk is consumed.
          QuantStageX<M>(xg, p.k, rows, c0, cw, stride, xs);
          __syncthreads();
          staged = true;
        }
        for (; v < vend; v += 32) {
          Fp8Step nxt;
          const bool more = v + 32 < vend;
          if (more) nxt = LoadFp8Step(row, v + 32);
          const int c = static_cast<int>(v - vbase) * 16;  // In the chunk.
          const float* xv = xs + QuantPad(c);  // 16 columns, one 32-block.
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            float w[kR][4];
#pragma unroll
            for (int i = 0; i < kR; ++i) {
              const uint32_t word = q == 0   ? cur.q[i].x
                                    : q == 1 ? cur.q[i].y
                                    : q == 2 ? cur.q[i].z
                                             : cur.q[i].w;
              Decode4(word, w[i]);
#pragma unroll
              for (int e = 0; e < 4; ++e)
                w[i][e] = __fmul_rn(w[i][e], cur.s[i]);
            }
#pragma unroll
            for (int t = 0; t < M; ++t) {
              const float4 a =
                  *reinterpret_cast<const float4*>(xv + t * stride + 4 * q);
              const float xe[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
              for (int i = 0; i < kR; ++i) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                  acc[i][t] = __fmaf_rn(xe[e], w[i][e], acc[i][t]);
                }
              }
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
        for (int64_t c = c0 + lane; c < c0 + cw; c += 32) {
          const int pc = QuantPad(static_cast<int>(c - c0));
#pragma unroll
          for (int i = 0; i < kR; ++i) {
            const float w = __fmul_rn(
                Decode1(row[i].q[c]),
                row[i].s[static_cast<uint32_t>(c) / row[i].tile_cols]);
#pragma unroll
            for (int t = 0; t < M; ++t) {
              acc[i][t] = __fmaf_rn(xs[t * stride + pc], w, acc[i][t]);
            }
          }
        }
      }
    }
    QuantWriteRows<kR, M>(acc, lane, rows, j0, p.n, out + first * p.n, p.n);
  }
}

}  // namespace

int LaunchGemvFp8(const float* x, const Fp8GemvSpec& spec,
                  const QuantGroup* groups, int64_t num_groups, float* out,
                  Strm stream) {
  return LaunchQuantGroups<Fp8GemvSpec>(
      GemvFp8Kernel<1>, GemvFp8Kernel<2>, GemvFp8Kernel<4>, GemvFp8Kernel<8>,
      spec, groups, num_groups, x, out, stream);
}

int LaunchMatMulFp8(const float* x, int64_t m, int64_t k, const uint8_t* wq,
                    const float* scales, int64_t tile_rows, int64_t tile_cols,
                    int64_t n, float* out, Strm stream) {
  Fp8GemvSpec spec;
  spec.k = k;
  spec.n = n;
  spec.split = n;
  // Absolute addresses: the group's base is 0.
  spec.a = {static_cast<int64_t>(reinterpret_cast<uintptr_t>(wq)),
            static_cast<int64_t>(reinterpret_cast<uintptr_t>(scales)),
            tile_rows, tile_cols};
  const QuantGroup one{nullptr, 0, m};
  return LaunchGemvFp8(x, spec, &one, 1, out, stream);
}

}  // namespace moeserve::kernels::cuda
