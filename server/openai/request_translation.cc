#include "server/openai/request_translation.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"

namespace moeserve::server::openai {
namespace {

using Json = nlohmann::json;

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

// The value of `key`, or null when it is absent or JSON null (OpenAI treats
// both as "not set").
const Json* Find(const Json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

// Reads a number; leaves *out alone when the field is not set.
absl::Status ReadNumber(const Json& body, const char* key, bool* present,
                        double* out) {
  *present = false;
  const Json* v = Find(body, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number()) return Invalid(key, "must be a number");
  *out = v->get<double>();
  if (!std::isfinite(*out)) return Invalid(key, "must be finite");
  *present = true;
  return absl::OkStatus();
}

// Reads an integer in [lo, hi]; leaves *out alone when it is not set.
absl::Status ReadInteger(const Json& body, const char* key, int64_t lo,
                         int64_t hi, bool* present, int64_t* out) {
  *present = false;
  const Json* v = Find(body, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number_integer()) return Invalid(key, "must be an integer");
  if (v->is_number_unsigned() &&
      v->get<uint64_t>() > static_cast<uint64_t>(hi)) {
    return Invalid(key, absl::StrCat("must be at most ", hi, ", got ",
                                     v->get<uint64_t>()));
  }
  const int64_t value = v->get<int64_t>();
  if (value < lo || value > hi) {
    return Invalid(
        key, absl::StrCat("must be in [", lo, ", ", hi, "], got ", value));
  }
  *out = value;
  *present = true;
  return absl::OkStatus();
}

absl::Status ReadBool(const Json& body, const char* key, bool* out) {
  const Json* v = Find(body, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_boolean()) return Invalid(key, "must be true or false");
  *out = v->get<bool>();
  return absl::OkStatus();
}

absl::Status ReadModel(const Json& body, OpenAiRequest* r) {
  const Json* v = Find(body, "model");
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_string()) return Invalid("model", "must be a string");
  r->model = v->get<std::string>();
  return absl::OkStatus();
}

// A list of token ids (the field `field`) appended to *out.
template <typename RepeatedIds>
absl::Status ReadIdList(const Json& ids, absl::string_view field,
                        RepeatedIds* out) {
  for (size_t i = 0; i < ids.size(); ++i) {
    const Json& id = ids[i];
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() > std::numeric_limits<uint32_t>::max()) {
      return Invalid(absl::StrCat(field, "[", i, "]"),
                     "a token id must be an integer in [0, 2^32)");
    }
    out->Add(static_cast<uint32_t>(id.get<int64_t>()));
  }
  return absl::OkStatus();
}

// A list of token ids into the request's prompt_token_ids.
absl::Status ReadTokenIds(const Json& ids, v1::GenerateRequest* g) {
  return ReadIdList(ids, "prompt", g->mutable_prompt_token_ids());
}

constexpr char kOnePrompt[] =
    "several prompts in one request are not supported; send one request per "
    "prompt (n asks for several completions of one prompt)";

absl::Status ReadPrompt(const Json& body, v1::GenerateRequest* g) {
  const Json* v = Find(body, "prompt");
  if (v == nullptr) return Invalid("prompt", "is required");
  if (v->is_string()) {
    g->set_prompt(v->get<std::string>());
    return absl::OkStatus();
  }
  if (!v->is_array()) {
    return Invalid("prompt",
                   "must be a string, a list of one string or a list of "
                   "token ids");
  }
  if (v->empty()) return Invalid("prompt", "must not be empty");
  const Json& first = v->front();
  if (first.is_string()) {
    if (v->size() > 1) return Invalid("prompt", kOnePrompt);
    g->set_prompt(first.get<std::string>());
    return absl::OkStatus();
  }
  if (first.is_array()) {  // a list of token-id lists
    if (v->size() > 1) return Invalid("prompt", kOnePrompt);
    return ReadTokenIds(first, g);
  }
  return ReadTokenIds(*v, g);
}

// A message's content: a string, or a list of {"type": "text", "text"}.
absl::StatusOr<std::string> ReadContent(const Json& message,
                                        const std::string& field) {
  const Json* v = Find(message, "content");
  const std::string where = absl::StrCat(field, ".content");
  if (v == nullptr) return Invalid(where, "is required");
  if (v->is_string()) return v->get<std::string>();
  if (!v->is_array()) {
    return Invalid(where, "must be a string or a list of text parts");
  }
  std::string text;
  for (size_t j = 0; j < v->size(); ++j) {
    const Json& part = (*v)[j];
    const std::string at = absl::StrCat(where, "[", j, "]");
    if (!part.is_object()) return Invalid(at, "must be an object");
    const Json* type = Find(part, "type");
    if (type == nullptr || !type->is_string() || *type != "text") {
      return Invalid(absl::StrCat(at, ".type"),
                     absl::StrCat("only text parts are supported, got ",
                                  type == nullptr ? "none" : type->dump()));
    }
    const Json* t = Find(part, "text");
    if (t == nullptr || !t->is_string()) {
      return Invalid(absl::StrCat(at, ".text"), "must be a string");
    }
    text += t->get<std::string>();
  }
  return text;
}

absl::Status ReadMessages(const Json& body, OpenAiRequest* r) {
  const Json* v = Find(body, "messages");
  if (v == nullptr) return Invalid("messages", "is required");
  if (!v->is_array() || v->empty()) {
    return Invalid("messages", "must be a non-empty list of messages");
  }
  for (size_t i = 0; i < v->size(); ++i) {
    const Json& m = (*v)[i];
    const std::string field = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return Invalid(field, "must be an object");
    const Json* role = Find(m, "role");
    if (role == nullptr || !role->is_string()) {
      return Invalid(absl::StrCat(field, ".role"), "must be a string");
    }
    ChatMessage message;
    message.role = role->get<std::string>();
    if (message.role == "developer") message.role = "system";
    if (message.role != "system" && message.role != "user" &&
        message.role != "assistant") {
      return Invalid(absl::StrCat(field, ".role"),
                     absl::StrCat("'", message.role,
                                  "' is not supported (system, developer, "
                                  "user and assistant are)"));
    }
    const Json* calls = Find(m, "tool_calls");
    if ((calls != nullptr && !calls->empty()) ||
        Find(m, "function_call") != nullptr) {
      return Invalid(absl::StrCat(field, ".tool_calls"),
                     "tool calling is not supported");
    }
    MOESERVE_ASSIGN_OR_RETURN(message.content, ReadContent(m, field));
    r->messages.push_back(std::move(message));
  }
  return ReadBool(body, "add_generation_prompt", &r->add_generation_prompt);
}

absl::Status ReadMaxTokens(const Json& body, Endpoint endpoint,
                           v1::SamplingParams* s) {
  constexpr int64_t kMax = std::numeric_limits<uint32_t>::max();
  const char* key = "max_tokens";
  if (endpoint == Endpoint::kChatCompletions &&
      Find(body, "max_completion_tokens") != nullptr) {
    key = "max_completion_tokens";
  }
  bool present = false;
  int64_t value = 0;
  MOESERVE_RETURN_IF_ERROR(ReadInteger(body, key, 1, kMax, &present, &value));
  if (present) s->set_max_new_tokens(static_cast<uint32_t>(value));
  MOESERVE_RETURN_IF_ERROR(
      ReadInteger(body, "min_tokens", 0, kMax, &present, &value));
  if (present) s->set_min_new_tokens(static_cast<uint32_t>(value));
  return absl::OkStatus();
}

absl::Status ReadSeed(const Json& body, v1::SamplingParams* s) {
  const Json* v = Find(body, "seed");
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number_integer()) return Invalid("seed", "must be an integer");
  // Any 64-bit integer: a negative one is its two's complement.
  s->set_seed(v->is_number_unsigned()
                  ? v->get<uint64_t>()
                  : static_cast<uint64_t>(v->get<int64_t>()));
  return absl::OkStatus();
}

