#include "kernels/cpu/matmul_int4.h"

#include <algorithm>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include "kernels/cpu/simd_x86.h"
#include "kernels/cpu/x86_intrinsics.h"
#endif

namespace moeserve::kernels::cpu {
namespace {

// Weight rows per tile, as MatMulBf16.
constexpr int64_t kTileRows = 4;

// One weight row: its nibbles, scales and zero points (null: all 8).
struct Row {
  const uint8_t* q;
  const uint16_t* s;
  const uint8_t* z;
};

// Rows of `a` then rows of `b`, all with the same k, group, scale type and
// zero-point presence.
struct Stacked {
  const Int4Matrix& a;
  const Int4Matrix* b;
  int64_t k() const { return a.cols; }
  int64_t group() const { return a.group; }
  Int4ScaleType scale_type() const { return a.scale_type; }
  Row row(int64_t j) const {
    const Int4Matrix& w = j < a.rows ? a : *b;
    const int64_t i = j < a.rows ? j : j - a.rows, g = k() / group();
    return {w.q + i * (k() / 2), w.scales + i * g,
            w.zeros != nullptr ? w.zeros + i * g : nullptr};
  }
};

// Scale and zero point of group g of a weight row.
inline float ScaleOf(const Row& w, Int4ScaleType t, int64_t g) {
  return Int4ScaleToFloat(w.s[g], t);
}
inline int ZeroOf(const Row& w, int64_t g) {
  return w.z != nullptr ? w.z[g] : kInt4ImplicitZero;
}

// Dequantised column c of a weight row: (u - z) * scale.
inline float WeightAt(const Row& w, Int4ScaleType t, int64_t group, int64_t c) {
  const uint8_t byte = w.q[c / 2];
  const int u = c % 2 == 0 ? byte & 0xf : byte >> 4;
  return static_cast<float>(u - ZeroOf(w, c / group)) *
         ScaleOf(w, t, c / group);
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
    const Row wj = w.row(j);
    for (int64_t c = 0; c < k; ++c) {
      row[c] = WeightAt(wj, w.scale_type(), w.group(), c);
    }
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
// rows w[j]. Per group: w = u * s - z s by one FMA (z s is exact: a 5-bit
// integer times an 11-bit significand, so the FMA rounds (u - z) s, itself
// exact, once: no rounding at all), then fp32 FMA into the accumulators;
// group columns past the last multiple of 16 go to a scalar tail. The scale
// (bf16 or fp16) is decoded once per group and row, exactly, in scalar code:
// a few instructions against the group's 16+ columns of FMAs.
template <int MR, int NR>
MOESERVE_AVX2 void TileAvx2(const float* x, int64_t k, int64_t group,
                            Int4ScaleType st, const Row* w, float* y,
                            int64_t ldy) {
  __m256 acc[MR][NR];
  float tail[MR][NR] = {};
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NR; ++j) acc[r][j] = _mm256_setzero_ps();
  for (int64_t g0 = 0; g0 < k; g0 += group) {
    const int64_t g1 = g0 + group;
    __m256 sv[NR], off[NR];
    for (int j = 0; j < NR; ++j) {
      const float sc = ScaleOf(w[j], st, g0 / group);
      sv[j] = _mm256_set1_ps(sc);
      off[j] =
          _mm256_set1_ps(static_cast<float>(-ZeroOf(w[j], g0 / group)) * sc);
    }
    int64_t c = g0;
    for (; c + 16 <= g1; c += 16) {
      for (int j = 0; j < NR; ++j) {
        const __m128i nib = Nibbles16Avx2(w[j].q + c / 2);
        const __m256 w0 = _mm256_fmadd_ps(
            _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(nib)), sv[j], off[j]);
        const __m256 w1 = _mm256_fmadd_ps(
            _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(nib, 8))),
            sv[j], off[j]);
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
        const float wc = WeightAt(w[j], st, group, c);
        for (int r = 0; r < MR; ++r) tail[r][j] += x[r * k + c] * wc;
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
// weights (n - z) * scale, exact in fp32; vpermps looks the weights up by the
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
                                Int4ScaleType st, const Row* w, float* y,
                                int64_t ldy) {
  __m512 acc[MR][NR];
  float tail[MR][NR] = {};
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NR; ++j) acc[r][j] = _mm512_setzero_ps();
  const __m512 nibbles =
      _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i shifts = _mm512_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12, 16, 16, 20,
                                           20, 24, 24, 28, 28);
  for (int64_t g0 = 0; g0 < k; g0 += group) {
    const int64_t g1 = g0 + group;
    __m512 table[NR];
    for (int j = 0; j < NR; ++j) {
      // (n - z) is an exact small integer; times the scale, exact.
      const __m512 levels = _mm512_sub_ps(
          nibbles,
          _mm512_set1_ps(static_cast<float>(ZeroOf(w[j], g0 / group))));
      table[j] =
          _mm512_mul_ps(levels, _mm512_set1_ps(ScaleOf(w[j], st, g0 / group)));
    }
    int64_t c = g0;
    for (; c + 16 <= g1; c += 16) {
      for (int j = 0; j < NR; ++j) {
        uint64_t bytes;
        std::memcpy(&bytes, w[j].q + c / 2, sizeof(bytes));
        const __m512i idx = _mm512_srlv_epi32(
            _mm512_set1_epi64(static_cast<long long>(bytes)), shifts);
        const __m512 wv = _mm512_permutexvar_ps(idx, table[j]);
        for (int r = 0; r < MR; ++r) {
          acc[r][j] =
              _mm512_fmadd_ps(wv, _mm512_loadu_ps(xp + r * k + c), acc[r][j]);
        }
      }
    }
    for (; c < g1; ++c) {
      for (int j = 0; j < NR; ++j) {
        const float wc = WeightAt(w[j], st, group, c);
        for (int r = 0; r < MR; ++r) tail[r][j] += xp[r * k + c] * wc;
      }
    }
  }
  for (int r = 0; r < MR; ++r) {
    for (int j = 0; j < NR; ++j) {
      y[r * ldy + j] = _mm512_reduce_add_ps(acc[r][j]) + tail[r][j];
    }
  }
}

