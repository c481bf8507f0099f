#include "server/openai/chat_template.h"

#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace moeserve::server::openai {
namespace {

// Real templates (tokenizer_config.json "chat_template" values), as JSON
// strings.
constexpr char kQwen2Config[] = R"({
  "eos_token": "<|im_end|>",
  "chat_template": "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
})";

constexpr char kQwen3Template[] =
    "{%- for message in messages %}{{- '<|im_start|>' + message.role + "
    "'\\n' + message.content + '<|im_end|>' + '\\n' }}{%- endfor %}{%- if "
    "add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

constexpr char kMixtralConfig[] = R"({
  "bos_token": "<s>",
  "eos_token": {"content": "</s>", "lstrip": false},
  "chat_template": "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
})";

constexpr char kOlmoeConfig[] = R"({
  "bos_token": "<|endoftext|>",
  "eos_token": "<|endoftext|>",
  "chat_template": [
    {"name": "default", "template": "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}{{ '<|system|>\n' + message['content'] + '\n' }}{% elif message['role'] == 'user' %}{{ '<|user|>\n' + message['content'] + '\n' }}{% elif message['role'] == 'assistant' %}{{ '<|assistant|>\n' + message['content'] + eos_token + '\n' }}{% endif %}{% if loop.last and add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}{% endfor %}"},
    {"name": "tool_use", "template": "{{ 'other' }}"}
  ]
})";

std::vector<ChatMessage> Conversation() {
  return {{"system", "Be brief."},
          {"user", "Hi"},
          {"assistant", "Hello."},
          {"user", "Why?"}};
}

TEST(ChatTemplate, ChatMlWithAndWithoutGenerationPrompt) {
  absl::StatusOr<ChatTemplate> t =
      ChatTemplate::FromTemplateText(kQwen3Template, "<|im_end|>");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->family_name(), "chatml");
  EXPECT_EQ(t->default_system(), "");
  absl::StatusOr<std::string> text = t->Render(Conversation(), true);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text,
            "<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n"
            "<|im_start|>user\nWhy?<|im_end|>\n"
            "<|im_start|>assistant\n");
  text = t->Render({{"user", "Hi"}}, false);
  EXPECT_EQ(*text, "<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplate, ChatMlDefaultSystemPromptFromTheTemplate) {
  absl::StatusOr<ChatTemplate> t =
      ChatTemplate::FromTokenizerConfig(kQwen2Config);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->family(), ChatFamily::kChatMl);
  EXPECT_EQ(t->default_system(), "You are a helpful assistant.");
  EXPECT_EQ(*t->Render({{"user", "Hi"}}, true),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // A system message of the conversation replaces it.
  EXPECT_EQ(
      *t->Render({{"system", "S"}, {"user", "Hi"}}, false),
      "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplate, MistralInstTurns) {
  absl::StatusOr<ChatTemplate> t =
      ChatTemplate::FromTokenizerConfig(kMixtralConfig);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->family_name(), "mistral");
  // No leading <s>: the engine adds BOS. eos from {"content": ...}.
  EXPECT_EQ(*t->Render(Conversation(), true),
            "[INST] Be brief.\n\nHi [/INST]Hello.</s>[INST] Why? [/INST]");
  EXPECT_EQ(*t->Render({{"user", "Hi"}}, false), "[INST] Hi [/INST]");
}

TEST(ChatTemplate, MistralRefusesRolesOutOfOrder) {
  absl::StatusOr<ChatTemplate> t =
      ChatTemplate::FromTokenizerConfig(kMixtralConfig);
  ASSERT_TRUE(t.ok());
  absl::StatusOr<std::string> text =
      t->Render({{"user", "a"}, {"user", "b"}}, true);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(text.status().message().substr(0, 18), "messages[1].role: ");
  text = t->Render({{"assistant", "a"}}, true);
  EXPECT_FALSE(text.ok());
  text = t->Render({{"system", "s"}}, true);
  EXPECT_FALSE(text.ok());
  text = t->Render({{"user", "a"}, {"system", "s"}}, true);
  EXPECT_FALSE(text.ok());
}

TEST(ChatTemplate, TuluFromANamedTemplateList) {
  absl::StatusOr<ChatTemplate> t =
      ChatTemplate::FromTokenizerConfig(kOlmoeConfig);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->family_name(), "tulu");
  EXPECT_EQ(*t->Render(Conversation(), true),
            "<|system|>\nBe brief.\n<|user|>\nHi\n"
            "<|assistant|>\nHello.<|endoftext|>\n<|user|>\nWhy?\n"
            "<|assistant|>\n");
  EXPECT_EQ(*t->Render({{"user", "Hi"}}, false), "<|user|>\nHi\n");
}

