// Who is calling: the scope of request ids and of Abort.
//
// A caller is the authenticated identity when there is one
// (security::CallIdentity: a stable id of the call's own bearer token, each
// call's token checked on its own, or the client certificate's subject;
// never the secret), else the connection the call came in on
// (`ServerContext::peer()`, e.g. "ipv4:127.0.0.1:53412"). Two callers never see
// each other's request ids: Abort reaches only the caller's own requests, and a
// client-given id only has to be unique among the caller's requests in flight.
//
// Also the server's own request ids: 128 random bits from the kernel's
// CSPRNG (getrandom), so they cannot be guessed.
#ifndef MOESERVE_SERVER_CALLER_IDENTITY_H_
#define MOESERVE_SERVER_CALLER_IDENTITY_H_

#include <string>
#include <string_view>

#include "grpcpp/server_context.h"

namespace moeserve::server {

// "id:<identity>" when the call has an authenticated identity, else
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
