// CUDA kernels of CudaBackend: simple, correct first versions (see README.md
// for what is untested). One launcher per op, declared in launchers.h.
#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/gemv_bf16.cuh"
#include "kernels/cuda/launchers.h"

namespace moeserve::kernels::cuda {
namespace {

constexpr int kBlock = 256;

__device__ float BlockSum(float v) { return BlockReduce<kBlock>(v, SumOp{}); }
__device__ float BlockMax(float v) { return BlockReduce<kBlock>(v, MaxOp{}); }

int Blocks(int64_t count) {
  const int64_t b = (count + kBlock - 1) / kBlock;
  return static_cast<int>(b < 65535 * 32 ? (b < 1 ? 1 : b) : 65535 * 32);
}

__global__ void EmbeddingKernel(const int32_t* ids, const uint16_t* table,
                                int64_t vocab, int64_t d, float* out) {
  const int64_t i = blockIdx.x;
  const int32_t id = ids[i];
  const bool ok = id >= 0 && id < vocab;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    out[i * d + j] = ok ? Bf16(table[id * d + j]) : 0.f;
  }
}

__global__ void RmsNormKernel(const float* x, int64_t d, const uint16_t* w,
                              float eps, float* out) {
  const float* xi = x + blockIdx.x * d;
  float* oi = out + blockIdx.x * d;
  float ss = 0.f;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) ss += xi[j] * xi[j];
  ss = BlockSum(ss);
  const float inv = rsqrtf(ss / static_cast<float>(d) + eps);
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    oi[j] = xi[j] * inv * Bf16(w[j]);
  }
}

// One warp per output column j (a row of W): gemv_bf16.cuh.
__global__ void GemvBf16Kernel(const float* x, int64_t m, int64_t k,
                               const uint16_t* w, int64_t n,
                               const uint16_t* bias, float* out) {
  const int lane = threadIdx.x & 31;
  const int64_t j =
      (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (j >= n) return;
  const float b = bias != nullptr ? Bf16(bias[j]) : 0.f;
  GemvBf16Column(x, m, k, w + j * k, GemvBf16Vectorized(x, w, k), b, lane,
                 out + j, n);
}

__global__ void RopeKernel(float* x, int64_t n, int64_t heads, int64_t hd,
                           const int32_t* positions, float theta) {
  const int64_t half = hd / 2;
  const int64_t total = n * heads * half;
  for (int64_t idx =
           blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       idx < total; idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx % half;
    const int64_t th = idx / half;  // token * heads + head
    const int64_t t = th / heads;
    // As HF (and the CPU backend): inv_freq and the angle rounded to fp32,
    // the rotation in double.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(hd);
    const float inv_freq =
        1.0f / static_cast<float>(pow(static_cast<double>(theta),
                                      static_cast<double>(exponent)));
    const float angle = static_cast<float>(positions[t]) * inv_freq;
    double s, c;
    sincos(static_cast<double>(angle), &s, &c);
    float* v = x + th * hd;
    const double a = v[i], b = v[i + half];
    v[i] = static_cast<float>(a * c - b * s);
    v[i + half] = static_cast<float>(b * c + a * s);
  }
}

__global__ void KvWriteKernel(const float* k, const float* v, int64_t n,
                              int64_t row, const int32_t* slots,
                              int64_t num_slots, float* k_pool, float* v_pool) {
  const int64_t total = n * row;
  for (int64_t idx =
           blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       idx < total; idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx / row, e = idx % row;
    const int32_t slot = slots[i];
    if (slot < 0 || slot >= num_slots) continue;
    k_pool[slot * row + e] = k[idx];
    v_pool[slot * row + e] = v[idx];
  }
}

// One warp per (query, head); each lane owns head-dim elements lane, lane+32,
// ...; online softmax over the query's causal prefix, one key at a time.
constexpr int kPerLane = kMaxHeadDim / 32;
__global__ void PagedAttentionKernel(const float* q, int64_t n_q, int64_t heads,
                                     int64_t kv_heads, int64_t hd,
                                     const float* k_pool, const float* v_pool,
                                     int64_t num_blocks, int64_t block_size,
                                     const int32_t* query_start,
                                     int64_t num_seqs, const int32_t* positions,
                                     const int32_t* block_tables,
                                     int64_t max_blocks, float* out) {
  const int lane = threadIdx.x & 31;
  const int64_t w =
      (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (w >= n_q * heads) return;
  const int64_t r = w / heads, h = w % heads;
  int64_t seq = 0;
  while (seq + 1 < num_seqs && query_start[seq + 1] <= r) ++seq;
  const int64_t kvh = h / (heads / kv_heads);
  const float scale = rsqrtf(static_cast<float>(hd));
  float qv[kPerLane], acc[kPerLane];
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    const int64_t e = lane + 32 * t;
    qv[t] = e < hd ? q[(r * heads + h) * hd + e] : 0.f;
    acc[t] = 0.f;
  }
  float mx = -INFINITY, denom = 0.f;
  const int64_t pos = positions[r];
  const int32_t* table = block_tables + seq * max_blocks;
  for (int64_t p = 0; p <= pos && p < max_blocks * block_size; ++p) {
    const int32_t blk = table[p / block_size];
    if (blk < 0 || blk >= num_blocks) continue;
    const int64_t base =
        ((static_cast<int64_t>(blk) * block_size + p % block_size) * kv_heads +
         kvh) *
        hd;
    float dot = 0.f;
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) {
      const int64_t e = lane + 32 * t;
      if (e < hd) dot += qv[t] * k_pool[base + e];
    }
    const float s = WarpSum(dot) * scale;
    const float new_mx = fmaxf(mx, s);
    const float corr = expf(mx - new_mx);  // 0 on the first key.
    const float pw = expf(s - new_mx);
    denom = denom * corr + pw;
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) {
      const int64_t e = lane + 32 * t;
      if (e < hd) acc[t] = acc[t] * corr + pw * v_pool[base + e];
    }
    mx = new_mx;
  }
  const float inv = denom > 0.f ? 1.f / denom : 0.f;
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    const int64_t e = lane + 32 * t;
    if (e < hd) out[(r * heads + h) * hd + e] = acc[t] * inv;
  }
}

