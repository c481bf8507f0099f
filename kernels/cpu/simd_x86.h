// x86 SIMD helpers shared by the CPU kernels (matmul.cc, matmul_int4.cc):
// the target attributes that let one translation unit hold AVX2 and AVX-512
// code next to the portable path (chosen at run time, never by -m flags),
// and small AVX2 building blocks.
//
// Internal to kernels/cpu. Include only from .cc files, inside
// `#if defined(__x86_64__)`.
#ifndef MOESERVE_KERNELS_CPU_SIMD_X86_H_
#define MOESERVE_KERNELS_CPU_SIMD_X86_H_

#include <immintrin.h>

#define MOESERVE_AVX2 __attribute__((target("avx2,fma")))
#define MOESERVE_AVX512 __attribute__((target("avx512f,avx2,fma")))

namespace moeserve::kernels::cpu {

// The sum of v's eight lanes, in a fixed order (so a row's result never
// depends on which kernel variant or tile computed it).
MOESERVE_AVX2 inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace moeserve::kernels::cpu

#endif  // MOESERVE_KERNELS_CPU_SIMD_X86_H_