TEST(ChatTemplate, MissingOrUnknownTemplateIsFailedPrecondition) {
  absl::StatusOr<ChatTemplate> t =
      ChatTemplate::FromTokenizerConfig(R"({"eos_token": "</s>"})");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(t.status().message().find("no chat template"), std::string::npos);
  EXPECT_NE(t.status().message().find("/v1/completions"), std::string::npos);
  t = ChatTemplate::FromTokenizerConfig(
      R"({"chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"})");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition);
  t = ChatTemplate::FromTokenizerConfig("not json");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  t = ChatTemplate::LoadFromModelDir("/nonexistent/dir");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(t.status().message().find("/nonexistent"), std::string::npos);
}

// A FIFO as tokenizer_config.json is refused at once (it blocked the
// server's start until a writer appeared).
TEST(ChatTemplate, ANonRegularTokenizerConfigIsRefusedAtOnce) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/fifo";
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(mkfifo((dir + "/tokenizer_config.json").c_str(), 0600), 0);
  absl::StatusOr<ChatTemplate> t = ChatTemplate::LoadFromModelDir(dir);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(t.status().message().find("not a regular file"), std::string::npos)
      << t.status();
}

// The bundled demo models carry the KJV dialogue template (they never saw
// a chat format; tools/demo_model/README.md has the measurements that chose
// it). The expected texts are what Hugging Face's renderer (jinja2 with
// transformers' settings) makes of the committed template, less its
// leading <s> (the engine adds BOS).
TEST(ChatTemplate, BundledModelsAreKjvDialogue) {
  for (const char* dir :
       {"models/demo", "models/demo-fg", "models/demo-draft"}) {
    absl::StatusOr<ChatTemplate> t = ChatTemplate::LoadFromModelDir(dir);
    ASSERT_TRUE(t.ok()) << dir << ": " << t.status();
    EXPECT_EQ(t->family(), ChatFamily::kKjvDialogue) << dir;
    EXPECT_EQ(t->family_name(), "kjv_dialogue");
    EXPECT_EQ(*t->Render({{"user", "Who made the heaven?"}}, true),
              "And one said unto him, Who made the heaven?\n"
              "And he answered and said,");
    EXPECT_EQ(*t->Render({{"system", "Speak as the King James Bible."},
                          {"user", "Who made the heaven?"}},
                         true),
              "Speak as the King James Bible.\n"
              "And one said unto him, Who made the heaven?\n"
              "And he answered and said,");
    EXPECT_EQ(*t->Render({{"system", "S"},
                          {"user", "u1"},
                          {"assistant", "a1"},
                          {"user", "u2"}},
                         true),
              "S\nAnd one said unto him, u1\nAnd he answered and said, a1\n"
              "And one said unto him, u2\nAnd he answered and said,");
    EXPECT_EQ(*t->Render({{"user", "u1"}, {"assistant", "a1"}}, false),
              "And one said unto him, u1\nAnd he answered and said, a1\n");
    EXPECT_EQ(*t->Render({{"user", "u1"}}, false),
              "And one said unto him, u1\n");
  }
}

// Roles as the template's raise_exception calls (and Mistral's) allow.
TEST(ChatTemplate, KjvDialogueRefusesRolesOutOfOrder) {
  absl::StatusOr<ChatTemplate> t =
      ChatTemplate::LoadFromModelDir("models/demo");
  ASSERT_TRUE(t.ok()) << t.status();
  const std::vector<std::vector<ChatMessage>> bad = {
      {{"assistant", "a"}},
      {{"user", "a"}, {"user", "b"}},
      {{"user", "a"}, {"system", "b"}},
      {{"system", "s"}},
      {}};
  const char* fields[] = {"messages[0].role", "messages[1].role",
                          "messages[1].role", "messages[0].role",
                          "messages[0].role"};
  for (size_t i = 0; i < bad.size(); ++i) {
    absl::StatusOr<std::string> text = t->Render(bad[i], true);
    EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument) << i;
    EXPECT_EQ(text.status().message().substr(0, strlen(fields[i]) + 2),
              absl::StrCat(fields[i], ": "))
        << i;
    EXPECT_NE(text.status().message().find("KJV dialogue"), std::string::npos)
        << text.status();
  }
}

}  // namespace
}  // namespace moeserve::server::openai
