#include "kernels/cpu/matmul_amx.h"

#include <algorithm>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#include "kernels/cpu/x86_intrinsics.h"
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/cpu/simd_x86.h"
#endif

namespace moeserve::kernels::cpu {

#if defined(__x86_64__)
namespace {

// The product is computed transposed: C^T[n, m] = W[n, k] x^T[k, m], so the
// weights are the A operand read straight from W (16 weight rows x 32 k =
// 64 bytes a row, stride 2k: no repacking of the weights, which are the
// bytes that matter at small m) and x^T is the B operand, packed once per
// call. Tiles: C 16 weight rows x 16 rows of x (fp32), A 16 x 32 bf16, B 16
// pairs of k x 16 rows of x (the VNNI layout TDPBF16PS wants). A block is
// 2 x 2 C tiles: tmm0..3 accumulate, tmm4/5 hold two A tiles, tmm6/7 two B
// tiles, so every tile load feeds two multiplies.
//
// Numerics: each output y[r, j] is C[j][r] of one tile, and TDPBF16PS
// computes C[i][j] from A row i, B column j and C[i][j] only, over the k
// blocks always in the same order: a row's result never depends on m, on the
// other rows (padding rows of x are zero), on the block or thread that
// computed it. Rows of a small m and the m tail are padded, not sent to
// other kernels, so decode, batched decode and verification agree bit for
// bit within this variant too.

constexpr int64_t kTile = 16;   // Rows of a tile; C is 16 x 16 fp32.
constexpr int64_t kTileK = 32;  // bf16 columns of k per A tile (64 bytes).
constexpr int64_t kTileU32 = kTile * kTile;  // uint32 (bf16 pairs) per B tile.

// The 64-byte operand of LDTILECFG (palette 1): every tile 16 rows x 64
// bytes.
struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64);

// Packed x^T: for row block mb (16 rows of x) and k block kb, a 16 x 16
// uint32 tile at (mb * kblocks + kb) * kTileU32 whose element [p][c] is the
// bf16 pair (x[16 mb + c][32 kb + 2p], x[16 mb + c][32 kb + 2p + 1]).
// Padding rows and columns (beyond m, beyond k) are zero. x is rounded to
// bf16 by VCVTNEPS2BF16 (nearest even), the same rounding as the avx512bf16
// kernels.
MOESERVE_AVX512BF16 void PackX(const float* x, int64_t m, int64_t k,
                               int64_t kblocks, uint32_t* out) {
  const int64_t mblocks = (m + kTile - 1) / kTile;
  std::memset(out, 0, mblocks * kblocks * kTileU32 * sizeof(uint32_t));
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * k;
    uint32_t* base = out + (r / kTile) * kblocks * kTileU32 + r % kTile;
    for (int64_t i = 0; i < k; i += 16) {
      const auto mask =
          static_cast<__mmask16>(k - i >= 16 ? 0xffff : (1u << (k - i)) - 1);
      const __m256bh h =
          _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, xr + i));
      alignas(32) uint32_t pairs[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(pairs), (__m256i)h);
      const int64_t q0 = i / 2;  // First pair: q = 16 kb + p.
      for (int t = 0; t < 8; ++t) {
        const int64_t q = q0 + t;
        base[(q / kTile) * kTileU32 + (q % kTile) * kTile] = pairs[t];
      }
    }
  }
}

// An A tile that cannot be read in place (the last, partial k block, or the
// last, partial 16 weight rows): its valid part copied into a zeroed 16 x 64
// byte buffer, so no load reads past W's end (and the zeros of x's padding
// meet zeros, never a neighbouring row's bytes).
MOESERVE_AVX512BF16 inline void PadA(const bf16* w, int64_t rows, int64_t k,
                                     int64_t k0, bf16* buf) {
  const auto mask = static_cast<__mmask32>(
      k - k0 >= kTileK ? 0xffffffffu : (uint64_t{1} << (k - k0)) - 1);
  for (int64_t r = 0; r < kTile; ++r) {
    const __m512i v = r < rows ? _mm512_maskz_loadu_epi16(mask, w + r * k + k0)
                               : _mm512_setzero_si512();
    _mm512_storeu_si512(buf + r * kTileK, v);
  }
}

