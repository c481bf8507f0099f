#include "server/openai/api_error.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"
#include "server/client_message.h"

namespace moeserve::server::openai {
namespace {

// Characters of a field path at the start of a message ("sampling.stop[2]").
bool IsFieldChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '[' || c == ']';
}

// The field path a message starts with ("top_p" of "top_p: must be ..."),
// or "" when it starts with none.
absl::string_view LeadingField(absl::string_view message) {
  const size_t colon = message.find(": ");
  if (colon == 0 || colon == absl::string_view::npos) return "";
  const absl::string_view field = message.substr(0, colon);
  for (char c : field) {
    if (!IsFieldChar(c)) return "";
  }
  return field;
}

// "stop[1]" -> "stop"; "messages[0].content" -> "messages[0].content" is
// kept whole except for a trailing index.
absl::string_view WithoutTrailingIndex(absl::string_view field) {
  if (!field.empty() && field.back() == ']') {
    const size_t open = field.rfind('[');
    if (open != absl::string_view::npos) return field.substr(0, open);
  }
  return field;
}

std::string CutUtf8(std::string message) {
  if (message.size() <= kMaxApiErrorMessageBytes) return message;
  size_t cut = kMaxApiErrorMessageBytes - 3;
  while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) {
    --cut;
  }
  message.resize(cut);
  return message + "...";
}

struct Kind {
  int http_status;
  const char* type;
  const char* code;  // "" for none
};

Kind KindOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return {400, "invalid_request_error", ""};
    case absl::StatusCode::kUnauthenticated:
      return {401, "authentication_error", "invalid_api_key"};
    case absl::StatusCode::kPermissionDenied:
      return {403, "permission_error", ""};
    case absl::StatusCode::kNotFound:
      return {404, "invalid_request_error", ""};
    case absl::StatusCode::kAlreadyExists:
      return {409, "invalid_request_error", ""};
    case absl::StatusCode::kResourceExhausted:
      return {429, "rate_limit_error", "rate_limit_exceeded"};
    case absl::StatusCode::kCancelled:
      return {499, "cancelled", ""};
    case absl::StatusCode::kUnimplemented:
      return {501, "invalid_request_error", "unsupported"};
    case absl::StatusCode::kUnavailable:
      return {503, "service_unavailable_error", "service_unavailable"};
    case absl::StatusCode::kDeadlineExceeded:
      return {504, "timeout_error", "timeout"};
    default:
      return {500, "server_error", ""};
  }
}

}  // namespace

std::string OpenAiFieldName(absl::string_view field, Endpoint endpoint) {
  absl::string_view index;
  absl::string_view base = WithoutTrailingIndex(field);
  if (base.size() < field.size()) index = field.substr(base.size());
  absl::ConsumePrefix(&base, "sampling.");
  std::string name(base);
  if (name == "max_new_tokens") {
    name = "max_tokens";
  } else if (name == "min_new_tokens") {
    name = "min_tokens";
  } else if (name == "policy") {
    name = "model";
  } else if (name == "prompt" || name == "prompt_token_ids") {
    name = endpoint == Endpoint::kChatCompletions ? "messages" : "prompt";
    // An index of prompt_token_ids is the prompt's own (prompt[3]).
  }
  return absl::StrCat(name, index);
}

ApiError ApiErrorFromStatus(const absl::Status& status, Endpoint endpoint) {
  const Kind kind = KindOf(status.code());
  ApiError error;
  error.http_status = kind.http_status;
  error.type = kind.type;
  error.code = kind.code;
  std::string message = ForClient(status.message());
  const absl::string_view field = LeadingField(message);
  if (!field.empty()) {
    const std::string name = OpenAiFieldName(field, endpoint);
    error.param = std::string(WithoutTrailingIndex(name));
    message = absl::StrCat(name, message.substr(field.size()));
  }
  if (status.code() == absl::StatusCode::kNotFound && error.param == "model") {
    error.code = "model_not_found";
  }
  if (message.empty()) message = absl::StatusCodeToString(status.code());
  error.message = CutUtf8(std::move(message));
  return error;
}

std::string ErrorBody(const ApiError& error) {
  nlohmann::json body;
  nlohmann::json& e = body["error"];
  e["message"] = error.message;
  e["type"] = error.type;
  e["param"] =
      error.param.empty() ? nlohmann::json() : nlohmann::json(error.param);
  e["code"] =
      error.code.empty() ? nlohmann::json() : nlohmann::json(error.code);
  // Invalid UTF-8 (a client's bytes echoed back) is replaced, not thrown.
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace moeserve::server::openai
