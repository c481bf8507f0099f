#include "server/openai/http_api_server.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "metrics/mhd_daemon.h"
#include "server/client_message.h"
#include "server/openai/api_error.h"
#include "server/openai/connection_parking.h"
#include "server/openai/hangup_watch.h"
#include "server/openai/sse_stream.h"
#include "server/openai/unary_completion.h"

namespace moeserve::server::openai {

namespace {

constexpr char kJson[] = "application/json";
constexpr char kText[] = "text/plain; charset=utf-8";
// Headers must fit (431 otherwise); also each connection's buffers.
constexpr size_t kConnectionMemoryBytes = 32 * 1024;
// How long Stop() lets the last events of cut streams (and the 503s of
// woken requests) go out; a client that does not read is cut after it.
constexpr absl::Duration kStopFlushTime = absl::Seconds(1);
// Bytes the SSE reader is asked for at most per call.
constexpr size_t kStreamBlockBytes = 4096;

enum class Route {
  kHealth,
  kModels,
  kModel,
  kCompletions,
  kChatCompletions,
  kTokenize,
  kDetokenize,
  kNotFound
};

Route RouteOf(absl::string_view url) {
  if (url == "/health") return Route::kHealth;
  if (url == "/v1/models") return Route::kModels;
  if (absl::StartsWith(url, "/v1/models/") && url.size() > 11) {
    return Route::kModel;
  }
  if (url == "/v1/completions") return Route::kCompletions;
  if (url == "/v1/chat/completions") return Route::kChatCompletions;
  if (url == kTokenizeRoute) return Route::kTokenize;
  if (url == kDetokenizeRoute) return Route::kDetokenize;
  return Route::kNotFound;
}

// A route that takes a body (POST); the others are GET/HEAD.
bool TakesBody(Route route) {
  return route == Route::kCompletions || route == Route::kChatCompletions ||
         route == Route::kTokenize || route == Route::kDetokenize;
}

// The name a body route is counted under.
const char* RouteName(Route route) {
  switch (route) {
    case Route::kChatCompletions:
      return kChatCompletionsRoute;
    case Route::kTokenize:
      return kTokenizeRoute;
    case Route::kDetokenize:
      return kDetokenizeRoute;
    default:
      return kCompletionsRoute;
  }
}

absl::Status CheckOptions(const HttpApiOptions& o) {
  if (o.port < 0 || o.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("bad HTTP port ", o.port));
  }
  if (o.threads < 1 || o.threads > 64 || o.idle_timeout_s < 1 ||
      o.max_connections < o.threads || o.max_connections_per_ip < 1 ||
      o.max_connections_per_ip > o.max_connections || o.max_body_bytes < 1) {
    return absl::InvalidArgumentError(
        "HTTP API server: threads must be 1-64, idle_timeout_s >= 1, "
        "1 <= max_connections_per_ip <= max_connections, threads <= "
        "max_connections, max_body_bytes >= 1");
  }
  if (o.head_timeout_s < 1 || o.min_body_bytes_per_s < 0 ||
      o.max_half_received < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP API server: head_timeout_s must be >= 1, ",
                     "min_body_bytes_per_s and max_half_received >= 0"));
  }
  if (o.tls_cert_pem.empty() != o.tls_key_pem.empty()) {
    return absl::InvalidArgumentError(
        "HTTP API server: a TLS certificate needs its key and vice versa");
  }
  if (!o.tls_client_ca_pem.empty() && o.tls_cert_pem.empty()) {
    return absl::InvalidArgumentError(
        "HTTP API server: a client CA needs a server certificate");
  }
  return absl::OkStatus();
}

// "127.0.0.1:53412", "[::1]:53412"; "unknown" when MHD has none.
std::string PeerAddress(MHD_Connection* conn) {
  const MHD_ConnectionInfo* info =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  if (info == nullptr || info->client_addr == nullptr) return "unknown";
  char text[INET6_ADDRSTRLEN] = {};
  const sockaddr* addr = info->client_addr;
  if (addr->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(addr);
    inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text));
    return absl::StrCat(text, ":", ntohs(v4->sin_port));
  }
  if (addr->sa_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(addr);
    inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof(text));
    return absl::StrCat("[", text, "]:", ntohs(v6->sin6_port));
  }
  return "unknown";
}

using Headers = std::vector<std::pair<const char*, std::string>>;

