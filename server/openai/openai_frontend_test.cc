#include "server/openai/openai_frontend.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metrics/registry.h"
#include "nlohmann/json.hpp"
#include "server/openai/api_error.h"
#include "server/openai/testing/fake_model_host.h"
#include "server/server_options.h"

namespace moeserve::server::openai {
namespace {

using testing::FakeModelHost;
using ::testing::HasSubstr;

constexpr char kMistral[] =
    R"({"eos_token": "</s>", "chat_template": "[INST] {{ m }} [/INST]"})";

class OpenAiFrontendTest : public ::testing::Test {
 protected:
  OpenAiFrontendTest() {
    ServerOptions options;
    metrics_ = *ServerMetrics::Create(&registry_, options, [] { return true; });
    frontend_ = std::make_unique<OpenAiFrontend>(
        &host_, metrics_.get(), RequestLimits(), "demo",
        ChatTemplate::FromTokenizerConfig(kMistral));
  }

  ApiError ErrorOf(Endpoint endpoint, const std::string& body) {
    absl::StatusOr<PreparedRequest> p = frontend_->Prepare(endpoint, body);
    EXPECT_FALSE(p.ok()) << body;
    return ApiErrorFromStatus(p.status(), endpoint);
  }

  FakeModelHost host_{{"lru", "overlap"}};
  metrics::Registry registry_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<OpenAiFrontend> frontend_;
};

TEST_F(OpenAiFrontendTest, ModelPicksTheEngineLikePolicy) {
  absl::StatusOr<PreparedRequest> p = frontend_->Prepare(
      Endpoint::kCompletions, R"({"model": "overlap", "prompt": "x"})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->request.generate.policy(), "overlap");
  EXPECT_EQ(p->header.model, "overlap");
  EXPECT_GT(p->header.created, 1700000000);
  // The served model's name, or none: the split / the default engine.
  for (const char* body :
       {R"({"model": "demo", "prompt": "x"})", R"({"prompt": "x"})"}) {
    p = frontend_->Prepare(Endpoint::kCompletions, body);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->request.generate.policy(), "");
    EXPECT_EQ(p->header.model, "demo");
  }
  const ApiError e =
      ErrorOf(Endpoint::kCompletions, R"({"model": "gpt-4", "prompt": "x"})");
  EXPECT_EQ(e.http_status, 404);
  EXPECT_EQ(e.code, "model_not_found");
  EXPECT_EQ(e.param, "model");
  EXPECT_THAT(e.message, HasSubstr("'gpt-4' does not exist"));
  EXPECT_THAT(e.message, HasSubstr("lru, overlap"));
}

TEST_F(OpenAiFrontendTest, ValidatorMessagesNameOpenAiFields) {
  ApiError e = ErrorOf(Endpoint::kCompletions,
                       R"({"prompt": "x", "max_tokens": 100000})");
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.param, "max_tokens");
  EXPECT_THAT(e.message,
              HasSubstr("max_tokens: 100000 is over the server cap"));
  e = ErrorOf(Endpoint::kCompletions, R"({"prompt": "x", "top_p": 1.5})");
  EXPECT_EQ(e.param, "top_p");
  e = ErrorOf(Endpoint::kCompletions,
              R"({"prompt": "x", "presence_penalty": 3})");
  EXPECT_EQ(e.param, "presence_penalty");
  e = ErrorOf(Endpoint::kCompletions, R"({"prompt": "x", "stop": [""]})");
  EXPECT_EQ(e.param, "stop");
  e = ErrorOf(Endpoint::kCompletions, R"({"prompt": ""})");
  EXPECT_EQ(e.param, "prompt");
  e = ErrorOf(Endpoint::kCompletions,
              absl::StrCat(R"({"prompt": ")", std::string(70000, 'a'), "\"}"));
  EXPECT_EQ(e.param, "prompt");
  EXPECT_THAT(e.message, HasSubstr("--max_prompt_bytes"));
}

TEST_F(OpenAiFrontendTest, ChecksRunInTheGrpcOrder) {
  host_.SetReady(absl::UnavailableError("model is loading"));
  // Bad fields first, then the model, then readiness.
  EXPECT_EQ(ErrorOf(Endpoint::kCompletions,
                    R"({"model": "nope", "prompt": "x", "n": 30})")
                .http_status,
            400);
  EXPECT_EQ(
      ErrorOf(Endpoint::kCompletions, R"({"model": "nope", "prompt": "x"})")
          .http_status,
      404);
  ApiError e = ErrorOf(Endpoint::kCompletions, R"({"prompt": "x"})");
  EXPECT_EQ(e.http_status, 503);
  EXPECT_THAT(e.message, HasSubstr("loading"));
  host_.SetReady(absl::OkStatus());
  frontend_->StartDraining();
  e = ErrorOf(Endpoint::kCompletions, R"({"prompt": "x"})");
  EXPECT_EQ(e.http_status, 503);
  EXPECT_THAT(e.message, HasSubstr("draining"));
}

