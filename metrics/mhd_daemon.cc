#include "metrics/mhd_daemon.h"

#include <arpa/inet.h>
#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace moeserve::metrics {

void HttpStartLog::Log(void* self, const char* format, va_list args) {
  auto* log = static_cast<HttpStartLog*>(self);
  // libmicrohttpd 0.9.75's "Too large value of 'Content-Length' header."
  // and "Failed to parse `Content-Length' header." (connection.c,
  // parse_connection_headers), logged just before it refuses the request.
  if (log->watch_ != nullptr && format != nullptr &&
      std::strstr(format, "Content-Length' header") != nullptr) {
    log->watch_->OnBadContentLength();
  }
  log->Append(format, args);
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

ConnectionWatch::ConnectionWatch(
    const HttpListenerOptions& options, std::string name,
    std::function<std::string(int status)> bad_length_response)
    : head_timeout_(std::chrono::seconds(options.head_timeout_s)),
      min_body_bytes_per_s_(options.min_body_bytes_per_s),
      max_half_received_(static_cast<size_t>(MaxHalfReceived(options))),
      max_connections_(static_cast<size_t>(options.max_connections)),
      name_(std::move(name)),
      bad_length_response_(std::move(bad_length_response)),
      last_log_(Clock::now() - std::chrono::hours(1)),
      thread_([this] { Run(); }) {}

ConnectionWatch::~ConnectionWatch() {
  {
    base::MutexLock lock(&mu_);
    stopping_ = true;
    wake_.SignalAll();
  }
  thread_.join();
}

void ConnectionWatch::OnConnection(void* self, MHD_Connection* conn,
                                   void** /*socket_context*/, int code) {
  auto* watch = static_cast<ConnectionWatch*>(self);
  if (code == MHD_CONNECTION_NOTIFY_STARTED) watch->Started(conn);
  if (code == MHD_CONNECTION_NOTIFY_CLOSED) watch->Closed(conn);
}

void ConnectionWatch::Started(MHD_Connection* conn) {
  const MHD_ConnectionInfo* info =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  Tracked t;
  t.fd = info != nullptr ? info->connect_fd : -1;
  t.thread = std::this_thread::get_id();
  t.began = Clock::now();
  base::MutexLock lock(&mu_);
  conns_[conn] = t;
  CapLocked();
  // Over max_connections (libmicrohttpd's own limit sits above it, see
  // ConnectionHeadroom): a connection still arriving makes room, the one
  // that began first; with none, this one is turned away, as
  // libmicrohttpd would at its limit. So a fresh client gets in while the
  // slots are held by half-sent requests, even before their cut sockets
  // are closed.
  size_t live = 0;
  Tracked* oldest_arriving = nullptr;
  for (auto& [c, other] : conns_) {
    if (other.cut) continue;
    ++live;
    if (c != conn && other.phase != Phase::kAnswering &&
        (oldest_arriving == nullptr || other.began < oldest_arriving->began)) {
      oldest_arriving = &other;
    }
  }
  if (live > max_connections_) {
    CutLocked(oldest_arriving != nullptr ? oldest_arriving : &conns_[conn],
              &cuts_.too_many);
  }
}

void ConnectionWatch::Closed(MHD_Connection* conn) {
  // Before libmicrohttpd closes the socket: once this returns the fd is
  // never touched again, so a reused number is safe.
  base::MutexLock lock(&mu_);
  auto it = conns_.find(conn);
  if (it == conns_.end()) return;
  if (it->second.refused && --refused_open_ == 0) refused_closed_.SignalAll();
  conns_.erase(it);
}

void ConnectionWatch::HeadReceived(MHD_Connection* conn) {
  base::MutexLock lock(&mu_);
  auto it = conns_.find(conn);
  if (it == conns_.end()) return;
  it->second.phase = Phase::kBody;
  it->second.body_began = Clock::now();
  it->second.body_bytes = 0;
}

void ConnectionWatch::BodyBytes(MHD_Connection* conn, size_t bytes) {
  base::MutexLock lock(&mu_);
  auto it = conns_.find(conn);
  if (it != conns_.end()) it->second.body_bytes += bytes;
}

void ConnectionWatch::RequestReceived(MHD_Connection* conn) {
  base::MutexLock lock(&mu_);
  auto it = conns_.find(conn);
  if (it != conns_.end()) it->second.phase = Phase::kAnswering;
}

void ConnectionWatch::RequestCompleted(MHD_Connection* conn) {
  base::MutexLock lock(&mu_);
  auto it = conns_.find(conn);
  if (it == conns_.end()) return;
  it->second.phase = Phase::kHead;  // the next request's, keep-alive
  it->second.began = Clock::now();
}

void ConnectionWatch::OnBadContentLength() {
  const std::thread::id me = std::this_thread::get_id();
  std::vector<std::pair<MHD_Connection*, int>> refused;  // conn, status
  {
    base::MutexLock lock(&mu_);
    for (auto& [conn, t] : conns_) {
      // Only this thread's connections, whose headers no other thread
      // writes while we read them; of those, the one whose head is in but
      // not yet handed to the access handler: the one being refused now.
      if (t.thread != me || t.phase != Phase::kHead || t.cut) continue;
      if (MHD_get_connection_info(
              conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE) == nullptr) {
        continue;  // head still arriving
      }
      const int status = BadContentLengthStatus(conn);
      if (status == 0) continue;
      t.cut = true;
      t.refused = true;
      ++refused_open_;
      ++cuts_.bad_length;
      refused.emplace_back(conn, status);
    }
  }
  for (const auto& [conn, status] : refused) {
    SendRawResponse(conn, bad_length_response_(status));
    // libmicrohttpd's own answer, built next, then fails to go out; it
    // closes the connection (Closed() then forgets it).
    const MHD_ConnectionInfo* info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (info != nullptr) shutdown(info->connect_fd, SHUT_RDWR);
  }
}

bool ConnectionWatch::WaitForRefusedClosed(std::chrono::milliseconds timeout) {
  base::MutexLock lock(&mu_);
  return refused_closed_.WaitFor(&mu_, timeout,
                                 [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                                   return refused_open_ == 0;
                                 });
}

ConnectionWatch::Cuts ConnectionWatch::cuts() const {
  base::MutexLock lock(&mu_);
  return cuts_;
}

void ConnectionWatch::Run() {
  base::MutexLock lock(&mu_);
  while (!stopping_) {
    wake_.WaitFor(&mu_, std::chrono::milliseconds(200),
                  [this]()
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; });
    if (stopping_) break;
    const Clock::time_point now = Clock::now();
    CheckLocked(now);
    CapLocked();
    LogLocked(now);
  }
}