// ---- AVX512_BF16 kernel -------------------------------------------------
//
// The nibbles never become fp32: (u - z) is a small integer (-16..15), exact
// in bf16, so a table of the 16 values (n - z) as bf16 bits, one table per
// zero point, turns 32 nibbles into 32 exact bf16 weights with one vpermw;
// vdpbf16ps multiplies them with x rounded to bf16 (exact products) into a
// per-group fp32 partial sum, and each group's partial sums are scaled once:
// acc += scale * partial (one FMA per group, 16 lanes).
//
// A step covers 64 columns c..c+63 (32 bytes): the bytes zero-extended to
// 32 words give the low nibbles (word i = column c+2i) and, shifted right by
// 4, the high nibbles (column c+2i+1). vpermw reads the low 5 bits of a
// word: for the low nibbles that is the nibble plus bit 0 of the high one,
// so each table holds its 16 entries twice. x is rounded to bf16 and
// permuted to match once per call (PrepareXBf16): per 64 columns the 32 even
// columns, then the 32 odd ones. fp32 lane l of the product sums columns
// c+4l .. c+4l+3, so lanes 0-7 hold columns c..c+31 and lanes 8-15 columns
// c+32..c+63. With groups of 32 a step holds two groups: words 16-31 are
// looked up in the second group's table (a masked vpermw) and lanes 8-15
// scaled by its scale. A row whose k is 32 past a multiple of 64 ends with a
// 32-column step: 16 bytes widened to 16 words, the high nibbles in words
// 16-31, x as 16 even columns then 16 odd ones. The kernel takes groups of
// 32, multiples of 64, and one group per row of a multiple of 32
// (Bf16KernelFits); MatMulInt4 gives any other matrix the AVX-512F kernel.

