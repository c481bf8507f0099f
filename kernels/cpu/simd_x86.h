// x86 SIMD helpers shared by the CPU kernels (matmul.cc, matmul_int4.cc,
// attention.cc):
// the target attributes that let one translation unit hold AVX2 and AVX-512
// code next to the portable path (chosen at run time, never by -m flags),
// and small AVX2 / AVX-512 building blocks.
//
// Internal to kernels/cpu. Include only from .cc files, inside
// `#if defined(__x86_64__)`.
#ifndef MOESERVE_KERNELS_CPU_SIMD_X86_H_
#define MOESERVE_KERNELS_CPU_SIMD_X86_H_

#include "kernels/cpu/x86_intrinsics.h"

#define MOESERVE_AVX2 __attribute__((target("avx2,fma")))
#define MOESERVE_AVX512 __attribute__((target("avx512f,avx2,fma")))
// The bf16 matmul's AVX-512 kernels also use BW+VL (16-bit masked loads).
#define MOESERVE_AVX512BW \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))
#define MOESERVE_AVX512BF16 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")))

namespace moeserve::kernels::cpu {

// The sum of v's eight lanes, in a fixed order (so a row's result never
// depends on which kernel variant or tile computed it).
MOESERVE_AVX2 inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The sums of a, b, c and d's sixteen lanes, as lanes 0-3: halves added
// (lane i + lane i + 8), then pairs, quads and the two 128-bit halves, the
// same order for every position (so a column's result never depends on
// which of the four it was).
MOESERVE_AVX512BW inline __m256 AddHalves(__m512 v) {
  return _mm256_add_ps(
      _mm512_castps512_ps256(v),
      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
MOESERVE_AVX512BW inline __m128 HorizontalSum4(__m512 a, __m512 b, __m512 c,
                                               __m512 d) {
  const __m256 ab = _mm256_hadd_ps(AddHalves(a), AddHalves(b));
  const __m256 cd = _mm256_hadd_ps(AddHalves(c), AddHalves(d));
  const __m256 abcd = _mm256_hadd_ps(ab, cd);
  return _mm_add_ps(_mm256_castps256_ps128(abcd),
                    _mm256_extractf128_ps(abcd, 1));
}

// exp(x) lane by lane. Cody-Waite reduction x = n ln2 + r (|r| <= ln2 / 2,
// ln2 split in a short high part and a correction so n ln2 is exact), then
// Cephes' degree-6 polynomial for exp(r) and 2^n through the exponent field:
// within 2 ulp of std::exp for x in [-87.3, 88]. Inputs outside are clamped
// there (so exp(-inf) gives about 2^-126 rather than 0, and large x
// exp(88) rather than inf); NaN stays NaN (min/max return their second operand
// when either is NaN).
MOESERVE_AVX2 inline __m256 ExpAvx2(__m256 x) {
  x = _mm256_min_ps(_mm256_set1_ps(88.0f), x);
  x = _mm256_max_ps(_mm256_set1_ps(-87.3365478515625f), x);
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  // exp(r) = 1 + r + r^2 p(r).
  const __m256 e = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r),
                                 _mm256_set1_ps(1.0f));
  const __m256i two_n = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(e, _mm256_castsi256_ps(two_n));
}

}  // namespace moeserve::kernels::cpu

#endif  // MOESERVE_KERNELS_CPU_SIMD_X86_H_
