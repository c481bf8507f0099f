#include "server/openai/response_json.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace moeserve::server::openai {
namespace {

using Json = nlohmann::json;

bool IsChat(Endpoint endpoint) {
  return endpoint == Endpoint::kChatCompletions;
}

// Text is the engine's UTF-8-complete output; a client's invalid bytes
// echoed in a stop string cannot reach it, but never throw on them.
std::string Dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Json Usage(const v1::Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens()},
          {"completion_tokens", usage.completion_tokens()},
          {"total_tokens", static_cast<uint64_t>(usage.prompt_tokens()) +
                               usage.completion_tokens()}};
}

Json FinishReason(v1::FinishReason reason) {
  const char* name = FinishReasonName(reason);
  return *name == '\0' ? Json() : Json(name);
}

Json Envelope(const ResponseHeader& header, const std::string& id,
              const char* object) {
  return {{"id", id},
          {"object", object},
          {"created", header.created},
          {"model", header.model}};
}

// A stream chunk of one choice.
Json Chunk(const ResponseHeader& header, bool include_usage,
           const std::string& id, Json choice) {
  Json c = Envelope(
      header, id,
      IsChat(header.endpoint) ? "chat.completion.chunk" : "text_completion");
  c["choices"] = Json::array({std::move(choice)});
  if (include_usage) c["usage"] = nullptr;
  return c;
}

// The first choice of a chat stream.
Json RoleChoice() {
  return {{"index", 0},
          {"delta", {{"role", "assistant"}, {"content", ""}}},
          {"logprobs", nullptr},
          {"finish_reason", nullptr}};
}

void AppendEvent(const Json& data, std::string* out) {
  absl::StrAppend(out, "data: ", Dump(data), "\n\n");
}

}  // namespace

std::string ResponseId(Endpoint endpoint, absl::string_view request_id) {
  absl::ConsumePrefix(&request_id, "req-");
  return absl::StrCat(IsChat(endpoint) ? "chatcmpl-" : "cmpl-", request_id);
}

const char* FinishReasonName(v1::FinishReason reason) {
  switch (reason) {
    case v1::EOS_TOKEN:
    case v1::STOP_SEQUENCE:
      return "stop";
    case v1::LENGTH:
    case v1::TIME_LIMIT:
      return "length";
    case v1::CANCELLED:
    case v1::DEADLINE:
      return "abort";
    case v1::ERROR:
      return "error";
    default:
      return "";
  }
}

std::string CompletionBody(const ResponseHeader& header,
                           const v1::GenerateUnaryResponse& r) {
  const bool chat = IsChat(header.endpoint);
  Json choice = {{"index", 0},
                 {"logprobs", nullptr},
                 {"finish_reason", FinishReason(r.finish_reason())}};
  if (chat) {
    choice["message"] = {{"role", "assistant"}, {"content", r.text()}};
  } else {
    choice["text"] = r.text();
  }
  Json body =
      Envelope(header,
               header.id.empty() ? ResponseId(header.endpoint, r.request_id())
                                 : header.id,
               chat ? "chat.completion" : "text_completion");
  body["choices"] = Json::array({std::move(choice)});
  body["usage"] = Usage(r.usage());
  body["system_fingerprint"] = r.policy();
  return Dump(body);
}

void StreamEncoder::Start(std::string* out) {
  if (!IsChat(header_.endpoint) || role_sent_) return;
  role_sent_ = true;
  AppendEvent(Chunk(header_, include_usage_, header_.id, RoleChoice()), out);
}

void StreamEncoder::Append(const v1::GenerateResponse& r, std::string* out) {
  const bool chat = IsChat(header_.endpoint);
  const std::string id = header_.id.empty()
                             ? ResponseId(header_.endpoint, r.request_id())
                             : header_.id;
  const char* object = chat ? "chat.completion.chunk" : "text_completion";
  auto chunk = [&](Json choice) {
    return Chunk(header_, include_usage_, id, std::move(choice));
  };
  auto text_choice = [&](const std::string& text, Json finish) {
    Json choice = {{"index", 0}, {"logprobs", nullptr}};
    if (chat) {
      choice["delta"] = text.empty() ? Json::object() : Json{{"content", text}};
    } else {
      choice["text"] = text;
    }
    choice["finish_reason"] = std::move(finish);
    return choice;
  };
  if (chat && !role_sent_) {
    role_sent_ = true;
    AppendEvent(chunk(RoleChoice()), out);
  }
  if (!r.text().empty())
    AppendEvent(chunk(text_choice(r.text(), nullptr)), out);
  if (r.finish_reason() == v1::FINISH_REASON_UNSPECIFIED) return;
  Json last = chunk(text_choice("", FinishReason(r.finish_reason())));
  last["system_fingerprint"] = r.policy();
  AppendEvent(last, out);
  if (include_usage_) {
    Json usage = Envelope(header_, id, object);
    usage["choices"] = Json::array();
    usage["usage"] = Usage(r.usage());
    AppendEvent(usage, out);
  }
}

void StreamEncoder::AppendDone(std::string* out) { *out += "data: [DONE]\n\n"; }

void StreamEncoder::AppendError(const ApiError& error, std::string* out) {
  absl::StrAppend(out, "data: ", ErrorBody(error), "\n\n");
}

}  // namespace moeserve::server::openai