bool Respond(MHD_Connection* conn, unsigned int code,
             absl::string_view content_type, absl::string_view body,
             const Headers& extra = {}) {
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
  MHD_destroy_response(response);  // reference-counted
  return queued == MHD_YES;
}

bool RespondError(MHD_Connection* conn, const ApiError& error,
                  const Headers& extra = {}) {
  return Respond(conn, static_cast<unsigned int>(error.http_status), kJson,
                 ErrorBody(error), extra);
}

ApiError PlainError(int http_status, std::string type, std::string message,
                    std::string code = "") {
  ApiError e;
  e.http_status = http_status;
  e.type = std::move(type);
  e.message = std::move(message);
  e.code = std::move(code);
  return e;
}

// "application/json", any case, with or without parameters
// ("; charset=utf-8").
bool IsJson(const char* content_type) {
  if (content_type == nullptr) return false;
  absl::string_view type(content_type);
  type = type.substr(0, type.find(';'));
  return absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(type), kJson);
}

// The one answer to a Content-Length libmicrohttpd refuses itself, sent by
// the connection watch (metrics/mhd_daemon.h: libmicrohttpd's own comes
// with its headers twice).
std::string BadContentLengthResponse(int http_status) {
  const bool too_large = http_status == 413;
  ApiError e = PlainError(
      http_status, "invalid_request_error",
      too_large ? "Content-Length is larger than any body this server takes"
                : "Content-Length is not a non-negative decimal number",
      too_large ? "request_too_large" : "invalid_content_length");
  e.param = "Content-Length";
  const std::string body = ErrorBody(e);
  return absl::StrCat("HTTP/1.1 ", http_status,
                      too_large ? " Content Too Large" : " Bad Request",
                      "\r\nConnection: close\r\nContent-Type: ", kJson,
                      "\r\nCache-Control: no-cache\r\nContent-Length: ",
                      body.size(), "\r\n\r\n", body);
}

}  // namespace

// One HTTP request: its route, body, caller and, for a generation, the
// stream or unary answer. Shared by libmicrohttpd's request state, the
// streamed response's reader and the server's open set.
class HttpExchange final : public ConnectionParking {
 public:
  explicit HttpExchange(MHD_Connection* conn) : conn_(conn) {}

  void Park() override { MHD_suspend_connection(conn_); }
  void Wake() override { MHD_resume_connection(conn_); }

  void Shutdown() {
    if (stream != nullptr) stream->Shutdown();
    if (unary != nullptr) unary->Shutdown();
  }
  void Close(bool completed) {
    if (stream != nullptr) stream->Close(completed);
    if (unary != nullptr) unary->Close();
  }

  MHD_Connection* const conn_;
  Route route = Route::kNotFound;
  std::string caller;
  std::string body;
  bool too_large = false;
  bool answered = false;  // a response is queued
  bool registered = false;
  // A generation: set before Register, never changed afterwards.
  ResponseHeader header;
  std::unique_ptr<SseStream> stream;
  std::unique_ptr<UnaryCompletion> unary;
};

// libmicrohttpd's entry points.
class HttpApiHandler {
 public:
  using Holder = std::shared_ptr<HttpExchange>;

  static MHD_Result OnRequest(void* self, MHD_Connection* conn, const char* url,
                              const char* method, const char* /*version*/,
                              const char* upload_data, size_t* upload_data_size,
                              void** request_state) {
    auto* server = static_cast<OpenAiHttpServer*>(self);
    if (*request_state == nullptr) {
      server->watch_->HeadReceived(conn);
      auto* holder = new Holder(std::make_shared<HttpExchange>(conn));
      *request_state = holder;
      return Begin(server, **holder, url ? url : "", method ? method : "")
                 ? MHD_YES
                 : MHD_NO;
    }
    Holder& holder = *static_cast<Holder*>(*request_state);
    HttpExchange& ex = *holder;
    if (*upload_data_size > 0) {
      server->watch_->BodyBytes(conn, *upload_data_size);
      if (!ex.answered && !ex.too_large) {
        if (ex.body.size() + *upload_data_size >
            server->options_.max_body_bytes) {
          ex.too_large = true;
          ex.body.clear();
          ex.body.shrink_to_fit();
        } else {
          ex.body.append(upload_data, *upload_data_size);
        }
      }
      *upload_data_size = 0;
      return MHD_YES;
    }
    server->watch_->RequestReceived(conn);  // no deadline while answered
    if (ex.answered) return MHD_YES;
    if (!TakesBody(ex.route)) {
      // A GET answered once the request is read: libmicrohttpd keeps the
      // connection alive only for a response queued then.
      return AnswerGet(server, ex, url ? url : "") ? MHD_YES : MHD_NO;
    }
    return Continue(server, holder) ? MHD_YES : MHD_NO;
  }