// Whether the bf16 kernel's steps fit the groups of rows of k columns.
inline bool Bf16KernelFits(int64_t group, int64_t k) {
  return group == 32 || group % 64 == 0 || (group == k && k % 32 == 0);
}

// bf16 bits of a small integer v (|v| <= 128: exact).
constexpr uint16_t Bf16OfSmallInt(int v) {
  if (v == 0) return 0;
  const int a = v < 0 ? -v : v;
  int e = 0;
  while ((a >> (e + 1)) != 0) ++e;
  return static_cast<uint16_t>((v < 0 ? 0x8000 : 0) | ((127 + e) << 7) |
                               ((a << (7 - e)) & 0x7f));
}
static_assert(Bf16OfSmallInt(1) == 0x3f80 && Bf16OfSmallInt(-16) == 0xc180 &&
              Bf16OfSmallInt(15) == 0x4170 && Bf16OfSmallInt(-3) == 0xc040);

// For every zero point z (0..kInt4MaxZero): the 32 words (n mod 16) - z as
// bf16 bits, n = 0..31 (the vpermw table of the steps above).
struct LevelTables {
  alignas(64) uint16_t t[kInt4MaxZero + 1][32];
};
constexpr LevelTables MakeLevelTables() {
  LevelTables l{};
  for (int z = 0; z <= kInt4MaxZero; ++z) {
    for (int n = 0; n < 32; ++n) l.t[z][n] = Bf16OfSmallInt(n % 16 - z);
  }
  return l;
}
constexpr LevelTables kLevelTables = MakeLevelTables();

#define MOESERVE_INLINE inline __attribute__((always_inline))

MOESERVE_AVX512BF16 MOESERVE_INLINE __m512i Table(const uint16_t* t) {
  return _mm512_load_si512(reinterpret_cast<const __m512i*>(t));
}

// x rounded to bf16 (nearest even, vcvtneps2bf16) into the steps' lane
// order: every 64 columns c..c+63 of a row as c, c+2, ..., c+62, c+1, ...,
// c+63; a last 32 columns as c, c+2, ..., c+30, c+1, ..., c+31.
// REQUIRES: k a multiple of 32.
MOESERVE_AVX512BF16 void PrepareXBf16(const float* x, int64_t m, int64_t k,
                                      bf16* xp) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20,
                                         22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * k;
    bf16* o = xp + r * k;
    int64_t c = 0;
    for (; c + 64 <= k; c += 64) {
      const __m512 a = _mm512_loadu_ps(xr + c),
                   b = _mm512_loadu_ps(xr + c + 16),
                   d = _mm512_loadu_ps(xr + c + 32),
                   e = _mm512_loadu_ps(xr + c + 48);
      // cvtne2ps: the second operand to words 0..15, the first to 16..31.
      const __m512bh evens =
          _mm512_cvtne2ps_pbh(_mm512_permutex2var_ps(d, even, e),
                              _mm512_permutex2var_ps(a, even, b));
      const __m512bh odds = _mm512_cvtne2ps_pbh(
          _mm512_permutex2var_ps(d, odd, e), _mm512_permutex2var_ps(a, odd, b));
      _mm512_storeu_si512(o + c, (__m512i)evens);
      _mm512_storeu_si512(o + c + 32, (__m512i)odds);
    }
    if (c < k) {
      const __m512 a = _mm512_loadu_ps(xr + c),
                   b = _mm512_loadu_ps(xr + c + 16);
      const __m512bh h =
          _mm512_cvtne2ps_pbh(_mm512_permutex2var_ps(a, odd, b),
                              _mm512_permutex2var_ps(a, even, b));
      _mm512_storeu_si512(o + c, (__m512i)h);
    }
  }
}

