// libFuzzer target: the OpenAI API's request path before the engine, i.e.
// a POST body through TranslateRequest (request_translation.h), the chat
// template (the demo model's, when MOESERVE_FUZZ_MODEL_DIR names it) and
// ValidateGenerateRequest, as OpenAiFrontend::Prepare runs them on
// untrusted bodies.
//
// Input: mode byte (bit 0 set: /v1/chat/completions, else
// /v1/completions), then the body. Checked: a refusal is INVALID_ARGUMENT
// with a message, becomes a 400 whose error body is JSON; an accepted body
// has consistent logprobs fields (generate.logprobs = max(1, N), 0 without)
// and, on chat, at least one message; rendering refuses only with
// INVALID_ARGUMENT; the validator's refusals are INVALID_ARGUMENT too.
// Built and run by tests/fuzz/run_fuzzers.sh (request_translation_fuzzer).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "server/openai/api_error.h"
#include "server/openai/chat_template.h"
#include "server/openai/request_translation.h"
#include "server/request_validator.h"

namespace {

using moeserve::server::openai::ChatTemplate;
using moeserve::server::openai::Endpoint;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

const std::optional<ChatTemplate>& Template() {
  static const std::optional<ChatTemplate> t =
      []() -> std::optional<ChatTemplate> {
    const char* dir = std::getenv("MOESERVE_FUZZ_MODEL_DIR");
    if (dir == nullptr) return std::nullopt;
    absl::StatusOr<ChatTemplate> loaded = ChatTemplate::LoadFromModelDir(dir);
    if (!loaded.ok()) std::abort();  // a broken set-up, not a finding
    return *std::move(loaded);
  }();
  return t;
}

void CheckRefusal(const absl::Status& status, Endpoint endpoint) {
  Check(status.code() == absl::StatusCode::kInvalidArgument);
  Check(!status.message().empty());
  const moeserve::server::openai::ApiError error =
      moeserve::server::openai::ApiErrorFromStatus(status, endpoint);
  Check(error.http_status == 400);
  const std::string body = moeserve::server::openai::ErrorBody(error);
  Check(nlohmann::json::accept(body));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const Endpoint endpoint =
      (data[0] & 1) ? Endpoint::kChatCompletions : Endpoint::kCompletions;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  absl::StatusOr<moeserve::server::openai::OpenAiRequest> r =
      moeserve::server::openai::TranslateRequest(body, endpoint);
  if (!r.ok()) {
    CheckRefusal(r.status(), endpoint);
    return 0;
  }
  Check(r->endpoint == endpoint);
  Check(r->top_logprobs >= -1);
  const uint32_t asked = r->generate.logprobs();
  Check(r->top_logprobs < 0
            ? asked == 0
            : asked == static_cast<uint32_t>(std::max(1, r->top_logprobs)));
  Check(r->include_usage ? r->stream : true);
  if (endpoint == Endpoint::kChatCompletions) {
    Check(!r->messages.empty());
    if (Template().has_value()) {
      absl::StatusOr<std::string> prompt =
          Template()->Render(r->messages, r->add_generation_prompt);
      if (!prompt.ok()) {
        CheckRefusal(prompt.status(), endpoint);
        return 0;
      }
      r->generate.set_prompt(*std::move(prompt));
    }
  }
  const absl::Status valid = moeserve::server::ValidateGenerateRequest(
      r->generate, moeserve::server::RequestLimits());
  if (!valid.ok()) CheckRefusal(valid, endpoint);
  return 0;
}
