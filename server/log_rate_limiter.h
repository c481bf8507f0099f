// A bound on how many lines one kind of log message may write: at most
// `lines_per_window` per `window`, the rest counted and reported with the
// next line let through ("... (N similar lines suppressed)"). For messages a
// client can cause at will (a request that does not parse), so that a
// flood of them cannot fill the disk or drown the other lines.
//
// Thread-safe.
#ifndef MOESERVE_SERVER_LOG_RATE_LIMITER_H_
#define MOESERVE_SERVER_LOG_RATE_LIMITER_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "base/mutex.h"

namespace moeserve::server {

class LogRateLimiter {
 public:
  // REQUIRES: lines_per_window >= 1, window > 0.
  LogRateLimiter(int lines_per_window, absl::Duration window)
      : lines_per_window_(lines_per_window), window_(window) {}

  // True when a line may be written at `now`; then `*suppressed` is the
  // number of lines refused since the last one let through. False: the
  // line is counted and must not be written.
  bool Allow(absl::Time now, int64_t* suppressed) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const int lines_per_window_;
  const absl::Duration window_;
  base::Mutex mu_;
  absl::Time window_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int lines_in_window_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t suppressed_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace moeserve::server

#endif  // MOESERVE_SERVER_LOG_RATE_LIMITER_H_