// The 32-column step: columns c..c+31 of one weight row as exact bf16
// (u - z), in the lane order above.
MOESERVE_AVX512BF16 MOESERVE_INLINE __m512bh Weights32(const uint8_t* q,
                                                       __m512i table) {
  const __m256i b = _mm256_cvtepu8_epi16(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
  const __m512i idx =
      _mm512_inserti64x4(_mm512_castsi256_si512(b), _mm256_srli_epi16(b, 4), 1);
  return (__m512bh)_mm512_permutexvar_epi16(idx, table);
}

// Sixteen scales (bits of type st; only the lanes in `mask` are read, the
// others are 0) as fp32, exactly: bf16 by a 16-bit shift, fp16 by vcvtph2ps
// (exact for every finite code, subnormals included).
MOESERVE_AVX512BF16 MOESERVE_INLINE __m512 Scales16(const uint16_t* s,
                                                    __mmask16 mask,
                                                    Int4ScaleType st) {
  const __m256i h = _mm256_maskz_loadu_epi16(mask, s);
  if (st == Int4ScaleType::kF16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// The scales of groups [g, g + 16) of the NR weight rows (those that exist).
template <int NR>
MOESERVE_AVX512BF16 MOESERVE_INLINE void DecodeScales(const Row* w, int64_t g,
                                                      int64_t groups,
                                                      Int4ScaleType st,
                                                      float (&out)[NR][16]) {
  const int64_t n = std::min<int64_t>(16, groups - g);
  const auto mask = static_cast<__mmask16>((1u << n) - 1);
  for (int j = 0; j < NR; ++j) {
    _mm512_store_ps(out[j], Scales16(w[j].s + g, mask, st));
  }
}

// Table of group g of weight row w.
template <bool kZeros>
MOESERVE_INLINE const uint16_t* TableOf(const Row& w, int64_t g) {
  return kLevelTables.t[kZeros ? w.z[g] : kInt4ImplicitZero];
}

// y[0..NR) = the sums of the lanes of acc[0..NR), in HorizontalSum4's order
// (a lone weight row as position 0 of a quad). By value: an accumulator
// array passed by reference stays in memory.
MOESERVE_AVX512BF16 MOESERVE_INLINE void StoreSums(__m512 a0, __m512 a1,
                                                   __m512 a2, __m512 a3,
                                                   float* y) {
  _mm_storeu_ps(y, HorizontalSum4(a0, a1, a2, a3));
}
MOESERVE_AVX512BF16 MOESERVE_INLINE void StoreSums(__m512 a, float* y) {
  *y = _mm_cvtss_f32(HorizontalSum4(a, a, a, a));
}
#define MOESERVE_STORE_TILE(acc, y, ldy)                                  \
  for (int r = 0; r < MR; ++r) {                                          \
    if constexpr (NR == 1) {                                              \
      StoreSums(acc[r][0], y + r * ldy);                                  \
    } else {                                                              \
      for (int q = 0; q < NR; q += 4) {                                   \
        StoreSums(acc[r][q], acc[r][q + 1], acc[r][q + 2], acc[r][q + 3], \
                  y + r * ldy + q);                                       \
      }                                                                   \
    }                                                                     \
  }

// The cache line of nibbles of column c of the NR weight rows pf[j].
template <int NR>
MOESERVE_INLINE void Prefetch(const Row* pf, int64_t c) {
  for (int j = 0; j < NR; ++j) {
    _mm_prefetch(reinterpret_cast<const char*>(pf[j].q + c / 2), _MM_HINT_T0);
  }
}

// y[MR rows, NR cols] for the prepared x rows xp[0..MR) (row stride k) and
// the NR weight rows w[j], groups of 32: each 64-column step is two groups,
// scaled as it ends (lanes 0-7 by the first group's scale, 8-15 by the
// second's); an odd last group is a 32-column step.
template <int MR, int NR, bool kZeros>
MOESERVE_AVX512BF16 void TilePairsBf16(const bf16* xp, int64_t k,
                                       int64_t groups, Int4ScaleType st,
                                       const Row* w, float* y, int64_t ldy,
                                       const Row* pf) {
  __m512 acc[MR][NR];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NR; ++j) acc[r][j] = _mm512_setzero_ps();
  alignas(64) float scales[NR][16];
  for (int64_t gb = 0; gb < groups; gb += 16) {
    DecodeScales<NR>(w, gb, groups, st, scales);
    const int64_t g1 = std::min(groups, gb + 16);
    int64_t g = gb;
    for (; g + 2 <= g1; g += 2) {
      const int64_t c = g * 32;
      if (pf != nullptr && c % 128 == 0) Prefetch<NR>(pf, c);
      for (int j = 0; j < NR; ++j) {
        const __m512i t = _mm512_cvtepu8_epi16(_mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(w[j].q + c / 2)));
        const __m512i h = _mm512_srli_epi16(t, 4);
        const __m512i lo = Table(TableOf<kZeros>(w[j], g));
        __m512i wa = _mm512_permutexvar_epi16(t, lo);
        __m512i wb = _mm512_permutexvar_epi16(h, lo);
        if constexpr (kZeros) {
          const __m512i hi = Table(TableOf<kZeros>(w[j], g + 1));
          wa = _mm512_mask_permutexvar_epi16(wa, 0xffff0000u, t, hi);
          wb = _mm512_mask_permutexvar_epi16(wb, 0xffff0000u, h, hi);
        }
        const __m512 sv = _mm512_mask_broadcastss_ps(
            _mm512_set1_ps(scales[j][g - gb]), 0xff00,
            _mm_load_ss(&scales[j][g - gb + 1]));
        for (int r = 0; r < MR; ++r) {
          __m512 part = _mm512_dpbf16_ps(
              _mm512_setzero_ps(), (__m512bh)_mm512_loadu_si512(xp + r * k + c),
              (__m512bh)wa);
          part = _mm512_dpbf16_ps(
              part, (__m512bh)_mm512_loadu_si512(xp + r * k + c + 32),
              (__m512bh)wb);
          acc[r][j] = _mm512_fmadd_ps(part, sv, acc[r][j]);
        }
      }
    }
    if (g < g1) {  // The odd last group.
      const int64_t c = g * 32;
      if (pf != nullptr && c % 128 == 0) Prefetch<NR>(pf, c);
      for (int j = 0; j < NR; ++j) {
        const __m512bh wv =
            Weights32(w[j].q + c / 2, Table(TableOf<kZeros>(w[j], g)));
        const __m512 sv = _mm512_set1_ps(scales[j][g - gb]);
        for (int r = 0; r < MR; ++r) {
          const __m512 part = _mm512_dpbf16_ps(
              _mm512_setzero_ps(), (__m512bh)_mm512_loadu_si512(xp + r * k + c),
              wv);
          acc[r][j] = _mm512_fmadd_ps(part, sv, acc[r][j]);
        }
      }
    }
  }
  static_assert(NR == 1 || NR == 4 || NR == 8);
  MOESERVE_STORE_TILE(acc, y, ldy)
}

// The same for groups of a multiple of 64 columns, or one group per row
// (then a row 32 past a multiple of 64 ends with a 32-column step): per
// group an fp32 partial sum over its steps, then acc += scale * partial.
template <int MR, int NR, bool kZeros>
MOESERVE_AVX512BF16 void TileGroupsBf16(const bf16* xp, int64_t k,
                                        int64_t group, int64_t groups,
                                        Int4ScaleType st, const Row* w,
                                        float* y, int64_t ldy, const Row* pf) {
  __m512 acc[MR][NR];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NR; ++j) acc[r][j] = _mm512_setzero_ps();
  alignas(64) float scales[NR][16];
  for (int64_t g = 0; g < groups; ++g) {
    if (g % 16 == 0) DecodeScales<NR>(w, g, groups, st, scales);
    __m512i table[NR];
    for (int j = 0; j < NR; ++j) table[j] = Table(TableOf<kZeros>(w[j], g));
    __m512 part[MR][NR];
    for (int r = 0; r < MR; ++r)
      for (int j = 0; j < NR; ++j) part[r][j] = _mm512_setzero_ps();
    const int64_t c1 = (g + 1) * group;
    int64_t c = g * group;
    for (; c + 64 <= c1; c += 64) {
      if (pf != nullptr && c % 128 == 0) Prefetch<NR>(pf, c);
      for (int j = 0; j < NR; ++j) {
        const __m512i t = _mm512_cvtepu8_epi16(_mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(w[j].q + c / 2)));
        const auto wa = (__m512bh)_mm512_permutexvar_epi16(t, table[j]);
        const auto wb = (__m512bh)_mm512_permutexvar_epi16(
            _mm512_srli_epi16(t, 4), table[j]);
        for (int r = 0; r < MR; ++r) {
          part[r][j] = _mm512_dpbf16_ps(
              part[r][j], (__m512bh)_mm512_loadu_si512(xp + r * k + c), wa);
          part[r][j] = _mm512_dpbf16_ps(
              part[r][j], (__m512bh)_mm512_loadu_si512(xp + r * k + c + 32),
              wb);
        }
      }
    }
    if (c < c1) {  // One group per row, k 32 past a multiple of 64.
      if (pf != nullptr && c % 128 == 0) Prefetch<NR>(pf, c);
      for (int j = 0; j < NR; ++j) {
        const __m512bh wv = Weights32(w[j].q + c / 2, table[j]);
        for (int r = 0; r < MR; ++r) {
          part[r][j] = _mm512_dpbf16_ps(
              part[r][j], (__m512bh)_mm512_loadu_si512(xp + r * k + c), wv);
        }
      }
    }
    for (int j = 0; j < NR; ++j) {
      const __m512 sv = _mm512_set1_ps(scales[j][g % 16]);
      for (int r = 0; r < MR; ++r) {
        acc[r][j] = _mm512_fmadd_ps(part[r][j], sv, acc[r][j]);
      }
    }
  }
  static_assert(NR == 1 || NR == 4 || NR == 8);
  MOESERVE_STORE_TILE(acc, y, ldy)
}

