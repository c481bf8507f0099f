#include "server/model_host_factory.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "server/no_model_host.h"
#include "spdlog/spdlog.h"

namespace moeserve::server {

std::unique_ptr<ModelHost> CreateModelHost(const ServerOptions& options) {
  std::string reason;
  if (!std::filesystem::is_directory(options.model_dir)) {
    reason = absl::StrCat("--model_dir '", options.model_dir,
                          "' is not a directory");
  } else {
    // The engine (model loading and generation) is not part of this build
    // yet; the server runs as a gRPC skeleton and says so.
    reason = "this build has no inference engine yet";
  }
  spdlog::warn("serving without a model: {}", reason);
  return std::make_unique<NoModelHost>(options.EngineNames(), reason);
}

}  // namespace moeserve::server
