// OpenAI request bodies -> moeserve.v1.GenerateRequest.
//
// POST /v1/completions and POST /v1/chat/completions bodies are parsed and
// every field is translated or refused here; the result is then checked by
// the same ValidateGenerateRequest as a gRPC request (openai_frontend.h).
//
// Translated: model (kept as given; the frontend maps it to an engine),
// prompt (a string, a one-string list, a list of token ids, or a list of
// one list of token ids), messages (chat: system / developer / user /
// assistant, content a string or a list of text parts), max_tokens
// (max_completion_tokens on chat), temperature (default 1), top_p, seed,
// stop (a string or a list), stream, stream_options.include_usage, n (1 to
// kMaxChoices) and best_of (= n only), presence_penalty, frequency_penalty;
// extensions as vLLM names them: top_k (-1 or 0: off), min_p,
// repetition_penalty, min_tokens, ignore_eos, stop_token_ids,
// add_generation_prompt (chat); logprobs: on completions the number of
// alternatives per token (0 and up; the sampled token's logprob always comes),
// on chat true/false with top_logprobs the number of alternatives (top_logprobs
// without logprobs: true is refused). Ignored: user, and any field this API
// does not know (as vLLM does). Refused with 400 naming the field when set to
// anything but its neutral value: echo, suffix, logit_bias, tools, tool_choice
// (but "none"), functions, function_call, response_format (but
// {"type": "text"}), several prompts (send n for several completions).
//
// Errors are INVALID_ARGUMENT statuses whose message starts with the
// OpenAI field name ("n: only 1 is supported, got 2"): api_error.h turns
// them into the 400 body with `param` set. Pure functions; thread-safe.
#ifndef MOESERVE_SERVER_OPENAI_REQUEST_TRANSLATION_H_
#define MOESERVE_SERVER_OPENAI_REQUEST_TRANSLATION_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/moeserve.pb.h"
#include "server/openai/api_error.h"
#include "server/openai/chat_template.h"

namespace moeserve::server::openai {

// The most completions (n) one request may ask for.
inline constexpr int kMaxChoices = 16;

struct OpenAiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;  // as the client named it; "" when absent
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // Completions of the prompt (n), each its own engine request.
  int n = 1;
  // Per-token logprobs with this many alternatives each; -1: none. The
  // engine is asked for max(1, top_logprobs) (generate.logprobs).
  int top_logprobs = -1;
  // Everything but the engine (policy) and, on chat, the prompt.
  v1::GenerateRequest generate;
  // Chat only: the conversation, and whether to open the assistant's turn.
  std::vector<ChatMessage> messages;
  bool add_generation_prompt = true;
};

// Parses and translates a request body of `endpoint` (kCompletions or
// kChatCompletions).
absl::StatusOr<OpenAiRequest> TranslateRequest(absl::string_view body,
                                               Endpoint endpoint);

// vLLM's POST /tokenize: {"prompt": text} or {"messages": [...],
// "add_generation_prompt"}, "add_special_tokens" (default true: the BOS a
// generation of the same prompt gets), "return_token_strs", "model".
struct OpenAiTokenizeRequest {
  std::string model;  // "" when absent
  // text (with a prompt; the frontend renders messages into it) and
  // add_bos.
  v1::TokenizeRequest tokenize;
  std::vector<ChatMessage> messages;  // non-empty: a chat
  bool add_generation_prompt = true;
  bool return_token_strs = false;
};
absl::StatusOr<OpenAiTokenizeRequest> TranslateTokenizeRequest(
    absl::string_view body);

// vLLM's POST /detokenize: {"tokens": [ids], "model"}, and
// "skip_special_tokens" (default false: special tokens are kept as their
// text, as Hugging Face's tokenizer.decode and vLLM's /detokenize give; not
// a bool: INVALID_ARGUMENT naming it); *model is set to the model named
// ("" when absent).
absl::StatusOr<v1::TokenizeRequest> TranslateDetokenizeRequest(
    absl::string_view body, std::string* model);

}  // namespace moeserve::server::openai

#endif  // MOESERVE_SERVER_OPENAI_REQUEST_TRANSLATION_H_
