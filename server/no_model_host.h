// A ModelHost with no model: what the server runs when no model could be
// loaded (or none is configured). Everything that needs the model answers
// UNAVAILABLE with the reason; nothing is ever generated.
#ifndef MOESERVE_SERVER_NO_MODEL_HOST_H_
#define MOESERVE_SERVER_NO_MODEL_HOST_H_

#include <string>
#include <utility>
#include <vector>

#include "server/model_host.h"

namespace moeserve::server {

class NoModelHost final : public ModelHost {
 public:
  // `engine_names`: the engines configured by flags (so that an unknown
  // policy is still NOT_FOUND); `reason`: why no model is loaded.
  NoModelHost(std::vector<std::string> engine_names, std::string reason)
      : engine_names_(std::move(engine_names)), reason_(std::move(reason)) {}

  absl::Status CheckReady() const override;
  std::vector<std::string> EngineNames() const override {
    return engine_names_;
  }
  v1::ListModelsResponse ListModels() const override { return {}; }
  absl::StatusOr<v1::TokenizeResponse> Tokenize(
      const v1::TokenizeRequest& request) override;
  absl::Status Generate(const v1::GenerateRequest& request, absl::Time deadline,
                        GenerateSink* sink) override;
  bool Abort(std::string_view /*request_id*/) override { return false; }

 private:
  const std::vector<std::string> engine_names_;
  const std::string reason_;
};

}  // namespace moeserve::server

#endif  // MOESERVE_SERVER_NO_MODEL_HOST_H_
