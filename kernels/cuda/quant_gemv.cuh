// What the quantized GEMVs (matmul_int4.cu, matmul_fp8.cu) share: the
// block shape, the by-value group table, the x tile in shared memory and the
// warp reduction of the results (nvcc only).
//
// A block is kQuantWarps warps; each warp computes kQuantRowsPerWarp weight
// rows (output columns) for M token rows (M = 1, 2, 4 or 8, a template
// parameter: the rows of x share every weight load). x is staged once per
// block in shared memory, fp32, a chunk of columns at a time (all of k when
// it fits), so every warp of the block reads it from there. Per-row result
// independence: the fp32 operations a token row goes through do not depend
// on M, on the chunking, on the group or on the launch (each lane walks its
// columns in ascending order with explicit __fmaf_rn / __fmul_rn / __fsub_rn,
// then a fixed butterfly sum), so an expert's row computed in a grouped
// launch is bit for bit what the single-matrix launch gives it.
#ifndef MOESERVE_KERNELS_CUDA_QUANT_GEMV_CUH_
#define MOESERVE_KERNELS_CUDA_QUANT_GEMV_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launchers.h"

namespace moeserve::kernels::cuda {

inline constexpr int kQuantWarps = 8;
inline constexpr int kQuantThreads = 32 * kQuantWarps;
inline constexpr int kQuantRowsPerWarp = 2;
inline constexpr int kQuantRowsPerBlock = kQuantWarps * kQuantRowsPerWarp;

// The groups of one launch, by value (16 bytes a group: 2 KiB).
struct QuantGroupTable {
  uintptr_t base[kQuantGroupsPerLaunch];
  int32_t begin[kQuantGroupsPerLaunch];
  int32_t count[kQuantGroupsPerLaunch];
};

// Columns of x staged at a time for M token rows: multiples of 1024 (so a
// chunk starts at a multiple of 32 vectors of either format and every lane
// keeps its columns), at most ~45 KiB of shared memory with the padding.
template <int M>
constexpr int64_t QuantChunkCols() {
  return M == 1 ? 10240 : M == 2 ? 5120 : M == 4 ? 2048 : 1024;
}

// M = 1 stages all of k in one chunk up to this many columns (Mixtral's
// w2, k = 14336: 72 KiB of dynamic shared memory, opted in per launch).
inline constexpr int64_t kQuantWideCols = 16384;

// Shared-memory index of column c of a staged row: 4 floats of padding after
// every 32 columns, so the 16-byte x reads of 8 lanes (32 or 16 columns
// apart) fall in distinct banks.
__device__ __forceinline__ int QuantPad(int c) { return c + (c >> 5) * 4; }

// Floats of one staged row of cw columns (a multiple of 4: rows stay
// 16-byte aligned).
__host__ __device__ inline int QuantRowStride(int64_t cw) {
  const int64_t s = cw + ((cw + 31) >> 5) * 4;
  return static_cast<int>((s + 3) / 4 * 4);
}

// The chunk a launch of `kernel` stages for rows of k columns:
// QuantChunkCols<M>(), or all of k for M = 1 up to kQuantWideCols when the
// kernel may take that much dynamic shared memory (asked for at every such
// launch: the attribute is per device; the call does not touch a stream, so
// it is allowed while a stream is being captured). The result does not
// depend on the chunk (see the file comment).
template <int M, typename Kernel>
int64_t QuantChunkFor(Kernel* kernel, int64_t k) {
  const int64_t chunk = QuantChunkCols<M>();
  if (M != 1 || k <= chunk || k > kQuantWideCols) return chunk;
  const int bytes = static_cast<int>(sizeof(float) * QuantRowStride(k));
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           bytes) != cudaSuccess) {
    cudaGetLastError();  // Not the launch's error: the default chunk serves.
    return chunk;
  }
  return k;
}

// The number of token rows a launch takes together for groups of at most
// max_count rows: the smallest of 1, 2, 4, 8 not below it (8 above 8: more
// rows take more passes).
inline int QuantRowsFor(int64_t max_count) {
  return max_count <= 1 ? 1 : max_count <= 2 ? 2 : max_count <= 4 ? 4 : 8;
}

// Stages rows [0, rows) of x (row stride k) at columns [c0, c0 + cw) into
// xs (M rows of `stride` floats, QuantPad'd); rows in [rows, M) are zeros.
// Every thread of the block calls it.
template <int M>
__device__ __forceinline__ void QuantStageX(const float* x, int64_t k, int rows,
                                            int64_t c0, int cw, int stride,
                                            float* xs) {
  const bool vec4 = (reinterpret_cast<uintptr_t>(x) % 16 == 0) &&
                    (k % 4 == 0) && (c0 % 4 == 0) && (cw % 4 == 0);
  if (vec4) {
    const int per_row = cw / 4;
    for (int i = threadIdx.x; i < M * per_row; i += blockDim.x) {
      const int t = i / per_row, c = (i - t * per_row) * 4;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (t < rows) {
        v = __ldg(reinterpret_cast<const float4*>(x + t * k + c0 + c));
      }
      *reinterpret_cast<float4*>(xs + t * stride + QuantPad(c)) = v;
    }
  } else {
    for (int i = threadIdx.x; i < M * cw; i += blockDim.x) {
      const int t = i / cw, c = i - t * cw;
      xs[t * stride + QuantPad(c)] = t < rows ? __ldg(x + t * k + c0 + c) : 0.f;
    }
  }
}

