// SecurityOptions: TLS material and API tokens for both listening ports,
// read and checked once at start from the flags --tls_cert_file,
// --tls_key_file, --tls_client_ca_file, --auth_token_file and
// --metrics_auth (defined in security_options.cc). A file that is missing,
// unreadable or wrong (no PEM certificate, a key that does not match the
// certificate, no token) refuses the start with the reason.
//
// Plain data, immutable once built; `tokens` is shared with the gRPC auth
// processor and the HTTP exporter.
#ifndef MOESERVE_SERVER_SECURITY_SECURITY_OPTIONS_H_
#define MOESERVE_SERVER_SECURITY_SECURITY_OPTIONS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/security/bearer_tokens.h"

namespace moeserve::server::security {

// The flags' values (paths; empty = not set).
struct SecurityFiles {
  std::string tls_cert_file;       // PEM certificate chain, leaf first
  std::string tls_key_file;        // PEM private key of the leaf
  std::string tls_client_ca_file;  // PEM CA(s) that sign client certificates
  std::string auth_token_file;     // see bearer_tokens.h
  bool metrics_auth = false;       // /metrics and /healthz need a token too
};

struct SecurityOptions {
  std::string tls_cert_pem;  // empty: plaintext
  std::string tls_key_pem;
  std::string tls_client_ca_pem;  // set: mTLS, a client certificate required
  std::shared_ptr<const BearerTokens> tokens;  // null: no token check
  bool metrics_auth = false;

  bool tls() const { return !tls_cert_pem.empty(); }
  bool mtls() const { return !tls_client_ca_pem.empty(); }
};

// Reads and checks the files. The rules: cert and key go together; a client
// CA needs them (mTLS is TLS); --metrics_auth needs --auth_token_file.
absl::StatusOr<SecurityOptions> LoadSecurityOptions(const SecurityFiles& files);

// LoadSecurityOptions() of the flags.
absl::StatusOr<SecurityOptions> SecurityOptionsFromFlags();

// A line for the start-up log when `host` listens beyond loopback without
// TLS or without authentication (or sends tokens in plaintext); empty when
// there is nothing to say.
std::string ExposureWarning(absl::string_view host,
                            const SecurityOptions& options);

// True for 127.0.0.0/8, ::1 and "localhost".
bool IsLoopbackHost(absl::string_view host);

}  // namespace moeserve::server::security

#endif  // MOESERVE_SERVER_SECURITY_SECURITY_OPTIONS_H_
