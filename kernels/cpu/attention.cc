#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/elementwise.h"
#if defined(__x86_64__)
#include "kernels/cpu/simd_x86.h"
#endif

namespace moeserve::kernels::cpu {
namespace {

inline float Dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  }
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
            ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

struct Geometry {
  int64_t block_size, kv_heads, head_dim, heads, group, max_blocks;
  // Floats between consecutive tokens of one block (all kv heads).
  int64_t token_stride() const { return kv_heads * head_dim; }
  int64_t block_stride() const { return block_size * token_stride(); }
};

// One query row of one head: out = softmax(q K^T * scale) V over cache
// positions 0..pos, walking the sequence's block table.
void AttendOne(const Geometry& g, const float* q, int64_t pos,
               const int32_t* table, const float* k_pool, const float* v_pool,
               int64_t kv_head, float scale, float* out) {
  float scores[kMaxBlockSize];
  float acc[kMaxHeadDim];
  std::fill(acc, acc + g.head_dim, 0.0f);
  float running_max = -std::numeric_limits<float>::infinity();
  float denom = 0.0f;
  const int64_t ctx = pos + 1;
  for (int64_t start = 0; start < ctx; start += g.block_size) {
    const int64_t rows = std::min(g.block_size, ctx - start);
    const int64_t base =
        static_cast<int64_t>(table[start / g.block_size]) * g.block_stride() +
        kv_head * g.head_dim;
    float block_max = -std::numeric_limits<float>::infinity();
    for (int64_t t = 0; t < rows; ++t) {
      scores[t] =
          Dot(q, k_pool + base + t * g.token_stride(), g.head_dim) * scale;
      block_max = std::max(block_max, scores[t]);
    }
    const float new_max = std::max(running_max, block_max);
    // Rescale what was accumulated against the old maximum.
    const float correction = std::exp(running_max - new_max);
    denom *= correction;
    for (int64_t d = 0; d < g.head_dim; ++d) acc[d] *= correction;
    for (int64_t t = 0; t < rows; ++t) {
      const float p = std::exp(scores[t] - new_max);
      denom += p;
      const float* v = v_pool + base + t * g.token_stride();
      for (int64_t d = 0; d < g.head_dim; ++d) acc[d] += p * v[d];
    }
    running_max = new_max;
  }
  const float inv = 1.0f / denom;
  for (int64_t d = 0; d < g.head_dim; ++d) out[d] = acc[d] * inv;
}

#if defined(__x86_64__)
// Query heads of one KV head that AttendGroupAvx2 takes together: 4 keeps
// its 2 x 4 accumulators plus the loaded rows inside the 16 AVX2 registers.
constexpr int64_t kGroupTile = 4;

// For each of S heads: acc[j][d .. d + 8V) = acc * correction[j] + sum over
// the block's rows t of p[j][t] * v_t[d .. d + 8V). Each V row is loaded
// once for all S heads; the S x V accumulators are independent FMA chains.
template <int S, int V>
MOESERVE_AVX2 inline void AccumulateRows(float (*acc)[kMaxHeadDim], int64_t d,
                                         const float* correction,
                                         const float (*p)[kMaxBlockSize + 8],
                                         int64_t rows, const float* v,
                                         int64_t stride) {
  __m256 a[S][V];
  for (int j = 0; j < S; ++j) {
    const __m256 c = _mm256_set1_ps(correction[j]);
    for (int i = 0; i < V; ++i) {
      a[j][i] = _mm256_mul_ps(_mm256_load_ps(acc[j] + d + 8 * i), c);
    }
  }
  for (int64_t t = 0; t < rows; ++t) {
    const float* vt = v + t * stride + d;
    __m256 vv[V];
    for (int i = 0; i < V; ++i) vv[i] = _mm256_loadu_ps(vt + 8 * i);
    for (int j = 0; j < S; ++j) {
      const __m256 w = _mm256_set1_ps(p[j][t]);
      for (int i = 0; i < V; ++i) a[j][i] = _mm256_fmadd_ps(w, vv[i], a[j][i]);
    }
  }
  for (int j = 0; j < S; ++j) {
    for (int i = 0; i < V; ++i) _mm256_store_ps(acc[j] + d + 8 * i, a[j][i]);
  }
}

// AttendOne with AVX2+FMA for S (1..kGroupTile) query heads that share one
// KV head, their q and out rows contiguous (head_dim apart), head_dim a
// multiple of 8 (every model we serve). The same online softmax block by
// block; what changes:
//   - the scores' exponentials are taken eight at a time (ExpAvx2, within
//     2 ulp of std::exp) instead of one libm call per cached position (that
//     call was about a third of a decode step at a 512-token context);
//   - the q.k dots, the block's sum of weights and the p.v updates run on
//     vectors, p.v in independent FMA chains (4 for one head, 2 per head for
//     several) so the loop runs at the FMA units' throughput;
//   - each K and V row of the cache is read once for all S heads instead of
//     once per head, which is what bounds grouped-query attention at long
//     contexts (Mixtral: 4 heads per KV head).
// Each head's arithmetic is the same, in the same order, whatever S is, so a
// head's result is bit-identical to that head computed alone.
template <int S>
MOESERVE_AVX2 void AttendGroupAvx2(const Geometry& g, const float* q,
                                   int64_t pos, const int32_t* table,
                                   const float* k_pool, const float* v_pool,
                                   int64_t kv_head, float scale, float* out) {
  alignas(32) float scores[S][kMaxBlockSize + 8];
  alignas(32) float acc[S][kMaxHeadDim];
  const int64_t hd = g.head_dim;
  for (int j = 0; j < S; ++j) {
    for (int64_t d = 0; d < hd; d += 8) {
      _mm256_store_ps(acc[j] + d, _mm256_setzero_ps());
    }
  }
  float running_max[S], denom[S];
  for (int j = 0; j < S; ++j) {
    running_max[j] = -std::numeric_limits<float>::infinity();
    denom[j] = 0.0f;
  }
  const int64_t ctx = pos + 1;
  const int64_t stride = g.token_stride();
  for (int64_t start = 0; start < ctx; start += g.block_size) {
    const int64_t rows = std::min(g.block_size, ctx - start);
    const int64_t base =
        static_cast<int64_t>(table[start / g.block_size]) * g.block_stride() +
        kv_head * g.head_dim;
    for (int64_t t = 0; t < rows; ++t) {
      const float* k = k_pool + base + t * stride;
      __m256 s0[S], s1[S];
      for (int j = 0; j < S; ++j) s0[j] = s1[j] = _mm256_setzero_ps();
      int64_t d = 0;
      for (; d + 16 <= hd; d += 16) {
        const __m256 k0 = _mm256_loadu_ps(k + d),
                     k1 = _mm256_loadu_ps(k + d + 8);
        for (int j = 0; j < S; ++j) {
          s0[j] = _mm256_fmadd_ps(_mm256_loadu_ps(q + j * hd + d), k0, s0[j]);
          s1[j] =
              _mm256_fmadd_ps(_mm256_loadu_ps(q + j * hd + d + 8), k1, s1[j]);
        }
      }
      if (d < hd) {
        const __m256 k0 = _mm256_loadu_ps(k + d);
        for (int j = 0; j < S; ++j) {
          s0[j] = _mm256_fmadd_ps(_mm256_loadu_ps(q + j * hd + d), k0, s0[j]);
        }
      }
      for (int j = 0; j < S; ++j) {
        scores[j][t] = HorizontalSum(_mm256_add_ps(s0[j], s1[j])) * scale;
      }
    }
    const int64_t padded = (rows + 7) / 8 * 8;
    float correction[S];
    for (int j = 0; j < S; ++j) {
      float block_max = -std::numeric_limits<float>::infinity();
      for (int64_t t = 0; t < rows; ++t) {
        block_max = std::max(block_max, scores[j][t]);
      }
      const float new_max = std::max(running_max[j], block_max);
      correction[j] = std::exp(running_max[j] - new_max);
      running_max[j] = new_max;
      for (int64_t t = rows; t < padded; ++t) scores[j][t] = new_max;
      const __m256 vmax = _mm256_set1_ps(new_max);
      for (int64_t t = 0; t < padded; t += 8) {
        _mm256_store_ps(
            scores[j] + t,
            ExpAvx2(_mm256_sub_ps(_mm256_load_ps(scores[j] + t), vmax)));
      }
      for (int64_t t = rows; t < padded; ++t) scores[j][t] = 0.0f;
      __m256 sum = _mm256_setzero_ps();
      for (int64_t t = 0; t < padded; t += 8) {
        sum = _mm256_add_ps(sum, _mm256_load_ps(scores[j] + t));
      }
      denom[j] = denom[j] * correction[j] + HorizontalSum(sum);
    }
    // p.v: kVecs vectors of dims at a time for all S heads (S x kVecs
    // chains), then single vectors.
    constexpr int kVecs = S == 1 ? 4 : 2;
    const float* v = v_pool + base;
    int64_t d = 0;
    for (; d + 8 * kVecs <= hd; d += 8 * kVecs) {
      AccumulateRows<S, kVecs>(acc, d, correction, scores, rows, v, stride);
    }
    for (; d < hd; d += 8) {
      AccumulateRows<S, 1>(acc, d, correction, scores, rows, v, stride);
    }
  }
  for (int j = 0; j < S; ++j) {
    const __m256 inv = _mm256_set1_ps(1.0f / denom[j]);
    for (int64_t d = 0; d < hd; d += 8) {
      _mm256_storeu_ps(out + j * hd + d,
                       _mm256_mul_ps(_mm256_load_ps(acc[j] + d), inv));
    }
  }
}

// `heads` (1..kGroupTile) query heads of one KV head, contiguous.
MOESERVE_AVX2 void AttendHeadsAvx2(const Geometry& g, int64_t heads,
                                   const float* q, int64_t pos,
                                   const int32_t* table, const float* k_pool,
                                   const float* v_pool, int64_t kv_head,
                                   float scale, float* out) {
  switch (heads) {
    case 1:
      AttendGroupAvx2<1>(g, q, pos, table, k_pool, v_pool, kv_head, scale, out);
      return;
    case 2:
      AttendGroupAvx2<2>(g, q, pos, table, k_pool, v_pool, kv_head, scale, out);
      return;
    case 3:
      AttendGroupAvx2<3>(g, q, pos, table, k_pool, v_pool, kv_head, scale, out);
      return;
    default:
      AttendGroupAvx2<4>(g, q, pos, table, k_pool, v_pool, kv_head, scale, out);
      return;
  }
}
#endif  // __x86_64__

}  // namespace

