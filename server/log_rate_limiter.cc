#include "server/log_rate_limiter.h"

namespace moeserve::server {

bool LogRateLimiter::Allow(absl::Time now, int64_t* suppressed) {
  base::MutexLock lock(&mu_);
  if (now - window_start_ >= window_) {
    window_start_ = now;
    lines_in_window_ = 0;
  }
  if (lines_in_window_ >= lines_per_window_) {
    ++suppressed_;
    return false;
  }
  ++lines_in_window_;
  *suppressed = suppressed_;
  suppressed_ = 0;
  return true;
}

}  // namespace moeserve::server
