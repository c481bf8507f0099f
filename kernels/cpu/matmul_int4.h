// The int4-weight matrix multiply behind CpuBackend::ExpertFfnInt4 (a
// quantized draft model, kernels/int4_expert.h):
//
//   y[m, n] = x[m, k] * dequant(W)[n, k]^T     x, y fp32; W int4 + bf16 or
//                                              fp16 scales (+ zero points)
//
// W may be two int4 matrices of the same k stacked (gate and up: rows
// [0, a.rows) from `a`, then b's), so one pass and one thread split serve
// both. Strategy as MatMulBf16: the thread pool splits the output columns in
// tiles of 4 weight rows; each thread walks its weight rows once per block of
// up to kRowBlock rows of x. Weights dequantise exactly ((u - z) * scale, z
// the group's zero point or 8, the scale bf16 or fp16 decoded exactly once
// per group and row) and accumulate with FMA in fp32. AVX2+FMA (8 lanes): 16
// nibbles at a time unpacked to fp32 and dequantised by one FMA with the -z
// offset folded in. AVX-512F (16 lanes, where the CPU has it): a 16-entry
// table of the group's weights (n - z) * scale per weight row, looked up with
// vpermps by the nibbles shifted into place (no unpacking), against x permuted
// once per call into the matching lane order. The scalar kernel is the
// fallback. Columns of a group not a multiple of 16 (only when group = k < 128)
// take a scalar tail.
//
// Thread safety: pure functions; concurrent calls on distinct outputs are fine.
#ifndef MOESERVE_KERNELS_CPU_MATMUL_INT4_H_
#define MOESERVE_KERNELS_CPU_MATMUL_INT4_H_

#include <cstdint>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/int4_expert.h"

namespace moeserve::kernels::cpu {

// The best int4 kernel this CPU supports (checked once): kAvx512 with
// AVX-512F (+ AVX2/FMA), else kAvx2 with AVX2+FMA, else kScalar.
Isa BestInt4Isa();

// REQUIRES: x [m, a.cols] fp32; b null or b->cols == a.cols, b->group ==
// a.group, b->scale_type == a.scale_type and b->zeros null iff a.zeros is;
// a.group even, > 0, dividing a.cols; y [m, a.rows + (b ? b->rows : 0)] not
// overlapping the inputs; isa supported by this CPU (kAvx512 only if
// BestInt4Isa() is kAvx512).
void MatMulInt4(ThreadPool& pool, Isa isa, const float* x, int64_t m,
                const Int4Matrix& a, const Int4Matrix* b, float* y);

}  // namespace moeserve::kernels::cpu

#endif  // MOESERVE_KERNELS_CPU_MATMUL_INT4_H_