  static void OnCompleted(void* self, MHD_Connection* conn,
                          void** request_state,
                          MHD_RequestTerminationCode code) {
    // The next request on this connection has its head deadline from now.
    static_cast<OpenAiHttpServer*>(self)->watch_->RequestCompleted(conn);
    if (request_state == nullptr || *request_state == nullptr) return;
    auto* holder = static_cast<Holder*>(*request_state);
    *request_state = nullptr;
    (*holder)->Close(code == MHD_REQUEST_TERMINATED_COMPLETED_OK);
    if ((*holder)->registered) {
      static_cast<OpenAiHttpServer*>(self)->Unregister(*holder);
    }
    delete holder;
  }

  static ssize_t ReadStream(void* cls, uint64_t /*pos*/, char* buf,
                            size_t max) {
    HttpExchange& ex = **static_cast<Holder*>(cls);
    const ssize_t n = ex.stream->Read(buf, max);
    if (n == SseStream::kEnd) return MHD_CONTENT_READER_END_OF_STREAM;
    if (n == SseStream::kAbort) return MHD_CONTENT_READER_END_WITH_ERROR;
    return n;
  }

  static void FreeStream(void* cls) { delete static_cast<Holder*>(cls); }

 private:
  // The first call, headers in: answers what needs no body.
  static bool Begin(OpenAiHttpServer* server, HttpExchange& ex,
                    absl::string_view url, absl::string_view method) {
    MHD_Connection* conn = ex.conn_;
    ex.route = RouteOf(url);
    auto answer = [&ex](bool queued) {
      ex.answered = true;
      return queued;
    };
    if (ex.route == Route::kNotFound) {
      return answer(
          RespondError(conn, PlainError(404, "invalid_request_error",
                                        absl::StrCat("no route ", method, " ",
                                                     url, " on this server"),
                                        "not_found")));
    }
    const bool post = TakesBody(ex.route);
    const bool allowed =
        post ? method == "POST" : (method == "GET" || method == "HEAD");
    if (!allowed) {
      return answer(RespondError(
          conn,
          PlainError(
              405, "invalid_request_error",
              absl::StrCat("method ", method, " is not allowed on ", url),
              "method_not_allowed"),
          {{MHD_HTTP_HEADER_ALLOW, post ? "POST" : "GET, HEAD"}}));
    }
    const HttpApiOptions& o = server->options_;
    if (!o.tls_client_ca_pem.empty() &&
        !metrics::ClientCertificateVerified(conn)) {
      return answer(RespondError(
          conn, PlainError(403, "permission_error",
                           "a client certificate signed by the client CA "
                           "is required")));
    }
    if (ex.route == Route::kHealth) return true;  // answered once read
    if (!Identify(server, ex)) return true;
    if (!post) return true;  // answered once read (AnswerGet)
    // A browser's cross-site "simple" POST (text/plain, a form) must not
    // start a generation: JSON only.
    if (!IsJson(MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                            MHD_HTTP_HEADER_CONTENT_TYPE))) {
      const absl::Status status = absl::InvalidArgumentError(
          "Content-Type: a request body must be sent as "
          "\"Content-Type: application/json\"");
      server->frontend_->Count(RouteName(ex.route), status);
      ApiError error = ApiErrorFromStatus(status, Endpoint::kOther);
      error.http_status = 415;
      error.param = "Content-Type";
      error.code = "unsupported_media_type";
      return answer(RespondError(conn, error));
    }
    const char* length = MHD_lookup_connection_value(
        conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    uint64_t bytes = 0;
    if (length != nullptr && absl::SimpleAtoi(length, &bytes) &&
        bytes > o.max_body_bytes) {
      return answer(TooLarge(server, ex));
    }
    return true;  // read the body
  }