// One thread per row: E <= a few hundred and k small in every target model.
__global__ void RouterTopKKernel(const float* logits, int64_t n, int64_t e,
                                 int k, bool normalize, float* weights,
                                 int32_t* ids) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= n) return;
  const float* l = logits + t * e;
  float mx = -INFINITY;
  for (int64_t j = 0; j < e; ++j) mx = fmaxf(mx, l[j]);
  float sum = 0.f;
  for (int64_t j = 0; j < e; ++j) sum += expf(l[j] - mx);
  int32_t picked[kMaxTopK];
  float picked_sum = 0.f;
  for (int s = 0; s < k; ++s) {
    int64_t best = -1;
    for (int64_t j = 0; j < e; ++j) {
      bool taken = false;
      for (int q = 0; q < s; ++q) taken |= picked[q] == j;
      if (taken) continue;
      // Strictly greater: ties keep the lower index. Compare logits (softmax
      // is monotonic) so equal logits tie exactly.
      if (best < 0 || l[j] > l[best]) best = j;
    }
    picked[s] = static_cast<int32_t>(best);
    const float p = expf(l[best] - mx) / sum;
    weights[t * k + s] = p;
    ids[t * k + s] = static_cast<int32_t>(best);
    picked_sum += p;
  }
  if (normalize) {
    for (int s = 0; s < k; ++s) weights[t * k + s] /= picked_sum;
  }
}

__global__ void SiluMulKernel(const float* gate, int64_t ldg, const float* up,
                              int64_t ldu, int64_t m, int64_t f, float* out) {
  const int64_t total = m * f;
  for (int64_t idx =
           blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       idx < total; idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx / f, j = idx % f;
    const float g = gate[i * ldg + j];
    out[idx] = g / (1.f + expf(-g)) * up[i * ldu + j];
  }
}

__global__ void AddKernel(const float* a, const float* b, int64_t count,
                          float* out) {
  for (int64_t idx =
           blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       idx < count; idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[idx] = a[idx] + b[idx];
  }
}

