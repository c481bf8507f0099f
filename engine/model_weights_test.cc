#include "engine/model_weights.h"

#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "engine/architecture.h"
#include "engine/quant/tensor_convert.h"
#include "engine/testing/model_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/tensor.h"

namespace moeserve::engine {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using testing::TestTensor;

TestTensor* FindTensor(std::vector<TestTensor>* ts, const std::string& name) {
  for (TestTensor& t : *ts) {
    if (t.name == name) return &t;
  }
  ADD_FAILURE() << "no tensor " << name;
  return &ts->front();
}

absl::Status LoadWith(
    const std::function<void(std::vector<TestTensor>*)>& mutate) {
  const std::string dir = testing::MakeTempDir();
  absl::Status s =
      testing::WriteTinyModel(dir, testing::TinyMixtralConfig(), mutate);
  if (!s.ok()) return s;
  return ModelWeights::Load(dir).status();
}

TEST(ModelWeightsTest, LoadsTinyMixtralAndPacksExperts) {
  const std::string dir = testing::MakeTempDir();
  const json config = testing::TinyMixtralConfig();
  ASSERT_TRUE(testing::WriteTinyModel(dir, config).ok());
  auto w = ModelWeights::Load(dir);
  ASSERT_TRUE(w.ok()) << w.status();
  const ModelWeights& m = **w;
  EXPECT_EQ(m.num_layers(), 2);
  EXPECT_EQ(m.num_experts(), 4);
  EXPECT_TRUE(m.unexpected_tensors().empty());

  auto tensors = testing::TensorsForConfig(config);
  ASSERT_TRUE(tensors.ok());
  const size_t matrix = 32 * 64 * 2;
  std::ifstream in(dir + "/model.safetensors", std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  for (int layer = 0; layer < 2; ++layer) {
    for (int e = 0; e < 4; ++e) {
      const ExpertBlob& b = m.expert({layer, e});
      ASSERT_NE(b.data, nullptr);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data) % 64, 0u);
      EXPECT_EQ(b.bytes % 64, 0u);
      EXPECT_EQ(b.gate_bytes, matrix);
      EXPECT_EQ(b.down_bytes, matrix);
      EXPECT_EQ(b.up_offset % 64, 0u);
      EXPECT_EQ(b.down_offset % 64, 0u);
      ExpertTensorNames n = m.config().architecture->ExpertNames(layer, e);
      const std::string& gate = FindTensor(&*tensors, n.gate)->data;
      const std::string& up = FindTensor(&*tensors, n.up)->data;
      const std::string& down = FindTensor(&*tensors, n.down)->data;
      EXPECT_EQ(std::memcmp(b.data + b.gate_offset, gate.data(), matrix), 0);
      EXPECT_EQ(std::memcmp(b.data + b.up_offset, up.data(), matrix), 0);
      EXPECT_EQ(std::memcmp(b.data + b.down_offset, down.data(), matrix), 0);
      // The recorded source offsets point at the same bytes in the file.
      EXPECT_EQ(m.shard_path(b.down_source.shard), dir + "/model.safetensors");
      EXPECT_EQ(file.substr(b.gate_source.file_offset, matrix), gate);
      EXPECT_EQ(file.substr(b.up_source.file_offset, matrix), up);
      EXPECT_EQ(file.substr(b.down_source.file_offset, matrix), down);
    }
  }
  EXPECT_EQ(m.expert_bytes(), 2u * 4u * m.expert({0, 0}).bytes);
  const WeightView* embed = m.Find("model.embed_tokens.weight");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(embed->shape, (std::vector<int64_t>{96, 64}));
  EXPECT_EQ(std::memcmp(
                embed->data,
                FindTensor(&*tensors, "model.embed_tokens.weight")->data.data(),
                embed->bytes),
            0);
  EXPECT_GT(m.non_expert_bytes(), 2u * 96 * 64 * 2);
  EXPECT_EQ(m.Find("model.layers.0.block_sparse_moe.experts.0.w1.weight"),
            nullptr);
}

TEST(ModelWeightsTest, WithoutPackingKeepsSourcesOnly) {
  const std::string dir = testing::MakeTempDir();
  ASSERT_TRUE(testing::WriteTinyModel(dir, testing::TinyMixtralConfig()).ok());
  auto w = ModelWeights::Load(dir, {.pack_experts = false});
  ASSERT_TRUE(w.ok()) << w.status();
  const ExpertBlob& b = (*w)->expert({1, 3});
  EXPECT_EQ(b.data, nullptr);
  EXPECT_EQ(b.up_source.bytes, 32u * 64 * 2);
  EXPECT_GT(b.up_source.file_offset, 8u);
}