  // The GET routes, once the request is read.
  static bool AnswerGet(OpenAiHttpServer* server, HttpExchange& ex,
                        absl::string_view url) {
    MHD_Connection* conn = ex.conn_;
    ex.answered = true;
    if (ex.route == Route::kHealth) return Health(server, conn);
    if (ex.route == Route::kModels) {
      server->frontend_->Count(kModelsRoute, absl::OkStatus());
      return Respond(conn, 200, kJson, server->frontend_->ModelsBody());
    }
    absl::StatusOr<std::string> body =
        server->frontend_->ModelBody(url.substr(11));
    server->frontend_->Count(kModelsRoute, body.status());
    if (!body.ok()) {
      return RespondError(conn,
                          ApiErrorFromStatus(body.status(), Endpoint::kOther));
    }
    return Respond(conn, 200, kJson, *body);
  }

  static bool Health(OpenAiHttpServer* server, MHD_Connection* conn) {
    if (server->frontend_->draining()) {
      return Respond(conn, 503, kText, "draining\n");
    }
    const absl::Status ready = server->frontend_->CheckAccepting();
    if (ready.ok()) return Respond(conn, 200, kText, "ok\n");
    return Respond(
        conn, 503, kText,
        absl::StrCat("not ready: ", ForClient(ready.message()), "\n"));
  }

  // Sets the caller, or answers 401 (and returns false).
  static bool Identify(OpenAiHttpServer* server, HttpExchange& ex) {
    const HttpApiOptions& o = server->options_;
    if (!o.identify) {
      ex.caller = absl::StrCat("peer:http:", PeerAddress(ex.conn_));
      return true;
    }
    const char* header = MHD_lookup_connection_value(
        ex.conn_, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    std::optional<std::string> identity = o.identify(header ? header : "");
    if (identity.has_value()) {
      ex.caller = absl::StrCat("id:", *identity);
      return true;
    }
    ex.answered = true;
    RespondError(
        ex.conn_,
        PlainError(401, "authentication_error",
                   "a valid API key is required: send "
                   "\"Authorization: Bearer <token>\"",
                   "invalid_api_key"),
        {{MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"moeserve\""}});
    return false;
  }

  static bool TooLarge(OpenAiHttpServer* server, HttpExchange& ex) {
    const absl::Status status = absl::InvalidArgumentError(absl::StrCat(
        "the request body is larger than this server takes (",
        server->options_.max_body_bytes, " bytes; --max_prompt_bytes)"));
    server->frontend_->Count(RouteName(ex.route), status);
    ApiError error = ApiErrorFromStatus(status, Endpoint::kOther);
    error.http_status = 413;
    error.code = "request_too_large";
    return RespondError(ex.conn_, error);
  }

  static Endpoint EndpointOf(Route route) {
    return route == Route::kChatCompletions ? Endpoint::kChatCompletions
                                            : Endpoint::kCompletions;
  }

  // Refuses a generation with `status`.
  static bool Refuse(OpenAiHttpServer* server, HttpExchange& ex,
                     const absl::Status& status) {
    server->frontend_->Count(RouteName(ex.route), status);
    ex.answered = true;
    return RespondError(ex.conn_,
                        ApiErrorFromStatus(status, EndpointOf(ex.route)));
  }

  // The body is in (or the connection was woken): starts the generation,
  // or answers it.
  static bool Continue(OpenAiHttpServer* server, const Holder& holder) {
    HttpExchange& ex = *holder;
    if (ex.unary != nullptr) return AnswerUnary(server, ex);
    if (ex.too_large) {
      ex.answered = true;
      return TooLarge(server, ex);
    }
    if (ex.route == Route::kTokenize || ex.route == Route::kDetokenize) {
      return AnswerTokenize(server, ex);
    }
    OpenAiFrontend* frontend = server->frontend_;
    absl::StatusOr<PreparedRequest> prepared =
        frontend->Prepare(EndpointOf(ex.route), ex.body);
    ex.body.clear();
    ex.body.shrink_to_fit();
    if (!prepared.ok()) return Refuse(server, ex, prepared.status());
    absl::StatusOr<std::vector<std::unique_ptr<GenerateCall>>> calls =
        frontend->Start(*prepared, ex.caller);
    if (!calls.ok()) return Refuse(server, ex, calls.status());
    const int n = prepared->request.n;
    ex.header = prepared->header;
    if (prepared->request.stream) {
      const char* route = RouteName(ex.route);
      ex.stream = std::make_unique<SseStream>(
          StreamEncoder(prepared->header, prepared->request.include_usage, n),
          &ex, [frontend, route](const absl::Status& status) {
            frontend->Count(route, status);
          });
    } else {
      ex.unary = std::make_unique<UnaryCompletion>(&ex, n);
    }
    if (!server->Register(holder)) {
      ex.stream.reset();  // never started: the call is dropped with it
      ex.unary.reset();
      return Refuse(server, ex,
                    absl::UnavailableError("server is shutting down"));
    }
    if (ex.unary != nullptr) {
      ex.unary->Start(*std::move(calls));
      WatchHangup(server, holder);
      return AnswerUnary(server, ex);
    }
    ex.stream->Start(*std::move(calls));
    WatchHangup(server, holder);
    return QueueStream(holder);
  }

  // /tokenize and /detokenize: answered at once (no engine step).
  static bool AnswerTokenize(OpenAiHttpServer* server, HttpExchange& ex) {
    OpenAiFrontend* frontend = server->frontend_;
    absl::StatusOr<std::string> body = ex.route == Route::kTokenize
                                           ? frontend->TokenizeBody(ex.body)
                                           : frontend->DetokenizeBody(ex.body);
    ex.body.clear();
    ex.body.shrink_to_fit();
    frontend->Count(RouteName(ex.route), body.status());
    ex.answered = true;
    if (!body.ok()) {
      return RespondError(ex.conn_,
                          ApiErrorFromStatus(body.status(), Endpoint::kOther));
    }
    return Respond(ex.conn_, 200, kJson, *body);
  }

  // libmicrohttpd does not read a parked connection: the hangup watch
  // polls its socket for the client going away. The callback holds the
  // exchange; Unregister ends the watch.
  static void WatchHangup(OpenAiHttpServer* server, const Holder& holder) {
    HttpExchange& ex = *holder;
    const MHD_ConnectionInfo* info =
        MHD_get_connection_info(ex.conn_, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (info == nullptr) return;
    server->hangups_->Add(&ex, info->connect_fd, [holder] {
      if (holder->unary != nullptr) holder->unary->ClientGone();
      if (holder->stream != nullptr) holder->stream->ClientGone();
    });
  }

  static bool QueueStream(const Holder& holder) {
    HttpExchange& ex = *holder;
    ex.answered = true;
    MHD_Response* response = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, kStreamBlockBytes, &HttpApiHandler::ReadStream,
        new Holder(holder), &HttpApiHandler::FreeStream);
    if (response == nullptr) return false;
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "text/event-stream; charset=utf-8");
    MHD_add_response_header(response, MHD_HTTP_HEADER_CACHE_CONTROL,
                            "no-cache");
    MHD_add_response_header(response, "X-Accel-Buffering", "no");
    const MHD_Result queued = MHD_queue_response(ex.conn_, 200, response);
    MHD_destroy_response(response);
    return queued == MHD_YES;
  }

