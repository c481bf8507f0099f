#include "server/openai/openai_frontend.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "grpcpp/support/status.h"
#include "nlohmann/json.hpp"
#include "server/caller_identity.h"

namespace moeserve::server::openai {
namespace {

using Json = nlohmann::json;

Json ModelEntry(const std::string& id, int64_t created,
                const std::string& root) {
  return {{"id", id},
          {"object", "model"},
          {"created", created},
          {"owned_by", "moeserve"},
          {"root", root}};
}

std::string Dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

OpenAiFrontend::OpenAiFrontend(ModelHost* host, ServerMetrics* metrics,
                               RequestLimits limits, std::string served_model,
                               absl::StatusOr<ChatTemplate> chat_template)
    : host_(host),
      metrics_(metrics),
      limits_(limits),
      served_model_(std::move(served_model)),
      chat_template_(std::move(chat_template)),
      created_(absl::ToUnixSeconds(absl::Now())) {}

absl::StatusOr<std::string> OpenAiFrontend::EngineOf(
    const std::string& model) const {
  const std::vector<std::string> names = host_->EngineNames();
  if (std::find(names.begin(), names.end(), model) != names.end()) {
    return model;
  }
  if (model.empty() || model == served_model_) return std::string();
  return absl::NotFoundError(absl::StrCat(
      "model: the model '", model, "' does not exist; this server serves ",
      absl::StrJoin(names, ", "),
      served_model_.empty() ? ""
                            : absl::StrCat(" (engines) and ", served_model_,
                                           " (its default choice)")));
}

absl::StatusOr<PreparedRequest> OpenAiFrontend::Prepare(
    Endpoint endpoint, absl::string_view body) const {
  PreparedRequest p;
  MOESERVE_ASSIGN_OR_RETURN(p.request, TranslateRequest(body, endpoint));
  v1::GenerateRequest& g = p.request.generate;
  if (endpoint == Endpoint::kChatCompletions) {
    if (!chat_template_.ok()) return chat_template_.status();
    MOESERVE_ASSIGN_OR_RETURN(
        *g.mutable_prompt(),
        chat_template_->Render(p.request.messages,
                               p.request.add_generation_prompt));
  }
  MOESERVE_RETURN_IF_ERROR(ValidateGenerateRequest(g, limits_));
  MOESERVE_ASSIGN_OR_RETURN(*g.mutable_policy(), EngineOf(p.request.model));
  MOESERVE_RETURN_IF_ERROR(CheckAccepting());
  // Our own id (the engine takes it as a client's): a stream can name its
  // chunks before the engine's first message.
  g.set_request_id(NewServerRequestId());
  p.header.endpoint = endpoint;
  p.header.id = ResponseId(endpoint, g.request_id());
  p.header.created = absl::ToUnixSeconds(absl::Now());
  p.header.top_logprobs = p.request.top_logprobs;
  p.header.model = !g.policy().empty()        ? g.policy()
                   : !p.request.model.empty() ? p.request.model
                                              : served_model_;
  return p;
}

absl::StatusOr<std::vector<std::unique_ptr<GenerateCall>>>
OpenAiFrontend::Start(const PreparedRequest& prepared,
                      std::string_view caller) const {
  const int n = prepared.request.n;
  std::vector<std::unique_ptr<GenerateCall>> calls;
  for (int i = 0; i < n; ++i) {
    v1::GenerateRequest g = prepared.request.generate;
    if (n > 1) {
      g.set_request_id(absl::StrCat(g.request_id(), "-", i));
      if (g.sampling().has_seed()) {
        g.mutable_sampling()->set_seed(g.sampling().seed() + i);
      }
    }
    absl::StatusOr<std::unique_ptr<GenerateCall>> call =
        host_->StartGenerate(g, absl::InfiniteFuture(), caller);
    // A refusal drops the calls started so far (a call's destructor
    // cancels it and frees its queue slot).
    if (!call.ok()) return call.status();
    calls.push_back(*std::move(call));
  }
  return calls;
}

absl::Status OpenAiFrontend::CheckAccepting() const {
  if (draining()) {
    return absl::UnavailableError("server is shutting down (draining)");
  }
  return host_->CheckReady();
}

std::string OpenAiFrontend::ModelsBody() const {
  Json data = Json::array();
  for (const std::string& name : host_->EngineNames()) {
    data.push_back(ModelEntry(name, created_, served_model_));
  }
  return Dump({{"object", "list"}, {"data", std::move(data)}});
}

absl::StatusOr<std::string> OpenAiFrontend::ModelBody(
    absl::string_view id) const {
  const std::vector<std::string> names = host_->EngineNames();
  if (std::find(names.begin(), names.end(), id) == names.end()) {
    return absl::NotFoundError(
        absl::StrCat("model: the model '", id, "' does not exist"));
  }
  return Dump(ModelEntry(std::string(id), created_, served_model_));
}

namespace {

// The validator and the tokenizer name the gRPC fields ("text: ...",
// "token_ids[3]: ..."): an error names the request's own instead.
absl::Status RenameTokenizeFields(const absl::Status& status,
                                  absl::string_view text_field,
                                  absl::string_view ids_field) {
  if (status.ok()) return status;
  absl::string_view message = status.message();
  std::string renamed(message);
  if (absl::ConsumePrefix(&message, "text:")) {
    renamed = absl::StrCat(text_field, ":", message);
  } else if (absl::ConsumePrefix(&message, "token_ids")) {
    renamed = absl::StrCat(ids_field, message);
  }
  return absl::Status(status.code(), renamed);
}

}  // namespace

absl::StatusOr<v1::TokenizeResponse> OpenAiFrontend::RunTokenize(
    const v1::TokenizeRequest& request, absl::string_view text_field,
    absl::string_view ids_field) const {
  MOESERVE_RETURN_IF_ERROR(RenameTokenizeFields(
      ValidateTokenizeRequest(request, limits_), text_field, ids_field));
  MOESERVE_RETURN_IF_ERROR(host_->CheckReady());
  absl::StatusOr<v1::TokenizeResponse> response = host_->Tokenize(request);
  if (!response.ok()) {
    return RenameTokenizeFields(response.status(), text_field, ids_field);
  }
  return response;
}

absl::StatusOr<std::string> OpenAiFrontend::TokenizeBody(
    absl::string_view body) const {
  MOESERVE_ASSIGN_OR_RETURN(OpenAiTokenizeRequest r,
                            TranslateTokenizeRequest(body));
  MOESERVE_RETURN_IF_ERROR(EngineOf(r.model).status());
  const bool chat = !r.messages.empty();
  if (chat) {
    if (!chat_template_.ok()) return chat_template_.status();
    MOESERVE_ASSIGN_OR_RETURN(
        *r.tokenize.mutable_text(),
        chat_template_->Render(r.messages, r.add_generation_prompt));
  }
  MOESERVE_ASSIGN_OR_RETURN(
      v1::TokenizeResponse response,
      RunTokenize(r.tokenize, chat ? "messages" : "prompt", "prompt"));
  Json tokens = Json::array();
  for (uint32_t id : response.token_ids()) tokens.push_back(id);
  Json strs = nullptr;
  if (r.return_token_strs) {
    strs = Json::array();
    for (const std::string& piece : response.pieces()) strs.push_back(piece);
  }
  const v1::ListModelsResponse models = host_->ListModels();
  Json body_json = {{"count", response.token_ids_size()},
                    {"tokens", std::move(tokens)},
                    {"token_strs", std::move(strs)}};
  if (models.models_size() > 0) {
    body_json["max_model_len"] = models.models(0).max_position_embeddings();
  }
  return Dump(body_json);
}

absl::StatusOr<std::string> OpenAiFrontend::DetokenizeBody(
    absl::string_view body) const {
  std::string model;
  MOESERVE_ASSIGN_OR_RETURN(v1::TokenizeRequest request,
                            TranslateDetokenizeRequest(body, &model));
  MOESERVE_RETURN_IF_ERROR(EngineOf(model).status());
  MOESERVE_ASSIGN_OR_RETURN(v1::TokenizeResponse response,
                            RunTokenize(request, "tokens", "tokens"));
  return Dump({{"prompt", response.text()}});
}

void OpenAiFrontend::Count(absl::string_view route,
                           const absl::Status& status) const {
  if (metrics_ == nullptr) return;
  // Only the code is counted; absl and gRPC share the numbering.
  metrics_->CountRpc(
      std::string(route),
      grpc::Status(static_cast<grpc::StatusCode>(status.code()), ""));
}

}  // namespace moeserve::server::openai
