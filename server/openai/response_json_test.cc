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

// A logprobs entry: the chosen token and `top` alternatives (the first
// is the chosen one, as greedy decoding has it).
void AddLogprobs(google::protobuf::RepeatedPtrField<v1::Logprobs>* out,
                 uint32_t id, const std::string& piece,
                 const std::string& bytes, float logprob,
                 const std::vector<std::pair<std::string, float>>& others) {
  v1::Logprobs* lp = out->Add();
  auto fill = [](v1::TokenLogprob* t, uint32_t id, const std::string& piece,
                 const std::string& bytes, float logprob) {
    t->set_token_id(id);
    t->set_text(piece);
    t->set_token_bytes(bytes);
    t->set_logprob(logprob);
  };
  fill(lp->mutable_chosen(), id, piece, bytes, logprob);
  fill(lp->add_top(), id, piece, bytes, logprob);
  for (const auto& [text, p] : others) {
    fill(lp->add_top(), 100, "\xE2\x96\x81" + text, " " + text, p);
  }
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

// Three tokens: " Hi", the first byte of "世" (E4 B8 96), and EOS.
void AddThreeTokens(google::protobuf::RepeatedPtrField<v1::Logprobs>* out) {
  AddLogprobs(out, 7, "\xE2\x96\x81Hi", " Hi", -0.5f, {{"Yo", -1.5f}});
  AddLogprobs(out, 8, "<0xE4>", "\xE4", -0.25f, {{"Ha", -3.0f}});
  AddLogprobs(out, 2, "</s>", "", -1e30f, {{"No", -2.0f}});
}

TEST(ResponseJson, CompletionLogprobsInTheLegacyShape) {
  v1::GenerateUnaryResponse r;
  r.set_request_id("req-3");
  r.set_text(" Hi\xEF\xBF\xBD");
  r.set_finish_reason(v1::EOS_TOKEN);
  AddThreeTokens(r.mutable_logprobs());
  ResponseHeader header{Endpoint::kCompletions, 1, "demo"};
  header.top_logprobs = 1;
  const Json lp =
      Json::parse(CompletionBody(header, r))["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"],
            Json({" Hi", "\xEF\xBF\xBD", "</s>"}));  // EOS: its piece
  EXPECT_EQ(lp["token_logprobs"], Json({-0.5, -0.25, -9999.0}));
  // The top 1 and the sampled token (the same here: one entry).
  EXPECT_EQ(lp["top_logprobs"][0], Json({{" Hi", -0.5}}));
  EXPECT_EQ(lp["top_logprobs"][2], Json({{"</s>", -9999.0}}));
  // Characters of the text before each token; EOS adds none.
  EXPECT_EQ(lp["text_offset"], Json({0, 3, 4}));
  header.top_logprobs = 2;
  const Json two =
      Json::parse(CompletionBody(header, r))["choices"][0]["logprobs"];
  EXPECT_EQ(two["top_logprobs"][0], Json({{" Hi", -0.5}, {" Yo", -1.5}}));
  header.top_logprobs = -1;
  EXPECT_TRUE(Json::parse(CompletionBody(header, r))["choices"][0]["logprobs"]
                  .is_null());
}

TEST(ResponseJson, ChatLogprobsWithBytes) {
  v1::GenerateUnaryResponse r;
  r.set_request_id("req-4");
  r.set_finish_reason(v1::EOS_TOKEN);
  AddThreeTokens(r.mutable_logprobs());
  ResponseHeader header{Endpoint::kChatCompletions, 1, "demo"};
  header.top_logprobs = 0;
  const Json content = Json::parse(
      CompletionBody(header, r))["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 3u);
  EXPECT_EQ(content[0]["token"], " Hi");
  EXPECT_EQ(content[0]["logprob"], -0.5);
  EXPECT_EQ(content[0]["bytes"], Json({32, 72, 105}));
  EXPECT_TRUE(content[0]["top_logprobs"].empty());
  EXPECT_EQ(content[1]["token"], "\xEF\xBF\xBD");
  EXPECT_EQ(content[1]["bytes"], Json({0xE4}));  // the raw byte
  EXPECT_EQ(content[2]["token"], "</s>");
  header.top_logprobs = 2;
  const Json top = Json::parse(CompletionBody(
      header, r))["choices"][0]["logprobs"]["content"][0]["top_logprobs"];
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[1]["token"], " Yo");
  EXPECT_EQ(top[1]["logprob"], -1.5);
}

