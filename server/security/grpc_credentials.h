// The gRPC listening port's credentials from SecurityOptions: TLS
// (grpc::SslServerCredentials' core, with
// GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY when a client CA
// is set) or plaintext, plus, when tokens or mTLS are on, an auth metadata
// processor that
//   - lets grpc.health.v1.Health and server reflection through untouched;
//   - with tokens: answers UNAUTHENTICATED unless the call's
//     `authorization: Bearer <token>` matches one (constant time), and then
//     removes that header from the call, so no handler can log the token;
//   - adds the caller's identity to the AuthContext as kIdentityProperty:
//     the token's identity (bearer_tokens.h), else with mTLS "x509:" + the
//     client certificate's subject.
// gRPC gives the processor the connection's AuthContext, shared by every
// call on it, so the identity belongs to the connection: the first
// authenticated call sets it, and a call with a token of another identity
// on the same connection is refused (UNAUTHENTICATED). Clients use one
// token per channel anyway (grpc call credentials are per channel).
// Code that scopes work to a caller reads the property, and falls back to
// the peer (the connection) when it is absent.
#ifndef MOESERVE_SERVER_SECURITY_GRPC_CREDENTIALS_H_
#define MOESERVE_SERVER_SECURITY_GRPC_CREDENTIALS_H_

#include <memory>

#include "absl/strings/string_view.h"
#include "grpcpp/security/server_credentials.h"
#include "server/security/security_options.h"

namespace moeserve::server::security {

inline constexpr char kIdentityProperty[] = "moeserve.identity";

// True for the methods that stay open whatever the options: health checks
// and server reflection (a load balancer and grpcurl need no token).
bool IsOpenMethod(absl::string_view path);

std::shared_ptr<grpc::ServerCredentials> MakeGrpcServerCredentials(
    const SecurityOptions& options);

}  // namespace moeserve::server::security

#endif  // MOESERVE_SERVER_SECURITY_GRPC_CREDENTIALS_H_