void ConnectionWatch::CheckLocked(Clock::time_point now) {
  for (auto& [conn, t] : conns_) {
    if (t.cut) continue;
    if (t.phase == Phase::kHead && now - t.began > head_timeout_) {
      CutLocked(&t, &cuts_.head);
    } else if (t.phase == Phase::kBody && now - t.body_began > head_timeout_) {
      const double late =
          std::chrono::duration<double>(now - t.body_began - head_timeout_)
              .count();
      if (static_cast<double>(t.body_bytes) < late * min_body_bytes_per_s_) {
        CutLocked(&t, &cuts_.body);
      }
    }
  }
}

void ConnectionWatch::CapLocked() {
  std::vector<Tracked*> arriving;
  for (auto& [conn, t] : conns_) {
    if (!t.cut && t.phase != Phase::kAnswering) arriving.push_back(&t);
  }
  if (arriving.size() <= max_half_received_) return;
  const size_t over = arriving.size() - max_half_received_;
  std::partial_sort(
      arriving.begin(), arriving.begin() + static_cast<ptrdiff_t>(over),
      arriving.end(),
      [](const Tracked* a, const Tracked* b) { return a->began < b->began; });
  for (size_t i = 0; i < over; ++i) CutLocked(arriving[i], &cuts_.too_many);
}

void ConnectionWatch::CutLocked(Tracked* t, int* counter) {
  // shutdown, not close: the socket stays libmicrohttpd's, which sees the
  // end at its next read and closes it (Closed() then forgets it).
  if (t->fd >= 0) shutdown(t->fd, SHUT_RDWR);
  t->cut = true;
  ++*counter;
}

