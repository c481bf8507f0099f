// Writes a random-weight Hugging Face qwen2_moe model directory (config.json
// + one model.safetensors, all BF16) for benchmarking at a real model's shape
// without downloading it. Tensor names and shapes come from the registered
// engine Architecture (NonExpertTensors, ExpertNames), so they match what
// ModelWeights::Load expects by construction. No tokenizer is written: the
// benchmark feeds token ids directly.
//
// Weights are uniform in [-a, a] with a = sqrt(3 / fan_in) (unit-variance
// outputs), norm weights are 1 and biases 0, so the forward pass stays finite
// and the kernels see ordinary (non-denormal, non-NaN) values.
//
// The file is streamed tensor by tensor; memory use is one tensor at a time.
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

// Writes config.json and model.safetensors into the existing directory
// `dir`. Deterministic for a given (shape, seed).
absl::Status WriteRandomQwenMoe(const std::string& dir,
                                const QwenMoeShape& shape, uint64_t seed);

}  // namespace moeserve::bench

#endif  // MOESERVE_TOOLS_BENCH_RANDOM_MODEL_WRITER_H_
