// HttpListenerOptions: what every moeserve HTTP listener is configured
// with. Kept apart from mhd_daemon.h so that the option structs of the
// servers (metrics/http_exporter.h, server/openai/http_api_server.h) do not
// bring libmicrohttpd's header to their users.
#ifndef MOESERVE_METRICS_HTTP_LISTENER_OPTIONS_H_
#define MOESERVE_METRICS_HTTP_LISTENER_OPTIONS_H_

#include <string>

namespace moeserve::metrics {

// The metrics port's and the OpenAI API port's options derive from it.
struct HttpListenerOptions {
  // An IPv4 or IPv6 literal ("localhost" means 127.0.0.1); port 0 picks a
  // free port.
  std::string host = "127.0.0.1";
  int port = 0;

  // PEM text. Both set: HTTPS only. tls_client_ca_pem set too: a request
  // must come with a client certificate signed by that CA (403 otherwise).
  std::string tls_cert_pem;
  std::string tls_key_pem;
  std::string tls_client_ca_pem;

  // Bounds (metrics/README.md "HTTP bounds"). A connection that sends
  // nothing for idle_timeout_s is closed, whether mid-request or idle
  // keep-alive.
  int threads = 4;  // epoll threads, each serving many sockets
  int idle_timeout_s = 5;
  int max_connections = 256;        // beyond: accepted and closed at once
  int max_connections_per_ip = 32;  // one client cannot take all the slots

  // Deadlines for a request as it arrives (slowloris; metrics/README.md
  // "HTTP bounds"), on every request of a connection, keep-alive too:
  // - its head (request line and headers; the TLS handshake for a new
  //   connection) must be in within head_timeout_s of the connection's
  //   start or of the previous response's end;
  // - its body, after head_timeout_s of grace, must keep an average of
  //   min_body_bytes_per_s;
  // - at most max_half_received requests may be arriving (head or body not
  //   yet in) at once: over it, the one that began first is cut. 0 means
  //   max_connections / 4, which leaves room for fresh clients.
  // A cut connection is shut down (libmicrohttpd then closes it) and
  // counted in a log line, at most one every 10 s.
  int head_timeout_s = 10;
  int min_body_bytes_per_s = 4096;
  int max_half_received = 0;
};

}  // namespace moeserve::metrics

#endif  // MOESERVE_METRICS_HTTP_LISTENER_OPTIONS_H_
