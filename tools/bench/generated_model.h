// Random-weight benchmark models at real models' shapes, generated on demand
// (random_model_writer.h): which shapes exist (GeneratedModelConfig), and a
// directory holding one (GeneratedModel).
//
// Kinds: "qwen" (Qwen1.5-MoE-A2.7B: 60 experts x ffn 1408, top-4, shared
// expert; default 4 of its 24 layers), "mixtral" (Mixtral-8x7B: 8 experts x
// ffn 14336, top-2; default 2 of its 32 layers), and "qwen_tiny" /
// "mixtral_tiny" (hidden 64, for smoke tests; default 2 layers). None has a
// tokenizer.
//
// Thread-compatible.
#ifndef MOESERVE_TOOLS_BENCH_GENERATED_MODEL_H_
#define MOESERVE_TOOLS_BENCH_GENERATED_MODEL_H_

#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace moeserve::bench {

struct GeneratedModelSpec {
  std::string kind;  // qwen | mixtral | qwen_tiny | mixtral_tiny
  int layers = 0;    // 0: the kind's default (see above).
};

// config.json of `spec`. InvalidArgument for an unknown kind or layers < 0.
absl::StatusOr<nlohmann::json> GeneratedModelConfig(
    const GeneratedModelSpec& spec);

// For reports, e.g. "mixtral-8x7b-shape-random, 2 of 32 layers".
std::string GeneratedModelName(const GeneratedModelSpec& spec);

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
