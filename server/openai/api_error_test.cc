#include "server/openai/api_error.h"

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace moeserve::server::openai {
namespace {

TEST(OpenAiFieldName, RenamesValidatorPaths) {
  EXPECT_EQ(OpenAiFieldName("sampling.max_new_tokens", Endpoint::kCompletions),
            "max_tokens");
  EXPECT_EQ(OpenAiFieldName("sampling.top_p", Endpoint::kCompletions), "top_p");
  EXPECT_EQ(OpenAiFieldName("sampling.stop[3]", Endpoint::kCompletions),
            "stop[3]");
  EXPECT_EQ(OpenAiFieldName("sampling.min_new_tokens", Endpoint::kCompletions),
            "min_tokens");
  EXPECT_EQ(OpenAiFieldName("prompt", Endpoint::kCompletions), "prompt");
  EXPECT_EQ(OpenAiFieldName("prompt", Endpoint::kChatCompletions), "messages");
  EXPECT_EQ(OpenAiFieldName("prompt_token_ids[2]", Endpoint::kCompletions),
            "prompt[2]");
  EXPECT_EQ(OpenAiFieldName("policy", Endpoint::kCompletions), "model");
  // The translator's own names pass through.
  EXPECT_EQ(OpenAiFieldName("n", Endpoint::kCompletions), "n");
  EXPECT_EQ(OpenAiFieldName("messages[1].role", Endpoint::kChatCompletions),
            "messages[1].role");
}

TEST(ApiErrorFromStatus, InvalidArgumentIs400WithParam) {
  ApiError e = ApiErrorFromStatus(
      absl::InvalidArgumentError("sampling.top_p: must be in (0, 1], got 1.5"),
      Endpoint::kCompletions);
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.type, "invalid_request_error");
  EXPECT_EQ(e.param, "top_p");
  EXPECT_EQ(e.message, "top_p: must be in (0, 1], got 1.5");
  EXPECT_EQ(e.code, "");

  e = ApiErrorFromStatus(
      absl::InvalidArgumentError("sampling.stop[1]: must not be empty"),
      Endpoint::kChatCompletions);
  EXPECT_EQ(e.param, "stop");
  EXPECT_EQ(e.message, "stop[1]: must not be empty");

  e = ApiErrorFromStatus(
      absl::InvalidArgumentError("prompt: is 9000 tokens, more than "
                                 "--max_input_tokens=2048"),
      Endpoint::kChatCompletions);
  EXPECT_EQ(e.param, "messages");

  e = ApiErrorFromStatus(
      absl::InvalidArgumentError("the request body is not valid JSON"),
      Endpoint::kCompletions);
  EXPECT_EQ(e.param, "");
  EXPECT_EQ(e.message, "the request body is not valid JSON");
}

TEST(ApiErrorFromStatus, CodesMapToHttpStatuses) {
  struct Case {
    absl::Status status;
    int http;
    const char* code;
  };
  const Case cases[] = {
      {absl::NotFoundError("model: the model 'x' does not exist"), 404,
       "model_not_found"},
      {absl::ResourceExhaustedError("engine queue full"), 429,
       "rate_limit_exceeded"},
      {absl::UnavailableError("model is loading"), 503, "service_unavailable"},
      {absl::UnavailableError("server is shutting down (draining)"), 503,
       "service_unavailable"},
      {absl::UnauthenticatedError("no token"), 401, "invalid_api_key"},
      {absl::FailedPreconditionError("messages: no chat template"), 400, ""},
      {absl::AlreadyExistsError("request_id: in flight"), 409, ""},
      {absl::DeadlineExceededError("late"), 504, "timeout"},
      {absl::InternalError("boom"), 500, ""},
  };
  for (const Case& c : cases) {
    const ApiError e = ApiErrorFromStatus(c.status, Endpoint::kCompletions);
    EXPECT_EQ(e.http_status, c.http) << c.status;
    EXPECT_EQ(e.code, c.code) << c.status;
  }
  EXPECT_EQ(ApiErrorFromStatus(absl::NotFoundError("model: x"),
                               Endpoint::kCompletions)
                .param,
            "model");
}

TEST(ApiErrorFromStatus, MessagesKeepNoServerPathsAndAreBounded) {
  ApiError e = ApiErrorFromStatus(
      absl::UnavailableError("no model: /srv/secret/models/x/config.json: bad"),
      Endpoint::kCompletions);
  EXPECT_EQ(e.message, "no model: config.json: bad");
  e = ApiErrorFromStatus(absl::InternalError(std::string(5000, 'x')),
                         Endpoint::kCompletions);
  EXPECT_LE(e.message.size(), kMaxApiErrorMessageBytes);
}

TEST(ErrorBody, IsTheOpenAiShapeWithNulls) {
  ApiError e;
  e.http_status = 400;
  e.type = "invalid_request_error";
  e.message = "n: only 1 is supported, got 2";
  e.param = "n";
  const nlohmann::json body = nlohmann::json::parse(ErrorBody(e));
  EXPECT_EQ(body["error"]["message"], "n: only 1 is supported, got 2");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(body["error"]["param"], "n");
  EXPECT_TRUE(body["error"]["code"].is_null());
  e.message = "bad \xff byte";
  EXPECT_TRUE(nlohmann::json::accept(ErrorBody(e)));
}

}  // namespace
}  // namespace moeserve::server::openai
