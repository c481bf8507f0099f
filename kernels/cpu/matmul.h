// The bf16-weight matrix multiply behind MatMul and ExpertFfn: the hot op of
// decoding, memory-bound on the weight bytes for small m.
//
//   y[m, n] = x[m, k] * W[n, k]^T (+ bias[n])     x, y fp32; W, bias bf16
//
// Strategy: the thread pool splits n (in tiles of 4 weight rows); each thread
// walks its weight rows once per block of up to kRowBlock rows of x, so for
// decode-sized m every weight byte comes from DRAM exactly once and the other
// rows of x reuse it from L1/L2. The SIMD kernel (AVX2+FMA, bf16 -> fp32 by a
// 16-bit shift, no F16C needed) is chosen at runtime; the scalar kernel is the
// portable fallback. Accumulation is fp32 in both.
//
// Thread safety: pure functions; concurrent calls on distinct outputs are fine.
#ifndef MOESERVE_KERNELS_CPU_MATMUL_H_
#define MOESERVE_KERNELS_CPU_MATMUL_H_

#include <cstdint>

#include "kernels/cpu/thread_pool.h"
#include "kernels/tensor.h"

namespace moeserve::kernels::cpu {

// Instruction-set variant of the CPU kernels. kAvx512 (AVX-512F + AVX2 +
// FMA) has its own kernel only for int4 (matmul_int4.h); the bf16 kernels
// run their AVX2 code under it.
enum class Isa { kScalar, kAvx2, kAvx512 };

// The best variant of the bf16 kernels this CPU supports (checked once, at
// first call): kAvx2 or kScalar. See BestInt4Isa() for int4.
Isa BestIsa();
const char* IsaName(Isa isa);

// Rows of x that share one pass over the weights.
inline constexpr int64_t kRowBlock = 16;

// REQUIRES: shapes as above, all pointers valid (bias may be null), y does
// not overlap the inputs, isa supported by this CPU.
void MatMulBf16(ThreadPool& pool, Isa isa, const float* x, int64_t m, int64_t k,
                const bf16* w, int64_t n, const bf16* bias, float* y);

}  // namespace moeserve::kernels::cpu

#endif  // MOESERVE_KERNELS_CPU_MATMUL_H_
