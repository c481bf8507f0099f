#include "kernels/cpu/matmul_fp8.h"

#include <algorithm>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>

#include "kernels/cpu/simd_x86.h"
#include "kernels/cpu/x86_intrinsics.h"

// F16C widens the decoded fp16 values; AVX-512BW does the 16-bit lane ops.
#define MOESERVE_FP8_AVX2 __attribute__((target("avx2,fma,f16c")))
#define MOESERVE_FP8_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#endif

namespace moeserve::kernels::cpu {
namespace {

// Weight rows per tile, as MatMulBf16.
constexpr int64_t kTileRows = 4;

// Rows of `a` then rows of `b`, all with the same k and tile.
struct Stacked {
  const Fp8Matrix& a;
  const Fp8Matrix* b;
  int64_t k() const { return a.cols; }
  int64_t tile_cols() const { return a.tile_cols; }
  const uint8_t* q(int64_t j) const {
    return j < a.rows ? a.q + j * k() : b->q + (j - a.rows) * k();
  }
  // The scales of weight row j: one per tile of columns.
  const float* scales(int64_t j) const {
    const Fp8Matrix& w = j < a.rows ? a : *b;
    const int64_t r = j < a.rows ? j : j - a.rows;
    return w.scales + (r / w.tile_rows) * w.scale_cols();
  }
};

// ---- Portable scalar kernel ------------------------------------------------

// dot(x[0:k], w[0:k]) with eight independent partial sums (as DotScalar).
inline float DotF32(const float* x, const float* w, int64_t k) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += x[i + l] * w[i + l];
  }
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
            ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < k; ++i) s += x[i] * w[i];
  return s;
}

void ColsScalar(const float* x, int64_t m, const Stacked& w, int64_t n,
                float* y, int64_t j0, int64_t j1) {
  const int64_t k = w.k(), tc = w.tile_cols();
  const float* table = Fp8E4M3Table();
  std::vector<float> row(k);  // One dequantised weight row.
  for (int64_t j = j0; j < j1; ++j) {
    const uint8_t* q = w.q(j);
    const float* s = w.scales(j);
    for (int64_t c = 0; c < k; ++c) row[c] = table[q[c]] * s[c / tc];
    for (int64_t r = 0; r < m; ++r) {
      y[r * n + j] = DotF32(x + r * k, row.data(), k);
    }
  }
}

#if defined(__x86_64__)

// 16 / 32 e4m3 codes as fp16 numbers q * 2^-8 (see the header): sign and the
// 7 low bits moved to fp16's sign, low 4 exponent bits and top 3 mantissa
// bits; a NaN code (x111 1111) becomes an fp16 NaN.
MOESERVE_FP8_AVX2 inline __m256i CodesToHalfAvx2(__m128i bytes) {
  const __m256i s = _mm256_cvtepi8_epi16(bytes);
  const __m256i h = _mm256_and_si256(
      _mm256_slli_epi16(s, 7), _mm256_set1_epi16(static_cast<int16_t>(0xbfff)));
  const __m256i nan = _mm256_cmpeq_epi16(
      _mm256_slli_epi16(s, 9), _mm256_set1_epi16(static_cast<int16_t>(0xfe00)));
  return _mm256_blendv_epi8(h, _mm256_set1_epi16(0x7fff), nan);
}

MOESERVE_FP8_AVX512 inline __m512i CodesToHalfAvx512(__m256i bytes) {
  const __m512i s = _mm512_cvtepi8_epi16(bytes);
  const __m512i h = _mm512_and_si512(
      _mm512_slli_epi16(s, 7), _mm512_set1_epi16(static_cast<int16_t>(0xbfff)));
  const __mmask32 nan = _mm512_cmpeq_epi16_mask(
      _mm512_slli_epi16(s, 9), _mm512_set1_epi16(static_cast<int16_t>(0xfe00)));
  return _mm512_mask_mov_epi16(h, nan, _mm512_set1_epi16(0x7fff));
}