void ConnectionWatch::LogLocked(Clock::time_point now) {
  const Cuts& c = cuts_;
  const int new_cuts = (c.head - logged_.head) + (c.body - logged_.body) +
                       (c.too_many - logged_.too_many);
  if (new_cuts == 0 || now - last_log_ < std::chrono::seconds(10)) return;
  spdlog::warn(
      "{} port: cut {} connection(s) whose requests arrived too slowly: {} "
      "past the {} s head deadline, {} below {} B/s of body, {} over the "
      "cap of {} requests arriving at once (logged at most every 10 s)",
      name_, new_cuts, c.head - logged_.head,
      std::chrono::duration_cast<std::chrono::seconds>(head_timeout_).count(),
      c.body - logged_.body, min_body_bytes_per_s_,
      c.too_many - logged_.too_many, max_half_received_);
  logged_ = c;
  last_log_ = now;
}

int ConnectionHeadroom(const HttpListenerOptions& options) {
  return std::max(8, options.max_connections / 8);
}

int MaxHalfReceived(const HttpListenerOptions& options) {
  return options.max_half_received > 0
             ? options.max_half_received
             : std::max(1, options.max_connections / 4);
}

namespace {

// MHD_OPTION_NOTIFY_CONNECTION's exact type (the header does not bring
// libmicrohttpd's enum).
void NotifyConnection(void* watch, MHD_Connection* conn, void** context,
                      enum MHD_ConnectionNotificationCode code) {
  ConnectionWatch::OnConnection(watch, conn, context, static_cast<int>(code));
}

}  // namespace

std::vector<MHD_OptionItem> DaemonOptionItems(
    const HttpListenerOptions& options, size_t connection_memory_bytes,
    ListenAddress* address, ConnectionWatch* watch) {
  // Every option bounds what a client can hold (metrics/README.md).
  std::vector<MHD_OptionItem> items = {
      {MHD_OPTION_THREAD_POOL_SIZE, options.threads, nullptr},
      {MHD_OPTION_CONNECTION_TIMEOUT, options.idle_timeout_s, nullptr},
      {MHD_OPTION_CONNECTION_LIMIT,
       options.max_connections + ConnectionHeadroom(options), nullptr},
      {MHD_OPTION_PER_IP_CONNECTION_LIMIT, options.max_connections_per_ip,
       nullptr},
      {MHD_OPTION_CONNECTION_MEMORY_LIMIT,
       static_cast<intptr_t>(connection_memory_bytes), nullptr},
      {MHD_OPTION_SOCK_ADDR, 0, &address->storage},
      {MHD_OPTION_NOTIFY_CONNECTION,
       reinterpret_cast<intptr_t>(&NotifyConnection), watch},
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

int BadContentLengthStatus(MHD_Connection* conn) {
  if (MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                  MHD_HTTP_HEADER_TRANSFER_ENCODING) !=
      nullptr) {
    return 0;  // libmicrohttpd ignores Content-Length then
  }
  const char* value = MHD_lookup_connection_value(
      conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
  if (value == nullptr) return 0;
  // MHD_str_to_uint64_n_: the leading decimal digits, none on overflow;
  // the whole value must be digits.
  const absl::string_view digits(value);
  size_t n_digits = 0;
  uint64_t n = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') break;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (n > (UINT64_MAX - d) / 10) return 413;  // overflows: too large
    n = n * 10 + d;
    ++n_digits;
  }
  return n_digits == digits.size() && n_digits > 0 ? 0 : 400;
}

bool SendRawResponse(MHD_Connection* conn, absl::string_view response) {
  const MHD_ConnectionInfo* tls =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
  const MHD_ConnectionInfo* fd =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  // A few hundred bytes on a connection that has been sent nothing yet:
  // the socket buffer takes them (the socket is non-blocking; a short retry
  // covers EAGAIN).
  size_t sent = 0;
  for (int tries = 0; sent < response.size() && tries < 20; ++tries) {
    ssize_t n;
    if (tls != nullptr && tls->tls_session != nullptr) {
      n = gnutls_record_send(static_cast<gnutls_session_t>(tls->tls_session),
                             response.data() + sent, response.size() - sent);
    } else if (fd != nullptr) {
      n = send(fd->connect_fd, response.data() + sent, response.size() - sent,
               MSG_NOSIGNAL);
    } else {
      return false;
    }
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else {
      usleep(1000);
    }
  }
  return sent == response.size();
}

}  // namespace moeserve::metrics
