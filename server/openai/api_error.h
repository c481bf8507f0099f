// The OpenAI error body and the one conversion from absl::Status to it.
//
// Every failure on the OpenAI-compatible HTTP API travels as an
// absl::Status (the translator's, the validator's, the ModelHost's) and is
// turned into an HTTP status and the body
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
// here, and only here. The convention shared with server/request_validator.h:
// an INVALID_ARGUMENT message starts with the offending field's path and
// ": ". Validator paths (sampling.top_p, sampling.stop[2], ...) are renamed
// to the OpenAI request's names (top_p, stop[2]); the path without its
// index is `param`.
//
//   INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE  400
//   UNAUTHENTICATED 401   PERMISSION_DENIED 403   NOT_FOUND 404 (a model:
//   code model_not_found)   ALREADY_EXISTS 409   RESOURCE_EXHAUSTED 429
//   CANCELLED 499   UNIMPLEMENTED 501   UNAVAILABLE 503
//   DEADLINE_EXCEEDED 504   anything else 500
//
// Messages go through ForClient (no server paths, no source locations) and
// are bounded. Pure functions; thread-safe.
#ifndef MOESERVE_SERVER_OPENAI_API_ERROR_H_
#define MOESERVE_SERVER_OPENAI_API_ERROR_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace moeserve::server::openai {

// Which request a status belongs to: the chat endpoint calls the prompt
// "messages".
enum class Endpoint { kCompletions, kChatCompletions, kOther };

// Longest error message sent (bytes; cut on a UTF-8 boundary).
inline constexpr size_t kMaxApiErrorMessageBytes = 1024;

struct ApiError {
  int http_status = 500;
  std::string type;     // "invalid_request_error", "server_error", ...
  std::string message;  // what the client is told
  std::string param;    // the request field at fault; "" is JSON null
  std::string code;     // e.g. "model_not_found"; "" is JSON null
};

// The OpenAI name of a server/request_validator.h field path, keeping an
// index: "sampling.max_new_tokens" -> "max_tokens", "sampling.stop[1]" ->
// "stop[1]", "prompt" -> "messages" on the chat endpoint. Other names (the
// translator's own, already OpenAI's) are returned unchanged.
std::string OpenAiFieldName(absl::string_view field, Endpoint endpoint);

// REQUIRES: !status.ok().
ApiError ApiErrorFromStatus(const absl::Status& status, Endpoint endpoint);

// {"error": {...}} as JSON text.
std::string ErrorBody(const ApiError& error);

}  // namespace moeserve::server::openai

#endif  // MOESERVE_SERVER_OPENAI_API_ERROR_H_
