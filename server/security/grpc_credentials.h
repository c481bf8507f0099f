// The gRPC listening port's credentials from SecurityOptions: TLS
// (grpc::SslServerCredentials' core, with
// GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY when a client CA
// is set) or plaintext, plus, when tokens or mTLS are on, an auth metadata
// processor that
//   - lets grpc.health.v1.Health and server reflection through untouched;
//   - with tokens: answers UNAUTHENTICATED unless the call has exactly one
//     `authorization: Bearer <token>` and it matches one (constant time).
//     Each call is checked on its own: calls with different tokens may
//     share a connection (grpcio shares one between channels to the same
//     target);
//   - with mTLS and no tokens: adds "x509:" + the client certificate's
//     subject to the connection's AuthContext as kIdentityProperty.
// CallIdentity() is the caller's identity of a call: its own token's
// identity (bearer_tokens.h), else the mTLS one; code that scopes work to a
// caller (server/caller_identity.h) falls back to the peer (the
// connection) when there is none.
#ifndef MOESERVE_SERVER_SECURITY_GRPC_CREDENTIALS_H_
#define MOESERVE_SERVER_SECURITY_GRPC_CREDENTIALS_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_context.h"
#include "server/security/security_options.h"

namespace moeserve::server::security {

// The mTLS identity, a property of the connection's AuthContext.
inline constexpr char kIdentityProperty[] = "moeserve.identity";
// Set on a connection's AuthContext ("bearer") when its port checks tokens:
// every call on it then passed the check with its own token.
inline constexpr char kTokenAuthProperty[] = "moeserve.token_auth";

// True for the methods that stay open whatever the options: health checks
// and server reflection (a load balancer and grpcurl need no token).
bool IsOpenMethod(absl::string_view path);

std::shared_ptr<grpc::ServerCredentials> MakeGrpcServerCredentials(
    const SecurityOptions& options);

// The authenticated identity of this call: with tokens, "token:" + the
// identity of the call's own token (checked by the processor); with mTLS
// alone, "x509:" + the certificate's subject; nullopt without auth (or on
// an open method). Never the token.
std::optional<std::string> CallIdentity(const grpc::ServerContextBase& context);

}  // namespace moeserve::server::security

#endif  // MOESERVE_SERVER_SECURITY_GRPC_CREDENTIALS_H_
