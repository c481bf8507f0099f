// OpenAiFrontend: the OpenAI-compatible API between HTTP and the ModelHost,
// free of HTTP types (http_api_server.h moves the bytes).
//
// A generation request goes through the same checks, in the same order, as
// a gRPC one (server/inference_service.h), so answers do not depend on load
// state: the body's fields (request_translation.h; INVALID_ARGUMENT), the
// chat template (FAILED_PRECONDITION when the model has none), the
// validator (ValidateGenerateRequest; INVALID_ARGUMENT), the model
// (NOT_FOUND), then draining or no model ready (UNAVAILABLE); the host's
// StartGenerate may still refuse (RESOURCE_EXHAUSTED: a full queue;
// INVALID_ARGUMENT: a prompt over the token limit).
//
// `model` picks the engine as gRPC's `policy` does: an engine's name picks
// it; "" or the served model's name (the model directory's last component,
// e.g. "demo") leaves it to the A/B split or the default engine; anything
// else is NOT_FOUND (404 model_not_found).
//
// Counts every finished API request in moeserve_grpc_requests_total with
// method = the route ("/v1/completions", "/v1/chat/completions",
// "/v1/models") and the gRPC code it maps to, so HTTP and gRPC requests
// show in one series.
//
// Thread-safe; does not own the host or the metrics.
#ifndef MOESERVE_SERVER_OPENAI_OPENAI_FRONTEND_H_
#define MOESERVE_SERVER_OPENAI_OPENAI_FRONTEND_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/model_host.h"
#include "server/openai/chat_template.h"
#include "server/openai/request_translation.h"
#include "server/openai/response_json.h"
#include "server/request_validator.h"
#include "server/server_metrics.h"

namespace moeserve::server::openai {

// A request ready to start.
struct PreparedRequest {
  OpenAiRequest request;  // request.generate complete: prompt and policy
  ResponseHeader header;
};

class OpenAiFrontend {
 public:
  // `host` must outlive the frontend; `metrics` too, or null (no counts).
  // `served_model`: the name the model answers to besides its engines'.
  // `chat_template`: the model's, or why there is none (the chat endpoint
  // answers that, as a 400).
  OpenAiFrontend(ModelHost* host, ServerMetrics* metrics, RequestLimits limits,
                 std::string served_model,
                 absl::StatusOr<ChatTemplate> chat_template);

  // Parses, translates, renders and checks a body of `endpoint`.
  absl::StatusOr<PreparedRequest> Prepare(Endpoint endpoint,
                                          absl::string_view body) const;

  // Queues the request's n choices on its engine, each its own engine
  // request (request id "<id>-<i>" when n > 1; with a seed, choice i
  // samples with seed + i); `caller` scopes them (server/caller_identity.
  // h). All or none: a refused choice (a full queue) cancels the others.
  absl::StatusOr<std::vector<std::unique_ptr<GenerateCall>>> Start(
      const PreparedRequest& prepared, std::string_view caller) const;

  // GET /v1/models: one entry per engine.
  std::string ModelsBody() const;
  // GET /v1/models/{id}: NOT_FOUND for another id.
  absl::StatusOr<std::string> ModelBody(absl::string_view id) const;

  // POST /tokenize (vLLM's): {"count", "max_model_len", "tokens",
  // "token_strs" (the pieces with return_token_strs, else null)}; a chat's
  // messages are rendered through the chat template first, so the ids are
  // those a generation of the same body is given. POST /detokenize:
  // {"prompt": text}. Errors as for generations (the fields named as the
  // body names them); UNAVAILABLE while no model is served.
  absl::StatusOr<std::string> TokenizeBody(absl::string_view body) const;
  absl::StatusOr<std::string> DetokenizeBody(absl::string_view body) const;

  // OK when generations are accepted; else UNAVAILABLE saying why.
  absl::Status CheckAccepting() const;

  // New generations get UNAVAILABLE from now on; never undone.
  void StartDraining() { draining_.store(true); }
  bool draining() const { return draining_.load(); }

  // Counts one finished request of `route` (see above).
  void Count(absl::string_view route, const absl::Status& status) const;

 private:
  // The engine `model` names ("" for the split), or NOT_FOUND.
  absl::StatusOr<std::string> EngineOf(const std::string& model) const;
  // The model is served and `request` (its fields named `text_field` and
  // `ids_field` in errors) passes the validator; then the host's answer.
  absl::StatusOr<v1::TokenizeResponse> RunTokenize(
      const v1::TokenizeRequest& request, absl::string_view text_field,
      absl::string_view ids_field) const;

  ModelHost* const host_;
  ServerMetrics* const metrics_;
  const RequestLimits limits_;
  const std::string served_model_;
  const absl::StatusOr<ChatTemplate> chat_template_;
  const int64_t created_;  // Unix seconds at start: the models' "created"
  std::atomic<bool> draining_{false};
};

// The route names of Count.
inline constexpr char kCompletionsRoute[] = "/v1/completions";
inline constexpr char kChatCompletionsRoute[] = "/v1/chat/completions";
inline constexpr char kModelsRoute[] = "/v1/models";
inline constexpr char kTokenizeRoute[] = "/tokenize";
inline constexpr char kDetokenizeRoute[] = "/detokenize";

}  // namespace moeserve::server::openai

#endif  // MOESERVE_SERVER_OPENAI_OPENAI_FRONTEND_H_
