#include "engine/model_config.h"

#include <fstream>
#include <string>

#include "engine/architecture.h"
#include "engine/testing/model_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moeserve::engine {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

json Qwen2MoeConfig() {
  json j = testing::TinyMixtralConfig();
  j.erase("num_local_experts");
  j.erase("intermediate_size");
  j["model_type"] = "qwen2_moe";
  j["num_experts"] = 8;
  j["moe_intermediate_size"] = 16;
  j["shared_expert_intermediate_size"] = 48;
  j["decoder_sparse_step"] = 1;
  j["mlp_only_layers"] = json::array();
  j["norm_topk_prob"] = false;
  j["use_sliding_window"] = false;
  j["sliding_window"] = 32;
  return j;
}

void ExpectRefused(const json& j, const std::string& substr) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(j.dump());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument)
      << c.status();
  EXPECT_THAT(c.status().message(), HasSubstr(substr));
}

TEST(ModelConfigTest, ParsesMixtral) {
  absl::StatusOr<ModelConfig> c =
      ParseModelConfig(testing::TinyMixtralConfig().dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_type, "mixtral");
  EXPECT_EQ(c->hidden_size, 64);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->num_key_value_heads, 2);
  EXPECT_EQ(c->num_experts, 4);
  EXPECT_EQ(c->num_experts_per_tok, 2);
  EXPECT_EQ(c->expert_intermediate_size, 32);
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_EQ(c->qk_norm, QkNorm::kNone);
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_THAT(c->eos_token_ids, ElementsAre(2));
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->torch_dtype, "bfloat16");
  EXPECT_EQ(c->architecture, FindArchitecture("mixtral"));
}

TEST(ModelConfigTest, ParsesQwen2MoeWithSharedExpertAndEosList) {
  json j = Qwen2MoeConfig();
  j["eos_token_id"] = {2, 5};
  j["head_dim"] = 8;
  absl::StatusOr<ModelConfig> c = ParseModelConfig(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->shared_expert_intermediate_size, 48);
  EXPECT_EQ(c->expert_intermediate_size, 16);
  EXPECT_TRUE(c->attention_bias);
  EXPECT_FALSE(c->norm_topk_prob);
  EXPECT_EQ(c->head_dim, 8);
  EXPECT_THAT(c->eos_token_ids, ElementsAre(2, 5));
}

TEST(ModelConfigTest, ParsesQwen3MoeAndOlmoeQkNorm) {
  json q3 = Qwen2MoeConfig();
  q3["model_type"] = "qwen3_moe";
  q3["norm_topk_prob"] = true;
  absl::StatusOr<ModelConfig> c = ParseModelConfig(q3.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->qk_norm, QkNorm::kPerHead);
  EXPECT_EQ(c->shared_expert_intermediate_size, 0);
  EXPECT_TRUE(c->norm_topk_prob);

  json ol = testing::TinyMixtralConfig();
  ol.erase("num_local_experts");
  ol["model_type"] = "olmoe";
  ol["num_experts"] = 8;
  ol["clip_qkv"] = nullptr;
  c = ParseModelConfig(ol.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->qk_norm, QkNorm::kWholeProjection);
  EXPECT_EQ(c->expert_intermediate_size, 32);
}

TEST(ModelConfigTest, RefusesUnknownModelType) {
  json j = testing::TinyMixtralConfig();
  j["model_type"] = "llama";
  ExpectRefused(j, "unsupported model_type \"llama\"");
  ExpectRefused(j, "mixtral, olmoe, qwen2_moe, qwen3_moe");
}

TEST(ModelConfigTest, RefusesMissingField) {
  json j = testing::TinyMixtralConfig();
  j.erase("hidden_size");
  ExpectRefused(j, "missing required field \"hidden_size\"");
  j = testing::TinyMixtralConfig();
  j.erase("num_local_experts");
  ExpectRefused(j, "missing required field \"num_local_experts\"");
}

TEST(ModelConfigTest, RefusesIllTypedField) {
  json j = testing::TinyMixtralConfig();
  j["num_hidden_layers"] = "2";
  ExpectRefused(j, "field \"num_hidden_layers\" must be an integer");
  j = testing::TinyMixtralConfig();
  j["tie_word_embeddings"] = 1;
  ExpectRefused(j, "field \"tie_word_embeddings\" must be a boolean");
  j = testing::TinyMixtralConfig();
  j["eos_token_id"] = {2, "x"};
  ExpectRefused(j, "eos_token_id");
}

