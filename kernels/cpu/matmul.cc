#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/matmul_amx.h"

#if defined(__x86_64__)
#include "kernels/cpu/x86_intrinsics.h"

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
// ---- AVX-512 kernels (fp32 FMA and AVX512_BF16) ----------------------------
//
// Inner-product register tiles: acc[r][j] holds 16 lanes of the dot product
// of x row r with weight row j (lane l sums the k indices = l mod 16; the
// bf16 kernel's lane l sums k = 2l, 2l + 1 mod 32), so each output is one
// accumulator walked over k in the same order whatever the tile, and its
// weights are loaded (and widened) once per tile for all MR rows.

// Rows of x per register tile: 6 x 4 accumulators + 4 weight vectors + x.
constexpr int64_t kMr = 6;

// Rows of x per block in the AVX-512 kernels for m rows: a block of x (up to
// ~512 KiB) stays in L2 while each 4-row weight panel (4 k bf16) sits in L1
// for all of the block's tiles. Blocks are balanced (m = 64 in two blocks of
// 36 and 28 rather than 60 and 4) and a multiple of kMr unless one block
// holds all of m.
int64_t GemmRowBlock(int64_t m, int64_t k, int64_t x_elem_bytes) {
  const int64_t limit = std::clamp<int64_t>(
      (int64_t{512} << 10) / std::max<int64_t>(1, k * x_elem_bytes) / kMr * kMr,
      kMr, 32 * kMr);
  if (m <= limit) return std::max<int64_t>(m, 1);
  const int64_t blocks = (m + limit - 1) / limit;
  const int64_t rows = (m + blocks - 1) / blocks;
  return (rows + kMr - 1) / kMr * kMr;
}

#define MOESERVE_ALWAYS_INLINE inline __attribute__((always_inline))

