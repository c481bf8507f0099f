// Validation of client requests before any work is done.
//
// Validation is pure (no model needed) so that bad input is answered with
// INVALID_ARGUMENT even while no model is loaded. Checks that need the model
// (token ids inside the vocabulary, tokenized prompt length) take the model's
// numbers as arguments and run once it is there.
#ifndef MOESERVE_SERVER_REQUEST_VALIDATOR_H_
#define MOESERVE_SERVER_REQUEST_VALIDATOR_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "proto/moeserve.pb.h"

namespace moeserve::server {

// Bytes of prompt text allowed per --max_input_tokens token when
// --max_prompt_bytes is 0. Text that tokenizes within the token limit is
// rarely over 8 bytes a token (English ~4, CJK ~2, code ~3-6); the bound
// exists because the tokenizer's memory grows with the bytes it is given
// (~110 bytes per input byte on the demo tokenizer; server/README.md), so a
// prompt far over the token limit must be refused before it is tokenized.
inline constexpr size_t kPromptBytesPerToken = 32;

// The default --max_prompt_bytes: kPromptBytesPerToken x max_input_tokens,
// at least 4 KiB.
size_t DefaultMaxPromptBytes(uint32_t max_input_tokens);

// Server-wide caps, resolved once from flags.
struct RequestLimits {
  // Default: --max_new_tokens_cap. Also the value used when a request leaves
  // max_new_tokens at 0.
  uint32_t max_new_tokens_cap = 512;
  // Default: --max_input_tokens.
  uint32_t max_input_tokens = 2048;
  uint32_t max_stop_strings = 16;
  uint32_t max_stop_string_bytes = 256;
  uint32_t max_stop_token_ids = 64;
  uint32_t max_logprobs = 20;
  uint32_t max_request_id_bytes = 256;
  // A bound on the prompt text itself (and Tokenize's text), checked before
  // tokenizing it. Default: --max_prompt_bytes, or DefaultMaxPromptBytes(
  // max_input_tokens) (64 KiB for 2048 tokens).
  size_t max_prompt_bytes = kPromptBytesPerToken * 2048;
};

// Checks every field of `request` that can be checked without a model.
// Returns INVALID_ARGUMENT whose message starts with the offending field's
// path, e.g. "sampling.top_p: must be in (0, 1], got 1.5".
absl::Status ValidateGenerateRequest(const v1::GenerateRequest& request,
                                     const RequestLimits& limits);

// Checks the parts that need the loaded model: token ids inside the
// vocabulary and the tokenized prompt length.
// REQUIRES: ValidateGenerateRequest(request, limits).ok().
absl::Status ValidateAgainstModel(const v1::GenerateRequest& request,
                                  size_t prompt_tokens, uint32_t vocab_size,
                                  const RequestLimits& limits);

// Tokenize takes text or token ids (not both), bounded like a prompt.
absl::Status ValidateTokenizeRequest(const v1::TokenizeRequest& request,
                                     const RequestLimits& limits);

}  // namespace moeserve::server

#endif  // MOESERVE_SERVER_REQUEST_VALIDATOR_H_
