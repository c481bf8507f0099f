#include "server/openai/response_json.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "engine/hf_tokenizer/unicode_util.h"
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

// The first chunk of a choice of a chat stream.
Json RoleChoice(int index) {
  return {{"index", index},
          {"delta", {{"role", "assistant"}, {"content", ""}}},
          {"logprobs", nullptr},
          {"finish_reason", nullptr}};
}

// What a logprobs entry calls a token: the bytes it adds to the text,
// or its piece when it adds none (a control token such as EOS).
const std::string& RawToken(const v1::TokenLogprob& t) {
  return t.token_bytes().empty() ? t.text() : t.token_bytes();
}

// RawToken as the string a response shows (an incomplete UTF-8 character
// as U+FFFD).
std::string TokenText(const v1::TokenLogprob& t) {
  return engine::hf_tokenizer::Utf8Lossy(RawToken(t));
}

double Logprob(const v1::TokenLogprob& t) {
  return std::max(static_cast<double>(t.logprob()), -9999.0);
}

size_t CountCharacters(absl::string_view utf8) {
  size_t n = 0;
  for (char c : utf8) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// Chat: {token, logprob, bytes}.
Json ChatToken(const v1::TokenLogprob& t) {
  const std::string& raw = RawToken(t);
  Json bytes = Json::array();
  for (char c : raw) bytes.push_back(static_cast<unsigned char>(c));
  return {{"token", TokenText(t)},
          {"logprob", Logprob(t)},
          {"bytes", std::move(bytes)}};
}

Json ChatLogprobs(
    const google::protobuf::RepeatedPtrField<v1::Logprobs>& logprobs, int top) {
  Json content = Json::array();
  for (const v1::Logprobs& lp : logprobs) {
    Json entry = ChatToken(lp.chosen());
    Json alternatives = Json::array();
    for (int i = 0; i < std::min(top, lp.top_size()); ++i) {
      alternatives.push_back(ChatToken(lp.top(i)));
    }
    entry["top_logprobs"] = std::move(alternatives);
    content.push_back(std::move(entry));
  }
  return {{"content", std::move(content)}};
}

// Completions; *text_offset: characters before the first token, advanced.
Json CompletionLogprobs(
    const google::protobuf::RepeatedPtrField<v1::Logprobs>& logprobs, int top,
    int64_t* text_offset) {
  Json tokens = Json::array(), token_logprobs = Json::array(),
       top_logprobs = Json::array(), offsets = Json::array();
  for (const v1::Logprobs& lp : logprobs) {
    const v1::TokenLogprob& chosen = lp.chosen();
    const std::string token = TokenText(chosen);
    token_logprobs.push_back(Logprob(chosen));
    Json alternatives = Json::object();
    for (int i = 0; i < std::min(top, lp.top_size()); ++i) {
      alternatives[TokenText(lp.top(i))] = Logprob(lp.top(i));
    }
    alternatives[token] = Logprob(chosen);
    top_logprobs.push_back(std::move(alternatives));
    offsets.push_back(*text_offset);
    // A token that adds no bytes (its piece stands in) does not move it.
    if (!chosen.token_bytes().empty()) {
      *text_offset += static_cast<int64_t>(CountCharacters(token));
    }
    tokens.push_back(token);
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top_logprobs)},
          {"text_offset", std::move(offsets)}};
}

