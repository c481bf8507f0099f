// Generated weights: the values are a pure function of (tensor, seed,
// index) -- equal to the plain sequential generator the disk writer always
// used, whatever the range or thread count; the in-memory model holds the
// same bytes as the one written to disk and loaded; and the
// Qwen3-30B-A3B shape is the real model's.
#include "tools/bench/random_weights.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/model_config.h"
#include "engine/model_weights.h"
#include "gtest/gtest.h"
#include "tools/bench/generated_model.h"
#include "tools/bench/random_model_writer.h"

namespace moeserve::bench {
namespace {

using engine::ModelWeights;
using engine::TensorSpec;

// The generator as first written (one sequential SplitMix64 stream per
// tensor, 4 values per draw, float math per value): the reference the
// table-driven, range-addressed generator must reproduce bit for bit.
std::vector<uint16_t> Reference(const TensorSpec& t, uint64_t seed) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : t.name) h = (h ^ c) * 1099511628211ull;
  uint64_t state = h ^ seed;
  auto next = [&state] {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  auto bf16 = [](float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    bits += 0x7fff + ((bits >> 16) & 1);
    return static_cast<uint16_t>(bits >> 16);
  };
  const float scale =
      std::sqrt(3.0f / static_cast<float>(t.shape.back())) / 32768.0f;
  std::vector<uint16_t> out(NumElements(t));
  for (size_t i = 0; i < out.size(); i += 4) {
    uint64_t r = next();
    for (size_t j = i; j < std::min(out.size(), i + 4); ++j, r >>= 16) {
      out[j] = bf16(static_cast<float>(static_cast<int>(r & 0xffff) - 32768) *
                    scale);
    }
  }
  return out;
}

TEST(RandomWeightsTest, AnyRangeEqualsTheSequentialReference) {
  const TensorSpec t{"model.layers.0.self_attn.q_proj.weight", {7, 1003}};
  const std::vector<uint16_t> want = Reference(t, 5);
  for (int64_t begin : {0, 4, 1000, 7016}) {
    for (int64_t count : {1, 3, 4, 13, 5000}) {
      count = std::min<int64_t>(count, NumElements(t) - begin);
      std::vector<uint16_t> got(count);
      FillRandomTensor(t, 5, begin, count, got.data());
      ASSERT_TRUE(std::equal(got.begin(), got.end(), want.begin() + begin))
          << begin << "+" << count;
    }
  }
  // Norm weights are 1, biases 0.
  uint16_t v[3];
  FillRandomTensor({"model.norm.weight", {3}}, 5, 0, 3, v);
  EXPECT_EQ(v[2], 0x3f80);
  FillRandomTensor({"model.layers.0.self_attn.q_proj.bias", {3}}, 5, 0, 3, v);
  EXPECT_EQ(v[1], 0);
}

TEST(RandomWeightsTest, ThreadCountDoesNotChangeTheBytes) {
  // Tensors over several 1 Mi-value blocks, one with a ragged tail.
  const std::vector<TensorSpec> tensors = {{"a.weight", {3, 1000003}},
                                           {"b.weight", {5}},
                                           {"c.weight", {2, 1 << 20}}};
  auto fill = [&tensors](int threads, uint64_t seed) {
    std::vector<std::vector<uint16_t>> out;
    std::vector<RandomFill> fills;
    for (const TensorSpec& t : tensors) out.emplace_back(NumElements(t));
    for (size_t i = 0; i < tensors.size(); ++i) {
      fills.push_back({tensors[i], out[i].data()});
    }
    FillRandomTensors(fills, seed, threads);
    return out;
  };
  const auto one = fill(1, 7);
  EXPECT_EQ(one, fill(3, 7));
  EXPECT_EQ(one, fill(0, 7));
  EXPECT_NE(one, fill(2, 8));
  EXPECT_EQ(one[0], Reference(tensors[0], 7));
}

// Every non-expert tensor and every expert blob of `a` equals `b`'s.
void ExpectSameBytes(const ModelWeights& a, const ModelWeights& b) {
  ASSERT_EQ(a.NonExpertNames(), b.NonExpertNames());
  for (const std::string& name : a.NonExpertNames()) {
    const engine::WeightView* x = a.Find(name);
    const engine::WeightView* y = b.Find(name);
    ASSERT_EQ(x->bytes, y->bytes) << name;
    EXPECT_EQ(std::memcmp(x->data, y->data, x->bytes), 0) << name;
  }
  ASSERT_EQ(a.num_layers(), b.num_layers());
  ASSERT_EQ(a.num_experts(), b.num_experts());
  ASSERT_EQ(a.expert_bytes(), b.expert_bytes());
  for (int l = 0; l < a.num_layers(); ++l) {
    for (int e = 0; e < a.num_experts(); ++e) {
      const engine::ExpertBlob& x = a.expert({l, e});
      const engine::ExpertBlob& y = b.expert({l, e});
      ASSERT_EQ(x.bytes, y.bytes);
      EXPECT_EQ(std::memcmp(x.data, y.data, x.bytes), 0) << l << "/" << e;
    }
  }
}

TEST(RandomWeightsTest, InMemoryModelHasTheBytesTheWriterWrites) {
  for (const char* kind : {"qwen3_tiny", "qwen_tiny", "mixtral_tiny"}) {
    SCOPED_TRACE(kind);
    absl::StatusOr<nlohmann::json> config = GeneratedModelConfig({kind, 0});
    ASSERT_TRUE(config.ok()) << config.status();
    const std::string dir =
        std::string(std::getenv("TEST_TMPDIR")) + "/" + kind;
    std::filesystem::create_directories(dir);
    ASSERT_TRUE(WriteRandomModel(dir, *config, 3).ok());
    absl::StatusOr<std::unique_ptr<ModelWeights>> loaded =
        ModelWeights::Load(dir);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    absl::StatusOr<std::unique_ptr<ModelWeights>> built =
        GenerateRandomWeights(*config, {.seed = 3, .check_finite = true});
    ASSERT_TRUE(built.ok()) << built.status();
    EXPECT_TRUE((*loaded)->has_files());
    EXPECT_FALSE((*built)->has_files());
    EXPECT_TRUE((*built)->unexpected_tensors().empty());
    EXPECT_EQ((*built)->config().num_hidden_layers, 2);
    ExpectSameBytes(**loaded, **built);
  }
}

TEST(RandomWeightsTest, SeedAndThreadsDecideTheBytes) {
  absl::StatusOr<nlohmann::json> config =
      GeneratedModelConfig({"qwen3_tiny", 3});
  ASSERT_TRUE(config.ok()) << config.status();
  auto make = [&config](uint64_t seed, int threads) {
    absl::StatusOr<std::unique_ptr<ModelWeights>> w =
        GenerateRandomWeights(*config, {.seed = seed, .threads = threads});
    EXPECT_TRUE(w.ok()) << w.status();
    return *std::move(w);
  };
  const std::unique_ptr<ModelWeights> a = make(9, 1);
  ExpectSameBytes(*a, *make(9, 3));
  ExpectSameBytes(*a, *make(9, 0));
  const std::unique_ptr<ModelWeights> other = make(10, 2);
  const engine::ExpertBlob& x = a->expert({2, 5});
  EXPECT_NE(std::memcmp(x.data, other->expert({2, 5}).data, x.bytes), 0);
  const engine::WeightView* e = a->Find("model.embed_tokens.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_NE(std::memcmp(e->data, other->Find("model.embed_tokens.weight")->data,
                        e->bytes),
            0);
  // The bytes one call reports are the ones it allocates.
  absl::StatusOr<uint64_t> bytes = GeneratedWeightBytes(*config);
  ASSERT_TRUE(bytes.ok());
  EXPECT_GE(*bytes, a->expert_bytes() + a->non_expert_bytes());
  EXPECT_LT(*bytes, a->expert_bytes() + a->non_expert_bytes() + 65536);
}

