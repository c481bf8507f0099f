#include "server/security/bearer_tokens.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace moeserve::server::security {
namespace {

bool IsToken68(absl::string_view token) {
  size_t i = 0;
  for (; i < token.size(); ++i) {
    const char c = token[i];
    if (!absl::ascii_isalnum(c) && c != '-' && c != '.' && c != '_' &&
        c != '~' && c != '+' && c != '/') {
      break;
    }
  }
  if (i == 0) return false;
  for (; i < token.size(); ++i) {
    if (token[i] != '=') return false;
  }
  return true;
}

std::string IdentityOf(const Sha256Digest& digest) {
  const std::string hex = absl::BytesToHexString(absl::string_view(
      reinterpret_cast<const char*>(digest.data()), digest.size()));
  return absl::StrCat("token:", hex.substr(0, 12));
}

}  // namespace

absl::StatusOr<BearerTokens> BearerTokens::Parse(absl::string_view contents,
                                                 absl::string_view source) {
  std::vector<Entry> entries;
  std::vector<int> lines;  // where each entry came from
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(contents, '\n')) {
    ++line_number;
    const absl::string_view token = absl::StripAsciiWhitespace(line);
    if (token.empty() || token[0] == '#') continue;
    const std::string where = absl::StrCat(source, " line ", line_number);
    if (token.size() < kMinLength || token.size() > kMaxLength) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": a token must be ", kMinLength, " to ", kMaxLength,
          " characters long (e.g. `openssl rand -hex 32`), this one has ",
          token.size()));
    }
    if (!IsToken68(token)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where,
          ": a token may hold only A-Z a-z 0-9 - . _ ~ + / and trailing = "
          "(RFC 6750), one token per line"));
    }
    Entry entry{Sha256(token), ""};
    for (size_t i = 0; i < entries.size(); ++i) {
      if (DigestsEqual(entries[i].digest, entry.digest)) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": repeats the token of line ", lines[i]));
      }
    }
    entry.identity = IdentityOf(entry.digest);
    entries.push_back(std::move(entry));
    lines.push_back(line_number);
  }
  if (entries.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source,
        " holds no token (one per line; blank lines and # comments are "
        "skipped)"));
  }
  return BearerTokens(std::move(entries));
}

absl::StatusOr<BearerTokens> BearerTokens::LoadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot read --auth_token_file ", path, ": ", std::strerror(errno)));
  }
  std::string contents(kMaxFileBytes + 1, '\0');
  in.read(contents.data(), contents.size());
  if (in.bad()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read --auth_token_file ", path));
  }
  contents.resize(in.gcount());
  if (contents.size() > kMaxFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat("--auth_token_file ", path,
                                                   " is larger than ",
                                                   kMaxFileBytes, " bytes"));
  }
  return Parse(contents, absl::StrCat("--auth_token_file ", path));
}

std::optional<std::string> BearerTokens::Identify(
    absl::string_view token) const {
  const Sha256Digest digest = Sha256(token);
  const Entry* match = nullptr;
  for (const Entry& entry : entries_) {
    // No early exit: the time does not say which token (if any) matched.
    if (DigestsEqual(entry.digest, digest)) match = &entry;
  }
  if (match == nullptr) return std::nullopt;
  return match->identity;
}

std::optional<absl::string_view> BearerTokens::TokenOfAuthorization(
    absl::string_view header_value) {
  absl::string_view value = absl::StripAsciiWhitespace(header_value);
  constexpr absl::string_view kScheme = "bearer ";
  if (!absl::StartsWithIgnoreCase(value, kScheme)) return std::nullopt;
  value.remove_prefix(kScheme.size());
  return absl::StripAsciiWhitespace(value);
}

std::string BearerTokens::IdentityOfToken(absl::string_view token) {
  return IdentityOf(Sha256(token));
}

std::optional<std::string> BearerTokens::IdentifyAuthorization(
    absl::string_view header_value) const {
  const std::optional<absl::string_view> token =
      TokenOfAuthorization(header_value);
  if (!token.has_value()) return std::nullopt;
  return Identify(*token);
}

}  // namespace moeserve::server::security