__global__ void GatherRowsKernel(const float* x, int64_t n, int64_t d,
                                 const int32_t* rows, float* out) {
  const int64_t i = blockIdx.x;
  const int32_t r = rows[i];
  const bool ok = r >= 0 && r < n;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    out[i * d + j] = ok ? x[r * d + j] : 0.f;
  }
}

__global__ void ScaleAddRowsKernel(const float* x, int64_t m, int64_t d,
                                   const int32_t* rows, const float* weights,
                                   float* y, int64_t n) {
  const int64_t total = m * d;
  for (int64_t idx =
           blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       idx < total; idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx / d, j = idx % d;
    const int64_t r = rows != nullptr ? rows[i] : i;
    if (r < 0 || r >= n) continue;
    atomicAdd(&y[r * d + j], weights[i] * x[idx]);
  }
}

__global__ void SigmoidGatedAddKernel(const float* x, int64_t n, int64_t d,
                                      const float* gate, float* y) {
  const int64_t total = n * d;
  for (int64_t idx =
           blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       idx < total; idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = gate[idx / d];
    y[idx] += x[idx] / (1.f + expf(-g));
  }
}

__global__ void SoftmaxKernel(const float* x, int64_t v, float* out) {
  const float* xi = x + blockIdx.x * v;
  float* oi = out + blockIdx.x * v;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) mx = fmaxf(mx, xi[j]);
  mx = BlockMax(mx);
  float sum = 0.f;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) sum += expf(xi[j] - mx);
  sum = BlockSum(sum);
  const float inv = 1.f / sum;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    oi[j] = expf(xi[j] - mx) * inv;
  }
}

// (value, index) pairs, larger value wins, ties to the lower index. NaN never
// wins (the reference returns 0 when x[0] is NaN; untested divergence).
__device__ __forceinline__ void ArgBetter(float& bv, int64_t& bi, float v,
                                          int64_t i) {
  const bool better = (v > bv) || (v == bv && i < bi);
  if (better) {
    bv = v;
    bi = i;
  }
}
__global__ void ArgmaxKernel(const float* x, int64_t v, int32_t* out) {
  __shared__ float sv[kBlock];
  __shared__ int64_t si[kBlock];
  const float* xi = x + blockIdx.x * v;
  float bv = -INFINITY;
  int64_t bi = v;  // Sentinel: worse than any real index on ties.
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x)
    ArgBetter(bv, bi, xi[j], j);
  sv[threadIdx.x] = bv;
  si[threadIdx.x] = bi;
  __syncthreads();
  for (int s = kBlock / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      float a = sv[threadIdx.x];
      int64_t ai = si[threadIdx.x];
      ArgBetter(a, ai, sv[threadIdx.x + s], si[threadIdx.x + s]);
      sv[threadIdx.x] = a;
      si[threadIdx.x] = ai;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0)
    out[blockIdx.x] = static_cast<int32_t>(si[0] < v ? si[0] : 0);
}

}  // namespace

int LaunchEmbedding(const int32_t* ids, int64_t n, const uint16_t* table,
                    int64_t vocab, int64_t d, float* out, Strm stream) {
  if (n == 0) return cudaSuccess;
  EmbeddingKernel<<<n, kBlock, 0, stream>>>(ids, table, vocab, d, out);
  return cudaGetLastError();
}

int LaunchRmsNorm(const float* x, int64_t n, int64_t d, const uint16_t* w,
                  float eps, float* out, Strm stream) {
  if (n == 0) return cudaSuccess;
  RmsNormKernel<<<n, kBlock, 0, stream>>>(x, d, w, eps, out);
  return cudaGetLastError();
}

int LaunchMatMulBf16(const float* x, int64_t m, int64_t k, const uint16_t* w,
                     int64_t n, const uint16_t* bias, float* out, Strm stream) {
  if (m == 0 || n == 0) return cudaSuccess;
  const int64_t threads = n * 32;
  GemvBf16Kernel<<<(threads + kBlock - 1) / kBlock, kBlock, 0, stream>>>(
      x, m, k, w, n, bias, out);
  return cudaGetLastError();
}

int LaunchRopeRotateHalf(float* x, int64_t n, int64_t heads, int64_t hd,
                         const int32_t* positions, float theta, Strm stream) {
  const int64_t total = n * heads * (hd / 2);
  if (total == 0) return cudaSuccess;
  RopeKernel<<<Blocks(total), kBlock, 0, stream>>>(x, n, heads, hd, positions,
                                                   theta);
  return cudaGetLastError();
}

