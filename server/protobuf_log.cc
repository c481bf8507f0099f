#include "server/protobuf_log.h"

#include <mutex>

#include "absl/time/clock.h"
#include "google/protobuf/stubs/logging.h"
#include "server/log_rate_limiter.h"
#include "spdlog/spdlog.h"

namespace moeserve::server {
namespace {

thread_local std::string* capture = nullptr;

LogRateLimiter& Limiter() {
  static LogRateLimiter* limiter = new LogRateLimiter(
      kProtobufLogLinesPerWindow, absl::Seconds(kProtobufLogWindowSeconds));
  return *limiter;
}

void Handle(google::protobuf::LogLevel level, const char* filename, int line,
            const std::string& message) {
  if (level == google::protobuf::LOGLEVEL_FATAL) {
    // libprotobuf aborts after this: always said.
    spdlog::critical("libprotobuf FATAL {}:{}: {}", filename, line, message);
    spdlog::default_logger()->flush();
    return;
  }
  if (capture != nullptr) {
    if (!capture->empty()) capture->append("; ");
    capture->append(message);
    return;
  }
  LogClientCausedProblem(std::string("libprotobuf: ") + message);
}

}  // namespace

void RouteProtobufLogs() {
  static std::once_flag once;
  std::call_once(once, [] { google::protobuf::SetLogHandler(&Handle); });
}

void LogClientCausedProblem(std::string_view line) {
  int64_t suppressed = 0;
  if (!Limiter().Allow(absl::Now(), &suppressed)) return;
  if (suppressed > 0) {
    spdlog::warn("{} ({} similar lines suppressed in the last {} s)", line,
                 suppressed, kProtobufLogWindowSeconds);
  } else {
    spdlog::warn("{}", line);
  }
}

ProtobufLogCapture::ProtobufLogCapture() { capture = &text_; }

ProtobufLogCapture::~ProtobufLogCapture() { capture = nullptr; }

}  // namespace moeserve::server
