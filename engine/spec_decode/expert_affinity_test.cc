#include "engine/spec_decode/expert_affinity.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "engine/architecture.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"
#include "engine/testing/model_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moeserve::engine::spec_decode {
namespace {

using engine::testing::TestTensor;
using nlohmann::json;

// The tiny mixtral of model_writer: 2 layers, 4 experts, hidden 64, ffn 32.
constexpr int kLayers = 2;
constexpr int kExperts = 4;
constexpr int64_t kHidden = 64;
constexpr int64_t kFfn = 32;
constexpr int64_t kElements = 3 * kHidden * kFfn;  // per expert

std::string Bf16Bytes(float value, size_t count) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const uint16_t h = static_cast<uint16_t>(bits >> 16);
  std::string out(count * 2, '\0');
  for (size_t i = 0; i < count; ++i) std::memcpy(&out[i * 2], &h, 2);
  return out;
}

float Bf16At(const std::string& bytes, size_t i) {
  uint16_t h;
  std::memcpy(&h, bytes.data() + i * 2, 2);
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

ExpertTensorNames Names(int layer, int expert) {
  absl::StatusOr<ModelConfig> config =
      ParseModelConfig(engine::testing::TinyMixtralConfig().dump());
  EXPECT_TRUE(config.ok()) << config.status();
  return config->architecture->ExpertNames(layer, expert);
}

// Finite bf16 values in [-2, 2] in steps of 1/64, from a hash of (name, i)
// (model_writer's pattern bytes include NaN and Inf bit patterns).
std::string FiniteBytes(const std::string& name, size_t count) {
  std::string out(count * 2, '\0');
  uint64_t h = std::hash<std::string>{}(name);
  for (size_t i = 0; i < count; ++i) {
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    const float v =
        static_cast<float>(static_cast<int>((h >> 33) % 257) - 128) / 64.f;
    out.replace(i * 2, 2, Bf16Bytes(v, 1));
  }
  return out;
}

// Writes the tiny model with finite expert weights; `constants` (layer,
// expert) -> value makes every weight of that expert that constant.
std::string WriteModel(const std::map<std::pair<int, int>, float>& constants,
                       std::vector<TestTensor>* tensors_out = nullptr) {
  const std::string dir = engine::testing::MakeTempDir();
  absl::Status s = engine::testing::WriteTinyModel(
      dir, engine::testing::TinyMixtralConfig(),
      [&](std::vector<TestTensor>* tensors) {
        for (int l = 0; l < kLayers; ++l) {
          for (int e = 0; e < kExperts; ++e) {
            const ExpertTensorNames n = Names(l, e);
            for (TestTensor& t : *tensors) {
              if (t.name == n.gate || t.name == n.up || t.name == n.down) {
                t.data = FiniteBytes(t.name, t.data.size() / 2);
              }
            }
          }
        }
        for (const auto& [id, value] : constants) {
          const ExpertTensorNames n = Names(id.first, id.second);
          for (TestTensor& t : *tensors) {
            if (t.name == n.gate || t.name == n.up || t.name == n.down) {
              t.data = Bf16Bytes(value, t.data.size() / 2);
            }
          }
        }
        if (tensors_out != nullptr) *tensors_out = *tensors;
      });
  EXPECT_TRUE(s.ok()) << s;
  return dir;
}

std::unique_ptr<ModelWeights> Load(const std::string& dir, bool pack = true) {
  auto w = ModelWeights::Load(dir, LoadOptions{.pack_experts = pack});
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? *std::move(w) : nullptr;
}

// The reference: the distance over rows r % stride == 0 of each matrix,
// straight from the tensors that were written.
double ReferenceDistance(const std::vector<TestTensor>& tensors, int layer,
                         int a, int b, int64_t stride) {
  auto data = [&](const std::string& name) -> const std::string& {
    for (const TestTensor& t : tensors) {
      if (t.name == name) return t.data;
    }
    ADD_FAILURE() << "no tensor " << name;
    return tensors.front().data;
  };
  const ExpertTensorNames na = Names(layer, a), nb = Names(layer, b);
  const std::string* ma[3] = {&data(na.gate), &data(na.up), &data(na.down)};
  const std::string* mb[3] = {&data(nb.gate), &data(nb.up), &data(nb.down)};
  const int64_t rows[3] = {kFfn, kFfn, kHidden};
  const int64_t cols[3] = {kHidden, kHidden, kFfn};
  double sum = 0;
  for (int k = 0; k < 3; ++k) {
    for (int64_t r = 0; r < rows[k]; r += stride) {
      for (int64_t c = 0; c < cols[k]; ++c) {
        const double d = static_cast<double>(Bf16At(*ma[k], r * cols[k] + c)) -
                         Bf16At(*mb[k], r * cols[k] + c);
        sum += d * d;
      }
    }
  }
  return std::sqrt(sum);
}

TEST(ExpertAffinityTest, KnownDistancesFromConstantExperts) {
  // Layer 0: constants 0, 1, 3, 7. Layer 1: 2, 0, 2, -1 (experts 0 and 2
  // identical).
  const std::string dir = WriteModel({{{0, 0}, 0.f},
                                      {{0, 1}, 1.f},
                                      {{0, 2}, 3.f},
                                      {{0, 3}, 7.f},
                                      {{1, 0}, 2.f},
                                      {{1, 1}, 0.f},
                                      {{1, 2}, 2.f},
                                      {{1, 3}, -1.f}});
  auto weights = Load(dir);
  ASSERT_NE(weights, nullptr);
  absl::StatusOr<ExpertAffinity> table = ExpertAffinity::Compute(*weights);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->num_layers(), kLayers);
  EXPECT_EQ(table->num_experts(), kExperts);
  EXPECT_TRUE(table->exact());

  const float unit = std::sqrt(static_cast<float>(kElements));
  const float c[2][4] = {{0, 1, 3, 7}, {2, 0, 2, -1}};
  for (int l = 0; l < kLayers; ++l) {
    for (int a = 0; a < kExperts; ++a) {
      for (int b = 0; b < kExperts; ++b) {
        EXPECT_FLOAT_EQ(table->Distance(l, a, b),
                        std::abs(c[l][a] - c[l][b]) * unit)
            << l << " " << a << " " << b;
      }
    }
  }

  // Nearest: the smallest distance among the allowed.
  const std::vector<int> none;
  EXPECT_EQ(table->Nearest(0, 3, std::vector<int>{0, 1, 2}), 2);
  EXPECT_EQ(table->Nearest(0, 0, std::vector<int>{3, 2, 1}), 1);
  EXPECT_EQ(table->Nearest(0, 1, std::vector<int>{3, 0}), 0);
  // The expert itself when allowed, even with an identical lower expert.
  EXPECT_EQ(table->Nearest(1, 2, std::vector<int>{0, 2}), 2);
  EXPECT_EQ(table->Nearest(1, 2, std::vector<int>{3, 0}), 0);  // distance 0
  // Ties: the lower id (1 is 2 away from both 0 and 2; order irrelevant).
  EXPECT_EQ(table->Nearest(1, 1, std::vector<int>{2, 0}), 0);
  EXPECT_EQ(table->Nearest(1, 1, std::vector<int>{2, 0, 3}), 3);  // 1 away
  // Empty, out-of-range entries, out-of-range queries.
  EXPECT_EQ(table->Nearest(0, 1, none), -1);
  EXPECT_EQ(table->Nearest(0, 1, std::vector<int>{-1, 4}), -1);
  EXPECT_EQ(table->Nearest(0, 1, std::vector<int>{-1, 9, 3}), 3);
  EXPECT_EQ(table->Nearest(2, 1, std::vector<int>{0}), -1);
  EXPECT_EQ(table->Nearest(0, 4, std::vector<int>{0}), -1);
}

