// The generated models parse as their engine architecture at the documented
// shapes, and a written one loads with every tensor the engine expects.
#include "tools/bench/random_model_writer.h"

#include <cstdlib>
#include <filesystem>
#include <string>

#include "engine/model_config.h"
#include "engine/model_weights.h"
#include "gtest/gtest.h"
#include "tools/bench/generated_model.h"

namespace moeserve::bench {
namespace {

TEST(RandomModelWriterTest, MixtralShapeIsMixtral8x7B) {
  absl::StatusOr<engine::ModelConfig> c =
      engine::ParseModelConfig(MixtralConfig(MixtralShape()).dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_type, "mixtral");
  EXPECT_EQ(c->hidden_size, 4096);
  EXPECT_EQ(c->num_hidden_layers, 2);  // of the real model's 32
  EXPECT_EQ(c->num_attention_heads, 32);
  EXPECT_EQ(c->num_key_value_heads, 8);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->num_experts, 8);
  EXPECT_EQ(c->num_experts_per_tok, 2);
  EXPECT_EQ(c->expert_intermediate_size, 14336);
  EXPECT_EQ(c->shared_expert_intermediate_size, 0);
  EXPECT_EQ(c->vocab_size, 32000);
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
}

// 0 layers: the whole model (the in-memory default); tiny kinds 2.
TEST(RandomModelWriterTest, GeneratedKindsAndDefaultLayers) {
  struct Case {
    const char* kind;
    int layers;
    int64_t want_layers;
    const char* model_type;
  };
  for (const Case& k :
       {Case{"qwen", 0, 24, "qwen2_moe"}, Case{"qwen", 4, 4, "qwen2_moe"},
        Case{"mixtral", 0, 32, "mixtral"}, Case{"mixtral", 2, 2, "mixtral"},
        Case{"mixtral_tiny", 0, 2, "mixtral"},
        Case{"qwen_tiny", 3, 3, "qwen2_moe"},
        Case{"qwen3_30b_a3b", 0, 48, "qwen3_moe"},
        Case{"qwen3_tiny", 0, 2, "qwen3_moe"}}) {
    absl::StatusOr<nlohmann::json> j =
        GeneratedModelConfig({.kind = k.kind, .layers = k.layers});
    ASSERT_TRUE(j.ok()) << k.kind << ": " << j.status();
    absl::StatusOr<engine::ModelConfig> c = engine::ParseModelConfig(j->dump());
    ASSERT_TRUE(c.ok()) << k.kind << ": " << c.status();
    EXPECT_EQ(c->num_hidden_layers, k.want_layers) << k.kind;
    EXPECT_EQ(c->model_type, k.model_type) << k.kind;
  }
  EXPECT_FALSE(GeneratedModelConfig({.kind = "llama"}).ok());
  EXPECT_FALSE(GeneratedModelConfig({.kind = "qwen", .layers = -1}).ok());
}

TEST(RandomModelWriterTest, WrittenTinyMixtralLoadsCompletely) {
  const std::string dir =
      std::string(std::getenv("TEST_TMPDIR")) + "/mixtral_tiny";
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(WriteRandomModel(dir, MixtralConfig(TinyMixtralShape()), 1).ok());
  absl::StatusOr<std::unique_ptr<engine::ModelWeights>> w =
      engine::ModelWeights::Load(dir);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE((*w)->unexpected_tensors().empty());
  EXPECT_EQ((*w)->num_experts(), 8);
  EXPECT_EQ((*w)->expert({1, 7}).bytes, 3u * 32 * 64 * 2);
  EXPECT_FALSE(std::filesystem::exists(dir + "/model.safetensors.partial"));
}

TEST(RandomModelWriterTest, PreparedModelIsReusedAndTemporaryOneRemoved) {
  const nlohmann::json config = QwenMoeConfig(TinyQwenMoeShape());
  const std::string keep =
      std::string(std::getenv("TEST_TMPDIR")) + "/kept_qwen";
  for (int run = 0; run < 2; ++run) {
    absl::StatusOr<std::unique_ptr<GeneratedModel>> m =
        GeneratedModel::Prepare(config, keep, stderr);
    ASSERT_TRUE(m.ok()) << m.status();
  }
  EXPECT_TRUE(std::filesystem::exists(keep + "/model.safetensors"));

  std::string temporary;
  {
    absl::StatusOr<std::unique_ptr<GeneratedModel>> m =
        GeneratedModel::Prepare(config, "", stderr);
    ASSERT_TRUE(m.ok()) << m.status();
    temporary = (*m)->dir();
    EXPECT_TRUE(std::filesystem::exists(temporary + "/config.json"));
  }
  EXPECT_FALSE(std::filesystem::exists(temporary));
}

}  // namespace
}  // namespace moeserve::bench
