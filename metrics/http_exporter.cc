#include "metrics/http_exporter.h"

#include <microhttpd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/mutex.h"
#include "metrics/mhd_daemon.h"

namespace moeserve::metrics {

namespace {

constexpr char kMetricsContentType[] =
    "text/plain; version=0.0.4; charset=utf-8";
constexpr char kTextContentType[] = "text/plain; charset=utf-8";
// Headers and request line must fit here (MHD answers 431 otherwise); it is
// also each connection's whole buffer, so it bounds memory per connection.
constexpr size_t kConnectionMemoryBytes = 16 * 1024;

absl::Status CheckOptions(const HttpExporterOptions& o) {
  if (o.port < 0 || o.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad metrics port ", o.port));
  }
  if (o.threads < 1 || o.threads > 64 || o.idle_timeout_s < 1 ||
      o.max_connections < o.threads || o.max_connections_per_ip < 1 ||
      o.max_connections_per_ip > o.max_connections) {
    return absl::InvalidArgumentError(
        "metrics server: threads must be 1-64, idle_timeout_s >= 1, and "
        "1 <= max_connections_per_ip <= max_connections, threads <= "
        "max_connections");
  }
  if (o.head_timeout_s < 1 || o.min_body_bytes_per_s < 0 ||
      o.max_half_received < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics server: head_timeout_s must be >= 1, ",
                     "min_body_bytes_per_s and max_half_received >= 0"));
  }
  if (o.tls_cert_pem.empty() != o.tls_key_pem.empty()) {
    return absl::InvalidArgumentError(
        "metrics server: a TLS certificate needs its key and vice versa");
  }
  if (!o.tls_client_ca_pem.empty() && o.tls_cert_pem.empty()) {
    return absl::InvalidArgumentError(
        "metrics server: a client CA needs a server certificate (mTLS is TLS)");
  }
  return absl::OkStatus();
}

bool Respond(
    MHD_Connection* conn, unsigned int code, absl::string_view content_type,
    absl::string_view body,
    const std::vector<std::pair<const char*, std::string>>& extra = {}) {
  MHD_Response* response = MHD_create_response_from_buffer(
      body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return false;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE,
                          std::string(content_type).c_str());
  MHD_add_response_header(response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
  for (const auto& [name, value] : extra) {
    MHD_add_response_header(response, name, value.c_str());
  }
  const MHD_Result queued = MHD_queue_response(conn, code, response);
  MHD_destroy_response(response);  // reference-counted: sent, then freed
  return queued == MHD_YES;
}

// The one answer to a Content-Length libmicrohttpd refuses itself, sent by
// the connection watch (metrics/mhd_daemon.h: libmicrohttpd's own comes
// with its headers twice).
std::string BadContentLengthResponse(int status) {
  const absl::string_view body = status == 413
                                     ? "Content-Length is too large\n"
                                     : "Content-Length is not a number\n";
  return absl::StrCat(
      "HTTP/1.1 ", status,
      status == 413 ? " Content Too Large" : " Bad Request",
      "\r\nConnection: close\r\nContent-Type: ", kTextContentType,
      "\r\nCache-Control: no-cache\r\nContent-Length: ", body.size(),
      "\r\n\r\n", body);
}

}  // namespace

// libmicrohttpd's entry points, kept out of the header (its types are C).
class MetricsHttpHandler {
 public:
  static MHD_Result OnRequest(void* self, MHD_Connection* conn, const char* url,
                              const char* method, const char* /*version*/,
                              const char* /*upload_data*/,
                              size_t* upload_data_size, void** request_state) {
    auto* server = static_cast<MetricsHttpServer*>(self);
    const absl::string_view path = url ? url : "";
    const absl::string_view verb = method ? method : "";
    if (*request_state == nullptr) {  // the first call: the head is in
      *request_state = server;
      server->watch_->HeadReceived(conn);
      // GETs are answered once the request is read, so that the connection
      // can be kept alive; anything else at once (and closed).
      if ((verb == "GET" || verb == "HEAD") &&
          (path == "/metrics" || path == "/healthz")) {
        return MHD_YES;
      }
      return server->Handle(conn, path, verb) ? MHD_YES : MHD_NO;
    }
    if (*upload_data_size > 0) {  // a body no route takes: discarded
      server->watch_->BodyBytes(conn, *upload_data_size);
      *upload_data_size = 0;
      return MHD_YES;
    }
    server->watch_->RequestReceived(conn);
    return server->Handle(conn, path, verb) ? MHD_YES : MHD_NO;
  }