TEST(ModelConfigTest, RefusesUnsupportedFeatures) {
  json j = testing::TinyMixtralConfig();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  ExpectRefused(j, "rope_scaling");
  j = testing::TinyMixtralConfig();
  j["sliding_window"] = 128;
  ExpectRefused(j, "sliding_window");
  j["sliding_window"] = 4096;  // >= max_position_embeddings: full attention.
  EXPECT_TRUE(ParseModelConfig(j.dump()).ok());
  j = Qwen2MoeConfig();
  j["mlp_only_layers"] = {1};
  ExpectRefused(j, "layer 1 would be a dense MLP layer");
  j = Qwen2MoeConfig();
  j["decoder_sparse_step"] = 2;
  ExpectRefused(j, "layer 0 would be a dense MLP layer");
  j = testing::TinyMixtralConfig();
  j["model_type"] = "olmoe";
  j["num_experts"] = 4;
  j["clip_qkv"] = 8.0;
  ExpectRefused(j, "clip_qkv");
}

TEST(ModelConfigTest, RefusesBadRanges) {
  json j = testing::TinyMixtralConfig();
  j["num_key_value_heads"] = 3;
  ExpectRefused(j, "divisible by num_key_value_heads");
  j = testing::TinyMixtralConfig();
  j["num_experts_per_tok"] = 5;
  ExpectRefused(j, "exceeds the number of experts");
  j = testing::TinyMixtralConfig();
  j["intermediate_size"] = 0;
  ExpectRefused(j, "must be positive");
  j = testing::TinyMixtralConfig();
  j["num_attention_heads"] = 0;
  ExpectRefused(j, "num_attention_heads");
}

TEST(ModelConfigTest, RefusesNonObjectsAndGarbage) {
  EXPECT_FALSE(ParseModelConfig("[]").ok());
  EXPECT_FALSE(ParseModelConfig("{").ok());
  EXPECT_FALSE(ParseModelConfig("").ok());
}

TEST(ArchitectureTest, NamesHuggingFaceTensors) {
  const Architecture* mixtral = FindArchitecture("mixtral");
  ASSERT_NE(mixtral, nullptr);
  ExpertTensorNames n = mixtral->ExpertNames(3, 7);
  EXPECT_EQ(n.gate, "model.layers.3.block_sparse_moe.experts.7.w1.weight");
  EXPECT_EQ(n.up, "model.layers.3.block_sparse_moe.experts.7.w3.weight");
  EXPECT_EQ(n.down, "model.layers.3.block_sparse_moe.experts.7.w2.weight");
  EXPECT_EQ(mixtral->RouterName(0),
            "model.layers.0.block_sparse_moe.gate.weight");
  EXPECT_FALSE(mixtral->SharedExpertNames(0).has_value());

  const Architecture* qwen2 = FindArchitecture("qwen2_moe");
  ASSERT_NE(qwen2, nullptr);
  EXPECT_EQ(qwen2->ExpertNames(1, 2).down,
            "model.layers.1.mlp.experts.2.down_proj.weight");
  EXPECT_EQ(qwen2->RouterName(1), "model.layers.1.mlp.gate.weight");
  auto shared = qwen2->SharedExpertNames(1);
  ASSERT_TRUE(shared.has_value());
  EXPECT_EQ(shared->mlp.up, "model.layers.1.mlp.shared_expert.up_proj.weight");
  EXPECT_EQ(shared->gate, "model.layers.1.mlp.shared_expert_gate.weight");
  EXPECT_EQ(qwen2->AttentionNames(0).q_bias,
            "model.layers.0.self_attn.q_proj.bias");
  EXPECT_EQ(FindArchitecture("olmoe")->AttentionNames(2).k_norm,
            "model.layers.2.self_attn.k_norm.weight");
}

TEST(ArchitectureTest, NonExpertShapesFollowConfig) {
  json j = testing::TinyMixtralConfig();
  j["model_type"] = "olmoe";
  j["num_experts"] = 4;
  j["tie_word_embeddings"] = true;
  absl::StatusOr<ModelConfig> c = ParseModelConfig(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const TensorSpec& s : c->architecture->NonExpertTensors(*c)) {
    shapes[s.name] = s.shape;
  }
  EXPECT_EQ(shapes.count("lm_head.weight"), 0u);
  EXPECT_THAT(shapes["model.layers.1.self_attn.q_norm.weight"],
              ElementsAre(64));
  EXPECT_THAT(shapes["model.layers.1.self_attn.k_norm.weight"],
              ElementsAre(32));
  EXPECT_THAT(shapes["model.layers.1.self_attn.k_proj.weight"],
              ElementsAre(32, 64));
  EXPECT_THAT(shapes["model.layers.0.mlp.gate.weight"], ElementsAre(4, 64));
  EXPECT_THAT(shapes["model.embed_tokens.weight"], ElementsAre(96, 64));
}