// With `pf` (the next tile's weight rows; the first row tile of a row block
// only), one prefetch per weight row and cache line of nibbles, so the
// short rows of an expert (k = 256: two lines) do not wait on the L3 one
// tile at a time; the steps are the same either way.
template <int MR, int NR, bool kZeros>
MOESERVE_AVX512BF16 void TileAvx512Bf16(const bf16* xp, int64_t k,
                                        int64_t group, int64_t groups,
                                        Int4ScaleType st, const Row* w,
                                        float* y, int64_t ldy, const Row* pf) {
  if (group == 32) {
    TilePairsBf16<MR, NR, kZeros>(xp, k, groups, st, w, y, ldy, pf);
  } else {
    TileGroupsBf16<MR, NR, kZeros>(xp, k, group, groups, st, w, y, ldy, pf);
  }
}

// All rows [r0, r1) of x against NR weight rows, MR rows at a time.
template <int NR>
MOESERVE_AVX2 void RowsAvx2(const float* x, int64_t r0, int64_t r1, int64_t k,
                            int64_t group, Int4ScaleType st, const Row* w,
                            float* y, int64_t ldy) {
  int64_t r = r0;
  for (; r + 2 <= r1; r += 2) {
    TileAvx2<2, NR>(x + r * k, k, group, st, w, y + r * ldy, ldy);
  }
  if (r < r1) TileAvx2<1, NR>(x + r * k, k, group, st, w, y + r * ldy, ldy);
}