TEST(ExpertAffinityTest, ExactMatchesABruteForceReference) {
  std::vector<TestTensor> tensors;
  const std::string dir = WriteModel({}, &tensors);  // pattern weights
  auto weights = Load(dir);
  ASSERT_NE(weights, nullptr);
  absl::StatusOr<ExpertAffinity> table = ExpertAffinity::Compute(*weights);
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_TRUE(table->exact());
  for (int l = 0; l < kLayers; ++l) {
    for (int a = 0; a < kExperts; ++a) {
      EXPECT_EQ(table->Distance(l, a, a), 0.f);
      for (int b = a + 1; b < kExperts; ++b) {
        const double want = ReferenceDistance(tensors, l, a, b, 1);
        EXPECT_NEAR(table->Distance(l, a, b), want, want * 1e-5);
        EXPECT_EQ(table->Distance(l, a, b), table->Distance(l, b, a));
      }
    }
  }
}

TEST(ExpertAffinityTest, LargeWorkTakesAStridedSubsampleOfRows) {
  std::vector<TestTensor> tensors;
  const std::string dir = WriteModel({}, &tensors);
  auto weights = Load(dir);
  ASSERT_NE(weights, nullptr);
  // 6 pairs x 6144 elements = 36864 pair-elements; a bound of 10000 needs
  // stride ceil(3.6864) = 4.
  absl::StatusOr<ExpertAffinity> table =
      ExpertAffinity::Compute(*weights, 10000);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_FALSE(table->exact());
  EXPECT_EQ(table->row_stride(), 4);
  for (int l = 0; l < kLayers; ++l) {
    for (int a = 0; a < kExperts; ++a) {
      for (int b = a + 1; b < kExperts; ++b) {
        const double want = ReferenceDistance(tensors, l, a, b, 4);
        EXPECT_NEAR(table->Distance(l, a, b), want, want * 1e-5);
      }
    }
  }
  // Rows off the stride are not looked at: experts that differ only in
  // row 1 of gate are at distance 0 sampled, not exact.
  const ExpertTensorNames n = Names(0, 1);
  std::vector<TestTensor> unused;
  const std::string dir2 = engine::testing::MakeTempDir();
  ASSERT_TRUE(engine::testing::WriteTinyModel(
                  dir2, engine::testing::TinyMixtralConfig(),
                  [&](std::vector<TestTensor>* ts) {
                    for (int e = 0; e < 2; ++e) {
                      const ExpertTensorNames ne = Names(0, e);
                      for (TestTensor& t : *ts) {
                        if (t.name == ne.gate || t.name == ne.up ||
                            t.name == ne.down) {
                          t.data = Bf16Bytes(1.f, t.data.size() / 2);
                        }
                      }
                    }
                    for (TestTensor& t : *ts) {
                      if (t.name == n.gate) {
                        // Row 1 (columns 0..63) of expert 1's gate.
                        const std::string two = Bf16Bytes(2.f, kHidden);
                        t.data.replace(kHidden * 2, two.size(), two);
                      }
                    }
                  })
                  .ok());
  auto w2 = Load(dir2);
  ASSERT_NE(w2, nullptr);
  auto exact = ExpertAffinity::Compute(*w2);
  auto sampled = ExpertAffinity::Compute(*w2, 10000);
  ASSERT_TRUE(exact.ok() && sampled.ok());
  EXPECT_FLOAT_EQ(exact->Distance(0, 0, 1), std::sqrt(64.f));
  EXPECT_EQ(sampled->Distance(0, 0, 1), 0.f);
}