// Issue 16: token ids outside the vocabulary and a context too short to
// generate anything were accepted.
TEST(ModelConfigTest, RefusesTokenIdsOutsideVocabAndTooFewPositions) {
  json j = testing::TinyMixtralConfig();  // vocab 96
  j["bos_token_id"] = 96;
  ExpectRefused(j,
                "field \"bos_token_id\" = 96 is outside the vocabulary "
                "[0, 96)");
  j = testing::TinyMixtralConfig();
  j["bos_token_id"] = -1;
  ExpectRefused(j, "field \"bos_token_id\" = -1 is outside");
  j = testing::TinyMixtralConfig();
  j["eos_token_id"] = 1000;
  ExpectRefused(j, "field \"eos_token_id\" = 1000 is outside");
  j = testing::TinyMixtralConfig();
  j["eos_token_id"] = {2, 96};
  ExpectRefused(j, "field \"eos_token_id\" = 96 is outside");
  j = testing::TinyMixtralConfig();
  j["max_position_embeddings"] = 1;
  ExpectRefused(j, "field \"max_position_embeddings\" = 1 is less than 2");
  // The edges are accepted.
  j = testing::TinyMixtralConfig();
  j["bos_token_id"] = 0;
  j["eos_token_id"] = {95};
  j["max_position_embeddings"] = 2;
  EXPECT_TRUE(ParseModelConfig(j.dump()).ok());
}

TEST(ModelConfigTest, GenerationConfigAddsEosIds) {
  absl::StatusOr<ModelConfig> c =
      ParseModelConfig(testing::TinyMixtralConfig().dump());
  ASSERT_TRUE(c.ok()) << c.status();
  // A list: new ids appended, ids already there not repeated.
  ASSERT_TRUE(
      MergeGenerationConfig(R"({"eos_token_id": [5, 2, 7, 5]})", &*c).ok());
  EXPECT_THAT(c->eos_token_ids, ElementsAre(2, 5, 7));
  // One id; absent or null: nothing.
  ASSERT_TRUE(MergeGenerationConfig(R"({"eos_token_id": 9})", &*c).ok());
  ASSERT_TRUE(MergeGenerationConfig(R"({"eos_token_id": null})", &*c).ok());
  ASSERT_TRUE(MergeGenerationConfig(R"({"do_sample": true})", &*c).ok());
  EXPECT_THAT(c->eos_token_ids, ElementsAre(2, 5, 7, 9));
}

TEST(ModelConfigTest, GenerationConfigRefusesBadEosIds) {
  const ModelConfig base =
      *ParseModelConfig(testing::TinyMixtralConfig().dump());
  auto refused = [&](absl::string_view text, const std::string& substr) {
    ModelConfig c = base;
    absl::Status s = MergeGenerationConfig(text, &c);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(s.message(), HasSubstr(substr)) << text;
  };
  refused(R"({"eos_token_id": [2, "x"]})", "eos_token_id");
  refused(R"({"eos_token_id": "2"})", "eos_token_id");
  refused(R"({"eos_token_id": 96})", "field \"eos_token_id\" = 96 is outside");
  refused(R"({"eos_token_id": -1})", "is outside");
  refused("[2]", "not a JSON object");
  refused("{\"eos_token_id\": ", "generation_config.json");
}

TEST(ModelConfigTest, LoadMergesGenerationConfigAndNamesItsPath) {
  const std::string dir = testing::MakeTempDir();
  std::ofstream(dir + "/config.json") << testing::TinyMixtralConfig().dump();
  absl::StatusOr<ModelConfig> c = LoadModelConfig(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->eos_token_ids, ElementsAre(2));

  std::ofstream(dir + "/generation_config.json")
      << R"({"bos_token_id": 1, "eos_token_id": [2, 4]})";
  c = LoadModelConfig(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->eos_token_ids, ElementsAre(2, 4));

  std::ofstream(dir + "/generation_config.json") << R"({"eos_token_id": [2,)";
  c = LoadModelConfig(dir);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(),
              HasSubstr(dir + "/generation_config.json: "));
}

}  // namespace
}  // namespace moeserve::engine