// Sixteen bf16 -> sixteen fp32 (widen, shift into the high half); the masked
// form reads only the lanes in `mask` and zeroes the rest.
MOESERVE_AVX512BW MOESERVE_ALWAYS_INLINE __m512 LoadBf16x16(const bf16* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
MOESERVE_AVX512BW MOESERVE_ALWAYS_INLINE __m512 LoadBf16x16(__mmask16 mask,
                                                            const bf16* p) {
  const __m256i h = _mm256_maskz_loadu_epi16(mask, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// y[r, j] = sum of acc[r][j]'s lanes (+ bias[j]); NR = 4 stores a quad.
template <int MR, int NR>
MOESERVE_AVX512BW MOESERVE_ALWAYS_INLINE void StoreTile(
    const __m512 (&acc)[MR][NR], const bf16* bias, float* y, int64_t ldy) {
  static_assert(NR == 4 || NR == 1);
  if constexpr (NR == 4) {
    const __m128 b =
        bias ? _mm_setr_ps(Bf16ToFloat(bias[0]), Bf16ToFloat(bias[1]),
                           Bf16ToFloat(bias[2]), Bf16ToFloat(bias[3]))
             : _mm_setzero_ps();
    for (int r = 0; r < MR; ++r) {
      __m128 s = HorizontalSum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
      if (bias) s = _mm_add_ps(s, b);
      _mm_storeu_ps(y + r * ldy, s);
    }
  } else {
    for (int r = 0; r < MR; ++r) {
      // Lane 0 of the quad sum: the same order as position 0 of a quad.
      float s = _mm_cvtss_f32(
          HorizontalSum4(acc[r][0], acc[r][0], acc[r][0], acc[r][0]));
      if (bias) s += Bf16ToFloat(bias[0]);
      y[r * ldy] = s;
    }
  }
}

// Software prefetch of the weights a tile will read next (into L2), one
// cache line per weight row per 32 columns of k: the hardware prefetchers
// alone keep too few lines in flight for a GEMV that reads 4 rows at a time
// (measured on a Xeon with AMX, 1 thread, 4096 x 14336 at m = 1: avx512
// 11.5 -> 13.3-14.7 GB/s, avx512bf16 13.0 -> 15.2 GB/s).
template <int NR>
MOESERVE_AVX512BW MOESERVE_ALWAYS_INLINE void PrefetchRows(const bf16* pf,
                                                           int64_t k,
                                                           int64_t i) {
  for (int j = 0; j < NR; ++j) {
    _mm_prefetch(reinterpret_cast<const char*>(pf + j * k + i), _MM_HINT_T1);
  }
}

// One step of TileAvx512: columns [i, i + 16) of k.
template <int MR, int NR>
MOESERVE_AVX512BW MOESERVE_ALWAYS_INLINE void StepAvx512(__m512 (&acc)[MR][NR],
                                                         const float* x,
                                                         int64_t k,
                                                         const bf16* w,
                                                         int64_t i) {
  __m512 wv[NR];
  for (int j = 0; j < NR; ++j) wv[j] = LoadBf16x16(w + j * k + i);
  for (int r = 0; r < MR; ++r) {
    const __m512 xv = _mm512_loadu_ps(x + r * k + i);
    for (int j = 0; j < NR; ++j) {
      acc[r][j] = _mm512_fmadd_ps(wv[j], xv, acc[r][j]);
    }
  }
}

// y[MR rows, NR cols] for x rows x[0..MR) (stride k) and weight rows
// w[0..NR) (stride k): fp32 FMA, 16 columns of k a step, the tail masked.
// With `pf` (the next tile's weights, for the first row tile of a block
// only), one prefetch per weight row and cache line; the steps are the same
// either way, so the result does not depend on it.
template <int MR, int NR>
MOESERVE_AVX512BW void TileAvx512(const float* x, int64_t k, const bf16* w,
                                  const bf16* bias, float* y, int64_t ldy,
                                  const bf16* pf) {
  __m512 acc[MR][NR];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NR; ++j) acc[r][j] = _mm512_setzero_ps();
  int64_t i = 0;
  if (pf != nullptr) {
    for (; i + 32 <= k; i += 32) {
      PrefetchRows<NR>(pf, k, i);
      StepAvx512<MR, NR>(acc, x, k, w, i);
      StepAvx512<MR, NR>(acc, x, k, w, i + 16);
    }
  }
  for (; i + 16 <= k; i += 16) StepAvx512<MR, NR>(acc, x, k, w, i);
  if (i < k) {
    const auto mask = static_cast<__mmask16>((1u << (k - i)) - 1);
    __m512 wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = LoadBf16x16(mask, w + j * k + i);
    for (int r = 0; r < MR; ++r) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x + r * k + i);
      for (int j = 0; j < NR; ++j) {
        acc[r][j] = _mm512_fmadd_ps(wv[j], xv, acc[r][j]);
      }
    }
  }
  StoreTile<MR, NR>(acc, bias, y, ldy);
}

// The same with x already rounded to bf16: vdpbf16ps, 32 columns of k (16
// pairs) a step, products exact, sums in fp32; `pf` as TileAvx512.
template <int MR, int NR>
MOESERVE_AVX512BF16 void TileAvx512Bf16(const bf16* x, int64_t k, const bf16* w,
                                        const bf16* bias, float* y, int64_t ldy,
                                        const bf16* pf) {
  __m512 acc[MR][NR];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NR; ++j) acc[r][j] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= k; i += 32) {
    if (pf != nullptr) PrefetchRows<NR>(pf, k, i);
    __m512bh wv[NR];
    for (int j = 0; j < NR; ++j) {
      wv[j] = (__m512bh)_mm512_loadu_si512(w + j * k + i);
    }
    for (int r = 0; r < MR; ++r) {
      const auto xv = (__m512bh)_mm512_loadu_si512(x + r * k + i);
      for (int j = 0; j < NR; ++j) {
        acc[r][j] = _mm512_dpbf16_ps(acc[r][j], xv, wv[j]);
      }
    }
  }
  if (i < k) {
    const auto mask = static_cast<__mmask32>((uint64_t{1} << (k - i)) - 1);
    __m512bh wv[NR];
    for (int j = 0; j < NR; ++j) {
      wv[j] = (__m512bh)_mm512_maskz_loadu_epi16(mask, w + j * k + i);
    }
    for (int r = 0; r < MR; ++r) {
      const auto xv = (__m512bh)_mm512_maskz_loadu_epi16(mask, x + r * k + i);
      for (int j = 0; j < NR; ++j) {
        acc[r][j] = _mm512_dpbf16_ps(acc[r][j], xv, wv[j]);
      }
    }
  }
  StoreTile<MR, NR>(acc, bias, y, ldy);
}

