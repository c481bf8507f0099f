// Device-side helpers shared by our .cu files (nvcc only; host C++ never
// includes this): bf16 decode and warp/block reductions.
#ifndef MOESERVE_KERNELS_CUDA_DEVICE_MATH_CUH_
#define MOESERVE_KERNELS_CUDA_DEVICE_MATH_CUH_

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace moeserve::kernels::cuda {

inline constexpr unsigned kFullWarp = 0xffffffffu;

// bf16 (raw bits) -> float is exact: the bits are the float's top half.
__device__ __forceinline__ float Bf16(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}

struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
  __device__ static float Identity() { return 0.f; }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
  __device__ static float Identity() { return -INFINITY; }
};

// Every lane of the warp gets op over the warp's 32 values.
template <typename Op>
__device__ __forceinline__ float WarpReduce(float v, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(kFullWarp, v, o));
  return v;
}

__device__ __forceinline__ float WarpSum(float v) {
  return WarpReduce(v, SumOp{});
}
__device__ __forceinline__ float WarpMax(float v) {
  return WarpReduce(v, MaxOp{});
}

// Every thread gets op over the block's values. REQUIRES: blockDim.x ==
// kThreads, a multiple of 32 and at most 1024, and every thread calls it.
template <int kThreads, typename Op>
__device__ float BlockReduce(float v, Op op) {
  __shared__ float part[kThreads / 32];
  __shared__ float total;
  v = WarpReduce(v, op);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float t = lane < kThreads / 32 ? part[lane] : Op::Identity();
    t = WarpReduce(t, op);
    if (lane == 0) total = t;
  }
  __syncthreads();
  const float r = total;
  __syncthreads();  // `total` is reused by the next call.
  return r;
}

}  // namespace moeserve::kernels::cuda

#endif  // MOESERVE_KERNELS_CUDA_DEVICE_MATH_CUH_
