// BearerTokens: the API tokens accepted by the server (--auth_token_file),
// and the check of a presented token or Authorization header against them.
//
// File format: one token per line; blank lines and lines starting with '#'
// are skipped; surrounding spaces and a trailing '\r' are ignored. A token
// is 16 to 4096 characters of RFC 6750's token68 alphabet
// ([A-Za-z0-9-._~+/], then '=' padding), and appears once. A file with none
// is refused. Errors name the line, never the token.
//
// Only SHA-256 digests are kept, not the tokens: a token cannot be logged
// or dumped from here. The caller identity of a token is "token:" and the
// first 12 hex digits of its digest (stable across reorderings of the file;
// 48 bits of a hash of a >= 16-character secret reveal nothing usable).
//
// Immutable after construction; thread-safe.
#ifndef MOESERVE_SERVER_SECURITY_BEARER_TOKENS_H_
#define MOESERVE_SERVER_SECURITY_BEARER_TOKENS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/security/constant_time.h"

namespace moeserve::server::security {

class BearerTokens {
 public:
  static constexpr size_t kMinLength = 16;
  static constexpr size_t kMaxLength = 4096;
  static constexpr size_t kMaxFileBytes = 1 << 20;

  // `source` names the file in error messages.
  static absl::StatusOr<BearerTokens> Parse(absl::string_view contents,
                                            absl::string_view source);
  static absl::StatusOr<BearerTokens> LoadFile(const std::string& path);

  // The identity of the token equal to `token`, or nullopt. Compares with
  // every token, in constant time each, whether or not one matches.
  std::optional<std::string> Identify(absl::string_view token) const;

  // Identify() on the token of an Authorization header value
  // "Bearer <token>" (scheme case-insensitive); nullopt for other schemes.
  std::optional<std::string> IdentifyAuthorization(
      absl::string_view header_value) const;

  // The token of an Authorization header value "Bearer <token>" (scheme
  // case-insensitive, spaces trimmed); nullopt for other schemes.
  static std::optional<absl::string_view> TokenOfAuthorization(
      absl::string_view header_value);

  // The identity `token` has, accepted or not ("token:" + 12 hex digits of
  // its SHA-256): what Identify() returns for it when it is accepted.
  static std::string IdentityOfToken(absl::string_view token);

  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    Sha256Digest digest;
    std::string identity;
  };
  explicit BearerTokens(std::vector<Entry> entries)
      : entries_(std::move(entries)) {}

  std::vector<Entry> entries_;
};

}  // namespace moeserve::server::security

#endif  // MOESERVE_SERVER_SECURITY_BEARER_TOKENS_H_
