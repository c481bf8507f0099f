#include "kernels/cpu/matmul_int4.h"

#include <algorithm>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include "kernels/cpu/x86_intrinsics.h"

#include "kernels/cpu/simd_x86.h"
#endif

namespace moeserve::kernels::cpu {
namespace {

// Weight rows per tile, as MatMulBf16.
constexpr int64_t kTileRows = 4;

// Rows of `a` then rows of `b`, all with the same k and group.
struct Stacked {
  const Int4Matrix& a;
  const Int4Matrix* b;
  int64_t k() const { return a.cols; }
  int64_t group() const { return a.group; }
  const uint8_t* q(int64_t j) const {
    return j < a.rows ? a.q + j * (k() / 2) : b->q + (j - a.rows) * (k() / 2);
  }
  const bf16* scales(int64_t j) const {
    const int64_t g = k() / group();
    return j < a.rows ? a.scales + j * g : b->scales + (j - a.rows) * g;
  }
};

// Dequantised column c of a weight row (q bytes, scales of that row).
inline float WeightAt(const uint8_t* q, const bf16* s, int64_t group,
                      int64_t c) {
  const uint8_t byte = q[c / 2];
  const int v = (c % 2 == 0 ? byte & 0xf : byte >> 4) - 8;
  return static_cast<float>(v) * Bf16ToFloat(s[c / group]);
}

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
  const int64_t k = w.k();
  std::vector<float> row(k);  // One dequantised weight row.
  for (int64_t j = j0; j < j1; ++j) {
    const uint8_t* q = w.q(j);
    const bf16* s = w.scales(j);
    for (int64_t c = 0; c < k; ++c) row[c] = WeightAt(q, s, w.group(), c);
    for (int64_t r = 0; r < m; ++r)
      y[r * n + j] = DotF32(x + r * k, row.data(), k);
  }
}

#if defined(__x86_64__)

// The 16 nibbles of 8 bytes at p, one a byte, in column order (low nibble of
// byte i = column 2i).
MOESERVE_AVX2 inline __m128i Nibbles16Avx2(const uint8_t* p) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m128i mask = _mm_set1_epi8(0x0f);
  const __m128i lo = _mm_and_si128(b, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), mask);
  return _mm_unpacklo_epi8(lo, hi);
}