TEST(StreamEncoder, LogprobsRideWithTheirTokensEvenWithoutText) {
  ResponseHeader header{Endpoint::kCompletions, 5, "demo"};
  header.top_logprobs = 0;
  StreamEncoder encoder(header, false);
  google::protobuf::RepeatedPtrField<v1::Logprobs> three;
  AddThreeTokens(&three);
  v1::GenerateResponse first = Message(" Hi");
  *first.add_logprobs() = three[0];
  v1::GenerateResponse held = Message("");  // E4 waits for its character
  *held.add_logprobs() = three[1];
  v1::GenerateResponse last = Message("\xEF\xBF\xBD", v1::EOS_TOKEN);
  *last.add_logprobs() = three[2];
  std::string sse;
  encoder.Append(first, &sse);
  encoder.Append(held, &sse);
  encoder.Append(last, &sse);
  const std::vector<Json> e = Events(sse);
  ASSERT_EQ(e.size(), 4u) << sse;
  EXPECT_EQ(e[0]["choices"][0]["logprobs"]["tokens"], Json({" Hi"}));
  EXPECT_EQ(e[1]["choices"][0]["text"], "");
  EXPECT_EQ(e[1]["choices"][0]["logprobs"]["text_offset"], Json({3}));
  EXPECT_EQ(e[2]["choices"][0]["logprobs"]["text_offset"], Json({4}));
  EXPECT_TRUE(e[3]["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(e[3]["choices"][0]["finish_reason"], "stop");
}

TEST(ResponseJson, SeveralChoicesInOneBody) {
  v1::GenerateUnaryResponse a, b;
  a.set_text("x");
  a.set_finish_reason(v1::LENGTH);
  a.mutable_usage()->set_prompt_tokens(4);
  a.mutable_usage()->set_completion_tokens(3);
  a.set_policy("lru");
  b = a;
  b.set_text("y");
  b.set_finish_reason(v1::EOS_TOKEN);
  b.mutable_usage()->set_completion_tokens(2);
  const v1::GenerateUnaryResponse both[] = {a, b};
  const Json body = Json::parse(CompletionBody(
      {Endpoint::kChatCompletions, 1, "demo", "chatcmpl-z"}, both));
  ASSERT_EQ(body["choices"].size(), 2u);
  EXPECT_EQ(body["choices"][1]["index"], 1);
  EXPECT_EQ(body["choices"][1]["message"]["content"], "y");
  EXPECT_EQ(body["choices"][1]["finish_reason"], "stop");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 4);  // the prompt once
  EXPECT_EQ(body["usage"]["completion_tokens"], 5);
}

TEST(StreamEncoder, SeveralChatChoicesEachOpenAndFinish) {
  StreamEncoder encoder({Endpoint::kChatCompletions, 5, "lru", "chatcmpl-q"},
                        true, 2);
  std::string sse;
  encoder.Start(&sse);
  encoder.Append(Message("b"), &sse, 1);
  encoder.Append(Message("a", v1::LENGTH), &sse, 0);
  encoder.Append(Message("", v1::STOP_SEQUENCE), &sse, 1);
  const std::vector<Json> e = Events(sse);
  ASSERT_EQ(e.size(), 7u) << sse;
  EXPECT_EQ(e[0]["choices"][0]["index"], 0);
  EXPECT_EQ(e[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(e[1]["choices"][0]["index"], 1);
  EXPECT_EQ(e[1]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(e[2]["choices"][0]["index"], 1);
  EXPECT_EQ(e[2]["choices"][0]["delta"]["content"], "b");
  EXPECT_EQ(e[3]["choices"][0]["delta"]["content"], "a");
  EXPECT_EQ(e[4]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(e[4]["choices"][0]["index"], 0);
  EXPECT_EQ(e[5]["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(e[5]["choices"][0]["index"], 1);
  // One usage chunk, after the last choice: the prompt once, both
  // completions.
  EXPECT_TRUE(e[6]["choices"].empty());
  EXPECT_EQ(e[6]["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(e[6]["usage"]["completion_tokens"], 4);
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
