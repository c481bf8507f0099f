// Random-weight benchmark models at real models' shapes, generated on demand
// (random_weights.h, random_model_writer.h): which shapes exist
// (GeneratedModelConfig), the model built in memory (GenerateModelInMemory:
// no file) or a directory holding one (GeneratedModel, for those that need
// files: a disk slow tier).
//
// Kinds (the real model's layer count is the default; --gen_layers picks
// the first N instead):
//   qwen3_30b_a3b  Qwen3-30B-A3B: 128 experts x ffn 768, top-8, q/k norm;
//                  48 layers, 58.0 GB of bf16 experts (1.21 GB a layer)
//   qwen           Qwen1.5-MoE-A2.7B: 60 experts x ffn 1408, top-4, shared
//                  expert; 24 layers, 24.9 GB of experts
//   mixtral        Mixtral-8x7B: 8 experts x ffn 14336, top-2; 32 layers,
//                  90.2 GB of experts
//   qwen3_tiny, qwen_tiny, mixtral_tiny: hidden 64, 2 layers (tests).
// None has a tokenizer.
//
// Thread-compatible.
#ifndef MOESERVE_TOOLS_BENCH_GENERATED_MODEL_H_
#define MOESERVE_TOOLS_BENCH_GENERATED_MODEL_H_

#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "engine/model_weights.h"
#include "nlohmann/json.hpp"

namespace moeserve::bench {

struct GeneratedModelSpec {
  // qwen3_30b_a3b | qwen | mixtral | qwen3_tiny | qwen_tiny | mixtral_tiny
  std::string kind;
  int layers = 0;  // 0: the kind's default (see above: the whole model).
};

// config.json of `spec`. InvalidArgument for an unknown kind or layers < 0.
absl::StatusOr<nlohmann::json> GeneratedModelConfig(
    const GeneratedModelSpec& spec);

// For reports, e.g. "mixtral-8x7b-shape-random, 2 of 32 layers".
std::string GeneratedModelName(const GeneratedModelSpec& spec);

// The model `config` implies, generated in memory on `threads` threads (0:
// all hardware threads) with seed 1: the bytes GeneratedModel::Prepare would
// write (random_weights.h). Refuses with ResourceExhausted, before
// allocating, a model larger than the memory available now (MemAvailable);
// the message names the bytes needed and suggests fewer layers. Size,
// threads, seconds and GB/s go to `log`.
absl::StatusOr<std::unique_ptr<engine::ModelWeights>> GenerateModelInMemory(
    const nlohmann::json& config, std::FILE* log, int threads = 0);

// A directory holding a generated model. Owns the directory when it is
// temporary (removes it on destruction); a caller-chosen one is kept.
class GeneratedModel {
 public:
  // Writes config.json + model.safetensors for `config` (seed 1) into `dir`,
  // or into a fresh directory under $TMPDIR when `dir` is empty. A `dir`
  // that already holds a complete model with the same config.json is reused
  // as is. Progress lines go to `log`.
  static absl::StatusOr<std::unique_ptr<GeneratedModel>> Prepare(
      const nlohmann::json& config, const std::string& dir, std::FILE* log);
  ~GeneratedModel();
  GeneratedModel(const GeneratedModel&) = delete;
  GeneratedModel& operator=(const GeneratedModel&) = delete;

  const std::string& dir() const { return dir_; }

 private:
  GeneratedModel(std::string dir, bool temporary)
      : dir_(std::move(dir)), temporary_(temporary) {}

  const std::string dir_;
  const bool temporary_;
};

}  // namespace moeserve::bench

#endif  // MOESERVE_TOOLS_BENCH_GENERATED_MODEL_H_
