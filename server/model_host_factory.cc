#include "server/model_host_factory.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "server/engine_host.h"

namespace moeserve::server {

std::unique_ptr<AsyncModelHost> CreateModelHost(const ServerOptions& options,
                                                metrics::Registry* registry) {
  return std::make_unique<AsyncModelHost>(
      options.EngineNames(),
      [options, registry]() -> absl::StatusOr<std::unique_ptr<ModelHost>> {
        if (!std::filesystem::is_directory(options.model_dir)) {
          return absl::NotFoundError(absl::StrCat(
              "--model_dir '", options.model_dir, "' is not a directory"));
        }
        absl::StatusOr<std::unique_ptr<EngineHost>> host =
            EngineHost::Create(options, registry);
        if (!host.ok()) return host.status();
        return std::unique_ptr<ModelHost>(*std::move(host));
      });
}

}  // namespace moeserve::server