// x rounded to bf16 (nearest even) row by row, so an element's rounding
// never depends on m (the row tail is masked, not scalar).
MOESERVE_AVX512BF16 void RoundRowsToBf16(const float* x, int64_t m, int64_t k,
                                         bf16* out) {
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * k;
    bf16* o = out + r * k;
    int64_t i = 0;
    for (; i + 16 <= k; i += 16) {
      const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(xr + i));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + i), (__m256i)h);
    }
    if (i < k) {
      const auto mask = static_cast<__mmask16>((1u << (k - i)) - 1);
      const __m256bh h =
          _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, xr + i));
      _mm256_mask_storeu_epi16(o + i, mask, (__m256i)h);
    }
  }
}

// The two AVX-512 variants as types for the blocked driver below.
struct Avx512F32 {
  using X = float;
  template <int MR, int NR>
  static void Tile(const X* x, int64_t k, const bf16* w, const bf16* bias,
                   float* y, int64_t ldy, const bf16* pf) {
    TileAvx512<MR, NR>(x, k, w, bias, y, ldy, pf);
  }
};
struct Avx512Bf16 {
  using X = bf16;
  template <int MR, int NR>
  static void Tile(const X* x, int64_t k, const bf16* w, const bf16* bias,
                   float* y, int64_t ldy, const bf16* pf) {
    TileAvx512Bf16<MR, NR>(x, k, w, bias, y, ldy, pf);
  }
};

// Rows [r0, r1) of x against NR weight rows: kMr rows a tile, then the rest.
// The first tile prefetches `pf` (the later ones find the weights in L1).
template <class V, int NR>
void RowsTiled(const typename V::X* x, int64_t r0, int64_t r1, int64_t k,
               const bf16* w, const bf16* bias, float* y, int64_t ldy,
               const bf16* pf) {
  int64_t r = r0;
  for (; r + kMr <= r1; r += kMr) {
    V::template Tile<kMr, NR>(x + r * k, k, w, bias, y + r * ldy, ldy,
                              r == r0 ? pf : nullptr);
  }
  if (r != r0) pf = nullptr;
  const typename V::X* xr = x + r * k;
  float* yr = y + r * ldy;
  switch (r1 - r) {
    case 5:
      V::template Tile<5, NR>(xr, k, w, bias, yr, ldy, pf);
      break;
    case 4:
      V::template Tile<4, NR>(xr, k, w, bias, yr, ldy, pf);
      break;
    case 3:
      V::template Tile<3, NR>(xr, k, w, bias, yr, ldy, pf);
      break;
    case 2:
      V::template Tile<2, NR>(xr, k, w, bias, yr, ldy, pf);
      break;
    case 1:
      V::template Tile<1, NR>(xr, k, w, bias, yr, ldy, pf);
      break;
    default:
      break;
  }
}

// Columns [j0, j1) of y: per block of rows of x (GemmRowBlock), every 4-row
// weight panel of the range against all the block's rows.
template <class V>
void ColsTiled(const typename V::X* x, int64_t m, int64_t k, const bf16* w,
               int64_t n, const bf16* bias, float* y, int64_t j0, int64_t j1) {
  const int64_t block = GemmRowBlock(m, k, sizeof(typename V::X));
  for (int64_t r0 = 0; r0 < m; r0 += block) {
    const int64_t r1 = std::min(m, r0 + block);
    int64_t j = j0;
    for (; j + kTileRows <= j1; j += kTileRows) {
      // The next panel of the thread's range, fetched while this one runs.
      const bf16* pf =
          j + 2 * kTileRows <= j1 ? w + (j + kTileRows) * k : nullptr;
      RowsTiled<V, kTileRows>(x, r0, r1, k, w + j * k,
                              bias ? bias + j : nullptr, y + j, n, pf);
    }
    for (; j < j1; ++j) {
      RowsTiled<V, 1>(x, r0, r1, k, w + j * k, bias ? bias + j : nullptr, y + j,
                      n, nullptr);
    }
  }
}
#endif  // __x86_64__

}  // namespace