TEST_F(OpenAiFrontendTest, ChatIsRenderedWithTheTemplate) {
  absl::StatusOr<PreparedRequest> p = frontend_->Prepare(
      Endpoint::kChatCompletions,
      R"({"messages": [{"role": "user", "content": "Hi"}]})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->request.generate.prompt(), "[INST] Hi [/INST]");
  const ApiError e = ErrorOf(Endpoint::kChatCompletions,
                             R"({"messages": [{"role": "user", "content": "a"},
                       {"role": "user", "content": "b"}]})");
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.param, "messages[1].role");
}

TEST_F(OpenAiFrontendTest, NoTemplateRefusesChatOnly) {
  OpenAiFrontend frontend(&host_, nullptr, RequestLimits(), "demo",
                          ChatTemplate::FromTokenizerConfig("{}"));
  absl::StatusOr<PreparedRequest> p =
      frontend.Prepare(Endpoint::kChatCompletions,
                       R"({"messages": [{"role": "user", "content": "Hi"}]})");
  const ApiError e = ApiErrorFromStatus(p.status(), Endpoint::kChatCompletions);
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.param, "messages");
  EXPECT_THAT(e.message, HasSubstr("no chat template"));
  EXPECT_TRUE(
      frontend.Prepare(Endpoint::kCompletions, R"({"prompt": "x"})").ok());
}

TEST_F(OpenAiFrontendTest, TokenizeAPromptOrAChat) {
  absl::StatusOr<std::string> body =
      frontend_->TokenizeBody(R"({"prompt": "Hi", "return_token_strs": true})");
  ASSERT_TRUE(body.ok()) << body.status();
  nlohmann::json j = nlohmann::json::parse(*body);
  EXPECT_EQ(j["count"], 3);  // BOS, as a generation gets it, then H i
  EXPECT_EQ(j["tokens"], nlohmann::json({1, 'H', 'i'}));
  EXPECT_EQ(j["token_strs"], nlohmann::json({"<s>", "H", "i"}));
  EXPECT_EQ(j["max_model_len"], 4096);
  body = frontend_->TokenizeBody(
      R"({"prompt": "Hi", "add_special_tokens": false, "model": "lru"})");
  ASSERT_TRUE(body.ok()) << body.status();
  j = nlohmann::json::parse(*body);
  EXPECT_EQ(j["count"], 2);
  EXPECT_TRUE(j["token_strs"].is_null());
  // A chat is counted as the template renders it.
  body = frontend_->TokenizeBody(
      R"({"messages": [{"role": "user", "content": "Hi"}]})");
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(nlohmann::json::parse(*body)["count"],
            1 + std::string("[INST] Hi [/INST]").size());
}

TEST_F(OpenAiFrontendTest, DetokenizeAndTheirErrors) {
  absl::StatusOr<std::string> body =
      frontend_->DetokenizeBody(R"({"tokens": [1, 72, 105]})");
  ASSERT_TRUE(body.ok()) << body.status();
  // Special tokens are kept unless asked (Hugging Face's decode default).
  EXPECT_EQ(nlohmann::json::parse(*body)["prompt"], "<s>Hi");
  body = frontend_->DetokenizeBody(
      R"({"tokens": [1, 72, 105], "skip_special_tokens": true})");
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(nlohmann::json::parse(*body)["prompt"], "Hi");
  body = frontend_->DetokenizeBody(
      R"({"tokens": [1, 72, 105], "skip_special_tokens": false})");
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(nlohmann::json::parse(*body)["prompt"], "<s>Hi");
  auto error = [](const absl::Status& status) {
    return ApiErrorFromStatus(status, Endpoint::kOther);
  };
  for (const char* bad : {R"("true")", "1", "[]"}) {
    const ApiError not_bool =
        error(frontend_
                  ->DetokenizeBody(absl::StrCat(
                      R"({"tokens": [1], "skip_special_tokens": )", bad, "}"))
                  .status());
    EXPECT_EQ(not_bool.http_status, 400) << bad;
    EXPECT_EQ(not_bool.param, "skip_special_tokens") << bad;
  }
  ApiError e =
      error(frontend_->DetokenizeBody(R"({"tokens": [1, -2]})").status());
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.param, "tokens");
  EXPECT_THAT(e.message, HasSubstr("tokens[1]"));
  // An id the tokenizer does not know: its error names `tokens`, the
  // request's field, not the gRPC request's token_ids (issue 29 item 6).
  e = error(frontend_->DetokenizeBody(R"({"tokens": [1, 300]})").status());
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.param, "tokens");
  EXPECT_THAT(e.message, HasSubstr("tokens[1]: 300"));
  EXPECT_THAT(e.message, ::testing::Not(HasSubstr("token_ids")));
  e = error(frontend_->TokenizeBody(R"({"prompt": [1, 300]})").status());
  if (e.http_status == 400) {  // ids as the prompt, where the route takes them
    EXPECT_THAT(e.message, ::testing::Not(HasSubstr("token_ids")));
  }
  e = error(frontend_->DetokenizeBody(R"({"model": "gpt-4", "tokens": []})")
                .status());
  EXPECT_EQ(e.http_status, 404);
  e = error(
      frontend_->TokenizeBody(R"({"prompt": "a", "messages": []})").status());
  EXPECT_EQ(e.http_status, 400);
  e = error(frontend_->TokenizeBody(R"({"prompt": 3})").status());
  EXPECT_EQ(e.param, "prompt");
  e = error(
      frontend_
          ->TokenizeBody(absl::StrCat(
              R"({"prompt": ")",
              std::string(RequestLimits().max_prompt_bytes + 1, 'a'), R"("})"))
          .status());
  EXPECT_EQ(e.param, "prompt");  // the validator's "text", renamed
  host_.SetReady(absl::UnavailableError("model is loading"));
  e = error(frontend_->TokenizeBody(R"({"prompt": "a"})").status());
  EXPECT_EQ(e.http_status, 503);
}