TEST(RandomWeightsTest, Qwen3ShapeIsQwen3_30B_A3B) {
  absl::StatusOr<nlohmann::json> j = GeneratedModelConfig({"qwen3_30b_a3b"});
  ASSERT_TRUE(j.ok()) << j.status();
  absl::StatusOr<engine::ModelConfig> c = engine::ParseModelConfig(j->dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_type, "qwen3_moe");
  EXPECT_EQ(c->hidden_size, 2048);
  EXPECT_EQ(c->num_hidden_layers, 48);  // the whole model by default
  EXPECT_EQ(c->num_attention_heads, 32);
  EXPECT_EQ(c->num_key_value_heads, 4);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->num_experts, 128);
  EXPECT_EQ(c->num_experts_per_tok, 8);
  EXPECT_EQ(c->expert_intermediate_size, 768);
  EXPECT_EQ(c->shared_expert_intermediate_size, 0);
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_EQ(c->qk_norm, engine::QkNorm::kPerHead);
  EXPECT_EQ(c->vocab_size, 151936);
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->max_position_embeddings, 40960);
  // 48 x 128 experts x 3 x 768 x 2048 bf16: 58.0 GB, 1.21 GB a layer.
  absl::StatusOr<uint64_t> bytes = GeneratedWeightBytes(*j);
  ASSERT_TRUE(bytes.ok());
  const uint64_t experts = 48ull * 128 * 3 * 768 * 2048 * 2;
  EXPECT_EQ(experts, 57982058496ull);
  EXPECT_GT(*bytes, experts);
  EXPECT_LT(*bytes, experts + (4ull << 30));  // + embeddings, attention
  absl::StatusOr<nlohmann::json> two =
      GeneratedModelConfig({"qwen3_30b_a3b", 2});
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->at("num_hidden_layers"), 2);
  EXPECT_EQ(GeneratedModelName({"qwen3_30b_a3b", 2}),
            "qwen3-30b-a3b-shape-random, 2 of 48 layers");
}