template <int NR>
MOESERVE_AVX512 void RowsAvx512(const float* x, int64_t r0, int64_t r1,
                                int64_t k, int64_t group, Int4ScaleType st,
                                const Row* w, float* y, int64_t ldy) {
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    TileAvx512<4, NR>(x + r * k, k, group, st, w, y + r * ldy, ldy);
  }
  for (; r + 2 <= r1; r += 2) {
    TileAvx512<2, NR>(x + r * k, k, group, st, w, y + r * ldy, ldy);
  }
  if (r < r1) TileAvx512<1, NR>(x + r * k, k, group, st, w, y + r * ldy, ldy);
}

// Rows of x per register tile of the bf16 kernel: 3 x 4 partial sums and
// 3 x 4 accumulators leave room for the weights in 32 zmm registers.
template <int NR, bool kZeros>
MOESERVE_AVX512BF16 void RowsAvx512Bf16(const bf16* xp, int64_t r0, int64_t r1,
                                        int64_t k, int64_t group,
                                        Int4ScaleType st, const Row* w,
                                        float* y, int64_t ldy, const Row* pf) {
  const int64_t groups = k / group;
  if constexpr (NR == 8) {  // One row of x only (ColsSimd).
    TileAvx512Bf16<1, 8, kZeros>(xp + r0 * k, k, group, groups, st, w,
                                 y + r0 * ldy, ldy, pf);
    return;
  }
  int64_t r = r0;
  for (; r + 3 <= r1; r += 3) {
    TileAvx512Bf16<3, NR, kZeros>(xp + r * k, k, group, groups, st, w,
                                  y + r * ldy, ldy, r == r0 ? pf : nullptr);
  }
  if (r != r0) pf = nullptr;
  if (r + 2 == r1) {
    TileAvx512Bf16<2, NR, kZeros>(xp + r * k, k, group, groups, st, w,
                                  y + r * ldy, ldy, pf);
  } else if (r + 1 == r1) {
    TileAvx512Bf16<1, NR, kZeros>(xp + r * k, k, group, groups, st, w,
                                  y + r * ldy, ldy, pf);
  }
}

