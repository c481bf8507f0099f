#include "kernels/cpu/matmul.h"

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>

#include "kernels/cpu/simd_x86.h"
#endif

namespace moeserve::kernels::cpu {
namespace {

// Weight rows per tile: 4 rows x 2 x-rows = 8 accumulators, which leaves
// AVX2's 16 registers enough room for the weights and x.
constexpr int64_t kTileRows = 4;

// ---- Portable scalar kernel ------------------------------------------------

// One output: dot(x[0:k], w[0:k]). Eight independent partial sums keep the
// loop vectorisable without -ffast-math.
inline float DotScalar(const float* x, const bf16* w, int64_t k) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += x[i + l] * Bf16ToFloat(w[i + l]);
  }
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
            ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < k; ++i) s += x[i] * Bf16ToFloat(w[i]);
  return s;
}

void ColsScalar(const float* x, int64_t m, int64_t k, const bf16* w, int64_t n,
                const bf16* bias, float* y, int64_t j0, int64_t j1) {
  for (int64_t r0 = 0; r0 < m; r0 += kRowBlock) {
    const int64_t r1 = std::min(m, r0 + kRowBlock);
    for (int64_t j = j0; j < j1; ++j) {
      const float b = bias ? Bf16ToFloat(bias[j]) : 0.0f;
      for (int64_t r = r0; r < r1; ++r) {
        y[r * n + j] = DotScalar(x + r * k, w + j * k, k) + b;
      }
    }
  }
}

// ---- AVX2 + FMA kernel -----------------------------------------------------
#if defined(__x86_64__)
// Eight bf16 -> eight fp32: widen to 32 bits and shift into the high half.
MOESERVE_AVX2 inline __m256 LoadBf16x8(const bf16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// y[MR rows, NR cols] for x rows x[0..MR) and weight rows w[0..NR).
template <int MR, int NR>
MOESERVE_AVX2 inline void TileAvx2(const float* x, int64_t k, const bf16* w,
                                   const bf16* bias, float* y, int64_t ldy) {
  __m256 acc[MR][NR];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NR; ++j) acc[r][j] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    __m256 wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = LoadBf16x8(w + j * k + i);
    for (int r = 0; r < MR; ++r) {
      const __m256 xv = _mm256_loadu_ps(x + r * k + i);
      for (int j = 0; j < NR; ++j) {
        acc[r][j] = _mm256_fmadd_ps(wv[j], xv, acc[r][j]);
      }
    }
  }
  for (int r = 0; r < MR; ++r) {
    for (int j = 0; j < NR; ++j) {
      float s = HorizontalSum(acc[r][j]);
      for (int64_t t = i; t < k; ++t) {
        s += x[r * k + t] * Bf16ToFloat(w[j * k + t]);
      }
      y[r * ldy + j] = s + (bias ? Bf16ToFloat(bias[j]) : 0.0f);
    }
  }
}

// All rows of one m-block against NR weight rows.
template <int NR>
MOESERVE_AVX2 void RowsAvx2(const float* x, int64_t r0, int64_t r1, int64_t k,
                            const bf16* w, const bf16* bias, float* y,
                            int64_t ldy) {
  int64_t r = r0;
  for (; r + 2 <= r1; r += 2) {
    TileAvx2<2, NR>(x + r * k, k, w, bias, y + r * ldy, ldy);
  }
  if (r < r1) TileAvx2<1, NR>(x + r * k, k, w, bias, y + r * ldy, ldy);
}

MOESERVE_AVX2 void ColsAvx2(const float* x, int64_t m, int64_t k, const bf16* w,
                            int64_t n, const bf16* bias, float* y, int64_t j0,
                            int64_t j1) {
  for (int64_t r0 = 0; r0 < m; r0 += kRowBlock) {
    const int64_t r1 = std::min(m, r0 + kRowBlock);
    int64_t j = j0;
    for (; j + kTileRows <= j1; j += kTileRows) {
      RowsAvx2<kTileRows>(x, r0, r1, k, w + j * k, bias ? bias + j : nullptr,
                          y + j, n);
    }
    for (; j < j1; ++j) {
      RowsAvx2<1>(x, r0, r1, k, w + j * k, bias ? bias + j : nullptr, y + j, n);
    }
  }
}
#endif  // __x86_64__

}  // namespace

Isa BestIsa() {
#if defined(__x86_64__)
  static const Isa best =
      (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
          ? Isa::kAvx2
          : Isa::kScalar;
  return best;
#else
  return Isa::kScalar;
#endif
}

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

void MatMulBf16(ThreadPool& pool, Isa isa, const float* x, int64_t m, int64_t k,
                const bf16* w, int64_t n, const bf16* bias, float* y) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // Empty reduction: y = bias.
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < n; ++j)
        y[r * n + j] = bias ? Bf16ToFloat(bias[j]) : 0.0f;
    return;
  }
  // Threads split the weight rows in whole tiles; tiny products stay on the
  // calling thread because a wake-up costs more than they do.
  const int64_t tiles = (n + kTileRows - 1) / kTileRows;
  const int64_t work_per_tile = kTileRows * k * std::min<int64_t>(m, kRowBlock);
  const int64_t min_tiles = std::max<int64_t>(
      1, (int64_t{1} << 16) / std::max<int64_t>(work_per_tile, 1));
  pool.ParallelFor(
      tiles,
      [&](int64_t t0, int64_t t1) {
        const int64_t j0 = t0 * kTileRows, j1 = std::min(n, t1 * kTileRows);
#if defined(__x86_64__)
        if (isa != Isa::kScalar) {  // kAvx512 runs the AVX2 kernel.
          ColsAvx2(x, m, k, w, n, bias, y, j0, j1);
          return;
        }
#endif
        ColsScalar(x, m, k, w, n, bias, y, j0, j1);
      },
      min_tiles);
}

}  // namespace moeserve::kernels::cpu