// y for weight tiles a (NA of them, from weight row j0) x row blocks b (NB,
// from row 16 mb0 of x), k blocks [kb0, kb1): the C tiles start from zero
// (kb0 == 0) or from `park` (4 tiles of 16 x 16 fp32, where the previous
// chunk of k left them), and end in `park` or, after the last k block,
// transposed into y (+ bias). Parking is an exact fp32 store and load, so a
// chunked product equals the unchunked one bit for bit. With `pf` (the next
// 32 weight rows, for the first row blocks of a pass only) each k block also
// prefetches their 32 cache lines at the same k into L2: at small m the
// weights stream from DRAM and the hardware prefetchers alone keep too few
// lines in flight. With `apack`, the A tiles of k blocks [kb0, kb1) come
// from there (PackA) instead of W.
template <int NA, int NB>
MOESERVE_AVX512BF16 void Block(const uint32_t* xp, int64_t m, int64_t k,
                               int64_t kblocks, const bf16* w, int64_t n,
                               const bf16* bias, float* y, int64_t j0,
                               int64_t mb0, const bf16* pf, int64_t kb0,
                               int64_t kb1, float* park, const bf16* apack) {
  static_assert(NA >= 1 && NA <= 2 && NB >= 1 && NB <= 2);
  alignas(64) bf16 abuf[2][kTile * kTileK];
  const int64_t full_k = k / kTileK;  // k blocks readable in place.
  const int64_t stride = k * static_cast<int64_t>(sizeof(bf16));
  int64_t rows[2];
  for (int a = 0; a < NA; ++a) rows[a] = std::min(kTile, n - j0 - a * kTile);
  const bf16* wa[2] = {w + j0 * k, NA == 2 ? w + (j0 + kTile) * k : nullptr};
  const uint32_t* xb0 = xp + mb0 * kblocks * kTileU32;
  const uint32_t* xb1 = xb0 + kblocks * kTileU32;

  constexpr int64_t kCBytes = kTile * sizeof(float);  // Stride of a C row.
  float* park_at[4] = {park, park + kTileU32, park + 2 * kTileU32,
                       park + 3 * kTileU32};
  if (kb0 == 0) {
    _tile_zero(0);
    if constexpr (NB == 2) _tile_zero(1);
    if constexpr (NA == 2) _tile_zero(2);
    if constexpr (NA == 2 && NB == 2) _tile_zero(3);
  } else {
    _tile_loadd(0, park_at[0], kCBytes);
    if constexpr (NB == 2) _tile_loadd(1, park_at[1], kCBytes);
    if constexpr (NA == 2) _tile_loadd(2, park_at[2], kCBytes);
    if constexpr (NA == 2 && NB == 2) _tile_loadd(3, park_at[3], kCBytes);
  }
  for (int64_t kb = kb0; kb < kb1; ++kb) {
    const int64_t k0 = kb * kTileK;
    if (pf != nullptr) {
      for (int64_t r = 0; r < 2 * kTile; ++r) {
        _mm_prefetch(reinterpret_cast<const char*>(pf + r * k + k0),
                     _MM_HINT_T1);
      }
    }
    if (apack != nullptr) {
      _tile_loadd(4, apack + (kb - kb0) * kTile * kTileK,
                  kTileK * sizeof(bf16));
    } else if (kb < full_k && rows[0] == kTile) {
      _tile_loadd(4, wa[0] + k0, stride);
    } else {
      PadA(wa[0], rows[0], k, k0, abuf[0]);
      _tile_loadd(4, abuf[0], kTileK * sizeof(bf16));
    }
    if constexpr (NA == 2) {
      if (apack != nullptr) {
        _tile_loadd(5, apack + (kb1 - kb0 + kb - kb0) * kTile * kTileK,
                    kTileK * sizeof(bf16));
      } else if (kb < full_k && rows[1] == kTile) {
        _tile_loadd(5, wa[1] + k0, stride);
      } else {
        PadA(wa[1], rows[1], k, k0, abuf[1]);
        _tile_loadd(5, abuf[1], kTileK * sizeof(bf16));
      }
    }
    _tile_loadd(6, xb0 + kb * kTileU32, kTile * sizeof(uint32_t));
    if constexpr (NB == 2) {
      _tile_loadd(7, xb1 + kb * kTileU32, kTile * sizeof(uint32_t));
    }
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NB == 2) _tile_dpbf16ps(1, 4, 7);
    if constexpr (NA == 2) _tile_dpbf16ps(2, 5, 6);
    if constexpr (NA == 2 && NB == 2) _tile_dpbf16ps(3, 5, 7);
  }

  _tile_stored(0, park_at[0], kCBytes);
  if constexpr (NB == 2) _tile_stored(1, park_at[1], kCBytes);
  if constexpr (NA == 2) _tile_stored(2, park_at[2], kCBytes);
  if constexpr (NA == 2 && NB == 2) _tile_stored(3, park_at[3], kCBytes);
  if (kb1 < kblocks) return;

  // C[a][b] -> y[16 (mb0 + b) + c, j0 + 16 a + i] = C[i][c] (+ bias).
  const float* c[2][2] = {{park_at[0], park_at[1]}, {park_at[2], park_at[3]}};
  // Column r of a C tile is 16 consecutive outputs of row r of y: one
  // gather from the stored tile, + bias, one masked store.
  const __m512i column = _mm512_mullo_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
      _mm512_set1_epi32(kTile));
  for (int a = 0; a < NA; ++a) {
    const int64_t ja = j0 + a * kTile;
    const auto mask = static_cast<__mmask16>((1u << rows[a]) - 1);
    const __m512 b16 = bias
                           ? _mm512_castsi512_ps(_mm512_slli_epi32(
                                 _mm512_cvtepu16_epi32(
                                     _mm256_maskz_loadu_epi16(mask, bias + ja)),
                                 16))
                           : _mm512_setzero_ps();
    for (int b = 0; b < NB; ++b) {
      const int64_t r0 = (mb0 + b) * kTile;
      const int64_t nr = std::min(kTile, m - r0);
      for (int64_t r = 0; r < nr; ++r) {
        __m512 v = _mm512_i32gather_ps(
            _mm512_add_epi32(column, _mm512_set1_epi32(static_cast<int>(r))),
            c[a][b], sizeof(float));
        if (bias) v = _mm512_add_ps(v, b16);
        _mm512_mask_storeu_ps(y + (r0 + r) * n + ja, mask, v);
      }
    }
  }
}

