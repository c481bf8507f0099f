#include "server/openai/chat_template.h"

#include <unistd.h>

#include <cerrno>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "engine/json_util.h"
#include "nlohmann/json.hpp"

namespace moeserve::server::openai {
namespace {

constexpr char kUseCompletions[] =
    "; the chat endpoint needs one (use /v1/completions with a prompt "
    "instead)";

// A special token of tokenizer_config.json: a string or {"content": ...}.
std::string TokenText(const nlohmann::json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto content = it->find("content");
    if (content != it->end() && content->is_string()) {
      return content->get<std::string>();
    }
  }
  return "";
}

// The template text: a string, or a list of {name, template} (the one
// named "default", else the first).
std::string TemplateText(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (!value.is_array()) return "";
  std::string first;
  for (const nlohmann::json& entry : value) {
    if (!entry.is_object()) continue;
    auto text = entry.find("template");
    if (text == entry.end() || !text->is_string()) continue;
    auto name = entry.find("name");
    if (name != entry.end() && *name == "default") {
      return text->get<std::string>();
    }
    if (first.empty()) first = text->get<std::string>();
  }
  return first;
}

// ChatML's literal default system prompt: the text between
// "<|im_start|>system" and a newline (a real one, or a Jinja "\n") and
// "<|im_end|>", when it is plain text, not an expression.
std::string DefaultSystemPrompt(absl::string_view text) {
  constexpr absl::string_view kOpen = "<|im_start|>system";
  size_t at = 0;
  while ((at = text.find(kOpen, at)) != absl::string_view::npos) {
    at += kOpen.size();
    absl::string_view rest = text.substr(at);
    if (!absl::ConsumePrefix(&rest, "\n") &&
        !absl::ConsumePrefix(&rest, "\\n")) {
      continue;
    }
    const size_t end = rest.find("<|im_end|>");
    if (end == absl::string_view::npos) return "";
    const absl::string_view body = rest.substr(0, end);
    if (!body.empty() &&
        body.find_first_of("'\"{}+\\") == absl::string_view::npos) {
      return std::string(body);
    }
  }
  return "";
}

absl::Status OutOfOrder(size_t index, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("messages[", index, "].role: ", why));
}

// The roles Mistral's template (and the KJV dialogue's) takes: an optional
// system message first, then users and assistants alternating from a user.
// Returns the index of the first non-system message.
absl::StatusOr<size_t> CheckAlternating(
    const std::vector<ChatMessage>& messages, absl::string_view family) {
  const size_t first =
      !messages.empty() && messages.front().role == "system" ? 1 : 0;
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "system") {
      return OutOfOrder(i, absl::StrCat("a system message may only come "
                                        "first here (",
                                        family, " template)"));
    }
    if ((m.role == "user") != ((i - first) % 2 == 0)) {
      return OutOfOrder(i, absl::StrCat("roles must alternate "
                                        "user/assistant/user/... starting "
                                        "with user (",
                                        family, " template)"));
    }
  }
  if (first == messages.size()) {
    return OutOfOrder(0, absl::StrCat("at least one user message is needed (",
                                      family, " template)"));
  }
  return first;
}

// What identifies the KJV dialogue template: the line its generation
// prompt opens.
constexpr absl::string_view kKjvAnswer = "And he answered and said,";
constexpr absl::string_view kKjvQuestion = "And one said unto him, ";

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::FromTemplateText(
    absl::string_view text, std::string eos_token) {
  if (absl::StrContains(text, "<|im_start|>")) {
    return ChatTemplate(ChatFamily::kChatMl, std::move(eos_token),
                        DefaultSystemPrompt(text));
  }
  if (absl::StrContains(text, "[INST]")) {
    return ChatTemplate(ChatFamily::kMistral, std::move(eos_token), "");
  }
  if (absl::StrContains(text, "<|user|>") &&
      absl::StrContains(text, "<|assistant|>")) {
    return ChatTemplate(ChatFamily::kTulu, std::move(eos_token), "");
  }
  if (absl::StrContains(text, kKjvAnswer)) {
    return ChatTemplate(ChatFamily::kKjvDialogue, std::move(eos_token), "");
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "messages: the model's chat template is of no family this server "
      "renders (ChatML <|im_start|>, Mistral [INST], Tulu <|user|>, KJV "
      "dialogue \"And he answered and said,\")",
      kUseCompletions));
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromTokenizerConfig(
    absl::string_view config_json) {
  const nlohmann::json config =
      nlohmann::json::parse(config_json.begin(), config_json.end(), nullptr,
                            /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError(
        "tokenizer_config.json: not a JSON object");
  }
  auto it = config.find("chat_template");
  const std::string text =
      it == config.end() ? std::string() : TemplateText(*it);
  if (text.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "messages: the model has no chat template (no chat_template in its "
        "tokenizer_config.json)",
        kUseCompletions));
  }
  return FromTemplateText(text, TokenText(config, "eos_token"));
}

