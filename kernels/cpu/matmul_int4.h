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
// up to kRowBlock rows of x. Variants (`Isa`), chosen at run time, never by
// -m flags:
//   kScalar      portable fallback: weights dequantised exactly
//                ((u - z) * scale, z the group's zero point or 8, the scale
//                bf16 or fp16 decoded exactly once per group and row), fp32
//                products and sums.
//   kAvx2        AVX2+FMA (8 lanes): 16 nibbles at a time unpacked to fp32
//                and dequantised exactly by one FMA with the -z offset folded
//                in; fp32 FMA into the accumulators.
//   kAvx512      AVX-512F (16 lanes): a 16-entry table of the group's exact
//                weights (n - z) * scale per weight row, looked up with
//                vpermps by the nibbles shifted into place (no unpacking),
//                against x permuted once per call into the matching lane
//                order. Same semantics as kAvx2 (exact weights, fp32
//                products and sums); only the summation order differs.
//   kAvx512Bf16  AVX512_BF16 + AVX-512BW (vdpbf16ps, 32 products per
//                instruction): 64 nibbles (32 bytes) at a time widened to
//                16-bit lanes and turned into the exact bf16 values (u - z)
//                by vpermw from a table per zero point (with groups of 32
//                each step spans two groups: a masked vpermw looks the
//                second one up in its own table); x is first rounded to
//                bf16 (round to nearest even) and permuted into the
//                unpacking's lane order, once per call. Products x * (u - z)
//                are exact, summed in fp32 per group, then each group's sums
//                are scaled once (acc += scale * partial, fp32 FMA; the
//                scales decoded exactly, 16 at a time). So each product
//                carries x's rounding error (<= 2^-8 relative, ~2^-9
//                typical): results differ from the fp32 variants by ~1e-3 of
//                the output scale on random data, as MatMulBf16's
//                kAvx512Bf16, and from the reference fed the same rounded x
//                by fp32 summation only. Takes groups of 32, multiples of 64
//                and one group per row of a multiple of 32 (every group the
//                checkpoints and Int4GroupFor give but 16 and rows not a
//                multiple of 32); a matrix with other groups runs kAvx512.
//                The first row tile of a block prefetches the next weight
//                tile's nibbles (short rows otherwise wait on the L3 tile by
//                tile).
// The group columns the SIMD steps do not cover (kAvx2/kAvx512: past the
// last multiple of 16, only when group = k < 128) take a scalar tail.
// Within one variant a row's result does not depend on m, on the other rows,
// on the row block or tile that computed it, nor on the thread count (each
// output is a fixed sequence of vector operations over k, then a fixed
// reduction): decode, batched decode and verification agree bit for bit.
//
// Thread safety: pure functions; concurrent calls on distinct outputs are fine.
#ifndef MOESERVE_KERNELS_CPU_MATMUL_INT4_H_
#define MOESERVE_KERNELS_CPU_MATMUL_INT4_H_

#include <cstdint>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/int4_expert.h"

namespace moeserve::kernels::cpu {

// Whether this CPU has what the int4 kernel of `isa` needs: kAvx2 AVX2+FMA;
// kAvx512 AVX-512F as well; kAvx512Bf16 what IsaSupported(Isa::kAvx512Bf16)
// asks (AVX-512F/BW/VL, AVX512_BF16); never kAmxBf16 (no int4 AMX kernel).
bool Int4IsaSupported(Isa isa);
// The highest int4 variant <= `want` that this CPU supports (kAmxBf16 ->
// kAvx512Bf16 where the CPU has it).
Isa ClampInt4Isa(Isa want);
// The default int4 kernel on this CPU (checked once): the best one with fp32
// semantics, ClampInt4Isa(Isa::kAvx512). As for the bf16 kernels
// (BestIsa), kAvx512Bf16 is never the default because it rounds x to bf16;
// ask for it by name.
Isa BestInt4Isa();

// REQUIRES: x [m, a.cols] fp32; b null or b->cols == a.cols, b->group ==
// a.group, b->scale_type == a.scale_type and b->zeros null iff a.zeros is;
// a.group even, > 0, dividing a.cols; y [m, a.rows + (b ? b->rows : 0)] not
// overlapping the inputs; Int4IsaSupported(isa).
void MatMulInt4(ThreadPool& pool, Isa isa, const float* x, int64_t m,
                const Int4Matrix& a, const Int4Matrix* b, float* y);

}  // namespace moeserve::kernels::cpu

#endif  // MOESERVE_KERNELS_CPU_MATMUL_INT4_H_
