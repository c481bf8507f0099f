#include "server/openai/http_api_options.h"

#include <optional>
#include <string>

namespace moeserve::server::openai {

size_t MaxBodyBytes(const RequestLimits& limits) {
  return 2 * limits.max_prompt_bytes + kBodyOverheadBytes;
}

HttpApiOptions HttpApiOptionsFor(const ServerOptions& options,
                                 const security::SecurityOptions& security) {
  HttpApiOptions http;
  http.host = options.http_host.empty() ? options.host : options.http_host;
  http.port = options.http_port;
  http.head_timeout_s = options.http_head_timeout_s;
  http.tls_cert_pem = security.tls_cert_pem;
  http.tls_key_pem = security.tls_key_pem;
  http.tls_client_ca_pem = security.tls_client_ca_pem;
  if (security.tokens != nullptr) {
    http.identify = [tokens = security.tokens](absl::string_view header) {
      return tokens->IdentifyAuthorization(header);
    };
  }
  http.max_body_bytes = MaxBodyBytes(options.limits);
  return http;
}

}  // namespace moeserve::server::openai
