#include "server/openai/request_translation.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moeserve::server::openai {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

absl::StatusOr<OpenAiRequest> Completion(const std::string& body) {
  return TranslateRequest(body, Endpoint::kCompletions);
}
absl::StatusOr<OpenAiRequest> Chat(const std::string& body) {
  return TranslateRequest(body, Endpoint::kChatCompletions);
}

// The message of a refused body: starts with the field's name.
std::string Refusal(const absl::StatusOr<OpenAiRequest>& r) {
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(r.status().message());
}

TEST(TranslateRequest, CompletionFields) {
  absl::StatusOr<OpenAiRequest> r = Completion(R"({
    "model": "lru", "prompt": "The LORD", "max_tokens": 16,
    "temperature": 0.7, "top_p": 0.9, "top_k": 40, "seed": 7,
    "stop": ["\n", "Amen"], "presence_penalty": 0.5,
    "frequency_penalty": -0.5, "n": 1, "user": "someone",
    "stream": true, "stream_options": {"include_usage": true},
    "unknown_field": {"ignored": true}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "lru");
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  const v1::GenerateRequest& g = r->generate;
  EXPECT_EQ(g.prompt(), "The LORD");
  EXPECT_EQ(g.policy(), "");  // the frontend resolves the model
  const v1::SamplingParams& s = g.sampling();
  EXPECT_EQ(s.max_new_tokens(), 16u);
  EXPECT_FLOAT_EQ(s.temperature(), 0.7f);
  EXPECT_FLOAT_EQ(s.top_p(), 0.9f);
  EXPECT_EQ(s.top_k(), 40);
  EXPECT_EQ(s.seed(), 7u);
  EXPECT_THAT(s.stop(), ElementsAre("\n", "Amen"));
  EXPECT_FLOAT_EQ(s.presence_penalty(), 0.5f);
  EXPECT_FLOAT_EQ(s.frequency_penalty(), -0.5f);
}

TEST(TranslateRequest, Defaults) {
  absl::StatusOr<OpenAiRequest> r = Completion(R"({"prompt": "x"})");
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::SamplingParams& s = r->generate.sampling();
  EXPECT_FLOAT_EQ(s.temperature(), 1.0f);  // OpenAI's default
  EXPECT_FALSE(s.has_top_p());
  EXPECT_FALSE(s.has_seed());
  EXPECT_EQ(s.max_new_tokens(), 0u);  // the server's cap
  EXPECT_FALSE(r->stream);
  EXPECT_EQ(r->model, "");
  // null is "not set".
  r = Completion(R"({"prompt": "x", "temperature": null, "stop": null,
                     "n": null, "logprobs": null, "max_tokens": null})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FLOAT_EQ(r->generate.sampling().temperature(), 1.0f);
}

