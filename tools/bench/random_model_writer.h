// Writes a random-weight Hugging Face MoE model directory (config.json + one
// model.safetensors, all BF16) for benchmarking at a real model's shape
// without downloading it: qwen2_moe (Qwen1.5-MoE-A2.7B), qwen3_moe
// (Qwen3-30B-A3B) or mixtral (Mixtral-8x7B), or any config.json of a
// registered architecture. Tensor names
// and shapes come from the registered engine Architecture (NonExpertTensors,
// ExpertNames), so they match what ModelWeights::Load expects by construction.
// No tokenizer is written: the benchmark feeds token ids directly.
//
// Weights are uniform in [-a, a] with a = sqrt(3 / fan_in) (unit-variance
// outputs), norm weights are 1 and biases 0, so the forward pass stays finite
// and the kernels see ordinary (non-denormal, non-NaN) values. The values are
// random_weights.h's: GenerateRandomWeights builds the same bytes in memory.
//
// The file is streamed tensor by tensor; memory use is one chunk at a time.
// Thread-compatible.
#ifndef MOESERVE_TOOLS_BENCH_RANDOM_MODEL_WRITER_H_
#define MOESERVE_TOOLS_BENCH_RANDOM_MODEL_WRITER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace moeserve::bench {

// The shape of a qwen2_moe model. Defaults: Qwen1.5-MoE-A2.7B except
// num_layers (the real model has 24).
struct QwenMoeShape {
  int64_t hidden = 2048;
  int64_t num_layers = 4;
  int64_t num_heads = 16;
  int64_t num_kv_heads = 16;
  int64_t vocab = 151936;
  int64_t num_experts = 60;
  int64_t top_k = 4;
  int64_t expert_ffn = 1408;
  int64_t shared_expert_ffn = 5632;
  int64_t max_positions = 8192;
};

// A tiny shape with the same structure (for the smoke test).
QwenMoeShape TinyQwenMoeShape();

// config.json contents for `shape`.
nlohmann::json QwenMoeConfig(const QwenMoeShape& shape);

// The shape of a qwen3_moe model (routed experts only, q/k RMSNorm per
// head). Defaults: Qwen3-30B-A3B's config.json, all 48 layers.
struct Qwen3MoeShape {
  int64_t hidden = 2048;
  int64_t num_layers = 48;
  int64_t num_heads = 32;
  int64_t num_kv_heads = 4;
  int64_t head_dim = 128;
  int64_t vocab = 151936;
  int64_t num_experts = 128;
  int64_t top_k = 8;
  int64_t expert_ffn = 768;
  // config.json's intermediate_size (a dense MLP's; no layer has one).
  int64_t dense_ffn = 6144;
  int64_t max_positions = 40960;
};

// A tiny shape with the same structure (for tests).
Qwen3MoeShape TinyQwen3MoeShape();

// config.json contents for `shape`.
nlohmann::json Qwen3MoeConfig(const Qwen3MoeShape& shape);

// The shape of a mixtral model. Defaults: Mixtral-8x7B (8 experts, top-2,
// no shared expert) except num_layers (the real model has 32).
struct MixtralShape {
  int64_t hidden = 4096;
  int64_t num_layers = 2;
  int64_t num_heads = 32;
  int64_t num_kv_heads = 8;
  int64_t head_dim = 128;
  int64_t vocab = 32000;
  int64_t num_experts = 8;
  int64_t top_k = 2;
  int64_t expert_ffn = 14336;
  int64_t max_positions = 32768;
  double rope_theta = 1e6;
};

// A tiny shape with the same structure (for the smoke test).
MixtralShape TinyMixtralShape();

// config.json contents for `shape`.
nlohmann::json MixtralConfig(const MixtralShape& shape);

// Writes config.json (`config`, which must parse as a registered
// architecture) and model.safetensors with every tensor that config implies
// into the existing directory `dir`. Deterministic for a given (config,
// seed).
absl::Status WriteRandomModel(const std::string& dir,
                              const nlohmann::json& config, uint64_t seed);

// WriteRandomModel(dir, QwenMoeConfig(shape), seed).
absl::Status WriteRandomQwenMoe(const std::string& dir,
                                const QwenMoeShape& shape, uint64_t seed);

}  // namespace moeserve::bench

#endif  // MOESERVE_TOOLS_BENCH_RANDOM_MODEL_WRITER_H_
