#include "server/request_validator.h"

#include <cmath>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moeserve::server {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

v1::GenerateRequest ValidRequest() {
  v1::GenerateRequest r;
  r.set_prompt("The LORD");
  r.mutable_sampling()->set_max_new_tokens(16);
  return r;
}

// Expects INVALID_ARGUMENT whose message starts with the field's path.
void ExpectInvalid(const v1::GenerateRequest& r, const std::string& field,
                   const RequestLimits& limits = {}) {
  absl::Status st = ValidateGenerateRequest(r, limits);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(std::string(st.message()), StartsWith(field + ":"));
}

TEST(ValidateGenerateRequest, AcceptsMinimalRequests) {
  EXPECT_TRUE(ValidateGenerateRequest(ValidRequest(), {}).ok());
  v1::GenerateRequest ids;
  ids.add_prompt_token_ids(1);
  ids.add_prompt_token_ids(7);
  EXPECT_TRUE(ValidateGenerateRequest(ids, {}).ok());
}

TEST(ValidateGenerateRequest, PromptMustBeExactlyOne) {
  v1::GenerateRequest empty;
  ExpectInvalid(empty, "prompt");
  v1::GenerateRequest both = ValidRequest();
  both.add_prompt_token_ids(3);
  ExpectInvalid(both, "prompt");
}

TEST(ValidateGenerateRequest, PromptTooLong) {
  RequestLimits limits;
  limits.max_input_tokens = 4;
  v1::GenerateRequest r;
  for (int i = 0; i < 5; ++i) r.add_prompt_token_ids(i);
  ExpectInvalid(r, "prompt_token_ids", limits);
  limits.max_prompt_bytes = 3;
  ExpectInvalid(ValidRequest(), "prompt", limits);
}

TEST(ValidateGenerateRequest, MaxNewTokensOverCap) {
  RequestLimits limits;
  limits.max_new_tokens_cap = 100;
  v1::GenerateRequest r = ValidRequest();
  r.mutable_sampling()->set_max_new_tokens(100);
  EXPECT_TRUE(ValidateGenerateRequest(r, limits).ok());
  r.mutable_sampling()->set_max_new_tokens(101);
  ExpectInvalid(r, "sampling.max_new_tokens", limits);
  absl::Status st = ValidateGenerateRequest(r, limits);
  EXPECT_THAT(std::string(st.message()), HasSubstr("max_new_tokens_cap=100"));
}

TEST(ValidateGenerateRequest, MinNewTokensAboveMax) {
  v1::GenerateRequest r = ValidRequest();
  r.mutable_sampling()->set_min_new_tokens(17);
  ExpectInvalid(r, "sampling.min_new_tokens");
}

TEST(ValidateGenerateRequest, Temperature) {
  v1::GenerateRequest r = ValidRequest();
  r.mutable_sampling()->set_temperature(-0.1f);
  ExpectInvalid(r, "sampling.temperature");
  r.mutable_sampling()->set_temperature(std::nanf(""));
  ExpectInvalid(r, "sampling.temperature");
  r.mutable_sampling()->set_temperature(std::numeric_limits<float>::infinity());
  ExpectInvalid(r, "sampling.temperature");
  r.mutable_sampling()->set_temperature(0.f);
  EXPECT_TRUE(ValidateGenerateRequest(r, {}).ok());
  r.mutable_sampling()->set_temperature(1.5f);
  EXPECT_TRUE(ValidateGenerateRequest(r, {}).ok());
}

TEST(ValidateGenerateRequest, TopPOutsideOpenZeroToOne) {
  v1::GenerateRequest r = ValidRequest();
  for (float bad : {0.f, -0.5f, 1.0001f, 2.f, std::nanf("")}) {
    r.mutable_sampling()->set_top_p(bad);
    ExpectInvalid(r, "sampling.top_p");
  }
  for (float good : {1e-6f, 0.9f, 1.f}) {
    r.mutable_sampling()->set_top_p(good);
    EXPECT_TRUE(ValidateGenerateRequest(r, {}).ok()) << good;
  }
}

TEST(ValidateGenerateRequest, OtherSamplingRanges) {
  v1::GenerateRequest r = ValidRequest();
  r.mutable_sampling()->set_top_k(-1);
  ExpectInvalid(r, "sampling.top_k");
  r = ValidRequest();
  r.mutable_sampling()->set_min_p(1.5f);
  ExpectInvalid(r, "sampling.min_p");
  r = ValidRequest();
  r.mutable_sampling()->set_repetition_penalty(0.f);
  ExpectInvalid(r, "sampling.repetition_penalty");
  r = ValidRequest();
  r.mutable_sampling()->set_presence_penalty(2.5f);
  ExpectInvalid(r, "sampling.presence_penalty");
  r = ValidRequest();
  r.mutable_sampling()->set_frequency_penalty(-3.f);
  ExpectInvalid(r, "sampling.frequency_penalty");
  r = ValidRequest();
  r.set_logprobs(21);
  ExpectInvalid(r, "logprobs");
  r = ValidRequest();
  r.set_request_id(std::string(300, 'x'));
  ExpectInvalid(r, "request_id");
}

