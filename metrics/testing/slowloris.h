// Slowloris for tests of the HTTP ports (issue 29): many connections, from
// several loopback addresses, that each send half a request and then one
// header line at a time, never finishing; a connection the server cuts is
// opened again at the next tick. And a probe that times a fresh client's
// GET from 127.0.0.1.
#ifndef MOESERVE_METRICS_TESTING_SLOWLORIS_H_
#define MOESERVE_METRICS_TESTING_SLOWLORIS_H_

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"

namespace moeserve::metrics::testing {

class Slowloris {
 public:
  // `connections` to 127.0.0.1:`port`, spread evenly over the source
  // addresses 127.0.0.2 .. 127.0.0.(1 + addresses); a header line on each
  // every `interval`. Starts at once; the destructor stops and closes.
  Slowloris(int port, int connections, int addresses, absl::Duration interval,
            std::string path = "/health");
  ~Slowloris();
  Slowloris(const Slowloris&) = delete;
  Slowloris& operator=(const Slowloris&) = delete;

  // Connections opened again after the server cut them.
  int reopened() const { return reopened_.load(); }
  // Connections open at the last tick.
  int open() const { return open_.load(); }

 private:
  void Run();

  const int port_;
  const absl::Duration interval_;
  const std::string request_head_;
  std::vector<std::string> sources_;  // per connection
  std::vector<int> fds_;              // per connection; -1: closed
  std::atomic<bool> stop_{false};
  std::atomic<int> reopened_{0};
  std::atomic<int> open_{0};
  std::thread thread_;
};

struct Probe {
  int status = 0;  // 0: no answer (refused, closed, or 5 s without one)
  absl::Duration latency;
  std::string body;
};

// A fresh client's "GET `path` HTTP/1.1" (Connection: close) to
// 127.0.0.1:`port`, from 127.0.0.1; gives up after 5 s.
Probe ProbeGet(int port, const std::string& path);

}  // namespace moeserve::metrics::testing

#endif  // MOESERVE_METRICS_TESTING_SLOWLORIS_H_