// Row blocks of x (16 rows each) per pass over a thread's weight rows: the
// packed block (kblocks KiB per row block) stays in L2 (~1 MiB) while each
// pair of weight tiles comes from DRAM once per pass. Balanced and even.
int64_t RowBlocksPerPass(int64_t mblocks, int64_t kblocks) {
  const int64_t limit = std::max<int64_t>(
      2, (int64_t{1024} / std::max<int64_t>(kblocks, 1)) & ~1);
  if (mblocks <= limit) return mblocks;
  const int64_t passes = (mblocks + limit - 1) / limit;
  const int64_t per = (mblocks + passes - 1) / passes;
  return (per + 1) & ~int64_t{1};
}

// k blocks per chunk when a pass has several pairs of row blocks: the two
// weight tiles' chunk, packed (PackA), 2 x 16 rows x 256 k = 16 KiB, stays in
// L1 for all of them, and only the x tiles stream from L2. On the Xeon this
// was written on (1 thread, k 2048, n 2816): m = 512 from ~340 to ~500
// GFLOP/s, m = 64 from ~350 to ~400; chunks of 16 blocks measured the same,
// unpacked chunks no better than none.
constexpr int64_t kChunkBlocks = 8;

// The A tiles of weight tiles j0 (and j0 + 16 when na == 2), k blocks
// [kb0, kb1), one after the other (16 x 64 bytes each, the tiles of j0 first):
// read in place, W's rows are 2k bytes apart, and for k = 2048 (4 KiB apart)
// all 16 lines of a tile fall in one L1 set, so a tile reused by many row
// blocks would keep coming from L2.
MOESERVE_AVX512BF16 void PackA(const bf16* w, int64_t n, int64_t k, int64_t j0,
                               int na, int64_t kb0, int64_t kb1, bf16* out) {
  for (int a = 0; a < na; ++a) {
    const int64_t ja = j0 + a * kTile;
    for (int64_t kb = kb0; kb < kb1; ++kb) {
      PadA(w + ja * k, std::min(kTile, n - ja), k, kb * kTileK, out);
      out += kTile * kTileK;
    }
  }
}