absl::Status ReadStop(const Json& body, v1::SamplingParams* s) {
  const Json* v = Find(body, "stop");
  if (v == nullptr) return absl::OkStatus();
  if (v->is_string()) {
    s->add_stop(v->get<std::string>());
    return absl::OkStatus();
  }
  if (!v->is_array()) {
    return Invalid("stop", "must be a string or a list of strings");
  }
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) {
      return Invalid(absl::StrCat("stop[", i, "]"), "must be a string");
    }
    s->add_stop((*v)[i].get<std::string>());
  }
  return absl::OkStatus();
}

// vLLM's stop_token_ids: a list of token ids that end generation (the
// id is generated, its text is not sent).
absl::Status ReadStopTokenIds(const Json& body, v1::SamplingParams* s) {
  const Json* v = Find(body, "stop_token_ids");
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_array()) {
    return Invalid("stop_token_ids", "must be a list of token ids");
  }
  return ReadIdList(*v, "stop_token_ids", s->mutable_stop_token_ids());
}

absl::Status ReadSampling(const Json& body, Endpoint endpoint,
                          v1::SamplingParams* s) {
  MOESERVE_RETURN_IF_ERROR(ReadMaxTokens(body, endpoint, s));
  bool present = false;
  double number = 1;  // OpenAI's default temperature
  MOESERVE_RETURN_IF_ERROR(ReadNumber(body, "temperature", &present, &number));
  s->set_temperature(static_cast<float>(number));
  MOESERVE_RETURN_IF_ERROR(ReadNumber(body, "top_p", &present, &number));
  if (present) s->set_top_p(static_cast<float>(number));
  MOESERVE_RETURN_IF_ERROR(ReadNumber(body, "min_p", &present, &number));
  if (present) s->set_min_p(static_cast<float>(number));
  MOESERVE_RETURN_IF_ERROR(
      ReadNumber(body, "repetition_penalty", &present, &number));
  if (present) s->set_repetition_penalty(static_cast<float>(number));
  MOESERVE_RETURN_IF_ERROR(
      ReadNumber(body, "presence_penalty", &present, &number));
  if (present) s->set_presence_penalty(static_cast<float>(number));
  MOESERVE_RETURN_IF_ERROR(
      ReadNumber(body, "frequency_penalty", &present, &number));
  if (present) s->set_frequency_penalty(static_cast<float>(number));
  int64_t top_k = 0;
  MOESERVE_RETURN_IF_ERROR(ReadInteger(body, "top_k", -1,
                                       std::numeric_limits<int32_t>::max(),
                                       &present, &top_k));
  if (present && top_k > 0) s->set_top_k(static_cast<int32_t>(top_k));
  bool ignore_eos = false;
  MOESERVE_RETURN_IF_ERROR(ReadBool(body, "ignore_eos", &ignore_eos));
  s->set_ignore_eos(ignore_eos);
  MOESERVE_RETURN_IF_ERROR(ReadSeed(body, s));
  MOESERVE_RETURN_IF_ERROR(ReadStopTokenIds(body, s));
  return ReadStop(body, s);
}

