// x86 SIMD helpers shared by the CPU kernels (matmul.cc, matmul_int4.cc):
// the target attributes that let one translation unit hold AVX2 and AVX-512
// code next to the portable path (chosen at run time, never by -m flags),
// and small AVX2 / AVX-512 building blocks.
//
// Internal to kernels/cpu. Include only from .cc files, inside
// `#if defined(__x86_64__)`.
#ifndef MOESERVE_KERNELS_CPU_SIMD_X86_H_
#define MOESERVE_KERNELS_CPU_SIMD_X86_H_

#include <immintrin.h>

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

}  // namespace moeserve::kernels::cpu

#endif  // MOESERVE_KERNELS_CPU_SIMD_X86_H_