// Weight tiles [t0, t1) (16 rows each) of y for all rows of x. The tile
// configuration is loaded here and released at the end, on whichever pool
// thread runs the range: no tile state outlives the call (a live tile state
// makes every context switch of the thread save 8 KiB more).
MOESERVE_AVX512BF16 void ColsAmx(const uint32_t* xp, int64_t m, int64_t k,
                                 int64_t kblocks, const bf16* w, int64_t n,
                                 const bf16* bias, float* y, int64_t t0,
                                 int64_t t1) {
  TileConfig cfg{};
  cfg.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = kTile;
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
  const int64_t mblocks = (m + kTile - 1) / kTile;
  const int64_t per_pass = RowBlocksPerPass(mblocks, kblocks);
  // C tiles parked between chunks of k: 4 per pair of row blocks.
  thread_local std::vector<float> park;
  park.resize((per_pass + 1) / 2 * 4 * kTileU32);
  // Chunks of k and packed weight tiles pay off when several pairs of row
  // blocks reuse them; one pair reads each weight tile once anyway.
  const bool pack = per_pass > 2;
  const int64_t chunk = pack ? kChunkBlocks : kblocks;
  thread_local std::vector<bf16> apack;
  if (pack) apack.resize(2 * chunk * kTile * kTileK);
  for (int64_t p0 = 0; p0 < mblocks; p0 += per_pass) {
    const int64_t p1 = std::min(mblocks, p0 + per_pass);
    for (int64_t t = t0; t < t1; t += 2) {
      const int64_t j0 = t * kTile;
      const bool two_a = t + 1 < t1;
      // The next two weight tiles, when the range holds them whole.
      const bf16* next = t + 4 <= t1 ? w + (j0 + 2 * kTile) * k : nullptr;
      for (int64_t kb0 = 0; kb0 < kblocks; kb0 += chunk) {
        const int64_t kb1 = std::min(kblocks, kb0 + chunk);
        const bf16* ap = nullptr;
        if (pack) {
          PackA(w, n, k, j0, two_a ? 2 : 1, kb0, kb1, apack.data());
          ap = apack.data();
        }
        for (int64_t mb = p0; mb < p1; mb += 2) {
          const bool two_b = mb + 1 < p1;
          const bf16* pf = mb == p0 ? next : nullptr;
          float* pk = park.data() + (mb - p0) / 2 * 4 * kTileU32;
          if (two_a && two_b) {
            Block<2, 2>(xp, m, k, kblocks, w, n, bias, y, j0, mb, pf, kb0, kb1,
                        pk, ap);
          } else if (two_a) {
            Block<2, 1>(xp, m, k, kblocks, w, n, bias, y, j0, mb, pf, kb0, kb1,
                        pk, ap);
          } else if (two_b) {
            Block<1, 2>(xp, m, k, kblocks, w, n, bias, y, j0, mb, pf, kb0, kb1,
                        pk, ap);
          } else {
            Block<1, 1>(xp, m, k, kblocks, w, n, bias, y, j0, mb, pf, kb0, kb1,
                        pk, ap);
          }
        }
      }
    }
  }
  _tile_release();
}

}  // namespace

bool AmxBf16Usable() {
  static const bool usable = [] {
    unsigned a, b, c, d;
    // CPUID.7.0:EDX bit 24 AMX-TILE, bit 22 AMX-BF16.
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if ((d & (1u << 24)) == 0 || (d & (1u << 22)) == 0) return false;
    // The OS manages the tile state: OSXSAVE, then XCR0 bits 17 (XTILECFG)
    // and 18 (XTILEDATA).
    if (!__get_cpuid(1, &a, &b, &c, &d) || (c & (1u << 27)) == 0) return false;
    uint32_t xcr0_lo, xcr0_hi;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo & (3u << 17)) != (3u << 17)) return false;
    // Linux hands the 8 KiB tile data state out per process on request;
    // without it the first tile instruction kills the process (SIGILL).
    constexpr long kArchReqXcompPerm = 0x1023;
    constexpr long kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return usable;
}

void MatMulAmxBf16(ThreadPool& pool, const float* x, int64_t m, int64_t k,
                   const bf16* w, int64_t n, const bf16* bias, float* y) {
  const int64_t kblocks = (k + kTileK - 1) / kTileK;
  const int64_t mblocks = (m + kTile - 1) / kTile;
  // The packed x is the calling thread's, read by the pool during this call.
  thread_local std::vector<uint32_t> packed;
  packed.resize(mblocks * kblocks * kTileU32);
  PackX(x, m, k, kblocks, packed.data());
  const uint32_t* xp = packed.data();
  // Threads split the weight rows in whole tiles; tiny products stay on the
  // calling thread because a wake-up costs more than they do.
  const int64_t tiles = (n + kTile - 1) / kTile;
  const int64_t work_per_tile = kTile * kblocks * kTileK * mblocks * kTile;
  const int64_t min_tiles = std::max<int64_t>(
      1, (int64_t{1} << 17) / std::max<int64_t>(work_per_tile, 1));
  pool.ParallelFor(
      tiles,
      [&](int64_t t0, int64_t t1) {
        ColsAmx(xp, m, k, kblocks, w, n, bias, y, t0, t1);
      },
      min_tiles);
}

#else  // !__x86_64__

bool AmxBf16Usable() { return false; }

void MatMulAmxBf16(ThreadPool&, const float*, int64_t, int64_t, const bf16*,
                   int64_t, const bf16*, float*) {}

#endif  // __x86_64__

}  // namespace moeserve::kernels::cpu