absl::Status ReadStream(const Json& body, OpenAiRequest* r) {
  MOESERVE_RETURN_IF_ERROR(ReadBool(body, "stream", &r->stream));
  const Json* options = Find(body, "stream_options");
  if (options == nullptr) return absl::OkStatus();
  if (!options->is_object()) {
    return Invalid("stream_options", "must be an object");
  }
  if (!r->stream) {
    return Invalid("stream_options", "is only allowed with stream: true");
  }
  const Json* usage = Find(*options, "include_usage");
  if (usage != nullptr) {
    if (!usage->is_boolean()) {
      return Invalid("stream_options.include_usage", "must be true or false");
    }
    r->include_usage = usage->get<bool>();
  }
  return absl::OkStatus();
}

// Completions: logprobs = N alternatives. Chat: logprobs = true/false,
// top_logprobs = N.
absl::Status ReadLogprobs(const Json& body, OpenAiRequest* r) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  bool present = false;
  int64_t top = 0;
  if (r->endpoint == Endpoint::kChatCompletions) {
    bool wanted = false;
    MOESERVE_RETURN_IF_ERROR(ReadBool(body, "logprobs", &wanted));
    MOESERVE_RETURN_IF_ERROR(
        ReadInteger(body, "top_logprobs", 0, kMax, &present, &top));
    if (top > 0 && !wanted) {
      return Invalid("top_logprobs", "requires logprobs: true");
    }
    if (!wanted) return absl::OkStatus();
  } else {
    MOESERVE_RETURN_IF_ERROR(
        ReadInteger(body, "logprobs", 0, kMax, &present, &top));
    if (!present) return absl::OkStatus();
  }
  r->top_logprobs = static_cast<int>(top);
  // The engine reports the sampled token beside its top alternatives, so
  // it is asked for at least one.
  r->generate.set_logprobs(static_cast<uint32_t>(std::max<int64_t>(top, 1)));
  return absl::OkStatus();
}

