#include "engine/spec_decode/expert_affinity.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/architecture.h"
#include "engine/spec_decode/expert_matrices.h"

namespace moeserve::engine::spec_decode {
namespace {

// Columns converted per expert at a time: E * kSegment floats stay in cache
// while every pair is compared.
constexpr int64_t kSegment = 2048;

// One expert's three matrices (bf16, row-major, possibly unaligned).
float Bf16ToF32(const std::byte* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// sum((a - b)^2) over n floats, in eight lanes the compiler can vectorise.
float SumSquaredDiff(const float* a, const float* b, int64_t n) {
  float lane[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) {
      const float d = a[i + j] - b[i + j];
      lane[j] += d * d;
    }
  }
  for (; i < n; ++i) {
    const float d = a[i] - b[i];
    lane[0] += d * d;
  }
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
         ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

// The squared distances of one layer's experts over the rows r with
// r % stride == 0 of each matrix, into sq[a * E + b] (a < b).
void LayerSquaredDistances(const std::vector<ExpertMatrices>& experts,
                           int64_t hidden, int64_t ffn, int64_t stride,
                           std::vector<double>* sq) {
  const int e_count = static_cast<int>(experts.size());
  sq->assign(static_cast<size_t>(e_count) * e_count, 0.0);
  const std::array<int64_t, 3> rows = {ffn, ffn, hidden};
  const std::array<int64_t, 3> cols = {hidden, hidden, ffn};
  std::vector<float> buf(static_cast<size_t>(e_count) * kSegment);
  for (int k = 0; k < 3; ++k) {
    for (int64_t r = 0; r < rows[k]; r += stride) {
      for (int64_t c0 = 0; c0 < cols[k]; c0 += kSegment) {
        const int64_t len = std::min(kSegment, cols[k] - c0);
        const size_t elem = static_cast<size_t>(r * cols[k] + c0);
        for (int e = 0; e < e_count; ++e) {
          const std::byte* src = experts[e].m[k] + elem * 2;
          float* dst = buf.data() + static_cast<size_t>(e) * kSegment;
          for (int64_t i = 0; i < len; ++i) dst[i] = Bf16ToF32(src + i * 2);
        }
        for (int a = 0; a < e_count; ++a) {
          const float* fa = buf.data() + static_cast<size_t>(a) * kSegment;
          for (int b = a + 1; b < e_count; ++b) {
            const float* fb = buf.data() + static_cast<size_t>(b) * kSegment;
            (*sq)[static_cast<size_t>(a) * e_count + b] +=
                SumSquaredDiff(fa, fb, len);
          }
        }
      }
    }
  }
}

}  // namespace

int64_t ExpertAffinity::RowStride(int num_experts, int64_t hidden, int64_t ffn,
                                  int64_t max_pair_elements_per_layer) {
  const int64_t bound = std::max<int64_t>(max_pair_elements_per_layer, 1);
  const int64_t pairs =
      static_cast<int64_t>(num_experts) * (num_experts - 1) / 2;
  if (pairs <= 0 || hidden <= 0 || ffn <= 0) return 1;
  // pairs * 3 * ffn * hidden in double: a huge model must not overflow.
  const double work = static_cast<double>(pairs) * 3.0 *
                      static_cast<double>(ffn) * static_cast<double>(hidden);
  if (work <= static_cast<double>(bound)) return 1;
  const double stride = std::ceil(work / static_cast<double>(bound));
  // A stride past the longest matrix keeps row 0 of each only.
  return static_cast<int64_t>(
      std::min(stride, static_cast<double>(std::max(hidden, ffn))));
}

absl::StatusOr<ExpertAffinity> ExpertAffinity::Compute(
    const ModelWeights& weights) {
  return Compute(weights, kMaxPairElementsPerLayer);
}

absl::StatusOr<ExpertAffinity> ExpertAffinity::Compute(
    const ModelWeights& weights, int64_t max_pair_elements_per_layer) {
  if (max_pair_elements_per_layer < 1) {
    return absl::InvalidArgumentError(
        "max_pair_elements_per_layer must be >= 1");
  }
  const int layers = weights.num_layers();
  const int e_count = weights.num_experts();
  const int64_t hidden = weights.config().hidden_size;
  const int64_t ffn = weights.config().expert_intermediate_size;
  if (layers < 0 || e_count < 0 || hidden <= 0 || ffn <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model shape ", layers, " layers x ", e_count,
                     " experts of ", hidden, " x ", ffn, " has no experts"));
  }
  ExpertAffinity table(
      layers, e_count,
      RowStride(e_count, hidden, ffn, max_pair_elements_per_layer));
  table.distances_.assign(static_cast<size_t>(layers) * e_count * e_count,
                          0.0f);
  const size_t matrix_bytes = static_cast<size_t>(hidden * ffn * 2);
  std::vector<ExpertMatrices> experts(e_count);
  // A quantized checkpoint's experts, dequantized one layer at a time.
  std::vector<std::vector<uint16_t>> dequantized(e_count);
  std::vector<double> sq;
  for (int layer = 0; layer < layers; ++layer) {
    for (int e = 0; e < e_count; ++e) {
      absl::StatusOr<ExpertMatrices> m = LocateExpertMatrices(
          weights, layer, e, matrix_bytes, &dequantized[e]);
      if (!m.ok()) return m.status();
      experts[e] = *m;
    }
    LayerSquaredDistances(experts, hidden, ffn, table.row_stride_, &sq);
    float* out = table.distances_.data() +
                 static_cast<size_t>(layer) * e_count * e_count;
    for (int a = 0; a < e_count; ++a) {
      for (int b = a + 1; b < e_count; ++b) {
        const float d = static_cast<float>(
            std::sqrt(sq[static_cast<size_t>(a) * e_count + b]));
        out[static_cast<size_t>(a) * e_count + b] = d;
        out[static_cast<size_t>(b) * e_count + a] = d;
      }
    }
  }
  return table;
}

int ExpertAffinity::Nearest(int layer, int expert,
                            std::span<const int> allowed) const {
  if (layer < 0 || layer >= num_layers_ || expert < 0 ||
      expert >= num_experts_) {
    return -1;
  }
  int best = -1;
  float best_distance = 0;
  for (int candidate : allowed) {
    if (candidate < 0 || candidate >= num_experts_) continue;
    if (candidate == expert) return expert;
    const float d = Distance(layer, expert, candidate);
    if (best < 0 || d < best_distance ||
        (d == best_distance && candidate < best)) {
      best = candidate;
      best_distance = d;
    }
  }
  return best;
}

}  // namespace moeserve::engine::spec_decode