int LaunchKvWrite(const float* k, const float* v, int64_t n, int64_t row,
                  const int32_t* slots, int64_t num_slots, float* k_pool,
                  float* v_pool, Strm stream) {
  if (n * row == 0) return cudaSuccess;
  KvWriteKernel<<<Blocks(n * row), kBlock, 0, stream>>>(
      k, v, n, row, slots, num_slots, k_pool, v_pool);
  return cudaGetLastError();
}

int LaunchPagedAttention(const float* q, int64_t n_q, int64_t heads,
                         int64_t kv_heads, int64_t hd, const float* k_pool,
                         const float* v_pool, int64_t num_blocks,
                         int64_t block_size, const int32_t* query_start,
                         int64_t num_seqs, const int32_t* positions,
                         const int32_t* block_tables, int64_t max_blocks,
                         float* out, Strm stream) {
  if (n_q * heads == 0) return cudaSuccess;
  const int64_t threads = n_q * heads * 32;
  PagedAttentionKernel<<<(threads + kBlock - 1) / kBlock, kBlock, 0, stream>>>(
      q, n_q, heads, kv_heads, hd, k_pool, v_pool, num_blocks, block_size,
      query_start, num_seqs, positions, block_tables, max_blocks, out);
  return cudaGetLastError();
}

int LaunchRouterTopK(const float* logits, int64_t n, int64_t e, int k,
                     bool normalize, float* weights, int32_t* ids,
                     Strm stream) {
  if (n == 0) return cudaSuccess;
  RouterTopKKernel<<<(n + 127) / 128, 128, 0, stream>>>(
      logits, n, e, k, normalize, weights, ids);
  return cudaGetLastError();
}

int LaunchSiluMul(const float* gate, int64_t ldg, const float* up, int64_t ldu,
                  int64_t m, int64_t f, float* out, Strm stream) {
  if (m * f == 0) return cudaSuccess;
  SiluMulKernel<<<Blocks(m * f), kBlock, 0, stream>>>(gate, ldg, up, ldu, m, f,
                                                      out);
  return cudaGetLastError();
}

int LaunchAdd(const float* a, const float* b, int64_t count, float* out,
              Strm stream) {
  if (count == 0) return cudaSuccess;
  AddKernel<<<Blocks(count), kBlock, 0, stream>>>(a, b, count, out);
  return cudaGetLastError();
}

int LaunchGatherRows(const float* x, int64_t n, int64_t d, const int32_t* rows,
                     int64_t m, float* out, Strm stream) {
  if (m == 0) return cudaSuccess;
  GatherRowsKernel<<<m, kBlock, 0, stream>>>(x, n, d, rows, out);
  return cudaGetLastError();
}

int LaunchScaleAddRows(const float* x, int64_t m, int64_t d,
                       const int32_t* rows, const float* weights, float* y,
                       int64_t n, Strm stream) {
  if (m * d == 0) return cudaSuccess;
  ScaleAddRowsKernel<<<Blocks(m * d), kBlock, 0, stream>>>(x, m, d, rows,
                                                           weights, y, n);
  return cudaGetLastError();
}

int LaunchSigmoidGatedAdd(const float* x, int64_t n, int64_t d,
                          const float* gate, float* y, Strm stream) {
  if (n * d == 0) return cudaSuccess;
  SigmoidGatedAddKernel<<<Blocks(n * d), kBlock, 0, stream>>>(x, n, d, gate, y);
  return cudaGetLastError();
}

int LaunchSoftmax(const float* x, int64_t n, int64_t v, float* out,
                  Strm stream) {
  if (n == 0) return cudaSuccess;
  SoftmaxKernel<<<n, kBlock, 0, stream>>>(x, v, out);
  return cudaGetLastError();
}

int LaunchArgmax(const float* x, int64_t n, int64_t v, int32_t* out,
                 Strm stream) {
  if (n == 0) return cudaSuccess;
  ArgmaxKernel<<<n, kBlock, 0, stream>>>(x, v, out);
  return cudaGetLastError();
}

}  // namespace moeserve::kernels::cuda