// The warp sums of acc[i][t] (weight row j0 + i, token row t), written by
// lane 0 to out[t * ldo + j0 + i] for rows t < rows and j < n.
template <int R, int M>
__device__ __forceinline__ void QuantWriteRows(float (&acc)[R][M], int lane,
                                               int rows, int64_t j0, int64_t n,
                                               float* out, int64_t ldo) {
#pragma unroll
  for (int i = 0; i < R; ++i) {
#pragma unroll
    for (int t = 0; t < M; ++t) {
      const float s = WarpSum(acc[i][t]);
      if (lane == 0 && t < rows && j0 + i < n) out[t * ldo + j0 + i] = s;
    }
  }
}

// Blocks along x for `tiles` tiles of weight rows in a launch of `used`
// groups x `passes` row passes: at most 4 per SM over the whole grid (each
// block stages x once and grid-strides over its tiles), at least 1.
inline int64_t QuantBlocksX(int64_t tiles, int used, int64_t passes) {
  static const int sms = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) !=
            cudaSuccess ||
        v <= 0) {
      cudaGetLastError();  // Not the next launch's error.
      v = 132;
    }
    return v;
  }();
  const int64_t per_group = used * passes;
  const int64_t want = (int64_t{4} * sms + per_group - 1) / per_group;
  return want < 1 ? 1 : want < tiles ? want : tiles;
}

// Fills `table` with the next groups from groups[*g] on that have rows and
// take `m` rows at a time (QuantRowsFor(count) == m); returns how many it
// took (0: none left) and their largest row count. Launching each m apart
// keeps a group of 1 or 2 rows from paying for 8 (rows are bit for bit the
// same whatever m: the file comment).
inline int QuantNextTable(const QuantGroup* groups, int64_t num_groups, int m,
                          int64_t* g, QuantGroupTable* table,
                          int64_t* max_count) {
  int used = 0;
  *max_count = 0;
  for (; *g < num_groups && used < kQuantGroupsPerLaunch; ++*g) {
    const QuantGroup& q = groups[*g];
    if (q.count <= 0 || QuantRowsFor(q.count) != m) continue;
    table->base[used] = reinterpret_cast<uintptr_t>(q.base);
    table->begin[used] = static_cast<int32_t>(q.begin);
    table->count[used] = static_cast<int32_t>(q.count);
    if (q.count > *max_count) *max_count = q.count;
    ++used;
  }
  return used;
}

// A quantized GEMV kernel (one per weight format, templated on the rows M
// a warp takes at a time): GemvInt4Kernel<M>, GemvFp8Kernel<M>.
template <typename Spec>
using QuantGemvKernel = void(QuantGroupTable, Spec, const float*, float*,
                             int64_t, int);

// One launch of `kernel` (taking M rows at a time) over the `used` groups
// of `table`: x staged in chunks that fit shared memory (QuantChunkFor),
// the grid sized by QuantBlocksX.
template <int M, typename Spec>
int LaunchQuantTable(QuantGemvKernel<Spec>* kernel,
                     const QuantGroupTable& table, int used, int64_t max_count,
                     const Spec& p, const float* x, float* out, Strm stream) {
  const int64_t chunk = QuantChunkFor<M>(kernel, p.k);
  const int stride = QuantRowStride(p.k < chunk ? p.k : chunk);
  const size_t smem = sizeof(float) * M * stride;
  const int64_t passes = (max_count + M - 1) / M;
  const dim3 grid(
      static_cast<unsigned>(QuantBlocksX(
          (p.n + kQuantRowsPerBlock - 1) / kQuantRowsPerBlock, used, passes)),
      static_cast<unsigned>(used), static_cast<unsigned>(passes));
  kernel<<<grid, kQuantThreads, smem, stream>>>(table, p, x, out, chunk,
                                                stride);
  return cudaGetLastError();
}

// Every group with rows through `kernels` (the format's kernel for M = 1,
// 2, 4, 8): for each M one launch per table of the groups that take M rows
// at a time (QuantNextTable), so a 1-row expert beside an 8-row one does
// not do 8 rows of work. The first CUDA error, else cudaSuccess.
template <typename Spec>
int LaunchQuantGroups(QuantGemvKernel<Spec>* k1, QuantGemvKernel<Spec>* k2,
                      QuantGemvKernel<Spec>* k4, QuantGemvKernel<Spec>* k8,
                      const Spec& spec, const QuantGroup* groups,
                      int64_t num_groups, const float* x, float* out,
                      Strm stream) {
  if (spec.n == 0) return cudaSuccess;
  for (const int m : {1, 2, 4, 8}) {
    int64_t g = 0, max_count = 0;
    QuantGroupTable table;
    while (const int used =
               QuantNextTable(groups, num_groups, m, &g, &table, &max_count)) {
      int e = cudaSuccess;
      switch (m) {
        case 1:
          e = LaunchQuantTable<1>(k1, table, used, max_count, spec, x, out,
                                  stream);
          break;
        case 2:
          e = LaunchQuantTable<2>(k2, table, used, max_count, spec, x, out,
                                  stream);
          break;
        case 4:
          e = LaunchQuantTable<4>(k4, table, used, max_count, spec, x, out,
                                  stream);
          break;
        default:
          e = LaunchQuantTable<8>(k8, table, used, max_count, spec, x, out,
                                  stream);
          break;
      }
      if (e != cudaSuccess) return e;
    }
  }
  return cudaSuccess;
}

}  // namespace moeserve::kernels::cuda

#endif  // MOESERVE_KERNELS_CUDA_QUANT_GEMV_CUH_
