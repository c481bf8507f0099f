#include "metrics/testing/slowloris.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace moeserve::metrics::testing {
namespace {

int ConnectFrom(int port, const std::string& source, absl::Duration timeout) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  const timeval tv = absl::ToTimeval(timeout);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in from = {};
  from.sin_family = AF_INET;
  inet_pton(AF_INET, source.c_str(), &from.sin_addr);
  sockaddr_in to = {};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n =
        send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// The server closed (EOF, reset) or answered (anything read).
bool ServerEnded(int fd) {
  char byte;
  const ssize_t n = recv(fd, &byte, 1, MSG_DONTWAIT);
  return n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
}

}  // namespace

Slowloris::Slowloris(int port, int connections, int addresses,
                     absl::Duration interval, std::string path)
    : port_(port),
      interval_(interval),
      request_head_(absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: x\r\n")) {
  for (int i = 0; i < connections; ++i) {
    sources_.push_back(absl::StrCat("127.0.0.", 2 + i % addresses));
    fds_.push_back(-1);
  }
  thread_ = std::thread([this] { Run(); });
}

Slowloris::~Slowloris() {
  stop_ = true;
  thread_.join();
  for (int fd : fds_) {
    if (fd >= 0) close(fd);
  }
}

void Slowloris::Run() {
  bool first = true;
  int line = 0;
  while (!stop_) {
    int open = 0;
    for (size_t i = 0; i < fds_.size() && !stop_; ++i) {
      int& fd = fds_[i];
      if (fd >= 0 && ServerEnded(fd)) {
        close(fd);
        fd = -1;
      }
      if (fd < 0) {
        fd = ConnectFrom(port_, sources_[i], absl::Milliseconds(200));
        if (fd < 0) continue;
        if (!first) ++reopened_;
        if (!SendAll(fd, request_head_)) {
          close(fd);
          fd = -1;
          continue;
        }
      } else if (!SendAll(fd, absl::StrCat("X-Line-", line, ": a\r\n"))) {
        close(fd);
        fd = -1;
        continue;
      }
      ++open;
    }
    open_ = open;
    first = false;
    ++line;
    const absl::Time next = absl::Now() + interval_;
    while (!stop_ && absl::Now() < next) absl::SleepFor(absl::Milliseconds(10));
  }
}

Probe ProbeGet(int port, const std::string& path) {
  Probe probe;
  const absl::Time start = absl::Now();
  const int fd = ConnectFrom(port, "127.0.0.1", absl::Seconds(5));
  if (fd < 0) {
    probe.latency = absl::Now() - start;
    return probe;
  }
  std::string raw;
  if (SendAll(fd, absl::StrCat("GET ", path,
                               " HTTP/1.1\r\nHost: x\r\n"
                               "Connection: close\r\n\r\n"))) {
    char buf[4096];
    for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) {
      raw.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  probe.latency = absl::Now() - start;
  const size_t split = raw.find("\r\n\r\n");
  if (raw.size() > 12 && split != std::string::npos) {
    (void)absl::SimpleAtoi(raw.substr(9, 3), &probe.status);
    probe.body = raw.substr(split + 4);
  }
  return probe;
}

}  // namespace moeserve::metrics::testing