// n: completions of the one prompt, 1..kMaxChoices; best_of: unset or n
// (choosing the best of more needs a ranking this API does not do).
absl::Status ReadChoices(const Json& body, OpenAiRequest* r) {
  bool present = false;
  int64_t n = 1;
  MOESERVE_RETURN_IF_ERROR(
      ReadInteger(body, "n", 1, kMaxChoices, &present, &n));
  r->n = static_cast<int>(n);
  int64_t best_of = n;
  MOESERVE_RETURN_IF_ERROR(ReadInteger(body, "best_of", 1,
                                       std::numeric_limits<int32_t>::max(),
                                       &present, &best_of));
  if (best_of != n) {
    return Invalid("best_of", absl::StrCat("only best_of = n (", n,
                                           ") is supported, got ", best_of));
  }
  return absl::OkStatus();
}

// A field that must be absent, null, false, 0, "" or empty.
bool IsNeutral(const Json& v) {
  return v.is_null() || (v.is_boolean() && !v.get<bool>()) ||
         (v.is_number() && v.get<double>() == 0) ||
         (v.is_string() && v.get<std::string>().empty()) ||
         ((v.is_array() || v.is_object()) && v.empty());
}

absl::Status RefuseUnsupported(const Json& body) {
  struct Refused {
    const char* key;
    const char* what;
  };
  static constexpr Refused kRefused[] = {
      {"echo", "echo is not supported"},
      {"suffix", "suffix (insertion) is not supported"},
      {"logit_bias", "logit_bias is not supported"},
      {"tools", "tool calling is not supported"},
      {"functions", "function calling is not supported"},
      {"function_call", "function calling is not supported"},
      {"parallel_tool_calls", "tool calling is not supported"},
  };
  for (const Refused& r : kRefused) {
    auto it = body.find(r.key);
    if (it != body.end() && !IsNeutral(*it)) return Invalid(r.key, r.what);
  }
  if (const Json* choice = Find(body, "tool_choice");
      choice != nullptr && *choice != "none") {
    return Invalid("tool_choice", "tool calling is not supported");
  }
  if (const Json* format = Find(body, "response_format"); format != nullptr) {
    const bool text = format->is_object() && format->contains("type") &&
                      (*format)["type"] == "text";
    if (!text) {
      return Invalid("response_format",
                     "only {\"type\": \"text\"} is supported");
    }
  }
  return absl::OkStatus();
}

// The body as a JSON object, or INVALID_ARGUMENT.
absl::StatusOr<Json> ParseBody(absl::string_view body) {
  Json json = Json::parse(body.begin(), body.end(), nullptr,
                          /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return absl::InvalidArgumentError("the request body is not valid JSON");
  }
  if (!json.is_object()) {
    return absl::InvalidArgumentError("the request body must be a JSON object");
  }
  return json;
}

}  // namespace