TEST_F(OpenAiFrontendTest, StartScopesTheCaller) {
  absl::StatusOr<PreparedRequest> p =
      frontend_->Prepare(Endpoint::kCompletions, R"({"prompt": "x"})");
  ASSERT_TRUE(p.ok());
  absl::StatusOr<std::vector<std::unique_ptr<GenerateCall>>> calls =
      frontend_->Start(*p, "id:token:abc");
  ASSERT_TRUE(calls.ok());
  ASSERT_EQ(calls->size(), 1u);
  EXPECT_EQ(host_.calls().at(0)->caller(), "id:token:abc");
  EXPECT_EQ(host_.calls().at(0)->request().prompt(), "x");
  EXPECT_EQ(host_.calls().at(0)->request().request_id(),
            p->request.generate.request_id());
  host_.SetStartStatus(absl::ResourceExhaustedError("queue full"));
  calls = frontend_->Start(*p, "c");
  EXPECT_EQ(
      ApiErrorFromStatus(calls.status(), Endpoint::kCompletions).http_status,
      429);
}

TEST_F(OpenAiFrontendTest, SeveralChoicesAreSeveralCallsWithTheirOwnSeeds) {
  absl::StatusOr<PreparedRequest> p = frontend_->Prepare(
      Endpoint::kCompletions, R"({"prompt": "x", "n": 3, "seed": 7})");
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<std::vector<std::unique_ptr<GenerateCall>>> calls =
      frontend_->Start(*p, "c");
  ASSERT_TRUE(calls.ok());
  ASSERT_EQ(calls->size(), 3u);
  const std::string id = p->request.generate.request_id();
  for (int i = 0; i < 3; ++i) {
    const v1::GenerateRequest& r = host_.calls().at(i)->request();
    EXPECT_EQ(r.request_id(), absl::StrCat(id, "-", i));
    EXPECT_EQ(r.sampling().seed(), 7u + i);
    EXPECT_EQ(r.prompt(), "x");
  }
  // All or none: the third refused (a full queue), the two started are
  // dropped (a real call cancels its engine request when dropped).
  host_.SetStartStatus(absl::ResourceExhaustedError("queue full"),
                       /*after_calls=*/2);
  calls = frontend_->Start(*p, "c");
  EXPECT_EQ(calls.status().code(), absl::StatusCode::kResourceExhausted);
  ASSERT_EQ(host_.calls().size(), 5u);
  for (int i = 3; i < 5; ++i) EXPECT_TRUE(host_.calls().at(i)->released()) << i;
}

TEST_F(OpenAiFrontendTest, ModelsListsEveryEngine) {
  const nlohmann::json models = nlohmann::json::parse(frontend_->ModelsBody());
  EXPECT_EQ(models["object"], "list");
  ASSERT_EQ(models["data"].size(), 2u);
  EXPECT_EQ(models["data"][0]["id"], "lru");
  EXPECT_EQ(models["data"][0]["object"], "model");
  EXPECT_EQ(models["data"][0]["owned_by"], "moeserve");
  EXPECT_EQ(models["data"][1]["id"], "overlap");
  EXPECT_TRUE(frontend_->ModelBody("lru").ok());
  EXPECT_EQ(frontend_->ModelBody("x").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(OpenAiFrontendTest, CountsLikeGrpcCalls) {
  frontend_->Count(kCompletionsRoute, absl::OkStatus());
  frontend_->Count(kChatCompletionsRoute, absl::ResourceExhaustedError("full"));
  const std::string text = registry_.Serialize();
  EXPECT_THAT(text, HasSubstr("moeserve_grpc_requests_total{method=\"/v1/"
                              "completions\",code=\"OK\"} 1"));
  EXPECT_THAT(text, HasSubstr("method=\"/v1/chat/completions\",code="
                              "\"RESOURCE_EXHAUSTED\"} 1"));
}

}  // namespace
}  // namespace moeserve::server::openai