TEST(TranslateRequest, PromptForms) {
  EXPECT_EQ(Completion(R"({"prompt": ["one"]})")->generate.prompt(), "one");
  absl::StatusOr<OpenAiRequest> r = Completion(R"({"prompt": [1, 2, 3]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->generate.prompt_token_ids(), ElementsAre(1u, 2u, 3u));
  r = Completion(R"({"prompt": [[4, 5]]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->generate.prompt_token_ids(), ElementsAre(4u, 5u));
  EXPECT_THAT(Refusal(Completion(R"({"prompt": ["a", "b"]})")),
              StartsWith("prompt: several prompts"));
  EXPECT_THAT(Refusal(Completion(R"({"prompt": [[1], [2]]})")),
              StartsWith("prompt: several prompts"));
  EXPECT_THAT(Refusal(Completion(R"({"prompt": [1, -2]})")),
              StartsWith("prompt[1]: "));
  EXPECT_THAT(Refusal(Completion(R"({"prompt": []})")),
              StartsWith("prompt: must not be empty"));
  EXPECT_THAT(Refusal(Completion(R"({"max_tokens": 3})")),
              StartsWith("prompt: is required"));
  EXPECT_THAT(Refusal(Completion(R"({"prompt": 5})")), StartsWith("prompt: "));
}

TEST(TranslateRequest, ChatMessages) {
  absl::StatusOr<OpenAiRequest> r = Chat(R"({
    "model": "demo", "max_completion_tokens": 9, "max_tokens": 100,
    "messages": [
      {"role": "developer", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hello "},
                                   {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": "Hi.", "name": "bot"},
      {"role": "user", "content": "Why?"}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->messages.size(), 4u);
  EXPECT_EQ(r->messages[0].role, "system");
  EXPECT_EQ(r->messages[1].content, "Hello there");
  EXPECT_EQ(r->messages[2].role, "assistant");
  EXPECT_TRUE(r->add_generation_prompt);
  EXPECT_EQ(r->generate.sampling().max_new_tokens(), 9u);
  EXPECT_EQ(r->generate.prompt(), "");  // rendered by the frontend
}

TEST(TranslateRequest, ChatRefusals) {
  EXPECT_THAT(Refusal(Chat(R"({"prompt": "x"})")),
              StartsWith("messages: is required"));
  EXPECT_THAT(Refusal(Chat(R"({"messages": []})")), StartsWith("messages: "));
  EXPECT_THAT(
      Refusal(Chat(R"({"messages": [{"role": "tool", "content": "x"}]})")),
      StartsWith("messages[0].role: 'tool' is not supported"));
  EXPECT_THAT(Refusal(Chat(R"({"messages": [{"role": "user", "content":
      [{"type": "image_url", "image_url": {"url": "x"}}]}]})")),
              StartsWith("messages[0].content[0].type: only text parts"));
  EXPECT_THAT(Refusal(Chat(R"({"messages": [{"role": "user"}]})")),
              StartsWith("messages[0].content: is required"));
  EXPECT_THAT(Refusal(Chat(R"({"messages": [{"role": "user", "content": "x"}],
                               "tools": [{"type": "function"}]})")),
              StartsWith("tools: "));
}

TEST(TranslateRequest, UnsupportedFieldsAreNamed) {
  struct Case {
    const char* body;
    const char* field;
  };
  const Case cases[] = {
      {R"({"prompt": "x", "n": 0})", "n: must be in [1, 16], got 0"},
      {R"({"prompt": "x", "n": 17})", "n: "},
      {R"({"prompt": "x", "best_of": 3})", "best_of: only best_of = n (1)"},
      {R"({"prompt": "x", "n": 2, "best_of": 3})", "best_of: "},
      {R"({"prompt": "x", "logprobs": -1})", "logprobs: "},
      {R"({"prompt": "x", "logprobs": true})", "logprobs: "},
      {R"({"prompt": "x", "echo": true})", "echo: "},
      {R"({"prompt": "x", "suffix": "end"})", "suffix: "},
      {R"({"prompt": "x", "logit_bias": {"5": 1}})", "logit_bias: "},
      {R"({"prompt": "x", "response_format": {"type": "json_object"}})",
       "response_format: "},
      {R"({"prompt": "x", "tool_choice": "auto"})", "tool_choice: "},
      {R"({"prompt": "x", "stream_options": {"include_usage": true}})",
       "stream_options: "},
      {R"({"prompt": "x", "temperature": "hot"})", "temperature: "},
      {R"({"prompt": "x", "max_tokens": 0})", "max_tokens: "},
      {R"({"prompt": "x", "max_tokens": -1})", "max_tokens: "},
      {R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens: "},
      {R"({"prompt": "x", "stop": [1]})", "stop[0]: "},
      {R"({"prompt": "x", "stream": "yes"})", "stream: "},
      {R"({"prompt": "x", "seed": 1.5})", "seed: "},
      {R"({"prompt": "x", "model": 3})", "model: "},
      {R"({"prompt": "x", "top_k": -2})", "top_k: "},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(Refusal(Completion(c.body)), StartsWith(c.field)) << c.body;
  }
  // Neutral values of refused fields pass.
  EXPECT_TRUE(Completion(R"({"prompt": "x", "n": 1, "best_of": 1,
      "echo": false, "suffix": "", "logit_bias": {},
      "tools": [], "tool_choice": "none",
      "response_format": {"type": "text"}})")
                  .ok());
}

TEST(TranslateRequest, SeveralChoices) {
  absl::StatusOr<OpenAiRequest> r =
      Completion(R"({"prompt": "x", "n": 3, "best_of": 3})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->n, 3);
  EXPECT_EQ(Completion(R"({"prompt": "x"})")->n, 1);
}

TEST(TranslateRequest, StopTokenIds) {
  absl::StatusOr<OpenAiRequest> r =
      Completion(R"({"prompt": "x", "stop_token_ids": [2, 13]})");
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->generate.sampling().stop_token_ids(),
              ::testing::ElementsAre(2, 13));
  EXPECT_THAT(Refusal(Completion(R"({"prompt": "x", "stop_token_ids": 2})")),
              StartsWith("stop_token_ids: "));
  EXPECT_THAT(
      Refusal(Completion(R"({"prompt": "x", "stop_token_ids": [1, -1]})")),
      StartsWith("stop_token_ids[1]: "));
}

TEST(TranslateRequest, CompletionLogprobsAreTheNumberOfAlternatives) {
  absl::StatusOr<OpenAiRequest> none = Completion(R"({"prompt": "x"})");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->top_logprobs, -1);
  EXPECT_EQ(none->generate.logprobs(), 0u);
  absl::StatusOr<OpenAiRequest> three =
      Completion(R"({"prompt": "x", "logprobs": 3})");
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(three->top_logprobs, 3);
  EXPECT_EQ(three->generate.logprobs(), 3u);
  // 0: the sampled token's logprob only; the engine is asked for one.
  absl::StatusOr<OpenAiRequest> zero =
      Completion(R"({"prompt": "x", "logprobs": 0})");
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(zero->top_logprobs, 0);
  EXPECT_EQ(zero->generate.logprobs(), 1u);
}

TEST(TranslateRequest, ChatLogprobsAreAFlagAndTopLogprobs) {
  constexpr char kMessages[] =
      R"("messages": [{"role": "user", "content": "x"}])";
  auto chat = [&](const std::string& fields) {
    return Chat(absl::StrCat("{", kMessages, fields, "}"));
  };
  absl::StatusOr<OpenAiRequest> off = chat(R"(, "logprobs": false)");
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->top_logprobs, -1);
  EXPECT_EQ(off->generate.logprobs(), 0u);
  absl::StatusOr<OpenAiRequest> on = chat(R"(, "logprobs": true)");
  ASSERT_TRUE(on.ok());
  EXPECT_EQ(on->top_logprobs, 0);
  EXPECT_EQ(on->generate.logprobs(), 1u);
  absl::StatusOr<OpenAiRequest> top =
      chat(R"(, "logprobs": true, "top_logprobs": 5)");
  ASSERT_TRUE(top.ok());
  EXPECT_EQ(top->top_logprobs, 5);
  EXPECT_EQ(top->generate.logprobs(), 5u);
  EXPECT_THAT(Refusal(chat(R"(, "top_logprobs": 2)")),
              StartsWith("top_logprobs: requires logprobs: true"));
  EXPECT_THAT(Refusal(chat(R"(, "logprobs": 2)")), StartsWith("logprobs: "));
  EXPECT_THAT(Refusal(chat(R"(, "logprobs": true, "top_logprobs": -1)")),
              StartsWith("top_logprobs: "));
  EXPECT_TRUE(chat(R"(, "logprobs": null, "top_logprobs": 0)").ok());
}

TEST(TranslateRequest, BodyMustBeAJsonObject) {
  EXPECT_THAT(Refusal(Completion("{")), HasSubstr("not valid JSON"));
  EXPECT_THAT(Refusal(Completion("[1]")), HasSubstr("JSON object"));
  EXPECT_THAT(Refusal(Completion("")), HasSubstr("not valid JSON"));
}

TEST(TranslateRequest, ExtensionsAndSeeds) {
  absl::StatusOr<OpenAiRequest> r = Completion(R"({"prompt": "x",
      "top_k": -1, "min_p": 0.1, "repetition_penalty": 1.2,
      "min_tokens": 2, "ignore_eos": true, "seed": -1})");
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::SamplingParams& s = r->generate.sampling();
  EXPECT_EQ(s.top_k(), 0);  // -1: off, as vLLM
  EXPECT_FLOAT_EQ(s.min_p(), 0.1f);
  EXPECT_FLOAT_EQ(s.repetition_penalty(), 1.2f);
  EXPECT_EQ(s.min_new_tokens(), 2u);
  EXPECT_TRUE(s.ignore_eos());
  EXPECT_EQ(s.seed(), ~uint64_t{0});
  r = Completion(R"({"prompt": "x", "seed": 18446744073709551615})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generate.sampling().seed(), ~uint64_t{0});
  r = Completion(R"({"prompt": "x", "stop": "END"})");
  EXPECT_THAT(r->generate.sampling().stop(), ElementsAre("END"));
}

}  // namespace
}  // namespace moeserve::server::openai
