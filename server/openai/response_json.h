// moeserve.v1 generation messages -> OpenAI response bodies.
//
// Non-streamed: one JSON object, "text_completion" (choices[0].text) or
// "chat.completion" (choices[0].message {role: assistant, content}), with
// id ("cmpl-..." / "chatcmpl-..."), created, model, finish_reason,
// usage {prompt_tokens, completion_tokens, total_tokens} and
// system_fingerprint (the engine instance that served it).
//
// Streamed: server-sent events, "data: {json}\n\n" each, object
// "text_completion" or "chat.completion.chunk": on chat a first chunk with
// delta {role: assistant, content: ""}; a chunk per engine message that
// carries text; a final chunk with an empty delta / text and the
// finish_reason; with include_usage a last chunk with no choices and the
// usage (the other chunks then carry "usage": null); then "data: [DONE]".
//
// With logprobs asked for (ResponseHeader::top_logprobs >= 0) each choice
// carries them for the tokens it covers, in the endpoint's shape:
// completions {tokens, token_logprobs, top_logprobs: [{token: logprob}],
// text_offset} (the top N and the sampled token, so up to N+1 entries, as
// OpenAI's legacy API); chat {content: [{token, logprob, bytes,
// top_logprobs: [{token, logprob, bytes}]}]}. A token is the bytes it adds
// to the text (UTF-8, an incomplete character as U+FFFD; `bytes` has the
// raw ones), or its piece ("</s>") when it adds none; text_offset counts
// characters of those tokens from the start of the completion, and does
// not move over such a token. A streamed chunk carries the logprobs of the
// tokens of its engine message, and is sent for them even when their text
// is held back (an unfinished character). Logprobs below -9999 are sent as
// -9999 (vLLM's floor; JSON has no -infinity).
//
// finish_reason: "stop" (EOS, a stop string or stop token), "length"
// (max_tokens, or the server's time limit), "abort" (cancelled, as vLLM
// says), "error".
//
// Not thread-safe (a StreamEncoder belongs to one stream); the free
// functions are pure.
#ifndef MOESERVE_SERVER_OPENAI_RESPONSE_JSON_H_
#define MOESERVE_SERVER_OPENAI_RESPONSE_JSON_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/moeserve.pb.h"
#include "server/openai/api_error.h"

namespace moeserve::server::openai {

// What every response of one request repeats.
struct ResponseHeader {
  Endpoint endpoint = Endpoint::kCompletions;
  int64_t created = 0;  // Unix seconds, when the request came
  std::string model;    // what the response calls the model
  // "cmpl-..." / "chatcmpl-..."; empty: ResponseId() of the engine
  // message's request_id.
  std::string id;
  // Per-token logprobs with this many alternatives; -1: none.
  int top_logprobs = -1;
};

// "cmpl-<hex>" / "chatcmpl-<hex>" from the server's "req-<hex>".
std::string ResponseId(Endpoint endpoint, absl::string_view request_id);

// See above; "" for FINISH_REASON_UNSPECIFIED.
const char* FinishReasonName(v1::FinishReason reason);

// The whole non-streamed body of the n choices (n >= 1) of one request:
// choices[i] has index i; usage counts the prompt once and the completion
// tokens of every choice; system_fingerprint is the first choice's engine.
std::string CompletionBody(const ResponseHeader& header,
                           absl::Span<const v1::GenerateUnaryResponse> choices);
inline std::string CompletionBody(const ResponseHeader& header,
                                  const v1::GenerateUnaryResponse& response) {
  return CompletionBody(header, absl::MakeConstSpan(&response, 1));
}

// The events of one stream of `n` choices (n >= 1), their chunks
// interleaved as the engine messages come, each with its choice's index.
class StreamEncoder {
 public:
  StreamEncoder(ResponseHeader header, bool include_usage, int n = 1);

  int n() const { return static_cast<int>(role_sent_.size()); }

  // Appends what a stream starts with before any engine message: on chat,
  // each choice's chunk with delta {role: assistant}. Requires header.id.
  void Start(std::string* out);

  // Appends the events of the next engine message of choice `index` to
  // *out; after its last one (finish_reason set), the choice's finish
  // chunk, and after the last choice's, the usage chunk (all choices).
  void Append(const v1::GenerateResponse& response, std::string* out,
              int index = 0);

  // "data: [DONE]\n\n".
  static void AppendDone(std::string* out);
  // A stream that fails after it started: "data: {"error": {...}}\n\n".
  static void AppendError(const ApiError& error, std::string* out);

 private:
  const ResponseHeader header_;
  const bool include_usage_;
  // Per choice: the chat role chunk sent; completions logprobs' characters
  // so far.
  std::vector<bool> role_sent_;
  std::vector<int64_t> text_offset_;
  int finished_ = 0;  // choices
  v1::Usage usage_;   // of the finished choices
};

}  // namespace moeserve::server::openai

#endif  // MOESERVE_SERVER_OPENAI_RESPONSE_JSON_H_