TEST(ModelWeightsTest, RefusesMissingTensor) {
  absl::Status s = LoadWith([](std::vector<TestTensor>* ts) {
    std::erase_if(*ts, [](const TestTensor& t) {
      return t.name == "model.layers.1.block_sparse_moe.experts.2.w3.weight";
    });
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("missing tensor \"model.layers.1.block_sparse_moe."
                        "experts.2.w3.weight\""));
}

TEST(ModelWeightsTest, RefusesWrongShapeVsConfig) {
  absl::Status s = LoadWith([](std::vector<TestTensor>* ts) {
    TestTensor* t = FindTensor(ts, "model.layers.0.self_attn.k_proj.weight");
    t->shape = {64, 32};  // Same bytes, transposed.
  });
  EXPECT_THAT(s.message(),
              HasSubstr("k_proj.weight\": wrong shape [64, 32], config "
                        "implies [32, 64]"));
}

TEST(ModelWeightsTest, RefusesNonBf16) {
  absl::Status s = LoadWith([](std::vector<TestTensor>* ts) {
    TestTensor* t = FindTensor(ts, "model.norm.weight");
    t->dtype = "F32";
    t->data += t->data;  // 4 bytes an element
  });
  EXPECT_THAT(s.message(), HasSubstr("model.norm.weight\": dtype F32 is not "
                                     "supported"));
}

// Every tensor stored as F16 (values in [0.5, 1) and their negatives, so
// each is finite): served as the nearest bf16, experts packed in memory.
TEST(ModelWeightsTest, ServesF16AsBf16) {
  const std::string dir = testing::MakeTempDir();
  std::vector<TestTensor> stored;
  ASSERT_TRUE(testing::WriteTinyModel(dir, testing::TinyMixtralConfig(),
                                      [&stored](std::vector<TestTensor>* ts) {
                                        for (TestTensor& t : *ts) {
                                          t.dtype = "F16";
                                          for (size_t i = 0;
                                               i + 1 < t.data.size(); i += 2) {
                                            uint16_t h;
                                            std::memcpy(&h, &t.data[i], 2);
                                            h = (h & 0x83FF) | 0x3800;
                                            std::memcpy(&t.data[i], &h, 2);
                                          }
                                        }
                                        stored = *ts;
                                      })
                  .ok());
  auto w = ModelWeights::Load(dir);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->expert_format(), quant::ExpertFormat::kBf16);
  EXPECT_EQ((*w)->expert_format_description(), "bf16 (from F16)");
  EXPECT_FALSE((*w)->experts_in_files());
  auto as_bf16 = [](const std::string& f16, size_t i) {
    uint16_t h;
    std::memcpy(&h, &f16[2 * i], 2);
    return kernels::FloatToBf16(quant::F16ToFloat(h));
  };
  const TestTensor* norm = FindTensor(&stored, "model.norm.weight");
  const WeightView* v = (*w)->Find("model.norm.weight");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->dtype, DType::kBF16);
  for (size_t i = 0; i < norm->data.size() / 2; ++i) {
    EXPECT_EQ(static_cast<const uint16_t*>(v->data)[i], as_bf16(norm->data, i));
  }
  const ExpertTensorNames n = FindArchitecture("mixtral")->ExpertNames(1, 2);
  const TestTensor* down = FindTensor(&stored, n.down);
  const ExpertBlob& b = (*w)->expert({1, 2});
  const auto* packed =
      reinterpret_cast<const uint16_t*>(b.data + b.down_offset);
  for (size_t i = 0; i < down->data.size() / 2; ++i) {
    ASSERT_EQ(packed[i], as_bf16(down->data, i)) << i;
  }
  // Only the arena holds them: no disk slow tier.
  auto unpacked = ModelWeights::Load(dir, {.pack_experts = false});
  ASSERT_FALSE(unpacked.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(unpacked.status()));
  EXPECT_THAT(unpacked.status().message(), HasSubstr("slow_tier host"));
}