bool IsaSupported(Isa isa) {
#if defined(__x86_64__)
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::kAvx512:
      return IsaSupported(Isa::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
    case Isa::kAvx512Bf16:
      return IsaSupported(Isa::kAvx512) && __builtin_cpu_supports("avx512bf16");
    case Isa::kAmxBf16:
      return IsaSupported(Isa::kAvx512Bf16) && AmxBf16Usable();
  }
  return false;
#else
  return isa == Isa::kScalar;
#endif
}

Isa ClampIsa(Isa want) {
  for (Isa isa = want; isa != Isa::kScalar;
       isa = static_cast<Isa>(static_cast<int>(isa) - 1)) {
    if (IsaSupported(isa)) return isa;
  }
  return Isa::kScalar;
}

Isa BestIsa() {
  static const Isa best = ClampIsa(Isa::kAvx512);
  return best;
}

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx512Bf16:
      return "avx512bf16";
    case Isa::kAmxBf16:
      return "amxbf16";
  }
  return "?";
}

std::optional<Isa> ParseIsa(std::string_view name) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16,
                  Isa::kAmxBf16}) {
    if (name == IsaName(isa)) return isa;
  }
  return std::nullopt;
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
  if (isa == Isa::kAmxBf16) {
    MatMulAmxBf16(pool, x, m, k, w, n, bias, y);
    return;
  }
  int64_t rows_per_pass = std::min<int64_t>(m, kRowBlock);
#if defined(__x86_64__)
  // The bf16-activation kernel reads x rounded to bf16; the buffer is the
  // calling thread's, read by the pool during this call only.
  thread_local std::vector<bf16> rounded;
  const bf16* xb = nullptr;
  if (isa == Isa::kAvx512Bf16) {
    rounded.resize(m * k);
    RoundRowsToBf16(x, m, k, rounded.data());
    xb = rounded.data();
  }
  if (isa == Isa::kAvx512 || isa == Isa::kAvx512Bf16) {
    rows_per_pass = GemmRowBlock(m, k, isa == Isa::kAvx512 ? 4 : 2);
  }
#endif
  // Threads split the weight rows in whole tiles; tiny products stay on the
  // calling thread because a wake-up costs more than they do.
  const int64_t tiles = (n + kTileRows - 1) / kTileRows;
  const int64_t work_per_tile = kTileRows * k * rows_per_pass;
  const int64_t min_tiles = std::max<int64_t>(
      1, (int64_t{1} << 16) / std::max<int64_t>(work_per_tile, 1));
  pool.ParallelFor(
      tiles,
      [&](int64_t t0, int64_t t1) {
        const int64_t j0 = t0 * kTileRows, j1 = std::min(n, t1 * kTileRows);
#if defined(__x86_64__)
        switch (isa) {
          case Isa::kAvx512Bf16:
            ColsTiled<Avx512Bf16>(xb, m, k, w, n, bias, y, j0, j1);
            return;
          case Isa::kAvx512:
            ColsTiled<Avx512F32>(x, m, k, w, n, bias, y, j0, j1);
            return;
          case Isa::kAvx2:
            ColsAvx2(x, m, k, w, n, bias, y, j0, j1);
            return;
          case Isa::kScalar:
          case Isa::kAmxBf16:  // Handled above.
            break;
        }
#endif
        ColsScalar(x, m, k, w, n, bias, y, j0, j1);
      },
      min_tiles);
}

}  // namespace moeserve::kernels::cpu