// All rows [r0, r1) of x against NR weight rows on the fp32 kernels.
template <int NR>
void RowsFp32(Isa isa, const float* x, int64_t r0, int64_t r1, int64_t k,
              int64_t group, Int4ScaleType st, const Row* w, float* y,
              int64_t ldy) {
  if (isa == Isa::kAvx512) {
    RowsAvx512<NR>(x, r0, r1, k, group, st, w, y, ldy);
  } else {
    RowsAvx2<NR>(x, r0, r1, k, group, st, w, y, ldy);
  }
}

// All rows [r0, r1) of x against NR weight rows on the kernel of `isa`: x
// fp32 (kAvx512: permuted) or, for kAvx512Bf16, xb (PrepareXBf16).
template <int NR>
void RowsSimd(Isa isa, const float* x, const bf16* xb, int64_t r0, int64_t r1,
              int64_t k, int64_t group, Int4ScaleType st, const Row* w,
              float* y, int64_t ldy, const Row* pf) {
  if (isa == Isa::kAvx512Bf16) {
    if (w[0].z != nullptr) {
      RowsAvx512Bf16<NR, true>(xb, r0, r1, k, group, st, w, y, ldy, pf);
    } else {
      RowsAvx512Bf16<NR, false>(xb, r0, r1, k, group, st, w, y, ldy, pf);
    }
    return;
  }
  if constexpr (NR <= kTileRows) {
    RowsFp32<NR>(isa, x, r0, r1, k, group, st, w, y, ldy);
  }
}

// Columns [j0, j1) of y for the rows [r0, r1) of x, TR weight rows a call
// (the rows left over one at a time).
template <int TR>
void ColsTiles(Isa isa, const float* x, const bf16* xb, int64_t r0, int64_t r1,
               const Stacked& w, int64_t n, float* y, int64_t j0, int64_t j1) {
  const int64_t k = w.k(), group = w.group();
  const Int4ScaleType st = w.scale_type();
  int64_t j = j0;
  Row rows[TR], next[TR];
  if (j + TR <= j1) {
    for (int t = 0; t < TR; ++t) next[t] = w.row(j + t);
  }
  for (; j + TR <= j1; j += TR) {
    std::copy(next, next + TR, rows);
    // The next tile of the thread's range (the bf16 kernel prefetches it).
    const bool more = j + 2 * TR <= j1;
    if (more) {
      for (int t = 0; t < TR; ++t) next[t] = w.row(j + TR + t);
    }
    RowsSimd<TR>(isa, x, xb, r0, r1, k, group, st, rows, y + j, n,
                 more ? next : nullptr);
  }
  for (; j < j1; ++j) {
    const Row lone[1] = {w.row(j)};
    RowsSimd<1>(isa, x, xb, r0, r1, k, group, st, lone, y + j, n, nullptr);
  }
}

