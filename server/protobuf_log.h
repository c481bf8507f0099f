// libprotobuf's own log lines, bounded. libprotobuf writes an ERROR line to
// stderr for every message that fails to parse for invalid UTF-8 in a
// string field; since any client can send such messages (issue 29: 2,000
// calls, 450 KB of log in 1.3 s), they go through a LogRateLimiter here.
//
// RouteProtobufLogs() installs the handler (process-wide, once; call it at
// start, before threads parse protobuf: libprotobuf's SetLogHandler is not
// thread-safe). ProtobufLogCapture keeps this thread's libprotobuf lines
// instead of logging them, so that a parse can tell its caller why it
// failed.
#ifndef MOESERVE_SERVER_PROTOBUF_LOG_H_
#define MOESERVE_SERVER_PROTOBUF_LOG_H_

#include <string>
#include <string_view>

namespace moeserve::server {

// Installs the rate-limited handler; later calls do nothing.
void RouteProtobufLogs();

// Writes `line` (a warning) unless this kind of line was written too often
// lately: at most kProtobufLogLinesPerWindow per kProtobufLogWindow, shared
// with libprotobuf's own lines; the next line let through says how many
// were dropped.
void LogClientCausedProblem(std::string_view line);

inline constexpr int kProtobufLogLinesPerWindow = 10;
inline constexpr int kProtobufLogWindowSeconds = 10;

// While alive, libprotobuf's log lines on this thread (below FATAL) are
// appended to text() instead of being logged. Not nestable.
// REQUIRES: RouteProtobufLogs() has run.
class ProtobufLogCapture {
 public:
  ProtobufLogCapture();
  ~ProtobufLogCapture();
  ProtobufLogCapture(const ProtobufLogCapture&) = delete;
  ProtobufLogCapture& operator=(const ProtobufLogCapture&) = delete;

  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

}  // namespace moeserve::server

#endif  // MOESERVE_SERVER_PROTOBUF_LOG_H_