absl::StatusOr<OpenAiTokenizeRequest> TranslateTokenizeRequest(
    absl::string_view body) {
  MOESERVE_ASSIGN_OR_RETURN(const Json json, ParseBody(body));
  OpenAiRequest chat;  // for the shared readers of model and messages
  MOESERVE_RETURN_IF_ERROR(ReadModel(json, &chat));
  OpenAiTokenizeRequest r;
  r.model = std::move(chat.model);
  const bool has_prompt = Find(json, "prompt") != nullptr;
  const bool has_messages = Find(json, "messages") != nullptr;
  if (has_prompt == has_messages) {
    return Invalid(has_prompt ? "messages" : "prompt",
                   "give either prompt or messages");
  }
  if (has_prompt) {
    const Json& prompt = *Find(json, "prompt");
    if (!prompt.is_string()) return Invalid("prompt", "must be a string");
    r.tokenize.set_text(prompt.get<std::string>());
  } else {
    MOESERVE_RETURN_IF_ERROR(ReadMessages(json, &chat));
    r.messages = std::move(chat.messages);
    r.add_generation_prompt = chat.add_generation_prompt;
  }
  bool add_special_tokens = true;
  MOESERVE_RETURN_IF_ERROR(
      ReadBool(json, "add_special_tokens", &add_special_tokens));
  r.tokenize.set_add_bos(add_special_tokens);
  MOESERVE_RETURN_IF_ERROR(
      ReadBool(json, "return_token_strs", &r.return_token_strs));
  return r;
}

absl::StatusOr<v1::TokenizeRequest> TranslateDetokenizeRequest(
    absl::string_view body, std::string* model) {
  MOESERVE_ASSIGN_OR_RETURN(const Json json, ParseBody(body));
  OpenAiRequest named;
  MOESERVE_RETURN_IF_ERROR(ReadModel(json, &named));
  *model = std::move(named.model);
  const Json* tokens = Find(json, "tokens");
  if (tokens == nullptr) return Invalid("tokens", "is required");
  if (!tokens->is_array()) {
    return Invalid("tokens", "must be a list of token ids");
  }
  v1::TokenizeRequest r;
  MOESERVE_RETURN_IF_ERROR(
      ReadIdList(*tokens, "tokens", r.mutable_token_ids()));
  bool skip_special_tokens = false;  // Hugging Face's decode default
  MOESERVE_RETURN_IF_ERROR(
      ReadBool(json, "skip_special_tokens", &skip_special_tokens));
  r.set_skip_special_tokens(skip_special_tokens);
  return r;
}

absl::StatusOr<OpenAiRequest> TranslateRequest(absl::string_view body,
                                               Endpoint endpoint) {
  MOESERVE_ASSIGN_OR_RETURN(const Json json, ParseBody(body));
  OpenAiRequest r;
  r.endpoint = endpoint;
  MOESERVE_RETURN_IF_ERROR(ReadModel(json, &r));
  if (endpoint == Endpoint::kChatCompletions) {
    MOESERVE_RETURN_IF_ERROR(ReadMessages(json, &r));
  } else {
    MOESERVE_RETURN_IF_ERROR(ReadPrompt(json, &r.generate));
  }
  MOESERVE_RETURN_IF_ERROR(
      ReadSampling(json, endpoint, r.generate.mutable_sampling()));
  MOESERVE_RETURN_IF_ERROR(ReadStream(json, &r));
  MOESERVE_RETURN_IF_ERROR(ReadLogprobs(json, &r));
  MOESERVE_RETURN_IF_ERROR(ReadChoices(json, &r));
  MOESERVE_RETURN_IF_ERROR(RefuseUnsupported(json));
  return r;
}

}  // namespace moeserve::server::openai
