#include "server/client_message.h"

#include <cctype>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"

namespace moeserve::server {
namespace {

// Characters of a path-like run: a path or file name (no spaces, quotes,
// colons or brackets, which end one in our messages).
bool IsPathChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '/' || c == '.' ||
         c == '_' || c == '-' || c == '+' || c == '~' || c == '@';
}

bool IsSourceFile(absl::string_view name) {
  for (absl::string_view ext : {".cc", ".cpp", ".cxx", ".c", ".h", ".hpp"}) {
    if (absl::EndsWith(name, ext) && name.size() > ext.size()) return true;
  }
  return false;
}

// Length of a line-number suffix of a source file at the start of `rest`:
// "(123)" or ":123", then a ':' and any spaces; 0 when there is none.
size_t LineSuffix(absl::string_view rest) {
  if (rest.empty() || (rest[0] != '(' && rest[0] != ':')) return 0;
  size_t i = 1;
  while (i < rest.size() && std::isdigit(static_cast<unsigned char>(rest[i]))) {
    ++i;
  }
  if (i == 1) return 0;
  if (rest[0] == '(') {
    if (i >= rest.size() || rest[i] != ')') return 0;
    ++i;
  }
  if (i < rest.size() && rest[i] == ':') ++i;
  while (i < rest.size() && rest[i] == ' ') ++i;
  return i;
}

// The last non-empty component of a path.
absl::string_view LastComponent(absl::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  const size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

}  // namespace

std::string ForClient(absl::string_view message) {
  std::string out;
  out.reserve(message.size());
  size_t i = 0;
  while (i < message.size()) {
    if (!IsPathChar(message[i])) {
      out += message[i++];
      continue;
    }
    size_t end = i;
    while (end < message.size() && IsPathChar(message[end])) ++end;
    absl::string_view run = message.substr(i, end - i);
    absl::string_view rest = message.substr(end);
    // A run that ends in a sentence's full stop is still a path.
    if (IsSourceFile(run)) {
      if (const size_t n = LineSuffix(rest); n > 0) {
        i = end + n;
        continue;
      }
    }
    if (run.size() > 1 && run[0] == '/') {
      const absl::string_view last = LastComponent(run);
      out.append(last.data(), last.size());
    } else {
      out.append(run.data(), run.size());
    }
    i = end;
  }
  return out;
}

std::string PublicModelName(absl::string_view model_dir) {
  if (absl::StripTrailingAsciiWhitespace(model_dir).empty()) return "";
  absl::string_view last = LastComponent(model_dir);
  return last == "/" ? "" : std::string(last);
}

}  // namespace moeserve::server