  // Answers a non-streamed generation once it is over; parks until then.
  static bool AnswerUnary(OpenAiHttpServer* server, HttpExchange& ex) {
    absl::Status status;
    if (!ex.unary->DoneOrPark(&status)) return true;  // woken later
    ex.answered = true;
    const char* route = RouteName(ex.route);
    for (const v1::GenerateUnaryResponse& r : ex.unary->responses()) {
      if (!status.ok()) break;
      if (r.finish_reason() == v1::ERROR) {
        status = absl::InternalError(absl::StrCat(
            "generation failed: ",
            r.error_message().empty() ? "engine error" : r.error_message()));
      }
    }
    server->frontend_->Count(route, status);
    if (!status.ok()) {
      return RespondError(ex.conn_,
                          ApiErrorFromStatus(status, EndpointOf(ex.route)));
    }
    return Respond(ex.conn_, 200, kJson,
                   CompletionBody(ex.header, ex.unary->responses()));
  }
};

absl::StatusOr<std::unique_ptr<OpenAiHttpServer>> OpenAiHttpServer::Start(
    const HttpApiOptions& options, OpenAiFrontend* frontend) {
  if (absl::Status st = CheckOptions(options); !st.ok()) return st;
  absl::StatusOr<metrics::ListenAddress> address =
      metrics::ParseListenAddress(options.host, options.port, "--http_host: ");
  if (!address.ok()) return address.status();
  const bool tls = !options.tls_cert_pem.empty();
  if (tls && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
    return absl::UnavailableError(
        "HTTP API server: this libmicrohttpd was built without TLS");
  }
  std::unique_ptr<OpenAiHttpServer> server(
      new OpenAiHttpServer(options, frontend));
  const HttpApiOptions& o = server->options_;  // stable strings

  std::vector<MHD_OptionItem> items = metrics::DaemonOptionItems(
      o, kConnectionMemoryBytes, &*address, server->watch_.get());

  // Suspend/resume parks generations (and brings the wake-up pipe that
  // also lets Stop() end the threads at once).
  unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO |
                       MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
  if (address->ipv6) flags |= MHD_USE_IPv6;
  if (tls) flags |= MHD_USE_TLS;
  server->daemon_ = MHD_start_daemon(
      flags, static_cast<uint16_t>(o.port), nullptr, nullptr,
      &HttpApiHandler::OnRequest, server.get(), MHD_OPTION_EXTERNAL_LOGGER,
      &metrics::HttpStartLog::Log, server->start_log_.get(),
      MHD_OPTION_NOTIFY_COMPLETED, &HttpApiHandler::OnCompleted, server.get(),
      MHD_OPTION_ARRAY, items.data(), MHD_OPTION_END);
  const std::string why = server->start_log_->Close();
  if (server->daemon_ == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "HTTP API server cannot listen on ", tls ? "https" : "http", "://",
        o.host, ":", o.port, why.empty() ? "" : ": ", why));
  }
  const MHD_DaemonInfo* info =
      MHD_get_daemon_info(server->daemon_, MHD_DAEMON_INFO_BIND_PORT);
  if (info == nullptr || info->port == 0) {
    return absl::InternalError("HTTP API server: no listening port");
  }
  server->port_ = info->port;
  return server;
}