void KvWriteRows(ThreadPool& pool, const Tensor& k, const Tensor& v,
                 const int32_t* slot_mapping, const PagedKvCache& cache) {
  const int64_t row = k.dim(1) * k.dim(2);
  const float* ks = k.data<float>();
  const float* vs = v.data<float>();
  float* kp = cache.k_pool.data<float>();
  float* vp = cache.v_pool.data<float>();
  // Slots are distinct in valid use; if not, rows race but stay in bounds.
  for (int64_t i = 0; i < k.dim(0); ++i) {
    const int64_t slot = slot_mapping[i];
    if (slot < 0) continue;
    std::memcpy(kp + slot * row, ks + i * row, row * sizeof(float));
    std::memcpy(vp + slot * row, vs + i * row, row * sizeof(float));
  }
  (void)pool;  // A few KB per token: not worth a wake-up.
}

void PagedAttention(ThreadPool& pool, Isa isa, const Tensor& q,
                    const PagedKvCache& cache, const AttentionBatch& batch,
                    const Tensor& out) {
  const Tensor& kp = cache.k_pool;
  Geometry g;
  g.block_size = kp.dim(1);
  g.kv_heads = kp.dim(2);
  g.head_dim = kp.dim(3);
  g.heads = q.dim(1);
  g.group = g.heads / g.kv_heads;
  g.max_blocks = batch.block_tables.dim(1);
  const int64_t n_q = q.dim(0);
  const int32_t* qstart = batch.query_start.data<int32_t>();
  const int64_t num_seqs = batch.query_start.dim(0) - 1;
  const int32_t* positions = batch.positions.data<int32_t>();
  const int32_t* tables = batch.block_tables.data<int32_t>();
  const float scale = 1.0f / std::sqrt(static_cast<float>(g.head_dim));
  const float* qd = q.data<float>();
  float* od = out.data<float>();
  const float* kd = kp.data<float>();
  const float* vd = cache.v_pool.data<float>();
  // The block table of the sequence owning query `row`: that of the last s
  // with qstart[s] <= row.
  auto table_of = [&](int64_t row) {
    const int64_t s =
        std::upper_bound(qstart, qstart + num_seqs + 1, row) - qstart - 1;
    return tables + s * g.max_blocks;
  };
#if defined(__x86_64__)
  if (isa != Isa::kScalar && g.head_dim % 8 == 0) {
    // One item per (query row, KV head, tile of up to kGroupTile of its
    // query heads): the K/V rows are walked once per tile.
    const int64_t tiles = (g.group + kGroupTile - 1) / kGroupTile;
    pool.ParallelFor(n_q * g.kv_heads * tiles, [&](int64_t b, int64_t e) {
      for (int64_t item = b; item < e; ++item) {
        const int64_t row = item / (g.kv_heads * tiles);
        const int64_t kv = item / tiles % g.kv_heads, tile = item % tiles;
        const int64_t h0 = kv * g.group + tile * kGroupTile;
        const int64_t heads = std::min(kGroupTile, (kv + 1) * g.group - h0);
        const int64_t at = (row * g.heads + h0) * g.head_dim;
        AttendHeadsAvx2(g, heads, qd + at, positions[row], table_of(row), kd,
                        vd, kv, scale, od + at);
      }
    });
    return;
  }
#endif
  (void)isa;
  pool.ParallelFor(n_q * g.heads, [&](int64_t b, int64_t e) {
    for (int64_t item = b; item < e; ++item) {
      const int64_t row = item / g.heads, h = item % g.heads;
      AttendOne(g, qd + item * g.head_dim, positions[row], table_of(row), kd,
                vd, h / g.group, scale, od + item * g.head_dim);
    }
  });
}

}  // namespace moeserve::kernels::cpu
