#include "server/openai/openai_frontend.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

absl::StatusOr<std::unique_ptr<GenerateCall>> OpenAiFrontend::Start(
    const PreparedRequest& prepared, std::string_view caller) const {
  return host_->StartGenerate(prepared.request.generate, absl::InfiniteFuture(),
                              caller);
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

void OpenAiFrontend::Count(absl::string_view route,
                           const absl::Status& status) const {
  if (metrics_ == nullptr) return;
  // Only the code is counted; absl and gRPC share the numbering.
  metrics_->CountRpc(
      std::string(route),
      grpc::Status(static_cast<grpc::StatusCode>(status.code()), ""));
}

}  // namespace moeserve::server::openai
