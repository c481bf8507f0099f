// EngineHost: the ModelHost that serves a loaded model. It owns the model
// weights and tokenizer (read-only, shared by every engine instance), the
// compute backend, and one Engine per engine spec (from --policy and the
// --ab arms, --engines or --engines_config; built by engine::BuildEngine),
// each with its own policy settings, fast tier, KV cache and scheduler.
//
// It translates between the public API (proto messages) and the engine's
// vocabulary (engine/generation.h): tokenizes prompts, resolves sampling
// defaults and seeds, picks the engine (named, or by the weighted A/B split),
// and turns engine events into GenerateResponse messages. Request ids are
// scoped to the caller (server/caller_identity.h): the engines know a
// request by ScopedRequestId(caller, id); the server's own ids are random.
//
// Thread-safe.
#ifndef MOESERVE_SERVER_ENGINE_HOST_H_
#define MOESERVE_SERVER_ENGINE_HOST_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "engine/builder/engine_builder.h"
#include "engine/engine.h"
#include "engine/model_weights.h"
#include "engine/tokenizer.h"
#include "kernels/backend.h"
#include "metrics/registry.h"
#include "server/model_host.h"
#include "server/server_options.h"

namespace moeserve::server {

class EngineHost final : public ModelHost {
 public:
  // Loads options.model_dir, builds the engines (engine::BuildEngine, one
  // per options.engines) and warms each one up. Engine
  // metrics go to `registry` (may be null; must outlive the host).
  // `tokenizer`: null loads <model_dir>/tokenizer.model; tests that cannot
  // load sentencepiece pass engine/testing's fake.
  static absl::StatusOr<std::unique_ptr<EngineHost>> Create(
      const ServerOptions& options, metrics::Registry* registry,
      std::unique_ptr<engine::Tokenizer> tokenizer = nullptr);
  ~EngineHost() override;

  absl::Status CheckReady() const override { return absl::OkStatus(); }
  std::vector<std::string> EngineNames() const override;
  v1::ListModelsResponse ListModels() const override;
  absl::StatusOr<v1::TokenizeResponse> Tokenize(
      const v1::TokenizeRequest& request) override;
  absl::StatusOr<std::unique_ptr<GenerateCall>> StartGenerate(
      const v1::GenerateRequest& request, absl::Time deadline,
      std::string_view caller) override;
  bool Abort(std::string_view caller, std::string_view request_id) override;

 private:
  class EngineCall;
  struct NamedEngine {
    engine::BuiltEngine built;
    double ab_weight = 0;
    const std::string& name() const { return built.spec.name; }
    engine::Engine* engine() const { return built.engine.get(); }
  };

  explicit EngineHost(const ServerOptions& options) : options_(options) {}
  absl::StatusOr<NamedEngine*> PickEngine(const std::string& policy);
  absl::StatusOr<engine::GenerationRequest> ToEngineRequest(
      const v1::GenerateRequest& request) const;
  void FillLogprobs(const engine::GenerationEvent& event,
                    v1::GenerateResponse* response) const;

  const ServerOptions options_;
  std::unique_ptr<engine::ModelWeights> weights_;
  std::unique_ptr<engine::Tokenizer> tokenizer_;
  std::unique_ptr<kernels::Backend> backend_;
  std::vector<NamedEngine> engines_;  // [0] is the default (--policy)

  base::Mutex rng_mu_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(rng_mu_);
};

}  // namespace moeserve::server

#endif  // MOESERVE_SERVER_ENGINE_HOST_H_
