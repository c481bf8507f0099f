#include "tools/bench/generated_model.h"

#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tools/bench/random_model_writer.h"

namespace moeserve::bench {
namespace {

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

absl::StatusOr<nlohmann::json> GeneratedModelConfig(
    const GeneratedModelSpec& spec) {
  if (spec.layers < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("generated model: layers ", spec.layers, " < 0"));
  }
  if (spec.kind == "qwen" || spec.kind == "qwen_tiny") {
    QwenMoeShape shape =
        spec.kind == "qwen" ? QwenMoeShape() : TinyQwenMoeShape();
    if (spec.layers > 0) shape.num_layers = spec.layers;
    return QwenMoeConfig(shape);
  }
  if (spec.kind == "mixtral" || spec.kind == "mixtral_tiny") {
    MixtralShape shape =
        spec.kind == "mixtral" ? MixtralShape() : TinyMixtralShape();
    if (spec.layers > 0) shape.num_layers = spec.layers;
    return MixtralConfig(shape);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown generated model '", spec.kind,
                   "' (qwen, mixtral, qwen_tiny or mixtral_tiny)"));
}

std::string GeneratedModelName(const GeneratedModelSpec& spec) {
  absl::StatusOr<nlohmann::json> c = GeneratedModelConfig(spec);
  const int64_t layers = c.ok() ? c->at("num_hidden_layers").get<int64_t>() : 0;
  if (spec.kind == "qwen") {
    return absl::StrCat("qwen1.5-moe-a2.7b-shape-random, ", layers,
                        " of 24 layers");
  }
  if (spec.kind == "mixtral") {
    return absl::StrCat("mixtral-8x7b-shape-random, ", layers, " of 32 layers");
  }
  return absl::StrCat(spec.kind, "-random");
}

absl::StatusOr<std::unique_ptr<GeneratedModel>> GeneratedModel::Prepare(
    const nlohmann::json& config, const std::string& dir, std::FILE* log) {
  std::string path = dir;
  const bool temporary = path.empty();
  if (temporary) {
    const char* tmp = getenv("TMPDIR");
    path = absl::StrCat(tmp != nullptr && *tmp ? tmp : "/tmp",
                        "/moe_random_XXXXXX");
    if (mkdtemp(path.data()) == nullptr) {
      return absl::InternalError(absl::StrCat("mkdtemp ", path, " failed"));
    }
  }
  // Owns a temporary directory from here on, also on error.
  auto model =
      std::unique_ptr<GeneratedModel>(new GeneratedModel(path, temporary));
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create ", path, ": ", ec.message()));
  }
  const std::string config_text = config.dump(2);
  if (ReadText(path + "/config.json") == config_text &&
      std::filesystem::exists(path + "/model.safetensors")) {
    std::fprintf(log, "reusing generated model in %s\n", path.c_str());
    return model;
  }
  std::fprintf(log, "writing random-weight %s (%lld layers) to %s ...\n",
               config.value("model_type", "?").c_str(),
               static_cast<long long>(config.value("num_hidden_layers", 0)),
               path.c_str());
  std::fflush(log);
  // A stale config.json must not vouch for the half-written new weights.
  std::filesystem::remove(path + "/config.json", ec);
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = WriteRandomModel(path, config, /*seed=*/1);
  if (!s.ok()) return s;
  std::fprintf(
      log, "  written in %.1f s\n",
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count());
  return model;
}

GeneratedModel::~GeneratedModel() {
  if (!temporary_) return;
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

}  // namespace moeserve::bench