// Columns [j0, j1) of y for every row of x, on the kernel of `isa`. The bf16
// kernel takes a lone row of x (decode) against 8 weight rows a tile, which
// halves its per-tile work; each output's operations are those of a 4-row
// tile, so the result is the same.
void ColsSimd(Isa isa, const float* x, const bf16* xb, int64_t m,
              const Stacked& w, int64_t n, float* y, int64_t j0, int64_t j1) {
  for (int64_t r0 = 0; r0 < m; r0 += kRowBlock) {
    const int64_t r1 = std::min(m, r0 + kRowBlock);
    if (isa == Isa::kAvx512Bf16 && r1 - r0 == 1) {
      const int64_t j8 = j0 + (j1 - j0) / 8 * 8;
      ColsTiles<8>(isa, x, xb, r0, r1, w, n, y, j0, j8);
      ColsTiles<kTileRows>(isa, x, xb, r0, r1, w, n, y, j8, j1);
    } else {
      ColsTiles<kTileRows>(isa, x, xb, r0, r1, w, n, y, j0, j1);
    }
  }
}
#endif  // __x86_64__

}  // namespace

bool Int4IsaSupported(Isa isa) {
#if defined(__x86_64__)
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::kAvx512:
      return Int4IsaSupported(Isa::kAvx2) && __builtin_cpu_supports("avx512f");
    case Isa::kAvx512Bf16:
      return Int4IsaSupported(Isa::kAvx512) && IsaSupported(Isa::kAvx512Bf16);
    case Isa::kAmxBf16:
      return false;
  }
  return false;
#else
  return isa == Isa::kScalar;
#endif
}

Isa ClampInt4Isa(Isa want) {
  for (Isa isa = want; isa != Isa::kScalar;
       isa = static_cast<Isa>(static_cast<int>(isa) - 1)) {
    if (Int4IsaSupported(isa)) return isa;
  }
  return Isa::kScalar;
}

Isa BestInt4Isa() {
  static const Isa best = ClampInt4Isa(Isa::kAvx512);
  return best;
}

void MatMulInt4(ThreadPool& pool, Isa isa, const float* x, int64_t m,
                const Int4Matrix& a, const Int4Matrix* b, float* y) {
  const int64_t n = a.rows + (b ? b->rows : 0), k = a.cols;
  if (m == 0 || n == 0) return;
  const Stacked w{a, b};
#if defined(__x86_64__)
  // The bf16 kernel's steps fit groups of 32, multiples of 64 and whole rows.
  if (isa == Isa::kAvx512Bf16 && !Bf16KernelFits(a.group, k)) {
    isa = Isa::kAvx512;
  }
  // The AVX-512 kernels read x in their lane order (PermuteForAvx512,
  // PrepareXBf16); the buffers are the calling thread's, read by the pool
  // during this call only.
  thread_local std::vector<float> permuted;
  thread_local std::vector<bf16> rounded;
  const bf16* xb = nullptr;
  if (isa == Isa::kAvx512Bf16) {
    rounded.resize(m * k);
    PrepareXBf16(x, m, k, rounded.data());
    xb = rounded.data();
  }
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
          ColsSimd(isa, x, xb, m, w, n, y, j0, j1);
          return;
        }
#endif
        ColsScalar(x, m, w, n, y, j0, j1);
      },
      min_tiles);
}

}  // namespace moeserve::kernels::cpu
