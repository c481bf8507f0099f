// libFuzzer target: client requests from wire bytes. Parses a
// GenerateRequest or TokenizeRequest (protobuf, as gRPC hands them to the
// server) and runs the server's validation on it: ValidateGenerateRequest,
// then ValidateAgainstModel for an accepted request; ValidateTokenizeRequest.
//
// Input: one mode byte (bit 0: Tokenize), then the serialized message.
// Checked: no crash; every refusal is INVALID_ARGUMENT whose message starts
// with the offending field ("field: what").
//
// Built and run by tests/fuzz/run_fuzzers.sh (request_validator_fuzzer).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "proto/moeserve.pb.h"
#include "server/request_validator.h"

namespace {

using moeserve::server::RequestLimits;

void CheckRefusal(const absl::Status& st) {
  if (st.ok()) return;
  const std::string message(st.message());
  const size_t colon = message.find(": ");
  if (st.code() != absl::StatusCode::kInvalidArgument || colon == 0 ||
      colon == std::string::npos) {
    std::fprintf(stderr, "request_validator_fuzzer: bad refusal: %s\n",
                 st.ToString().c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // Small limits, so that the fuzzer reaches both sides of each.
  RequestLimits limits;
  limits.max_new_tokens_cap = 64;
  limits.max_input_tokens = 32;
  limits.max_prompt_bytes = 256;
  limits.max_stop_strings = 4;
  limits.max_stop_string_bytes = 16;
  limits.max_stop_token_ids = 8;
  limits.max_request_id_bytes = 32;
  const bool tokenize = data[0] & 1;
  const void* body = data + 1;
  const int body_size = static_cast<int>(size - 1);
  if (tokenize) {
    moeserve::v1::TokenizeRequest request;
    if (!request.ParseFromArray(body, body_size)) return 0;
    CheckRefusal(moeserve::server::ValidateTokenizeRequest(request, limits));
    return 0;
  }
  moeserve::v1::GenerateRequest request;
  if (!request.ParseFromArray(body, body_size)) return 0;
  const absl::Status st =
      moeserve::server::ValidateGenerateRequest(request, limits);
  CheckRefusal(st);
  if (st.ok()) {
    // A prompt of about a token per 4 bytes, on a 4096-token vocabulary.
    const size_t tokens = request.prompt().empty()
                              ? request.prompt_token_ids_size()
                              : request.prompt().size() / 4 + 1;
    CheckRefusal(
        moeserve::server::ValidateAgainstModel(request, tokens, 4096, limits));
  }
  return 0;
}
