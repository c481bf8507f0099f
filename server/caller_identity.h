// Who is calling: the scope of request ids and of Abort.
//
// A caller is the authenticated identity when there is one (the
// `moeserve.identity` property that the token / mTLS check adds to the
// call's grpc::AuthContext: a stable id of the token or the client
// certificate's subject, never the secret), else the connection the call
// came in on (`ServerContext::peer()`, e.g. "ipv4:127.0.0.1:53412"). Two
// callers never see each other's request ids: Abort reaches only the
// caller's own requests, and a client-given id only has to be unique among
// the caller's requests in flight.
//
// Also the server's own request ids: 128 random bits from the kernel's
// CSPRNG (getrandom), so they cannot be guessed.
#ifndef MOESERVE_SERVER_CALLER_IDENTITY_H_
#define MOESERVE_SERVER_CALLER_IDENTITY_H_

#include <string>
#include <string_view>

#include "grpcpp/server_context.h"

namespace moeserve::server {

// The AuthContext property an authenticating interceptor or auth processor
// sets (the contract with the auth code).
inline constexpr char kIdentityProperty[] = "moeserve.identity";

// "id:<identity>" when the call carries kIdentityProperty, else
// "peer:<peer>". Never empty.
std::string CallerOf(const grpc::ServerContextBase& context);

// The key a request is known by inside the engines: the caller and the
// request id, so equal ids of two callers never meet.
std::string ScopedRequestId(std::string_view caller,
                            std::string_view request_id);

// "req-" and 32 lowercase hex digits (128 random bits).
std::string NewServerRequestId();

}  // namespace moeserve::server

#endif  // MOESERVE_SERVER_CALLER_IDENTITY_H_
