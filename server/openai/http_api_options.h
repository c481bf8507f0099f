// The HTTP API port's options from the server's: --http_host/--http_port,
// the TLS material and the tokens of every port (server/security/), and
// the body bound from --max_prompt_bytes.
#ifndef MOESERVE_SERVER_OPENAI_HTTP_API_OPTIONS_H_
#define MOESERVE_SERVER_OPENAI_HTTP_API_OPTIONS_H_

#include <cstddef>

#include "server/openai/http_api_server.h"
#include "server/security/security_options.h"
#include "server/server_options.h"

namespace moeserve::server::openai {

// Room a body gets besides its prompt text: the other fields, JSON
// escapes, a chat's roles.
inline constexpr size_t kBodyOverheadBytes = 64 * 1024;

// Largest request body: the prompt limit twice (a prompt's JSON escapes
// may double it), plus kBodyOverheadBytes.
size_t MaxBodyBytes(const RequestLimits& limits);

HttpApiOptions HttpApiOptionsFor(const ServerOptions& options,
                                 const security::SecurityOptions& security);

}  // namespace moeserve::server::openai

#endif  // MOESERVE_SERVER_OPENAI_HTTP_API_OPTIONS_H_
