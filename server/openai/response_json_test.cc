#include "server/openai/response_json.h"

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace moeserve::server::openai {
namespace {

using Json = nlohmann::json;

v1::GenerateResponse Message(
    const std::string& text,
    v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED) {
  v1::GenerateResponse r;
  r.set_request_id("req-00ff");
  r.set_text(text);
  if (finish != v1::FINISH_REASON_UNSPECIFIED) {
    r.set_finish_reason(finish);
    r.mutable_usage()->set_prompt_tokens(4);
    r.mutable_usage()->set_completion_tokens(2);
    r.set_policy("lru");
  }
  return r;
}

// The JSON of each "data: " event; "[DONE]" as the string.
std::vector<Json> Events(const std::string& sse) {
  std::vector<Json> events;
  for (absl::string_view block : absl::StrSplit(sse, "\n\n")) {
    if (block.empty()) continue;
    EXPECT_EQ(block.substr(0, 6), "data: ") << block;
    block.remove_prefix(6);
    events.push_back(block == "[DONE]" ? Json("[DONE]") : Json::parse(block));
  }
  return events;
}

TEST(ResponseJson, IdsAndFinishReasons) {
  EXPECT_EQ(ResponseId(Endpoint::kCompletions, "req-abc"), "cmpl-abc");
  EXPECT_EQ(ResponseId(Endpoint::kChatCompletions, "req-abc"), "chatcmpl-abc");
  EXPECT_STREQ(FinishReasonName(v1::EOS_TOKEN), "stop");
  EXPECT_STREQ(FinishReasonName(v1::STOP_SEQUENCE), "stop");
  EXPECT_STREQ(FinishReasonName(v1::LENGTH), "length");
  EXPECT_STREQ(FinishReasonName(v1::CANCELLED), "abort");
  EXPECT_STREQ(FinishReasonName(v1::FINISH_REASON_UNSPECIFIED), "");
}

TEST(ResponseJson, NonStreamedCompletion) {
  v1::GenerateUnaryResponse r;
  r.set_request_id("req-1");
  r.set_text("Amen.");
  r.set_finish_reason(v1::LENGTH);
  r.mutable_usage()->set_prompt_tokens(3);
  r.mutable_usage()->set_completion_tokens(5);
  r.set_policy("lru");
  const Json body = Json::parse(
      CompletionBody({Endpoint::kCompletions, 1700000000, "demo"}, r));
  EXPECT_EQ(body["id"], "cmpl-1");
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["created"], 1700000000);
  EXPECT_EQ(body["model"], "demo");
  EXPECT_EQ(body["choices"][0]["index"], 0);
  EXPECT_EQ(body["choices"][0]["text"], "Amen.");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(body["usage"]["completion_tokens"], 5);
  EXPECT_EQ(body["usage"]["total_tokens"], 8);
  EXPECT_EQ(body["system_fingerprint"], "lru");
}

TEST(ResponseJson, NonStreamedChat) {
  v1::GenerateUnaryResponse r;
  r.set_request_id("req-2");
  r.set_text("Hi.");
  r.set_finish_reason(v1::EOS_TOKEN);
  const Json body =
      Json::parse(CompletionBody({Endpoint::kChatCompletions, 1, "lru"}, r));
  EXPECT_EQ(body["id"], "chatcmpl-2");
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(body["choices"][0]["message"]["content"], "Hi.");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
}

TEST(StreamEncoder, ChatChunksRoleFirstThenFinishThenDone) {
  StreamEncoder encoder({Endpoint::kChatCompletions, 5, "lru"}, false);
  std::string sse;
  encoder.Append(Message("Hel"), &sse);
  encoder.Append(Message(""), &sse);  // a held-back partial character
  encoder.Append(Message("lo", v1::STOP_SEQUENCE), &sse);
  StreamEncoder::AppendDone(&sse);
  const std::vector<Json> e = Events(sse);
  ASSERT_EQ(e.size(), 5u) << sse;
  EXPECT_EQ(e[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(e[0]["id"], "chatcmpl-00ff");
  EXPECT_EQ(e[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(e[0]["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(e[1]["choices"][0]["delta"]["content"], "Hel");
  EXPECT_FALSE(e[1]["choices"][0]["delta"].contains("role"));
  EXPECT_EQ(e[2]["choices"][0]["delta"]["content"], "lo");
  EXPECT_TRUE(e[3]["choices"][0]["delta"].empty());
  EXPECT_EQ(e[3]["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(e[3].contains("usage"));
  EXPECT_EQ(e[4], "[DONE]");
}

TEST(StreamEncoder, CompletionChunksWithUsage) {
  StreamEncoder encoder({Endpoint::kCompletions, 5, "demo"}, true);
  std::string sse;
  encoder.Append(Message("a"), &sse);
  encoder.Append(Message("", v1::LENGTH), &sse);
  StreamEncoder::AppendDone(&sse);
  const std::vector<Json> e = Events(sse);
  ASSERT_EQ(e.size(), 4u) << sse;
  EXPECT_EQ(e[0]["object"], "text_completion");
  EXPECT_EQ(e[0]["choices"][0]["text"], "a");
  EXPECT_TRUE(e[0]["usage"].is_null());
  EXPECT_EQ(e[1]["choices"][0]["text"], "");
  EXPECT_EQ(e[1]["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(e[2]["choices"].empty());
  EXPECT_EQ(e[2]["usage"]["total_tokens"], 6);
  EXPECT_EQ(e[3], "[DONE]");
}

TEST(StreamEncoder, ErrorEvent) {
  std::string sse;
  ApiError error;
  error.http_status = 500;
  error.type = "server_error";
  error.message = "boom";
  StreamEncoder::AppendError(error, &sse);
  const std::vector<Json> e = Events(sse);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0]["error"]["message"], "boom");
}

}  // namespace
}  // namespace moeserve::server::openai