TEST(ExpertAffinityTest, UnpackedModelReadsTheFiles) {
  const std::string dir = WriteModel({});
  auto packed = Load(dir, true);
  auto unpacked = Load(dir, false);
  ASSERT_NE(packed, nullptr);
  ASSERT_NE(unpacked, nullptr);
  ASSERT_EQ(unpacked->expert({0, 0}).data, nullptr);
  auto a = ExpertAffinity::Compute(*packed);
  auto b = ExpertAffinity::Compute(*unpacked);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  for (int l = 0; l < kLayers; ++l) {
    for (int x = 0; x < kExperts; ++x) {
      for (int y = 0; y < kExperts; ++y) {
        EXPECT_EQ(a->Distance(l, x, y), b->Distance(l, x, y));
      }
    }
  }
}

TEST(ExpertAffinityTest, RowStrideBound) {
  const int64_t bound = ExpertAffinity::kMaxPairElementsPerLayer;
  // The demo models are exact.
  EXPECT_EQ(ExpertAffinity::RowStride(8, 256, 384, bound), 1);  // demo
  EXPECT_EQ(ExpertAffinity::RowStride(32, 256, 96, bound), 1);  // demo-fg
  // Mixtral-8x7B: 28 pairs x 176M elements -> 74.
  EXPECT_EQ(ExpertAffinity::RowStride(8, 4096, 14336, bound), 74);
  // One expert (no pairs) or a degenerate shape: nothing to subsample.
  EXPECT_EQ(ExpertAffinity::RowStride(1, 4096, 14336, bound), 1);
  // A stride never passes the longest matrix (row 0 of each remains).
  EXPECT_EQ(ExpertAffinity::RowStride(256, 4096, 14336, 1), 14336);
  // The sampled work stays within the bound (rows rounded up per matrix).
  for (int e : {8, 64, 128, 160}) {
    for (auto [h, f] : {std::pair<int64_t, int64_t>{4096, 14336},
                        {2048, 768},
                        {5120, 1536}}) {
      const int64_t s = ExpertAffinity::RowStride(e, h, f, bound);
      const int64_t rows_ffn = (f + s - 1) / s, rows_hidden = (h + s - 1) / s;
      const int64_t sampled = 2 * rows_ffn * h + rows_hidden * f;
      const int64_t pairs = static_cast<int64_t>(e) * (e - 1) / 2;
      // Rounding up adds at most one row per matrix.
      EXPECT_LE(pairs * sampled, bound + pairs * (2 * h + f))
          << e << " " << h << " " << f;
    }
  }
}

}  // namespace
}  // namespace moeserve::engine::spec_decode
