// libFuzzer target: the access-control parsers on the request path, i.e.
// the --auth_token_file parser (BearerTokens::Parse) and the check of an
// HTTP / gRPC Authorization header (IdentifyAuthorization). The HTTP
// request itself is parsed by libmicrohttpd (Debian's library);
// what moeserve adds to that path is this.
//
// Input: mode byte, then bytes. Bit 0 clear: the bytes are a token file;
// when accepted, every token it names must identify as itself and the file
// again in reverse order gives the same identities. Bit 0 set: the bytes are
// an Authorization header checked against a fixed token set; only
// "Bearer <a token of the set>" may pass, with that token's identity.
// Built and run by tests/fuzz/run_fuzzers.sh (bearer_tokens_fuzzer).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "server/security/bearer_tokens.h"

namespace {

using moeserve::server::security::BearerTokens;

constexpr char kTokenA[] = "fuzz-token-aaaaaaaaaaaa";
constexpr char kTokenB[] = "fuzz/token+bbbbbbbbbbbb==";

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

// The tokens of an accepted file, as Parse reads them.
std::vector<std::string> TokensOf(const std::string& text) {
  std::vector<std::string> tokens;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (!line.empty() && line[0] != '#') tokens.emplace_back(line);
  }
  return tokens;
}

void FuzzFile(const std::string& text) {
  absl::StatusOr<BearerTokens> tokens = BearerTokens::Parse(text, "fuzz");
  if (!tokens.ok()) return;
  const std::vector<std::string> names = TokensOf(text);
  Check(tokens->size() == names.size() && !names.empty());
  std::vector<std::string> reversed(names.rbegin(), names.rend());
  absl::StatusOr<BearerTokens> again =
      BearerTokens::Parse(absl::StrJoin(reversed, "\n"), "fuzz");
  Check(again.ok());
  for (const std::string& token : names) {
    const std::optional<std::string> id = tokens->Identify(token);
    Check(id.has_value() && absl::StartsWith(*id, "token:"));
    Check(again->Identify(token) == id);
    Check(tokens->IdentifyAuthorization("Bearer " + token) == id);
  }
}

void FuzzHeader(const std::string& header) {
  static const BearerTokens* const set = [] {
    auto parsed = BearerTokens::Parse(
        std::string(kTokenA) + "\n" + std::string(kTokenB), "fuzz");
    Check(parsed.ok());
    return new BearerTokens(*std::move(parsed));
  }();
  const std::optional<std::string> id = set->IdentifyAuthorization(header);
  if (!id.has_value()) return;
  // Passed: the header must be "Bearer" + spaces + one of the tokens.
  absl::string_view rest = absl::StripAsciiWhitespace(header);
  Check(absl::StartsWithIgnoreCase(rest, "bearer "));
  rest = absl::StripAsciiWhitespace(rest.substr(7));
  Check(rest == kTokenA || rest == kTokenB);
  Check(set->Identify(rest) == id);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) {
    FuzzHeader(bytes);
  } else {
    FuzzFile(bytes);
  }
  return 0;
}