// The choice's "logprobs" value: null unless they were asked for.
Json ChoiceLogprobs(
    const ResponseHeader& header,
    const google::protobuf::RepeatedPtrField<v1::Logprobs>& logprobs,
    int64_t* text_offset) {
  if (header.top_logprobs < 0) return nullptr;
  return IsChat(header.endpoint)
             ? ChatLogprobs(logprobs, header.top_logprobs)
             : CompletionLogprobs(logprobs, header.top_logprobs, text_offset);
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

std::string CompletionBody(
    const ResponseHeader& header,
    absl::Span<const v1::GenerateUnaryResponse> choices) {
  const bool chat = IsChat(header.endpoint);
  Json list = Json::array();
  v1::Usage usage;
  for (size_t i = 0; i < choices.size(); ++i) {
    const v1::GenerateUnaryResponse& r = choices[i];
    int64_t text_offset = 0;
    Json choice = {
        {"index", i},
        {"logprobs", ChoiceLogprobs(header, r.logprobs(), &text_offset)},
        {"finish_reason", FinishReason(r.finish_reason())}};
    if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", r.text()}};
    } else {
      choice["text"] = r.text();
    }
    list.push_back(std::move(choice));
    // One prompt, n completions.
    usage.set_prompt_tokens(r.usage().prompt_tokens());
    usage.set_completion_tokens(usage.completion_tokens() +
                                r.usage().completion_tokens());
  }
  const std::string& request_id =
      choices.empty() ? std::string() : choices[0].request_id();
  Json body = Envelope(
      header,
      header.id.empty() ? ResponseId(header.endpoint, request_id) : header.id,
      chat ? "chat.completion" : "text_completion");
  body["choices"] = std::move(list);
  body["usage"] = Usage(usage);
  body["system_fingerprint"] = choices.empty() ? "" : choices[0].policy();
  return Dump(body);
}

StreamEncoder::StreamEncoder(ResponseHeader header, bool include_usage, int n)
    : header_(std::move(header)),
      include_usage_(include_usage),
      role_sent_(static_cast<size_t>(n), false),
      text_offset_(static_cast<size_t>(n), 0) {}

void StreamEncoder::Start(std::string* out) {
  if (!IsChat(header_.endpoint)) return;
  for (size_t i = 0; i < role_sent_.size(); ++i) {
    if (role_sent_[i]) continue;
    role_sent_[i] = true;
    AppendEvent(Chunk(header_, include_usage_, header_.id,
                      RoleChoice(static_cast<int>(i))),
                out);
  }
}

void StreamEncoder::Append(const v1::GenerateResponse& r, std::string* out,
                           int index) {
  const bool chat = IsChat(header_.endpoint);
  const std::string id = header_.id.empty()
                             ? ResponseId(header_.endpoint, r.request_id())
                             : header_.id;
  const char* object = chat ? "chat.completion.chunk" : "text_completion";
  auto chunk = [&](Json choice) {
    return Chunk(header_, include_usage_, id, std::move(choice));
  };
  auto text_choice = [&](const std::string& text, Json logprobs, Json finish) {
    Json choice = {{"index", index}, {"logprobs", std::move(logprobs)}};
    if (chat) {
      choice["delta"] = text.empty() ? Json::object() : Json{{"content", text}};
    } else {
      choice["text"] = text;
    }
    choice["finish_reason"] = std::move(finish);
    return choice;
  };
  if (chat && !role_sent_[index]) {
    role_sent_[index] = true;
    AppendEvent(chunk(RoleChoice(index)), out);
  }
  const bool with_logprobs = header_.top_logprobs >= 0 && r.logprobs_size() > 0;
  if (!r.text().empty() || with_logprobs) {
    Json logprobs = with_logprobs ? ChoiceLogprobs(header_, r.logprobs(),
                                                   &text_offset_[index])
                                  : Json();
    AppendEvent(chunk(text_choice(r.text(), std::move(logprobs), nullptr)),
                out);
  }
  if (r.finish_reason() == v1::FINISH_REASON_UNSPECIFIED) return;
  Json last = chunk(text_choice("", nullptr, FinishReason(r.finish_reason())));
  last["system_fingerprint"] = r.policy();
  AppendEvent(last, out);
  usage_.set_prompt_tokens(r.usage().prompt_tokens());
  usage_.set_completion_tokens(usage_.completion_tokens() +
                               r.usage().completion_tokens());
  if (include_usage_ && ++finished_ == static_cast<int>(role_sent_.size())) {
    Json usage = Envelope(header_, id, object);
    usage["choices"] = Json::array();
    usage["usage"] = Usage(usage_);
    AppendEvent(usage, out);
  }
}

void StreamEncoder::AppendDone(std::string* out) { *out += "data: [DONE]\n\n"; }

void StreamEncoder::AppendError(const ApiError& error, std::string* out) {
  absl::StrAppend(out, "data: ", ErrorBody(error), "\n\n");
}

}  // namespace moeserve::server::openai
