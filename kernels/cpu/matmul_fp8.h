// The fp8-weight matrix multiply behind CpuBackend::ExpertFfnFp8 (an FP8
// checkpoint's experts, kernels/fp8_expert.h):
//
//   y[m, n] = x[m, k] * dequant(W)[n, k]^T     x, y fp32; W e4m3fn + F32 scales
//
// W may be two fp8 matrices of the same shape and tile stacked (gate and up:
// rows [0, a.rows) from `a`, then b's), so one pass and one thread split serve
// both. Strategy as MatMulInt4: the thread pool splits the output columns
// (weight rows) in tiles of 4; each thread walks its weight rows once per
// block of up to kRowBlock rows of x. Each weight is dequantised to the fp32
// value of the reference, Fp8E4M3ToFloat(q) * scale rounded once, and
// accumulated with FMA in fp32.
//
// Decode: scalar through the 256-entry table (Fp8E4M3Table). SIMD through
// fp16: the sign-extended byte shifted left by 7 with bit 14 cleared is the
// fp16 number q * 2^-8 (e4m3's exponent field lands in the low 4 of fp16's
// 5, its subnormals on fp16 subnormals), NaN codes are replaced by an fp16
// NaN, F16C widens to fp32 exactly and one multiply by scale * 256 gives
// q * scale rounded once: the table's value bit for bit (scale * 256 is
// exact for |scale| < 2^120). AVX2+F16C: 16 weights a step; AVX-512F/BW:
// 32. The columns of a scale tile that are not a whole number of steps take
// a scalar tail.
//
// Thread safety: pure functions; concurrent calls on distinct outputs are fine.
#ifndef MOESERVE_KERNELS_CPU_MATMUL_FP8_H_
#define MOESERVE_KERNELS_CPU_MATMUL_FP8_H_

#include <cstdint>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/fp8_expert.h"

namespace moeserve::kernels::cpu {

// The best fp8 kernel this CPU supports (checked once): kAvx512 with
// AVX-512F/BW (+ AVX2, FMA, F16C), else kAvx2 with AVX2+FMA+F16C, else
// kScalar.
Isa BestFp8Isa();

// REQUIRES: x [m, a.cols] fp32; b null or b has a's cols, tile_rows and
// tile_cols; y [m, a.rows + (b ? b->rows : 0)] not overlapping the inputs;
// every scale finite with |scale| < 2^120; isa kScalar, kAvx2 or kAvx512
// and at most BestFp8Isa().
void MatMulFp8(ThreadPool& pool, Isa isa, const float* x, int64_t m,
               const Fp8Matrix& a, const Fp8Matrix* b, float* y);

}  // namespace moeserve::kernels::cpu

#endif  // MOESERVE_KERNELS_CPU_MATMUL_FP8_H_
