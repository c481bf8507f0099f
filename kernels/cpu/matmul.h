// The bf16-weight matrix multiply behind MatMul and ExpertFfn: the hot op of
// decoding (memory-bound on the weight bytes for small m) and of prefill,
// batched decode and speculative verification (compute-bound for large m).
//
//   y[m, n] = x[m, k] * W[n, k]^T (+ bias[n])     x, y fp32; W, bias bf16
//
// Strategy: the thread pool splits n (in tiles of 4 weight rows; 16 for
// kAmxBf16). Each thread walks its weight rows once per block of rows of x,
// so for decode-sized m every weight byte comes from DRAM exactly once and
// the other rows of x reuse it from L1/L2. Variants (`Isa`), chosen at run
// time, never by -m flags:
//   kScalar      portable fallback, fp32 accumulation.
//   kAvx2        AVX2+FMA: register tiles of 2 rows of x by 4 weight rows,
//                8 lanes, bf16 -> fp32 by a 16-bit shift; row block 16.
//   kAvx512      AVX-512F/BW/VL: register tiles of 6 rows of x by 4 weight
//                rows (24 zmm accumulators), 16 lanes over k, the weights
//                widened to fp32 in registers once per tile and reused by
//                the 6 rows; the rows of x blocked so a block stays in L2
//                (GemmRowBlock) while the 4-row weight panel stays in L1;
//                k tails by masked loads; a 4-way horizontal sum per output
//                quad. The first row tile of a block prefetches the next
//                panel into L2 (the m = 1 GEMV is bound by lines in flight,
//                not by arithmetic). Products and sums in fp32: same
//                semantics as kAvx2, only the summation order differs.
//   kAvx512Bf16  AVX512_BF16 (vdpbf16ps): as kAvx512 with 32 bf16 pairs per
//                instruction, but x is first rounded to bf16 (round to
//                nearest even): each product carries x's rounding error
//                (<= 2^-8 relative, ~2^-9 typical), so results differ from
//                the fp32 variants by ~1e-3 of the output scale on random
//                data. Products are exact and sums fp32.
//   kAmxBf16     + AMX-TILE/AMX-BF16 (matmul_amx.h): 16 x 16 fp32 tiles of
//                the transposed product by TDPBF16PS, weights read in place
//                as the A operand, x rounded to bf16 as kAvx512Bf16 and packed
//                once per call; every m (small m and the m tail padded with
//                zero rows). Same rounding of x as kAvx512Bf16, products
//                exact, the tile's own fp32 summation order: results differ
//                from kAvx512Bf16 by fp32 summation only (~1e-6).
// Within one variant a row's result does not depend on m, on the other rows,
// on the row block or tile that computed it, nor on the thread count: each
// output is one accumulator per lane over k in a fixed order, then a fixed
// reduction (decode, batched decode and verification agree bit for bit).
//
// Thread safety: pure functions; concurrent calls on distinct outputs are fine.
#ifndef MOESERVE_KERNELS_CPU_MATMUL_H_
#define MOESERVE_KERNELS_CPU_MATMUL_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "kernels/cpu/thread_pool.h"
#include "kernels/tensor.h"

namespace moeserve::kernels::cpu {

// Instruction-set variant of the CPU kernels, in increasing order: each needs
// the CPU features of the ones before it. kAvx512 (AVX-512F+BW+VL, AVX2, FMA)
// is also the int4 kernel's AVX-512 level (matmul_int4.h; it needs only
// AVX-512F); kAvx512Bf16 adds AVX512_BF16 (the bf16 kernels' vdpbf16ps
// variant, and the int4 kernels' own, matmul_int4.h; the fp8 kernels run
// their kAvx512 code under it). kAmxBf16 adds
// AMX-TILE + AMX-BF16 and the kernel's permission to use the tile data
// (arch_prctl, asked once per process: IsaSupported is false without it).
enum class Isa { kScalar, kAvx2, kAvx512, kAvx512Bf16, kAmxBf16 };

// The default variant of the bf16 kernels on this CPU (checked once, at first
// call): the best one with fp32 semantics, kAvx512, else kAvx2, else
// kScalar. kAvx512Bf16 and kAmxBf16 are never the default because they round
// x to bf16; ask for them by name (CpuBackendOptions::isa,
// MOESERVE_CPU_KERNELS).
Isa BestIsa();
// Whether this CPU has what the bf16 kernels of `isa` need.
bool IsaSupported(Isa isa);
// The highest variant <= `want` that this CPU supports.
Isa ClampIsa(Isa want);
// "scalar", "avx2", "avx512", "avx512bf16", "amxbf16".
const char* IsaName(Isa isa);
// The inverse of IsaName; nullopt for any other string.
std::optional<Isa> ParseIsa(std::string_view name);

// Rows of x that share one pass over the weights in the kAvx2 and kScalar
// kernels (the AVX-512 ones size their blocks by k: GemmRowBlock).
inline constexpr int64_t kRowBlock = 16;

// REQUIRES: shapes as above, all pointers valid (bias may be null), y does
// not overlap the inputs, IsaSupported(isa).
void MatMulBf16(ThreadPool& pool, Isa isa, const float* x, int64_t m, int64_t k,
                const bf16* w, int64_t n, const bf16* bias, float* y);

}  // namespace moeserve::kernels::cpu

#endif  // MOESERVE_KERNELS_CPU_MATMUL_H_
