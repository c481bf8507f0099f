#include "server/request_validator.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/sampling/sampler.h"

namespace moeserve::server {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

// Checks lo <= value <= hi; also rejects NaN, which fails every comparison.
absl::Status CheckRange(absl::string_view field, double value, double lo,
                        double hi) {
  if (value >= lo && value <= hi) return absl::OkStatus();
  return Invalid(field,
                 absl::StrCat("must be in [", lo, ", ", hi, "], got ", value));
}

absl::Status ValidatePrompt(const v1::GenerateRequest& request,
                            const RequestLimits& limits) {
  const bool has_text = !request.prompt().empty();
  const bool has_ids = request.prompt_token_ids_size() > 0;
  if (has_text && has_ids) {
    return Invalid("prompt",
                   "set exactly one of prompt and prompt_token_ids, not both");
  }
  if (!has_text && !has_ids) {
    return Invalid("prompt",
                   "must not be empty (set prompt or prompt_token_ids)");
  }
  if (request.prompt().size() > limits.max_prompt_bytes) {
    return Invalid("prompt", absl::StrCat("is ", request.prompt().size(),
                                          " bytes, more than the limit of ",
                                          limits.max_prompt_bytes,
                                          " (--max_prompt_bytes)"));
  }
  if (request.prompt_token_ids_size() > limits.max_input_tokens) {
    return Invalid("prompt_token_ids",
                   absl::StrCat("has ", request.prompt_token_ids_size(),
                                " tokens, more than --max_input_tokens=",
                                limits.max_input_tokens));
  }
  return absl::OkStatus();
}

absl::Status ValidateStops(const v1::SamplingParams& s,
                           const RequestLimits& limits) {
  if (s.stop_size() > limits.max_stop_strings) {
    return Invalid("sampling.stop",
                   absl::StrCat("has ", s.stop_size(), " strings, at most ",
                                limits.max_stop_strings, " are allowed"));
  }
  for (int i = 0; i < s.stop_size(); ++i) {
    const std::string field = absl::StrCat("sampling.stop[", i, "]");
    if (s.stop(i).empty()) return Invalid(field, "must not be empty");
    if (s.stop(i).size() > limits.max_stop_string_bytes) {
      return Invalid(field,
                     absl::StrCat("is ", s.stop(i).size(), " bytes, at most ",
                                  limits.max_stop_string_bytes));
    }
  }
  if (s.stop_token_ids_size() > limits.max_stop_token_ids) {
    return Invalid("sampling.stop_token_ids",
                   absl::StrCat("has ", s.stop_token_ids_size(),
                                " ids, at most ", limits.max_stop_token_ids));
  }
  return absl::OkStatus();
}

absl::Status ValidateSampling(const v1::SamplingParams& s,
                              const RequestLimits& limits) {
  if (s.max_new_tokens() > limits.max_new_tokens_cap) {
    return Invalid("sampling.max_new_tokens",
                   absl::StrCat(s.max_new_tokens(),
                                " is over the server cap --max_new_tokens_cap=",
                                limits.max_new_tokens_cap));
  }
  const uint32_t max_new =
      s.max_new_tokens() == 0 ? limits.max_new_tokens_cap : s.max_new_tokens();
  if (s.min_new_tokens() > max_new) {
    return Invalid("sampling.min_new_tokens",
                   absl::StrCat(s.min_new_tokens(),
                                " is more than max_new_tokens=", max_new));
  }
  // 0 and anything below engine::kGreedyTemperature (1e-5) are greedy.
  if (!(s.temperature() >= 0) || std::isinf(s.temperature())) {
    return Invalid(
        "sampling.temperature",
        absl::StrCat("must be finite and >= 0, got ", s.temperature()));
  }
  if (s.has_top_p() && !(s.top_p() > 0 && s.top_p() <= 1)) {
    return Invalid("sampling.top_p",
                   absl::StrCat("must be in (0, 1], got ", s.top_p()));
  }
  if (s.top_k() < 0) {
    return Invalid("sampling.top_k",
                   absl::StrCat("must be >= 0 (0 disables), got ", s.top_k()));
  }
  if (auto st = CheckRange("sampling.min_p", s.min_p(), 0, 1); !st.ok()) {
    return st;
  }
  // Outside [0.01, 100] a penalised logit overflows (1e-45: inf) or the
  // penalty is meaningless; the sampler would clamp, the client is told.
  if (s.has_repetition_penalty() &&
      !(s.repetition_penalty() >= engine::kMinRepetitionPenalty &&
        s.repetition_penalty() <= engine::kMaxRepetitionPenalty)) {
    return Invalid("sampling.repetition_penalty",
                   absl::StrCat("must be in [", engine::kMinRepetitionPenalty,
                                ", ", engine::kMaxRepetitionPenalty,
                                "] (1: off), got ", s.repetition_penalty()));
  }
  if (auto st =
          CheckRange("sampling.presence_penalty", s.presence_penalty(), -2, 2);
      !st.ok()) {
    return st;
  }
  if (auto st = CheckRange("sampling.frequency_penalty", s.frequency_penalty(),
                           -2, 2);
      !st.ok()) {
    return st;
  }
  return ValidateStops(s, limits);
}

}  // namespace

