#include "kernels/cpu/elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace moeserve::kernels::cpu {
namespace {

// Rows per chunk so that one chunk is at least ~16K elements of work.
int64_t MinRows(int64_t row_elems) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(row_elems, 1));
}

inline float Silu(float g) { return g / (1.0f + std::exp(-g)); }
inline float Sigmoid(float g) { return 1.0f / (1.0f + std::exp(-g)); }

}  // namespace

float RopeInvFreq(float theta, int64_t i, int64_t head_dim) {
  // HF: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all fp32.
  const float exponent =
      static_cast<float>(2 * i) / static_cast<float>(head_dim);
  const float p = static_cast<float>(
      std::pow(static_cast<double>(theta), static_cast<double>(exponent)));
  return 1.0f / p;
}

void EmbeddingRows(ThreadPool& pool, const int32_t* ids, int64_t n,
                   const bf16* table, int64_t d, float* out) {
  pool.ParallelFor(
      n,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const bf16* row = table + static_cast<int64_t>(ids[i]) * d;
          float* o = out + i * d;
          for (int64_t j = 0; j < d; ++j) o[j] = Bf16ToFloat(row[j]);
        }
      },
      MinRows(d));
}

void RmsNormRows(ThreadPool& pool, const float* x, int64_t n, int64_t d,
                 const bf16* w, float eps, float* out) {
  pool.ParallelFor(
      n,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const float* xi = x + i * d;
          float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
          int64_t j = 0;
          for (; j + 8 <= d; j += 8) {
            for (int l = 0; l < 8; ++l) acc[l] += xi[j + l] * xi[j + l];
          }
          float ss = 0.0f;
          for (int l = 0; l < 8; ++l) ss += acc[l];
          for (; j < d; ++j) ss += xi[j] * xi[j];
          const float inv = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
          float* o = out + i * d;  // May alias xi: read-before-write per j.
          for (j = 0; j < d; ++j) o[j] = Bf16ToFloat(w[j]) * (xi[j] * inv);
        }
      },
      MinRows(d));
}

void RopeRotateHalfRows(ThreadPool& pool, float* x, int64_t n, int64_t heads,
                        int64_t head_dim, const int32_t* positions,
                        float theta) {
  const int64_t half = head_dim / 2;
  float inv_freq[kMaxHeadDim / 2];
  for (int64_t i = 0; i < half; ++i)
    inv_freq[i] = RopeInvFreq(theta, i, head_dim);
  pool.ParallelFor(
      n,
      [&](int64_t b, int64_t e) {
        float cos_v[kMaxHeadDim / 2], sin_v[kMaxHeadDim / 2];
        for (int64_t t = b; t < e; ++t) {
          const float pos = static_cast<float>(positions[t]);
          for (int64_t i = 0; i < half; ++i) {
            const float angle = pos * inv_freq[i];  // fp32, as HF.
            cos_v[i] = std::cos(angle);
            sin_v[i] = std::sin(angle);
          }
          for (int64_t h = 0; h < heads; ++h) {
            float* v = x + (t * heads + h) * head_dim;
            for (int64_t i = 0; i < half; ++i) {
              const float a = v[i], c = v[i + half];
              v[i] = a * cos_v[i] - c * sin_v[i];
              v[i + half] = c * cos_v[i] + a * sin_v[i];
            }
          }
        }
      },
      MinRows(heads * head_dim * 4));
}

void RouterTopKRows(ThreadPool& pool, const float* logits, int64_t n,
                    int64_t experts, int k, bool normalize, float* weights,
                    int32_t* ids) {
  pool.ParallelFor(
      n,
      [&](int64_t b, int64_t e) {
        float prob[kMaxExperts];
        bool taken[kMaxExperts];
        for (int64_t t = b; t < e; ++t) {
          const float* l = logits + t * experts;
          float mx = -std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j < experts; ++j) mx = std::max(mx, l[j]);
          float sum = 0.0f;
          for (int64_t j = 0; j < experts; ++j) {
            prob[j] = std::exp(l[j] - mx);
            sum += prob[j];
            taken[j] = false;
          }
          const float inv = 1.0f / sum;
          for (int64_t j = 0; j < experts; ++j) prob[j] *= inv;
          // k passes of argmax; strict '>' keeps the lower index on ties.
          float picked = 0.0f;
          for (int s = 0; s < k; ++s) {
            int64_t best = -1;
            for (int64_t j = 0; j < experts; ++j) {
              if (!taken[j] && (best < 0 || prob[j] > prob[best])) best = j;
            }
            taken[best] = true;
            weights[t * k + s] = prob[best];
            ids[t * k + s] = static_cast<int32_t>(best);
            picked += prob[best];
          }
          if (normalize) {
            for (int s = 0; s < k; ++s) weights[t * k + s] /= picked;
          }
        }
      },
      MinRows(experts * k));
}

