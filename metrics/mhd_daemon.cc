#include "metrics/mhd_daemon.h"

#include <arpa/inet.h>
#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <netinet/in.h>

#include <cstdint>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace moeserve::metrics {

void HttpStartLog::Log(void* self, const char* format, va_list args) {
  static_cast<HttpStartLog*>(self)->Append(format, args);
}

void HttpStartLog::Append(const char* format, va_list args) {
  char line[256];
  std::vsnprintf(line, sizeof(line), format, args);
  base::MutexLock lock(&mu_);
  if (closed_ || text_.size() > 512) return;
  absl::StrAppend(&text_, text_.empty() ? "" : "; ", line);
}

std::string HttpStartLog::Close() {
  base::MutexLock lock(&mu_);
  closed_ = true;
  while (!text_.empty() && (text_.back() == '\n' || text_.back() == ' ')) {
    text_.pop_back();
  }
  return text_;
}

absl::StatusOr<ListenAddress> ParseListenAddress(absl::string_view host,
                                                 int port,
                                                 absl::string_view what) {
  ListenAddress address;
  const std::string literal(host == "localhost" ? "127.0.0.1" : host);
  auto* v4 = reinterpret_cast<sockaddr_in*>(&address.storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&address.storage);
  if (inet_pton(AF_INET, literal.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
  } else if (inet_pton(AF_INET6, literal.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    address.ipv6 = true;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "'", host, "' is not an IPv4 or IPv6 address"));
  }
  return address;
}

std::vector<MHD_OptionItem> DaemonOptionItems(
    const HttpListenerOptions& options, size_t connection_memory_bytes,
    ListenAddress* address) {
  // Every option bounds what a client can hold (metrics/README.md).
  std::vector<MHD_OptionItem> items = {
      {MHD_OPTION_THREAD_POOL_SIZE, options.threads, nullptr},
      {MHD_OPTION_CONNECTION_TIMEOUT, options.idle_timeout_s, nullptr},
      {MHD_OPTION_CONNECTION_LIMIT, options.max_connections, nullptr},
      {MHD_OPTION_PER_IP_CONNECTION_LIMIT, options.max_connections_per_ip,
       nullptr},
      {MHD_OPTION_CONNECTION_MEMORY_LIMIT,
       static_cast<intptr_t>(connection_memory_bytes), nullptr},
      {MHD_OPTION_SOCK_ADDR, 0, &address->storage},
  };
  if (!options.tls_cert_pem.empty()) {
    items.push_back({MHD_OPTION_HTTPS_MEM_CERT, 0,
                     const_cast<char*>(options.tls_cert_pem.c_str())});
    items.push_back({MHD_OPTION_HTTPS_MEM_KEY, 0,
                     const_cast<char*>(options.tls_key_pem.c_str())});
    if (!options.tls_client_ca_pem.empty()) {
      items.push_back({MHD_OPTION_HTTPS_MEM_TRUST, 0,
                       const_cast<char*>(options.tls_client_ca_pem.c_str())});
    }
  }
  items.push_back({MHD_OPTION_END, 0, nullptr});
  return items;
}

bool ClientCertificateVerified(MHD_Connection* conn) {
  const MHD_ConnectionInfo* info =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
  if (info == nullptr || info->tls_session == nullptr) return false;
  unsigned int problems = 0;
  // Fails (GNUTLS_E_NO_CERTIFICATE_FOUND) when the client sent none.
  if (gnutls_certificate_verify_peers2(
          static_cast<gnutls_session_t>(info->tls_session), &problems) !=
      GNUTLS_E_SUCCESS) {
    return false;
  }
  return problems == 0;
}

}  // namespace moeserve::metrics
