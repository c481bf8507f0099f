// ParseQuantizationConfig: the configs the Hugging Face tools write are
// accepted with the right description, and each unsupported or malformed
// key is refused by name.
#include "engine/quant/quantization_config.h"

#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace moeserve::engine::quant {
namespace {

using nlohmann::json;

absl::StatusOr<QuantizationConfig> Parse(const std::string& q) {
  return ParseQuantizationConfig(json::parse(
      R"({"model_type": "qwen3_moe", "quantization_config": )" + q + "}"));
}

// Refused with InvalidArgument whose message names `key`.
void ExpectRefused(const std::string& q, const std::string& key) {
  absl::StatusOr<QuantizationConfig> c = Parse(q);
  ASSERT_FALSE(c.ok()) << q;
  EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << c.status();
  EXPECT_NE(c.status().message().find(key), absl::string_view::npos)
      << c.status() << " should name " << key;
}

TEST(QuantizationConfigTest, AbsentOrNullIsUnquantized) {
  EXPECT_FALSE(ParseQuantizationConfig(json::parse("{}"))->quantized());
  EXPECT_FALSE(Parse("null")->quantized());
}

TEST(QuantizationConfigTest, Fp8BlockAsQwen3AndDeepSeekWriteIt) {
  absl::StatusOr<QuantizationConfig> c = Parse(
      R"({"activation_scheme": "dynamic", "fmt": "e4m3",
          "quant_method": "fp8", "weight_block_size": [128, 128]})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->method, QuantMethod::kFp8Block);
  EXPECT_EQ(c->granularity, ScaleGranularity::kBlock);
  EXPECT_EQ(c->block_rows, 128);
  EXPECT_EQ(c->block_cols, 128);
  EXPECT_EQ(c->Describe(), "fp8 e4m3, block 128x128");
}

TEST(QuantizationConfigTest, CompressedTensorsFp8Dynamic) {
  absl::StatusOr<QuantizationConfig> c = Parse(R"({
    "config_groups": {"group_0": {
      "targets": ["Linear"],
      "weights": {"num_bits": 8, "type": "float", "symmetric": true,
                  "strategy": "channel", "dynamic": false},
      "input_activations": {"num_bits": 8, "type": "float",
                            "strategy": "token", "dynamic": true}}},
    "format": "float-quantized", "ignore": ["lm_head", "re:.*mlp.gate$"],
    "quant_method": "compressed-tensors",
    "quantization_status": "compressed"})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->method, QuantMethod::kFp8Compressed);
  EXPECT_EQ(c->granularity, ScaleGranularity::kChannel);
  EXPECT_TRUE(c->IsUnquantized("lm_head"));
  EXPECT_TRUE(c->IsUnquantized("model.layers.3.mlp.gate"));
  EXPECT_FALSE(c->IsUnquantized("model.layers.3.mlp.experts.0.gate_proj"));
}

TEST(QuantizationConfigTest, CompressedTensorsW4A16) {
  absl::StatusOr<QuantizationConfig> c = Parse(R"({
    "config_groups": {"group_0": {
      "targets": ["Linear"],
      "weights": {"num_bits": 4, "type": "int", "symmetric": true,
                  "strategy": "group", "group_size": 32, "dynamic": false,
                  "actorder": null},
      "input_activations": null}},
    "format": "pack-quantized", "ignore": ["lm_head"],
    "quant_method": "compressed-tensors"})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->method, QuantMethod::kInt4Compressed);
  EXPECT_EQ(c->block_cols, 32);
  EXPECT_TRUE(c->symmetric);
}