absl::StatusOr<ChatTemplate> ChatTemplate::LoadFromModelDir(
    const std::string& model_dir) {
  // Opened without blocking and refused unless a regular file: a FIFO here
  // would otherwise hold the server's start until a writer appeared.
  absl::StatusOr<int> fd =
      engine::json_util::OpenRegularFile(model_dir + "/tokenizer_config.json");
  if (!fd.ok()) {
    // The message reaches API clients: no path in it.
    return absl::FailedPreconditionError(absl::StrCat(
        absl::IsInvalidArgument(fd.status())
            ? "messages: the model's tokenizer_config.json is not a regular "
              "file, so no chat template"
            : "messages: the model has no tokenizer_config.json, so no chat "
              "template",
        kUseCompletions));
  }
  std::string text(kMaxTokenizerConfigBytes + 1, '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = read(*fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(*fd);
  text.resize(got);
  if (text.size() > kMaxTokenizerConfigBytes) {
    return absl::FailedPreconditionError(
        "messages: the model's tokenizer_config.json is too large to read");
  }
  return FromTokenizerConfig(text);
}

absl::string_view ChatTemplate::family_name() const {
  switch (family_) {
    case ChatFamily::kChatMl:
      return "chatml";
    case ChatFamily::kMistral:
      return "mistral";
    case ChatFamily::kTulu:
      return "tulu";
    case ChatFamily::kKjvDialogue:
      return "kjv_dialogue";
  }
  return "";
}

absl::StatusOr<std::string> ChatTemplate::Render(
    const std::vector<ChatMessage>& messages,
    bool add_generation_prompt) const {
  switch (family_) {
    case ChatFamily::kChatMl:
      return RenderChatMl(messages, add_generation_prompt);
    case ChatFamily::kMistral:
      return RenderMistral(messages);
    case ChatFamily::kTulu:
      return RenderTulu(messages, add_generation_prompt);
    case ChatFamily::kKjvDialogue:
      return RenderKjvDialogue(messages, add_generation_prompt);
  }
  return absl::InternalError("unknown chat template family");
}

std::string ChatTemplate::RenderChatMl(const std::vector<ChatMessage>& messages,
                                       bool add_generation_prompt) const {
  std::string out;
  if (!default_system_.empty() &&
      (messages.empty() || messages.front().role != "system")) {
    absl::StrAppend(&out, "<|im_start|>system\n", default_system_,
                    "<|im_end|>\n");
  }
  for (const ChatMessage& m : messages) {
    absl::StrAppend(&out, "<|im_start|>", m.role, "\n", m.content,
                    "<|im_end|>\n");
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

absl::StatusOr<std::string> ChatTemplate::RenderMistral(
    const std::vector<ChatMessage>& messages) const {
  MOESERVE_ASSIGN_OR_RETURN(const size_t first,
                            CheckAlternating(messages, "Mistral"));
  const std::string system = first == 1 ? messages.front().content : "";
  std::string out;
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user") {
      const bool with_system = i == first && !system.empty();
      absl::StrAppend(&out, "[INST] ", with_system ? system : "",
                      with_system ? "\n\n" : "", m.content, " [/INST]");
    } else {
      absl::StrAppend(&out, m.content, eos_);
    }
  }
  return out;
}

absl::StatusOr<std::string> ChatTemplate::RenderKjvDialogue(
    const std::vector<ChatMessage>& messages,
    bool add_generation_prompt) const {
  MOESERVE_ASSIGN_OR_RETURN(const size_t first,
                            CheckAlternating(messages, "KJV dialogue"));
  std::string out;
  if (first == 1) absl::StrAppend(&out, messages.front().content, "\n");
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    absl::StrAppend(&out, m.role == "user" ? kKjvQuestion : kKjvAnswer,
                    m.role == "user" ? "" : " ", m.content, "\n");
  }
  if (add_generation_prompt) absl::StrAppend(&out, kKjvAnswer);
  return out;
}

std::string ChatTemplate::RenderTulu(const std::vector<ChatMessage>& messages,
                                     bool add_generation_prompt) const {
  std::string out;
  for (const ChatMessage& m : messages) {
    absl::StrAppend(&out, "<|", m.role, "|>\n", m.content,
                    m.role == "assistant" ? eos_ : "", "\n");
  }
  if (add_generation_prompt) out += "<|assistant|>\n";
  return out;
}

}  // namespace moeserve::server::openai
