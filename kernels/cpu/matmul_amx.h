// The AMX-BF16 variant of the bf16 matmul (Isa::kAmxBf16, matmul.h): tile
// matrix multiplies (TDPBF16PS) on x rounded to bf16, for every m.
//
// Internal to kernels/cpu: MatMulBf16 calls it after IsaSupported(kAmxBf16).
// It lives in its own translation unit (and cc_library) because that one is
// compiled with -mamx-tile -mamx-bf16: those flags only let the tile
// intrinsics compile (the compiler never emits tile instructions on its
// own), and the AVX-512 code around them uses target attributes like
// matmul.cc. A TU compiled with -mavx512f would be unsafe: the inline
// functions it instantiates (std::vector, ...) are COMDAT, and the linker may
// pick its AVX-512 copy for the portable code of an AVX2-only CPU.
#ifndef MOESERVE_KERNELS_CPU_MATMUL_AMX_H_
#define MOESERVE_KERNELS_CPU_MATMUL_AMX_H_

#include <cstdint>

#include "kernels/cpu/thread_pool.h"
#include "kernels/tensor.h"

namespace moeserve::kernels::cpu {

// Whether AMX-BF16 tiles can run in this process: the CPU has AMX-TILE and
// AMX-BF16 (CPUID), the OS enabled the tile state (XCR0), and the kernel
// granted this process the tile data (arch_prctl(ARCH_REQ_XCOMP_PERM), asked
// once per process; Linux >= 5.16). False off x86-64.
bool AmxBf16Usable();

// y[m, n] = bf16(x)[m, k] * W[n, k]^T (+ bias), as MatMulBf16.
// REQUIRES: AmxBf16Usable() and AVX-512F/BW/VL + AVX512_BF16 (every AMX CPU
// has them), shapes and pointers as MatMulBf16, m, n, k > 0.
void MatMulAmxBf16(ThreadPool& pool, const float* x, int64_t m, int64_t k,
                   const bf16* w, int64_t n, const bf16* bias, float* y);

}  // namespace moeserve::kernels::cpu

#endif  // MOESERVE_KERNELS_CPU_MATMUL_AMX_H_