TEST(QuantizationConfigTest, GptqAndAwq) {
  absl::StatusOr<QuantizationConfig> g = Parse(
      R"({"quant_method": "gptq", "bits": 4, "group_size": 128,
          "desc_act": false, "sym": false, "checkpoint_format": "gptq"})");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->method, QuantMethod::kGptq);
  EXPECT_FALSE(g->symmetric);
  EXPECT_TRUE(g->gptq_zeros_minus_one);
  EXPECT_EQ(g->block_cols, 128);
  absl::StatusOr<QuantizationConfig> v2 = Parse(
      R"({"quant_method": "gptq", "bits": 4, "group_size": -1,
          "checkpoint_format": "gptq_v2", "modules_to_not_convert": ["gate"]})");
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_FALSE(v2->gptq_zeros_minus_one);
  EXPECT_EQ(v2->block_cols, -1);
  EXPECT_TRUE(v2->IsUnquantized("model.layers.0.mlp.gate"));
  EXPECT_FALSE(v2->IsUnquantized("model.layers.0.mlp.gate_proj"));
  absl::StatusOr<QuantizationConfig> a = Parse(
      R"({"quant_method": "awq", "bits": 4, "group_size": 128,
          "zero_point": true, "version": "gemm"})");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->method, QuantMethod::kAwq);
  EXPECT_FALSE(a->symmetric);
}

TEST(QuantizationConfigTest, RefusesWhatItCannotServeByName) {
  ExpectRefused(R"({"quant_method": "bitsandbytes"})", "quant_method");
  ExpectRefused(R"("fp8")", "quantization_config");
  ExpectRefused(R"({"quant_method": "fp8", "fmt": "e5m2",
                   "weight_block_size": [128, 128]})",
                "fmt");
  ExpectRefused(R"({"quant_method": "fp8", "activation_scheme": "static",
                   "weight_block_size": [128, 128]})",
                "activation_scheme");
  ExpectRefused(R"({"quant_method": "fp8"})", "weight_block_size");
  ExpectRefused(R"({"quant_method": "fp8", "weight_block_size": [128]})",
                "weight_block_size");
  ExpectRefused(R"({"quant_method": "gptq", "bits": 8, "group_size": 128})",
                "bits");
  ExpectRefused(R"({"quant_method": "gptq", "bits": 4, "group_size": 0})",
                "group_size");
  ExpectRefused(R"({"quant_method": "gptq", "bits": 4, "group_size": 128,
                   "desc_act": true})",
                "desc_act");
  ExpectRefused(R"({"quant_method": "gptq", "bits": 4,
                   "checkpoint_format": "marlin"})",
                "checkpoint_format");
  ExpectRefused(R"({"quant_method": "gptq", "bits": "4"})", "bits");
  ExpectRefused(R"({"quant_method": "awq", "bits": 4, "version": "gemv"})",
                "version");
  ExpectRefused(R"({"quant_method": "compressed-tensors",
                   "format": "pack-quantized"})",
                "config_groups");
  const std::string w4 = R"({"quant_method": "compressed-tensors",
    "format": "pack-quantized", "config_groups": {"group_0": {
      "targets": ["Linear"], "weights": {"num_bits": 4, "type": "int",
      "strategy": "group", "group_size": 32, "actorder": "group"}}}})";
  ExpectRefused(w4, "actorder");
  ExpectRefused(R"({"quant_method": "compressed-tensors",
    "format": "pack-quantized", "config_groups": {"group_0": {
      "targets": ["Linear"], "weights": {"num_bits": 8, "type": "int",
      "strategy": "channel"}}}})",
                "type");
  ExpectRefused(R"({"quant_method": "compressed-tensors",
    "format": "float-quantized", "config_groups": {"group_0": {
      "targets": ["Linear"], "weights": {"num_bits": 8, "type": "float",
      "strategy": "channel"}, "input_activations": {"num_bits": 8,
      "type": "float", "strategy": "tensor", "dynamic": false}}}})",
                "input_activations.dynamic");
  ExpectRefused(R"({"quant_method": "compressed-tensors",
    "format": "float-quantized", "ignore": ["re:(["], "config_groups":
    {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 8,
    "type": "float", "strategy": "tensor"}}}})",
                "ignore");
  ExpectRefused(R"({"quant_method": "compressed-tensors",
    "format": "float-quantized", "config_groups": {"group_0": {
      "targets": ["Embedding"], "weights": {"num_bits": 8, "type": "float",
      "strategy": "tensor"}}}})",
                "targets");
}

}  // namespace
}  // namespace moeserve::engine::quant