OpenAiHttpServer::OpenAiHttpServer(const HttpApiOptions& options,
                                   OpenAiFrontend* frontend)
    : options_(options),
      frontend_(frontend),
      hangups_(std::make_unique<HangupWatch>()),
      watch_(std::make_unique<metrics::ConnectionWatch>(
          options, "HTTP API", &BadContentLengthResponse)),
      start_log_(std::make_unique<metrics::HttpStartLog>(watch_.get())) {}

OpenAiHttpServer::~OpenAiHttpServer() { Stop(); }

OpenAiHttpServer::SlowCuts OpenAiHttpServer::slow_cuts() const {
  const metrics::ConnectionWatch::Cuts c = watch_->cuts();
  return {c.head, c.body, c.too_many};
}

bool OpenAiHttpServer::Register(const std::shared_ptr<HttpExchange>& ex) {
  base::MutexLock lock(&mu_);
  if (stopping_) return false;
  open_.insert(ex);
  ex->registered = true;
  return true;
}

void OpenAiHttpServer::Unregister(const std::shared_ptr<HttpExchange>& ex) {
  hangups_->Remove(ex.get());
  base::MutexLock lock(&mu_);
  open_.erase(ex);
  if (open_.empty()) no_calls_.SignalAll();
}

bool OpenAiHttpServer::WaitForOpenCalls(absl::Time deadline) {
  base::MutexLock lock(&mu_);
  const absl::Duration left = std::clamp(
      deadline - absl::Now(), absl::ZeroDuration(), absl::Hours(24 * 365));
  return no_calls_.WaitFor(
      &mu_, absl::ToChronoNanoseconds(left),
      [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return open_.empty(); });
}

int OpenAiHttpServer::open_calls() const {
  base::MutexLock lock(&mu_);
  return static_cast<int>(open_.size());
}

void OpenAiHttpServer::Stop() {
  if (daemon_ == nullptr) return;
  frontend_->StartDraining();
  std::vector<std::shared_ptr<HttpExchange>> open;
  {
    base::MutexLock lock(&mu_);
    stopping_ = true;
    open.assign(open_.begin(), open_.end());
  }
  // libmicrohttpd must not be stopped with a connection suspended: wake
  // every parked one; from now on none parks again.
  for (const std::shared_ptr<HttpExchange>& ex : open) ex->Shutdown();
  open.clear();
  // Cut streams send their error event and [DONE], woken unary requests
  // their 503: give them a moment to go out before the sockets close.
  WaitForOpenCalls(absl::Now() + kStopFlushTime);
  // Not while libmicrohttpd is still refusing a bad Content-Length
  // (metrics::ConnectionWatch::WaitForRefusedClosed): closed at once.
  watch_->WaitForRefusedClosed(std::chrono::seconds(2));
  MHD_stop_daemon(daemon_);  // closes the connections, joins the threads
  daemon_ = nullptr;
}

}  // namespace moeserve::server::openai
