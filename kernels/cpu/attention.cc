#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/elementwise.h"

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

void PagedAttention(ThreadPool& pool, const Tensor& q,
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
  pool.ParallelFor(n_q * g.heads, [&](int64_t b, int64_t e) {
    for (int64_t item = b; item < e; ++item) {
      const int64_t row = item / g.heads, h = item % g.heads;
      // The sequence owning this row: last s with qstart[s] <= row.
      const int64_t s =
          std::upper_bound(qstart, qstart + num_seqs + 1, row) - qstart - 1;
      AttendOne(g, qd + item * g.head_dim, positions[row],
                tables + s * g.max_blocks, kd, vd, h / g.group, scale,
                od + item * g.head_dim);
    }
  });
}

}  // namespace moeserve::kernels::cpu
