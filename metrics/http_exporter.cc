#include "metrics/http_exporter.h"

#include <civetweb.h>

#include <mutex>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace moeserve::metrics {
namespace {

constexpr char kMetricsContentType[] =
    "text/plain; version=0.0.4; charset=utf-8";
constexpr char kTextContentType[] = "text/plain; charset=utf-8";

// civetweb wants one library init per process before the first mg_start;
// it is never undone, since other servers in the process may still run. Its
// result is the mask of features initialised, 0 here since we request none
// (no TLS), so it carries no error to report.
void InitCivetwebOnce() {
  static std::once_flag once;
  std::call_once(once, [] { (void)mg_init_library(0); });
}

// civetweb's "listening_ports" syntax: "1.2.3.4:80" or "[::1]:80".
std::string ListenSpec(absl::string_view host, int port) {
  return absl::StrContains(host, ':') ? absl::StrCat("[", host, "]:", port)
                                      : absl::StrCat(host, ":", port);
}

int SendResponse(mg_connection* conn, int code, absl::string_view reason,
                 absl::string_view content_type, absl::string_view body,
                 bool head_only, absl::string_view extra_headers = "") {
  const std::string head = absl::StrCat(
      "HTTP/1.1 ", code, " ", reason, "\r\nContent-Type: ", content_type,
      "\r\nContent-Length: ", body.size(),
      "\r\nCache-Control: no-cache\r\nConnection: close\r\n", extra_headers,
      "\r\n");
  mg_write(conn, head.data(), head.size());
  if (!head_only) mg_write(conn, body.data(), body.size());
  return code;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    absl::string_view host, int port, const Registry* registry,
    std::function<bool()> healthy) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("bad metrics port ", port));
  }
  InitCivetwebOnce();
  std::unique_ptr<MetricsHttpServer> server(
      new MetricsHttpServer(registry, std::move(healthy)));
  const std::string listen = ListenSpec(host, port);
  // No document_root: civetweb serves no files, only our handler.
  const char* options[] = {
      "listening_ports",    listen.c_str(), "num_threads", "2",
      "request_timeout_ms", "10000",        nullptr};
  mg_callbacks callbacks = {};
  // Silence civetweb's own stderr logging; failures come back as a Status.
  callbacks.log_message = [](const mg_connection*, const char*) { return 1; };
  mg_init_data init = {&callbacks, server.get(), options};
  char error_text[256] = "";
  mg_error_data error = {nullptr, error_text, sizeof(error_text)};
  server->ctx_ = mg_start2(&init, &error);
  if (server->ctx_ == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "metrics server cannot listen on ", listen, ": ", error_text));
  }
  mg_set_request_handler(server->ctx_, "/", &MetricsHttpServer::HandleRequest,
                         server.get());
  mg_server_port ports[1] = {};
  if (mg_get_server_ports(server->ctx_, 1, ports) < 1) {
    return absl::InternalError("metrics server: no listening port");
  }
  server->port_ = ports[0].port;
  return server;
}

MetricsHttpServer::MetricsHttpServer(const Registry* registry,
                                     std::function<bool()> healthy)
    : registry_(registry), healthy_(std::move(healthy)) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

void MetricsHttpServer::Stop() {
  if (ctx_ == nullptr) return;
  mg_stop(ctx_);  // joins the worker threads
  ctx_ = nullptr;
}

int MetricsHttpServer::HandleRequest(mg_connection* conn, void* self) {
  return static_cast<const MetricsHttpServer*>(self)->Handle(conn);
}

int MetricsHttpServer::Handle(mg_connection* conn) const {
  const mg_request_info* info = mg_get_request_info(conn);
  const absl::string_view method = info->request_method;
  const absl::string_view uri = info->local_uri ? info->local_uri : "";
  const bool head = method == "HEAD";
  if (uri != "/metrics" && uri != "/healthz") {
    return SendResponse(conn, 404, "Not Found", kTextContentType, "not found\n",
                        head);
  }
  if (method != "GET" && !head) {
    return SendResponse(conn, 405, "Method Not Allowed", kTextContentType,
                        "method not allowed\n", head, "Allow: GET, HEAD\r\n");
  }
  if (uri == "/metrics") {
    return SendResponse(conn, 200, "OK", kMetricsContentType,
                        registry_->Serialize(), head);
  }
  if (!healthy_ || healthy_()) {
    return SendResponse(conn, 200, "OK", kTextContentType, "ok", head);
  }
  return SendResponse(conn, 503, "Service Unavailable", kTextContentType,
                      "not ready", head);
}

}  // namespace moeserve::metrics
