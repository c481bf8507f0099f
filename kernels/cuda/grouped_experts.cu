// Kernels of CudaBackend::ExpertFfnGrouped and CombineExpertRows: a layer's
// experts in a constant number of launches, whatever the number of experts.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/gemv_bf16.cuh"
#include "kernels/cuda/launchers.h"

namespace moeserve::kernels::cuda {
namespace {

constexpr int kBlock = 256;
// Groups per launch: the table travels by value as a kernel parameter (no
// upload, no host buffer to keep alive), 12 bytes a group + the weights'
// pointers, well under the 4 KiB parameter limit of every CUDA version.
constexpr int kGroupsPerLaunch = 128;

struct GroupTable {
  const uint16_t* w[kGroupsPerLaunch];
  int32_t begin[kGroupsPerLaunch];
  int32_t count[kGroupsPerLaunch];
};

// blockIdx.y: the group; one warp per output column j of the group's
// weight [n, k] (at w_offset elements into its blob); rows
// [begin, begin + count) of x [R, k] in, the same rows of out [R, n] out.
__global__ void GroupedGemvBf16Kernel(GroupTable table, const float* x,
                                      int64_t k, int64_t w_offset, int64_t n,
                                      float* out) {
  const int g = blockIdx.y;
  const int lane = threadIdx.x & 31;
  const int64_t j =
      (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (j >= n) return;
  const uint16_t* w = table.w[g] + w_offset;
  const float* xg = x + static_cast<int64_t>(table.begin[g]) * k;
  // The alignment test of the whole-matrix GEMV on the same operands, so a
  // group computes exactly what LaunchMatMulBf16 computes for its expert.
  GemvBf16Column(xg, table.count[g], k, w + j * k, GemvBf16Vectorized(xg, w, k),
                 0.f, lane, out + static_cast<int64_t>(table.begin[g]) * n + j,
                 n);
}

// One thread per (token, column): the token's pairs in the order listed,
// each a rounded product then a rounded add (as ScaleAddRows' atomicAdd of
// weights[i] * x), so the sum does not depend on how experts were batched.
__global__ void CombineExpertRowsKernel(const float* x, int64_t pairs_total,
                                        int64_t d, const float* weights,
                                        const int32_t* pairs, int64_t n,
                                        int64_t k, float* y) {
  const int64_t total = n * d;
  for (int64_t idx =
           blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       idx < total; idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = idx / d, c = idx % d;
    float acc = y[idx];
    for (int64_t j = 0; j < k; ++j) {
      const int32_t p = pairs[t * k + j];
      if (p < 0 || p >= pairs_total) break;
      acc = __fadd_rn(acc, __fmul_rn(weights[p], x[p * d + c]));
    }
    y[idx] = acc;
  }
}

int Blocks(int64_t count) {
  const int64_t b = (count + kBlock - 1) / kBlock;
  return static_cast<int>(b < 65535 * 32 ? (b < 1 ? 1 : b) : 65535 * 32);
}

}  // namespace

int LaunchGroupedGemvBf16(const float* x, int64_t k, const GemvGroup* groups,
                          int64_t num_groups, int64_t w_offset, int64_t n,
                          float* out, Strm stream) {
  if (n == 0 || k == 0) return cudaSuccess;
  const int64_t threads = n * 32;
  const unsigned blocks_x =
      static_cast<unsigned>((threads + kBlock - 1) / kBlock);
  int64_t g = 0;
  while (g < num_groups) {
    GroupTable table;
    int used = 0;
    for (; g < num_groups && used < kGroupsPerLaunch; ++g) {
      if (groups[g].count == 0) continue;
      table.w[used] = groups[g].w;
      table.begin[used] = static_cast<int32_t>(groups[g].begin);
      table.count[used] = static_cast<int32_t>(groups[g].count);
      ++used;
    }
    if (used == 0) break;
    GroupedGemvBf16Kernel<<<dim3(blocks_x, used), kBlock, 0, stream>>>(
        table, x, k, w_offset, n, out);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

int LaunchCombineExpertRows(const float* x, int64_t pairs_total, int64_t d,
                            const float* weights, const int32_t* pairs,
                            int64_t n, int64_t k, float* y, Strm stream) {
  if (n * d == 0 || k == 0) return cudaSuccess;
  CombineExpertRowsKernel<<<Blocks(n * d), kBlock, 0, stream>>>(
      x, pairs_total, d, weights, pairs, n, k, y);
  return cudaGetLastError();
}

}  // namespace moeserve::kernels::cuda