void SiluMulRows(ThreadPool& pool, const float* gate, int64_t gate_stride,
                 const float* up, int64_t up_stride, int64_t m, int64_t f,
                 float* out) {
  pool.ParallelFor(
      m,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const float* g = gate + i * gate_stride;
          const float* u = up + i * up_stride;
          float* o = out + i * f;
          for (int64_t j = 0; j < f; ++j) o[j] = Silu(g[j]) * u[j];
        }
      },
      MinRows(f * 4));
}

void AddElems(ThreadPool& pool, const float* a, const float* b, int64_t count,
              float* out) {
  pool.ParallelFor(
      count,
      [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) out[i] = a[i] + b[i];
      },
      65536);
}

void GatherRowsF32(ThreadPool& pool, const float* x, int64_t d,
                   const int32_t* rows, int64_t m, float* out) {
  pool.ParallelFor(
      m,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          std::memcpy(out + i * d, x + static_cast<int64_t>(rows[i]) * d,
                      d * sizeof(float));
        }
      },
      MinRows(d));
}

void ScaleAddRowsF32(ThreadPool& pool, const float* x, int64_t m, int64_t d,
                     const int32_t* rows, const float* weights, float* y) {
  // Split columns, not rows: repeated destination rows then never race.
  pool.ParallelFor(
      d,
      [&](int64_t c0, int64_t c1) {
        for (int64_t i = 0; i < m; ++i) {
          const float w = weights[i];
          const float* xi = x + i * d;
          float* yi = y + (rows ? static_cast<int64_t>(rows[i]) : i) * d;
          for (int64_t c = c0; c < c1; ++c) yi[c] += w * xi[c];
        }
      },
      std::max<int64_t>(64, 16384 / std::max<int64_t>(m, 1)));
}

void CombineRowsF32(ThreadPool& pool, const float* x, int64_t d,
                    const float* weights, const int32_t* pairs, int64_t n,
                    int64_t k, float* y) {
  pool.ParallelFor(
      d,
      [&](int64_t c0, int64_t c1) {
        for (int64_t t = 0; t < n; ++t) {
          float* yt = y + t * d;
          for (int64_t j = 0; j < k; ++j) {
            const int32_t p = pairs[t * k + j];
            if (p < 0) break;
            const float w = weights[p];
            const float* xp = x + static_cast<int64_t>(p) * d;
            for (int64_t c = c0; c < c1; ++c) yt[c] += w * xp[c];
          }
        }
      },
      std::max<int64_t>(64, 16384 / std::max<int64_t>(n * k, 1)));
}

void SigmoidGatedAddRows(ThreadPool& pool, const float* x, int64_t n, int64_t d,
                         const float* gate, float* y) {
  pool.ParallelFor(
      n,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const float s = Sigmoid(gate[i]);
          for (int64_t j = 0; j < d; ++j) y[i * d + j] += s * x[i * d + j];
        }
      },
      MinRows(d));
}

void SoftmaxRows(ThreadPool& pool, const float* x, int64_t n, int64_t v,
                 float* out) {
  pool.ParallelFor(
      n,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const float* xi = x + i * v;
          float* o = out + i * v;
          float mx = -std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j < v; ++j) mx = std::max(mx, xi[j]);
          double sum = 0.0;  // V can be 150K: keep the normaliser exact.
          for (int64_t j = 0; j < v; ++j) {
            o[j] = std::exp(xi[j] - mx);
            sum += o[j];
          }
          const float inv = static_cast<float>(1.0 / sum);
          for (int64_t j = 0; j < v; ++j) o[j] *= inv;
        }
      },
      MinRows(v * 4));
}

void ArgmaxRows(ThreadPool& pool, const float* x, int64_t n, int64_t v,
                int32_t* out) {
  pool.ParallelFor(
      n,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const float* xi = x + i * v;
          int64_t best = 0;
          for (int64_t j = 1; j < v; ++j) {
            if (xi[j] > xi[best]) best = j;
          }
          out[i] = static_cast<int32_t>(best);
        }
      },
      MinRows(v));
}

}  // namespace moeserve::kernels::cpu