// Issue 16: a penalty of 1e-45 was accepted and produced garbage; tiny
// temperatures are accepted and mean greedy (engine::kGreedyTemperature).
TEST(ValidateGenerateRequest, RepetitionPenaltyRangeAndTinyTemperature) {
  for (float bad : {1e-45f, 0.0099f, 100.5f, 1e30f, -1.f}) {
    v1::GenerateRequest r = ValidRequest();
    r.mutable_sampling()->set_repetition_penalty(bad);
    ExpectInvalid(r, "sampling.repetition_penalty");
  }
  for (float good : {0.01f, 1.f, 100.f}) {
    v1::GenerateRequest r = ValidRequest();
    r.mutable_sampling()->set_repetition_penalty(good);
    EXPECT_TRUE(ValidateGenerateRequest(r, {}).ok()) << good;
  }
  for (float t : {1e-45f, 1e-39f, 1e-6f}) {
    v1::GenerateRequest r = ValidRequest();
    r.mutable_sampling()->set_temperature(t);
    EXPECT_TRUE(ValidateGenerateRequest(r, {}).ok()) << t;
  }
}

// Issue 16: the prompt byte bound follows the token bound (a 1 MiB prompt
// was tokenized, at ~114 MB, only to be refused for its token count).
TEST(ValidateGenerateRequest, DefaultPromptBytesFollowInputTokens) {
  RequestLimits limits;
  EXPECT_EQ(limits.max_prompt_bytes,
            DefaultMaxPromptBytes(limits.max_input_tokens));
  EXPECT_EQ(DefaultMaxPromptBytes(2048), 64u << 10);
  EXPECT_EQ(DefaultMaxPromptBytes(1), 4096u);
  v1::GenerateRequest r = ValidRequest();
  r.set_prompt(std::string(limits.max_prompt_bytes, 'a'));
  EXPECT_TRUE(ValidateGenerateRequest(r, limits).ok());
  r.set_prompt(std::string(limits.max_prompt_bytes + 1, 'a'));
  ExpectInvalid(r, "prompt", limits);
  v1::TokenizeRequest t;
  t.set_text(std::string(1 << 20, 'a'));
  absl::Status st = ValidateTokenizeRequest(t, limits);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), StartsWith("text:"));
}

TEST(ValidateGenerateRequest, StopStringCaps) {
  RequestLimits limits;
  limits.max_stop_strings = 2;
  limits.max_stop_string_bytes = 4;
  v1::GenerateRequest r = ValidRequest();
  r.mutable_sampling()->add_stop("ab");
  r.mutable_sampling()->add_stop("abcd");
  EXPECT_TRUE(ValidateGenerateRequest(r, limits).ok());
  r.mutable_sampling()->add_stop("c");
  ExpectInvalid(r, "sampling.stop", limits);
  r.mutable_sampling()->mutable_stop()->RemoveLast();
  r.mutable_sampling()->set_stop(1, "abcde");
  ExpectInvalid(r, "sampling.stop[1]", limits);
  r.mutable_sampling()->set_stop(1, "");
  ExpectInvalid(r, "sampling.stop[1]", limits);
}

TEST(ValidateAgainstModel, VocabularyAndTokenizedLength) {
  RequestLimits limits;
  limits.max_input_tokens = 8;
  v1::GenerateRequest r;
  r.add_prompt_token_ids(5);
  r.add_prompt_token_ids(99);
  EXPECT_TRUE(ValidateAgainstModel(r, 2, 100, limits).ok());
  absl::Status st = ValidateAgainstModel(r, 2, 99, limits);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), StartsWith("prompt_token_ids[1]:"));
  st = ValidateAgainstModel(ValidRequest(), 9, 100, limits);
  EXPECT_THAT(std::string(st.message()), StartsWith("prompt:"));
  v1::GenerateRequest stops = ValidRequest();
  stops.mutable_sampling()->add_stop_token_ids(100);
  st = ValidateAgainstModel(stops, 2, 100, limits);
  EXPECT_THAT(std::string(st.message()),
              StartsWith("sampling.stop_token_ids[0]:"));
}

TEST(ValidateTokenizeRequest, TextOrIds) {
  v1::TokenizeRequest r;
  r.set_text("hi");
  EXPECT_TRUE(ValidateTokenizeRequest(r, {}).ok());
  r.add_token_ids(3);
  absl::Status st = ValidateTokenizeRequest(r, {});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), StartsWith("text:"));
}

}  // namespace
}  // namespace moeserve::server