  static void OnCompleted(void* self, MHD_Connection* conn,
                          void** /*request_state*/,
                          MHD_RequestTerminationCode /*code*/) {
    // The next request on this connection has its head deadline from now.
    static_cast<MetricsHttpServer*>(self)->watch_->RequestCompleted(conn);
  }
};

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    absl::string_view host, int port, const Registry* registry,
    std::function<bool()> healthy) {
  HttpExporterOptions options;
  options.host = std::string(host);
  options.port = port;
  return Start(options, registry, std::move(healthy));
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const HttpExporterOptions& options, const Registry* registry,
    std::function<bool()> healthy) {
  if (absl::Status st = CheckOptions(options); !st.ok()) return st;
  absl::StatusOr<ListenAddress> address =
      ParseListenAddress(options.host, options.port, "metrics host ");
  if (!address.ok()) return address.status();
  const bool tls = !options.tls_cert_pem.empty();
  if (tls && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
    return absl::UnavailableError(
        "metrics server: this libmicrohttpd was built without TLS");
  }
  std::unique_ptr<MetricsHttpServer> server(
      new MetricsHttpServer(options, registry, std::move(healthy)));
  const HttpExporterOptions& o = server->options_;  // stable strings

  // libmicrohttpd keeps the TLS pointers: they point into options_.
  std::vector<MHD_OptionItem> items = DaemonOptionItems(
      o, kConnectionMemoryBytes, &*address, server->watch_.get());

  // ITC: Stop() wakes the threads at once instead of waiting for a timeout.
  unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO |
                       MHD_USE_ITC | MHD_USE_ERROR_LOG;
  if (address->ipv6) flags |= MHD_USE_IPv6;
  if (tls) flags |= MHD_USE_TLS;
  server->daemon_ = MHD_start_daemon(
      flags, static_cast<uint16_t>(options.port), nullptr, nullptr,
      &MetricsHttpHandler::OnRequest, server.get(), MHD_OPTION_EXTERNAL_LOGGER,
      &HttpStartLog::Log, server->start_log_.get(), MHD_OPTION_NOTIFY_COMPLETED,
      &MetricsHttpHandler::OnCompleted, server.get(), MHD_OPTION_ARRAY,
      items.data(), MHD_OPTION_END);
  const std::string why = server->start_log_->Close();
  if (server->daemon_ == nullptr) {
    const char* kind = tls ? "https" : "http";
    return absl::UnavailableError(absl::StrCat(
        "metrics server cannot listen on ", kind, "://", options.host, ":",
        options.port, why.empty() ? "" : ": ", why));
  }
  const MHD_DaemonInfo* info =
      MHD_get_daemon_info(server->daemon_, MHD_DAEMON_INFO_BIND_PORT);
  if (info == nullptr || info->port == 0) {
    return absl::InternalError("metrics server: no listening port");
  }
  server->port_ = info->port;
  return server;
}

MetricsHttpServer::MetricsHttpServer(const HttpExporterOptions& options,
                                     const Registry* registry,
                                     std::function<bool()> healthy)
    : options_(options),
      registry_(registry),
      healthy_(std::move(healthy)),
      watch_(std::make_unique<ConnectionWatch>(options, "metrics",
                                               &BadContentLengthResponse)),
      start_log_(std::make_unique<HttpStartLog>(watch_.get())) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

MetricsHttpServer::SlowCuts MetricsHttpServer::slow_cuts() const {
  const ConnectionWatch::Cuts c = watch_->cuts();
  return {c.head, c.body, c.too_many};
}

void MetricsHttpServer::Stop() {
  if (daemon_ == nullptr) return;
  // Not while libmicrohttpd is still refusing a bad Content-Length
  // (ConnectionWatch::WaitForRefusedClosed): closed at once, normally.
  watch_->WaitForRefusedClosed(std::chrono::seconds(2));
  MHD_stop_daemon(daemon_);  // closes the sockets, joins the threads
  daemon_ = nullptr;
}

bool MetricsHttpServer::Handle(MHD_Connection* conn, absl::string_view url,
                               absl::string_view method) const {
  const bool head = method == "HEAD";
  if (url != "/metrics" && url != "/healthz") {
    return Respond(conn, 404, kTextContentType, "not found\n");
  }
  if (method != "GET" && !head) {
    return Respond(conn, 405, kTextContentType, "method not allowed\n",
                   {{MHD_HTTP_HEADER_ALLOW, "GET, HEAD"}});
  }
  if (!options_.tls_client_ca_pem.empty() && !ClientCertificateVerified(conn)) {
    return Respond(
        conn, 403, kTextContentType,
        "a client certificate signed by the client CA is required\n");
  }
  if (options_.authorize) {
    const char* header = MHD_lookup_connection_value(
        conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!options_.authorize(header ? header : "")) {
      return Respond(
          conn, 401, kTextContentType, "unauthorized\n",
          {{MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"moeserve\""}});
    }
  }
  if (url == "/metrics") {
    return Respond(conn, 200, kMetricsContentType, registry_->Serialize());
  }
  if (draining_.load(std::memory_order_relaxed)) {
    return Respond(conn, 503, kTextContentType, "draining");
  }
  if (!healthy_ || healthy_()) {
    return Respond(conn, 200, kTextContentType, "ok");
  }
  return Respond(conn, 503, kTextContentType, "not ready");
}

}  // namespace moeserve::metrics