size_t DefaultMaxPromptBytes(uint32_t max_input_tokens) {
  return std::max<size_t>(4096, kPromptBytesPerToken * max_input_tokens);
}

absl::Status ValidateGenerateRequest(const v1::GenerateRequest& request,
                                     const RequestLimits& limits) {
  if (auto st = ValidatePrompt(request, limits); !st.ok()) return st;
  if (auto st = ValidateSampling(request.sampling(), limits); !st.ok()) {
    return st;
  }
  if (request.logprobs() > limits.max_logprobs) {
    return Invalid("logprobs",
                   absl::StrCat("must be at most ", limits.max_logprobs,
                                ", got ", request.logprobs()));
  }
  if (request.request_id().size() > limits.max_request_id_bytes) {
    return Invalid(
        "request_id",
        absl::StrCat("is longer than ", limits.max_request_id_bytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status ValidateAgainstModel(const v1::GenerateRequest& request,
                                  size_t prompt_tokens, uint32_t vocab_size,
                                  const RequestLimits& limits) {
  if (prompt_tokens > limits.max_input_tokens) {
    return Invalid("prompt",
                   absl::StrCat("is ", prompt_tokens,
                                " tokens, more than --max_input_tokens=",
                                limits.max_input_tokens));
  }
  for (int i = 0; i < request.prompt_token_ids_size(); ++i) {
    if (request.prompt_token_ids(i) >= vocab_size) {
      return Invalid(
          absl::StrCat("prompt_token_ids[", i, "]"),
          absl::StrCat(request.prompt_token_ids(i),
                       " is outside the vocabulary of ", vocab_size));
    }
  }
  const auto& stops = request.sampling().stop_token_ids();
  for (int i = 0; i < stops.size(); ++i) {
    if (stops[i] >= vocab_size) {
      return Invalid(
          absl::StrCat("sampling.stop_token_ids[", i, "]"),
          absl::StrCat(stops[i], " is outside the vocabulary of ", vocab_size));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateTokenizeRequest(const v1::TokenizeRequest& request,
                                     const RequestLimits& limits) {
  if (!request.text().empty() && request.token_ids_size() > 0) {
    return Invalid("text", "set text or token_ids, not both");
  }
  if (request.text().size() > limits.max_prompt_bytes) {
    return Invalid(
        "text", absl::StrCat("is ", request.text().size(),
                             " bytes, more than the limit of ",
                             limits.max_prompt_bytes, " (--max_prompt_bytes)"));
  }
  if (request.token_ids_size() >
      limits.max_input_tokens + limits.max_new_tokens_cap) {
    return Invalid("token_ids", "has more ids than any sequence can hold");
  }
  return absl::OkStatus();
}

}  // namespace moeserve::server
