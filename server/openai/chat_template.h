// Chat templates: OpenAI chat messages -> the prompt text a model was tuned
// on, for the template families of the models moeserve loads.
//
// Hugging Face keeps a model's template as Jinja text in
// tokenizer_config.json ("chat_template"). moeserve does not run Jinja: it
// recognises the family from the template text and renders it with a
// renderer of its own (one function per family):
//
//   ChatML   (Qwen1.5/2/2.5/3, "<|im_start|>")
//            <|im_start|>{role}\n{content}<|im_end|>\n ...
//            + "<|im_start|>assistant\n" with add_generation_prompt. A
//            template with a literal default system prompt (Qwen2's "You
//            are a helpful assistant") gets it when the messages have none.
//   Mistral  (Mixtral/Mistral instruct, "[INST]")
//            [INST] {user} [/INST]{assistant}</s>[INST] {user} [/INST]
//            users and assistants alternate, starting with a user; a
//            leading system message is put before the first user message
//            (separated by a blank line), as Mistral's later templates do.
//            The prompt already ends where the assistant speaks, so
//            add_generation_prompt adds nothing.
//   Tulu     (OLMoE-Instruct, Tulu 2; "<|user|>" and "<|assistant|>")
//            <|system|>\n{content}\n<|user|>\n{content}\n
//            <|assistant|>\n{content}</s>\n ... + "<|assistant|>\n"
//   KJV dialogue (models/demo, demo-fg, demo-draft; "And he answered and
//            said,"): the conversation as King James Bible dialogue, a
//            form the demo models' corpus holds (they never saw a chat
//            format, and answer Mistral's [INST] with </s> at once):
//            {system}\nAnd one said unto him, {user}\n
//            And he answered and said, {assistant}\n ...
//            + "And he answered and said," with add_generation_prompt.
//            Roles as Mistral's (a system message only first; users and
//            assistants alternate, starting with a user).
//
// The template's leading bos_token is left out: the engine prepends BOS to
// every text prompt. eos_token (after each assistant turn) is the config's.
//
// Immutable once built; thread-safe.
#ifndef MOESERVE_SERVER_OPENAI_CHAT_TEMPLATE_H_
#define MOESERVE_SERVER_OPENAI_CHAT_TEMPLATE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace moeserve::server::openai {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

enum class ChatFamily { kChatMl, kMistral, kTulu, kKjvDialogue };

// Largest tokenizer_config.json read (real ones are under 200 KiB).
inline constexpr size_t kMaxTokenizerConfigBytes = 4 << 20;

class ChatTemplate {
 public:
  // From the text of a tokenizer_config.json. FAILED_PRECONDITION when it
  // has no chat_template, or one of no family above (the message says so
  // and points to /v1/completions); INVALID_ARGUMENT when it is not JSON.
  static absl::StatusOr<ChatTemplate> FromTokenizerConfig(
      absl::string_view config_json);

  // FromTokenizerConfig() of `model_dir`/tokenizer_config.json;
  // FAILED_PRECONDITION when the file is missing. Messages name the file
  // by its name only.
  static absl::StatusOr<ChatTemplate> LoadFromModelDir(
      const std::string& model_dir);

  // From a template text directly (tests); `eos_token` as in the config.
  static absl::StatusOr<ChatTemplate> FromTemplateText(
      absl::string_view template_text, std::string eos_token);

  // INVALID_ARGUMENT naming "messages[i].role" for a message this family
  // cannot take (Mistral, KJV dialogue: roles out of order).
  // REQUIRES: every role is system, user or assistant.
  absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                                     bool add_generation_prompt) const;

  ChatFamily family() const { return family_; }
  // "chatml", "mistral", "tulu" or "kjv_dialogue".
  absl::string_view family_name() const;
  // ChatML only: the template's default system prompt, or "".
  const std::string& default_system() const { return default_system_; }

 private:
  ChatTemplate(ChatFamily family, std::string eos, std::string default_system)
      : family_(family),
        eos_(std::move(eos)),
        default_system_(std::move(default_system)) {}

  std::string RenderChatMl(const std::vector<ChatMessage>& messages,
                           bool add_generation_prompt) const;
  absl::StatusOr<std::string> RenderMistral(
      const std::vector<ChatMessage>& messages) const;
  std::string RenderTulu(const std::vector<ChatMessage>& messages,
                         bool add_generation_prompt) const;
  absl::StatusOr<std::string> RenderKjvDialogue(
      const std::vector<ChatMessage>& messages,
      bool add_generation_prompt) const;

  ChatFamily family_;
  std::string eos_;
  std::string default_system_;
};

}  // namespace moeserve::server::openai

#endif  // MOESERVE_SERVER_OPENAI_CHAT_TEMPLATE_H_