// y[MR rows, NR cols] for x rows x[0..MR) (row stride k) and the NR weight
// rows q[j] / s[j]. Per tile of tile_cols columns: 16 weights a step decoded
// (CodesToHalfAvx2), widened, multiplied by the tile's scale * 256, then fp32
// FMA into the accumulators; columns past the last whole step go to a scalar
// tail through the table.
template <int MR, int NR>
MOESERVE_FP8_AVX2 void TileAvx2(const float* x, int64_t k, int64_t tc,
                                const uint8_t* const* q, const float* const* s,
                                float* y, int64_t ldy) {
  const float* table = Fp8E4M3Table();
  __m256 acc[MR][NR];
  float tail[MR][NR] = {};
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NR; ++j) acc[r][j] = _mm256_setzero_ps();
  for (int64_t c0 = 0; c0 < k; c0 += tc) {
    const int64_t c1 = std::min(k, c0 + tc);
    __m256 scale[NR];
    for (int j = 0; j < NR; ++j) {
      scale[j] = _mm256_set1_ps(s[j][c0 / tc] * 256.0f);
    }
    int64_t c = c0;
    for (; c + 16 <= c1; c += 16) {
      for (int j = 0; j < NR; ++j) {
        const __m256i h = CodesToHalfAvx2(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(q[j] + c)));
        const __m256 w0 =
            _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), scale[j]);
        const __m256 w1 = _mm256_mul_ps(
            _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), scale[j]);
        for (int r = 0; r < MR; ++r) {
          acc[r][j] =
              _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + r * k + c), acc[r][j]);
          acc[r][j] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + r * k + c + 8),
                                      acc[r][j]);
        }
      }
    }
    for (; c < c1; ++c) {
      for (int j = 0; j < NR; ++j) {
        const float w = table[q[j][c]] * s[j][c0 / tc];
        for (int r = 0; r < MR; ++r) tail[r][j] += x[r * k + c] * w;
      }
    }
  }
  for (int r = 0; r < MR; ++r) {
    for (int j = 0; j < NR; ++j) {
      y[r * ldy + j] = HorizontalSum(acc[r][j]) + tail[r][j];
    }
  }
}

// As TileAvx2 with 32 weights a step in two 16-lane halves.
template <int MR, int NR>
MOESERVE_FP8_AVX512 void TileAvx512(const float* x, int64_t k, int64_t tc,
                                    const uint8_t* const* q,
                                    const float* const* s, float* y,
                                    int64_t ldy) {
  const float* table = Fp8E4M3Table();
  __m512 acc[MR][NR];
  float tail[MR][NR] = {};
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NR; ++j) acc[r][j] = _mm512_setzero_ps();
  for (int64_t c0 = 0; c0 < k; c0 += tc) {
    const int64_t c1 = std::min(k, c0 + tc);
    __m512 scale[NR];
    for (int j = 0; j < NR; ++j) {
      scale[j] = _mm512_set1_ps(s[j][c0 / tc] * 256.0f);
    }
    int64_t c = c0;
    for (; c + 32 <= c1; c += 32) {
      for (int j = 0; j < NR; ++j) {
        const __m512i h = CodesToHalfAvx512(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[j] + c)));
        const __m512 w0 =
            _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(h)), scale[j]);
        const __m512 w1 = _mm512_mul_ps(
            _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1)), scale[j]);
        for (int r = 0; r < MR; ++r) {
          acc[r][j] =
              _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + r * k + c), acc[r][j]);
          acc[r][j] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + r * k + c + 16),
                                      acc[r][j]);
        }
      }
    }
    for (; c < c1; ++c) {
      for (int j = 0; j < NR; ++j) {
        const float w = table[q[j][c]] * s[j][c0 / tc];
        for (int r = 0; r < MR; ++r) tail[r][j] += x[r * k + c] * w;
      }
    }
  }
  for (int r = 0; r < MR; ++r) {
    for (int j = 0; j < NR; ++j) {
      y[r * ldy + j] = _mm512_reduce_add_ps(acc[r][j]) + tail[r][j];
    }
  }
}