TEST(ModelWeightsTest, ToleratesExtraTensors) {
  const std::string dir = testing::MakeTempDir();
  ASSERT_TRUE(testing::WriteTinyModel(
                  dir, testing::TinyMixtralConfig(),
                  [](std::vector<TestTensor>* ts) {
                    ts->push_back(
                        {"model.layers.0.self_attn.rotary_emb.inv_freq",
                         "F32",
                         {2},
                         std::string(8, '\0')});
                  })
                  .ok());
  auto w = ModelWeights::Load(dir);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(
      (*w)->unexpected_tensors(),
      std::vector<std::string>{"model.layers.0.self_attn.rotary_emb.inv_freq"});
}

// Every supported architecture loads from a generated directory.
TEST(ModelWeightsTest, LoadsEveryArchitecture) {
  for (const char* type : {"qwen2_moe", "qwen3_moe", "olmoe"}) {
    json j = testing::TinyMixtralConfig();
    j.erase("num_local_experts");
    j["model_type"] = type;
    j["num_experts"] = 3;
    j["moe_intermediate_size"] = 16;
    j["shared_expert_intermediate_size"] = 24;
    const std::string dir = testing::MakeTempDir();
    ASSERT_TRUE(testing::WriteTinyModel(dir, j).ok()) << type;
    auto w = ModelWeights::Load(dir);
    ASSERT_TRUE(w.ok()) << type << ": " << w.status();
    EXPECT_EQ((*w)->num_experts(), 3);
    EXPECT_TRUE((*w)->unexpected_tensors().empty()) << type;
  }
}

// Issue 16: a config with fewer layers than the weights served a truncated
// model with a warning.
TEST(ModelWeightsTest, RefusesFewerLayersInConfigThanInWeights) {
  const std::string dir = testing::MakeTempDir();
  ASSERT_TRUE(testing::WriteTinyModel(dir, testing::TinyMixtralConfig()).ok());
  json fewer = testing::TinyMixtralConfig();
  fewer["num_hidden_layers"] = 1;
  ASSERT_TRUE(testing::WriteFile(dir + "/config.json", fewer.dump()).ok());
  absl::Status s = ModelWeights::Load(dir).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("\"num_hidden_layers\" = 1 disagrees "
                                     "with the weights, which hold layer 1"));
}

// Issue 16: NaN weights were served as garbage. Each kind of weight, at the
// start, the middle and the end of its tensor, NaN and +-Inf.
TEST(ModelWeightsTest, RefusesNonFiniteWeights) {
  struct Case {
    const char* tensor;
    size_t element;
    uint16_t bits;
    const char* kind;
  };
  const Case cases[] = {
      {"model.norm.weight", 0, 0x7FC0, "NaN"},
      {"model.embed_tokens.weight", 96 * 64 - 1, 0xFF80, "Inf"},
      {"model.layers.1.block_sparse_moe.experts.3.w2.weight", 1000, 0x7F80,
       "Inf"},
      {"model.layers.0.block_sparse_moe.experts.0.w1.weight", 2047, 0xFFC1,
       "NaN"},
      {"model.layers.0.self_attn.o_proj.weight", 4095, 0x7F81, "NaN"},
  };
  for (const Case& c : cases) {
    absl::Status s = LoadWith([&c](std::vector<TestTensor>* ts) {
      TestTensor* t = FindTensor(ts, c.tensor);
      ASSERT_LT(2 * c.element + 1, t->data.size()) << c.tensor;
      std::memcpy(&t->data[2 * c.element], &c.bits, 2);
    });
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.tensor;
    EXPECT_THAT(s.message(),
                HasSubstr(absl::StrCat("tensor \"", c.tensor, "\": element ",
                                       c.element, " is ", c.kind)));
  }
  // The largest finite values load.
  EXPECT_TRUE(LoadWith([](std::vector<TestTensor>* ts) {
                const uint16_t max_finite[] = {0x7F7F, 0xFF7F};
                std::memcpy(&FindTensor(ts, "model.norm.weight")->data[0],
                            max_finite, 4);
              }).ok());
  // Skipping the scan is possible (LoadOptions::check_finite).
  const std::string dir = testing::MakeTempDir();
  ASSERT_TRUE(testing::WriteTinyModel(
                  dir, testing::TinyMixtralConfig(),
                  [](std::vector<TestTensor>* ts) {
                    const uint16_t nan = 0x7FC0;
                    std::memcpy(&FindTensor(ts, "model.norm.weight")->data[0],
                                &nan, 2);
                  })
                  .ok());
  EXPECT_TRUE(ModelWeights::Load(dir, {.check_finite = false}).ok());
}

}  // namespace
}  // namespace moeserve::engine