// y[MR rows, NR cols] for x rows x[0..MR) (row stride k) and the NR weight
// rows q[j] / s[j]. Per group: w = q_stored * s - 8 s (exact) by one FMA,
// then fp32 FMA into the accumulators; group columns past the last multiple
// of 16 go to a scalar tail.
template <int MR, int NR>
MOESERVE_AVX2 void TileAvx2(const float* x, int64_t k, int64_t group,
                            const uint8_t* const* q, const bf16* const* s,
                            float* y, int64_t ldy) {
  __m256 acc[MR][NR];
  float tail[MR][NR] = {};
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NR; ++j) acc[r][j] = _mm256_setzero_ps();
  for (int64_t g0 = 0; g0 < k; g0 += group) {
    const int64_t g1 = g0 + group;
    int64_t c = g0;
    for (; c + 16 <= g1; c += 16) {
      for (int j = 0; j < NR; ++j) {
        const float sc = Bf16ToFloat(s[j][g0 / group]);
        const __m256 sv = _mm256_set1_ps(sc), off = _mm256_set1_ps(-8 * sc);
        const __m128i nib = Nibbles16Avx2(q[j] + c / 2);
        const __m256 w0 = _mm256_fmadd_ps(
            _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(nib)), sv, off);
        const __m256 w1 = _mm256_fmadd_ps(
            _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(nib, 8))),
            sv, off);
        for (int r = 0; r < MR; ++r) {
          acc[r][j] =
              _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + r * k + c), acc[r][j]);
          acc[r][j] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + r * k + c + 8),
                                      acc[r][j]);
        }
      }
    }
    for (; c < g1; ++c) {
      for (int j = 0; j < NR; ++j) {
        const float w = WeightAt(q[j], s[j], group, c);
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

// AVX-512: a 16-entry table per group and weight row holds the 16 possible
// weights (n - 8) * scale, exact in fp32; vpermps looks the weights up by the
// nibbles directly. 8 bytes (16 columns) broadcast to the 32-bit lanes give
// lo, hi, lo, hi, ...; shifting lane 2i and 2i+1 right by 4i leaves column i
// and column 8 + i in their low 4 bits, which are all vpermps reads. So the
// lanes hold the columns in the order 0, 8, 1, 9, ..., 7, 15, and x is
// permuted to match once per call (PermuteForAvx512).

// x rows with each full 16-column chunk of every group in the lane order
// above; other (tail) columns copied.
void PermuteForAvx512(const float* x, int64_t m, int64_t k, int64_t group,
                      float* xp) {
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * k;
    float* pr = xp + r * k;
    for (int64_t g0 = 0; g0 < k; g0 += group) {
      const int64_t g1 = g0 + group;
      int64_t c = g0;
      for (; c + 16 <= g1; c += 16) {
        for (int i = 0; i < 8; ++i) {
          pr[c + 2 * i] = xr[c + i];
          pr[c + 2 * i + 1] = xr[c + 8 + i];
        }
      }
      for (; c < g1; ++c) pr[c] = xr[c];
    }
  }
}

template <int MR, int NR>
MOESERVE_AVX512 void TileAvx512(const float* xp, int64_t k, int64_t group,
                                const uint8_t* const* q, const bf16* const* s,
                                float* y, int64_t ldy) {
  __m512 acc[MR][NR];
  float tail[MR][NR] = {};
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NR; ++j) acc[r][j] = _mm512_setzero_ps();
  const __m512 levels =
      _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
  const __m512i shifts = _mm512_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12, 16, 16, 20,
                                           20, 24, 24, 28, 28);
  for (int64_t g0 = 0; g0 < k; g0 += group) {
    const int64_t g1 = g0 + group;
    __m512 table[NR];
    for (int j = 0; j < NR; ++j) {
      table[j] =
          _mm512_mul_ps(levels, _mm512_set1_ps(Bf16ToFloat(s[j][g0 / group])));
    }
    int64_t c = g0;
    for (; c + 16 <= g1; c += 16) {
      for (int j = 0; j < NR; ++j) {
        uint64_t bytes;
        std::memcpy(&bytes, q[j] + c / 2, sizeof(bytes));
        const __m512i idx = _mm512_srlv_epi32(
            _mm512_set1_epi64(static_cast<long long>(bytes)), shifts);
        const __m512 w = _mm512_permutexvar_ps(idx, table[j]);
        for (int r = 0; r < MR; ++r) {
          acc[r][j] =
              _mm512_fmadd_ps(w, _mm512_loadu_ps(xp + r * k + c), acc[r][j]);
        }
      }
    }
    for (; c < g1; ++c) {
      for (int j = 0; j < NR; ++j) {
        const float w = WeightAt(q[j], s[j], group, c);
        for (int r = 0; r < MR; ++r) tail[r][j] += xp[r * k + c] * w;
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
MOESERVE_AVX2 void RowsAvx2(const float* x, int64_t r0, int64_t r1, int64_t k,
                            int64_t group, const uint8_t* const* q,
                            const bf16* const* s, float* y, int64_t ldy) {
  int64_t r = r0;
  for (; r + 2 <= r1; r += 2) {
    TileAvx2<2, NR>(x + r * k, k, group, q, s, y + r * ldy, ldy);
  }
  if (r < r1) TileAvx2<1, NR>(x + r * k, k, group, q, s, y + r * ldy, ldy);
}

template <int NR>
MOESERVE_AVX512 void RowsAvx512(const float* x, int64_t r0, int64_t r1,
                                int64_t k, int64_t group,
                                const uint8_t* const* q, const bf16* const* s,
                                float* y, int64_t ldy) {
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    TileAvx512<4, NR>(x + r * k, k, group, q, s, y + r * ldy, ldy);
  }
  for (; r + 2 <= r1; r += 2) {
    TileAvx512<2, NR>(x + r * k, k, group, q, s, y + r * ldy, ldy);
  }
  if (r < r1) TileAvx512<1, NR>(x + r * k, k, group, q, s, y + r * ldy, ldy);
}

// Columns [j0, j1) of y for every row of x, on the kernel of `isa`.
void ColsSimd(Isa isa, const float* x, int64_t m, const Stacked& w, int64_t n,
              float* y, int64_t j0, int64_t j1) {
  const int64_t k = w.k(), group = w.group();
  for (int64_t r0 = 0; r0 < m; r0 += kRowBlock) {
    const int64_t r1 = std::min(m, r0 + kRowBlock);
    int64_t j = j0;
    for (; j + kTileRows <= j1; j += kTileRows) {
      const uint8_t* q[kTileRows];
      const bf16* s[kTileRows];
      for (int t = 0; t < kTileRows; ++t) {
        q[t] = w.q(j + t);
        s[t] = w.scales(j + t);
      }
      if (isa == Isa::kAvx512) {
        RowsAvx512<kTileRows>(x, r0, r1, k, group, q, s, y + j, n);
      } else {
        RowsAvx2<kTileRows>(x, r0, r1, k, group, q, s, y + j, n);
      }
    }
    for (; j < j1; ++j) {
      const uint8_t* q[1] = {w.q(j)};
      const bf16* s[1] = {w.scales(j)};
      if (isa == Isa::kAvx512) {
        RowsAvx512<1>(x, r0, r1, k, group, q, s, y + j, n);
      } else {
        RowsAvx2<1>(x, r0, r1, k, group, q, s, y + j, n);
      }
    }
  }
}
#endif  // __x86_64__

}  // namespace

Isa BestInt4Isa() {
#if defined(__x86_64__)
  static const Isa best = [] {
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
      return Isa::kScalar;
    }
    return __builtin_cpu_supports("avx512f") ? Isa::kAvx512 : Isa::kAvx2;
  }();
  return best;
#else
  return Isa::kScalar;
#endif
}

void MatMulInt4(ThreadPool& pool, Isa isa, const float* x, int64_t m,
                const Int4Matrix& a, const Int4Matrix* b, float* y) {
  const int64_t n = a.rows + (b ? b->rows : 0), k = a.cols;
  if (m == 0 || n == 0) return;
  const Stacked w{a, b};
#if defined(__x86_64__)
  // The AVX-512 kernel reads x in its lane order (PermuteForAvx512); the
  // buffer is the calling thread's, read by the pool during this call only.
  thread_local std::vector<float> permuted;
  if (isa == Isa::kAvx512) {
    permuted.resize(m * k);
    PermuteForAvx512(x, m, k, a.group, permuted.data());
    x = permuted.data();
  }
#endif
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
        if (isa != Isa::kScalar) {
          ColsSimd(isa, x, m, w, n, y, j0, j1);
          return;
        }
#endif
        ColsScalar(x, m, w, n, y, j0, j1);
      },
      min_tiles);
}

}  // namespace moeserve::kernels::cpu