// All rows [r0, r1) of x against NR weight rows, MR rows at a time.
template <int NR>
MOESERVE_FP8_AVX2 void RowsAvx2(const float* x, int64_t r0, int64_t r1,
                                int64_t k, int64_t tc, const uint8_t* const* q,
                                const float* const* s, float* y, int64_t ldy) {
  int64_t r = r0;
  for (; r + 2 <= r1; r += 2) {
    TileAvx2<2, NR>(x + r * k, k, tc, q, s, y + r * ldy, ldy);
  }
  if (r < r1) TileAvx2<1, NR>(x + r * k, k, tc, q, s, y + r * ldy, ldy);
}

template <int NR>
MOESERVE_FP8_AVX512 void RowsAvx512(const float* x, int64_t r0, int64_t r1,
                                    int64_t k, int64_t tc,
                                    const uint8_t* const* q,
                                    const float* const* s, float* y,
                                    int64_t ldy) {
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    TileAvx512<4, NR>(x + r * k, k, tc, q, s, y + r * ldy, ldy);
  }
  for (; r + 2 <= r1; r += 2) {
    TileAvx512<2, NR>(x + r * k, k, tc, q, s, y + r * ldy, ldy);
  }
  if (r < r1) TileAvx512<1, NR>(x + r * k, k, tc, q, s, y + r * ldy, ldy);
}

// NR weight rows from j on, on the kernel of `isa`, for x rows [r0, r1).
template <int NR>
void RowsSimd(Isa isa, const float* x, int64_t r0, int64_t r1, const Stacked& w,
              int64_t j, float* y, int64_t n) {
  const uint8_t* q[NR];
  const float* s[NR];
  for (int t = 0; t < NR; ++t) {
    q[t] = w.q(j + t);
    s[t] = w.scales(j + t);
  }
  if (isa == Isa::kAvx512) {
    RowsAvx512<NR>(x, r0, r1, w.k(), w.tile_cols(), q, s, y + j, n);
  } else {
    RowsAvx2<NR>(x, r0, r1, w.k(), w.tile_cols(), q, s, y + j, n);
  }
}

// Columns [j0, j1) of y for every row of x.
void ColsSimd(Isa isa, const float* x, int64_t m, const Stacked& w, int64_t n,
              float* y, int64_t j0, int64_t j1) {
  for (int64_t r0 = 0; r0 < m; r0 += kRowBlock) {
    const int64_t r1 = std::min(m, r0 + kRowBlock);
    int64_t j = j0;
    for (; j + kTileRows <= j1; j += kTileRows) {
      RowsSimd<kTileRows>(isa, x, r0, r1, w, j, y, n);
    }
    for (; j < j1; ++j) RowsSimd<1>(isa, x, r0, r1, w, j, y, n);
  }
}
#endif  // __x86_64__

}  // namespace

#if defined(__x86_64__)
namespace {
// F16C (CPUID.1:ECX bit 29) read directly: clang's __builtin_cpu_supports
// (the thread-safety build's compiler) does not know "f16c".
bool HasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ecx & (1u << 29)) != 0;
}
}  // namespace
#endif

Isa BestFp8Isa() {
#if defined(__x86_64__)
  static const Isa best = [] {
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
        !HasF16c()) {
      return Isa::kScalar;
    }
    return __builtin_cpu_supports("avx512f") &&
                   __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl")
               ? Isa::kAvx512
               : Isa::kAvx2;
  }();
  return best;
#else
  return Isa::kScalar;
#endif
}

void MatMulFp8(ThreadPool& pool, Isa isa, const float* x, int64_t m,
               const Fp8Matrix& a, const Fp8Matrix* b, float* y) {
  const int64_t n = a.rows + (b ? b->rows : 0), k = a.cols;
  if (m == 0 || n == 0) return;
  const Stacked w{a, b};
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
        if (isa == Isa::kAvx2 || isa == Isa::kAvx512) {
          ColsSimd(isa, x, m, w, n, y, j0, j1);
          return;
        }
#endif
        ColsScalar(x, m, w, n, y, j0, j1);
      },
      min_tiles);
}

}  // namespace moeserve::kernels::cpu
