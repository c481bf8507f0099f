#include "tools/bench/generated_model.h"

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tools/bench/random_model_writer.h"
#include "tools/bench/random_weights.h"

namespace moeserve::bench {
namespace {

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// /proc/meminfo's MemAvailable in bytes; 0 when unknown.
uint64_t AvailableMemoryBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib << 10;
  }
  return 0;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since)
      .count();
}

}  // namespace

absl::StatusOr<nlohmann::json> GeneratedModelConfig(
    const GeneratedModelSpec& spec) {
  if (spec.layers < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("generated model: layers ", spec.layers, " < 0"));
  }
  // The full-size kinds default to the real model's layer count (the shape
  // structs' own defaults predate generation in memory).
  if (spec.kind == "qwen3_30b_a3b" || spec.kind == "qwen3_tiny") {
    Qwen3MoeShape shape =
        spec.kind == "qwen3_30b_a3b" ? Qwen3MoeShape() : TinyQwen3MoeShape();
    if (spec.layers > 0) shape.num_layers = spec.layers;
    return Qwen3MoeConfig(shape);
  }
  if (spec.kind == "qwen" || spec.kind == "qwen_tiny") {
    QwenMoeShape shape = TinyQwenMoeShape();
    if (spec.kind == "qwen") {
      shape = QwenMoeShape();
      shape.num_layers = 24;
    }
    if (spec.layers > 0) shape.num_layers = spec.layers;
    return QwenMoeConfig(shape);
  }
  if (spec.kind == "mixtral" || spec.kind == "mixtral_tiny") {
    MixtralShape shape = TinyMixtralShape();
    if (spec.kind == "mixtral") {
      shape = MixtralShape();
      shape.num_layers = 32;
    }
    if (spec.layers > 0) shape.num_layers = spec.layers;
    return MixtralConfig(shape);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown generated model '", spec.kind,
                   "' (qwen3_30b_a3b, qwen, mixtral, qwen3_tiny, qwen_tiny or "
                   "mixtral_tiny)"));
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
  if (spec.kind == "qwen3_30b_a3b") {
    return absl::StrCat("qwen3-30b-a3b-shape-random, ", layers,
                        " of 48 layers");
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
  std::fprintf(log, "  written in %.1f s\n", Seconds(start));
  return model;
}

absl::StatusOr<std::unique_ptr<engine::ModelWeights>> GenerateModelInMemory(
    const nlohmann::json& config, std::FILE* log, int threads) {
  absl::StatusOr<uint64_t> bytes = GeneratedWeightBytes(config);
  if (!bytes.ok()) return bytes.status();
  const uint64_t available = AvailableMemoryBytes();
  const long long layers = config.value("num_hidden_layers", 0LL);
  if (available > 0 && *bytes > available) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the generated ", config.value("model_type", "?"),
                     " model (", layers, " layers) needs ", *bytes / 1e9,
                     " GB of memory and this machine has ", available / 1e9,
                     " GB available; generate fewer layers (--gen_layers)"));
  }
  if (threads <= 0) {
    threads =
        static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  std::fprintf(log,
               "generating random-weight %s (%lld layers, %.2f GB) in memory "
               "on %d threads ...\n",
               config.value("model_type", "?").c_str(), layers, *bytes / 1e9,
               threads);
  std::fflush(log);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<engine::ModelWeights>> weights =
      GenerateRandomWeights(config, {.seed = 1, .threads = threads});
  if (!weights.ok()) return weights.status();
  const double seconds = Seconds(start);
  std::fprintf(log, "  generated in %.2f s (%.2f GB/s)\n", seconds,
               *bytes / 1e9 / std::max(seconds, 1e-9));
  return weights;
}

GeneratedModel::~GeneratedModel() {
  if (!temporary_) return;
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

}  // namespace moeserve::bench