TEST(RandomWeightsTest, FromMemoryKeepsTheLoadChecks) {
  absl::StatusOr<nlohmann::json> config = GeneratedModelConfig({"qwen3_tiny"});
  ASSERT_TRUE(config.ok());
  absl::StatusOr<engine::ModelConfig> c =
      engine::ParseModelConfig(config->dump());
  ASSERT_TRUE(c.ok());
  auto image = [&c](bool drop_last) {
    std::vector<TensorSpec> specs = NonExpertTensorSpecs(*c);
    if (drop_last) specs.pop_back();
    const std::string header = SafetensorsHeader(specs);
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) {
      bytes[i] = static_cast<char>(header.size() >> (8 * i));
    }
    bytes += header;
    for (const TensorSpec& t : specs) bytes.append(2 * NumElements(t), '\0');
    absl::StatusOr<std::unique_ptr<engine::SafetensorsFile>> f =
        engine::SafetensorsFile::FromBuffer(bytes, "<test>");
    EXPECT_TRUE(f.ok()) << f.status();
    return *std::move(f);
  };
  auto zeros = [](const engine::ModelConfig& mc,
                  const engine::ExpertBlob& layout, std::byte* arena) {
    std::memset(arena, 0,
                static_cast<size_t>(mc.num_hidden_layers) * mc.num_experts *
                    layout.bytes);
    return absl::OkStatus();
  };
  absl::StatusOr<std::unique_ptr<ModelWeights>> ok =
      ModelWeights::FromMemory(config->dump(), image(false), zeros);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_FALSE((*ok)->has_files());

  absl::StatusOr<std::unique_ptr<ModelWeights>> missing =
      ModelWeights::FromMemory(config->dump(), image(true), zeros);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing tensor"),
            std::string::npos)
      << missing.status();

  auto nan_in_expert = [&zeros](const engine::ModelConfig& mc,
                                const engine::ExpertBlob& layout,
                                std::byte* arena) {
    absl::Status s = zeros(mc, layout, arena);
    const uint16_t nan = 0x7fc1;
    std::memcpy(
        arena + (mc.num_experts + 3) * layout.bytes + layout.down_offset + 10,
        &nan, 2);
    return s;
  };
  absl::StatusOr<std::unique_ptr<ModelWeights>> bad =
      ModelWeights::FromMemory(config->dump(), image(false), nan_in_expert);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(
                "model.layers.1.mlp.experts.3.down_proj.weight"),
            std::string::npos)
      << bad.status();
  EXPECT_TRUE(ModelWeights::FromMemory(config->dump(), image(false),
                                       nan_in_expert, {.check_finite = false})
                  .ok());
  EXPECT_FALSE(ModelWeights::FromMemory(config->dump(), image(false), zeros,
                                        {.pack_experts = false})
                   .ok());
}

}  // namespace
}  // namespace moeserve::bench
