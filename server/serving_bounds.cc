#include "server/serving_bounds.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(int, max_open_streams,
          moeserve::server::ServingBounds{}.max_open_streams,
          "Most Generate + GenerateUnary calls open at once, server-wide "
          "(a call counts until its client has read its end); more are "
          "RESOURCE_EXHAUSTED. [1, 1000000]");
ABSL_FLAG(int, max_streams_per_connection,
          moeserve::server::ServingBounds{}.max_streams_per_connection,
          "HTTP/2 MAX_CONCURRENT_STREAMS: most calls of any kind open at "
          "once on one client connection. [1, 65536]");
ABSL_FLAG(int, grpc_max_threads,
          moeserve::server::ServingBounds{}.grpc_max_threads,
          "Most threads gRPC may create for synchronous handlers (only "
          "server reflection has one: each open reflection stream holds a "
          "thread); beyond it a new reflection stream is "
          "RESOURCE_EXHAUSTED. [4, 4096]");

namespace moeserve::server {
namespace {

absl::Status CheckRange(const char* flag, int value, int lo, int hi) {
  if (value >= lo && value <= hi) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--", flag, ": must be in [", lo, ", ", hi, "], got ", value));
}

}  // namespace

absl::StatusOr<ServingBounds> ServingBoundsFromFlags() {
  ServingBounds b;
  b.max_open_streams = absl::GetFlag(FLAGS_max_open_streams);
  b.max_streams_per_connection =
      absl::GetFlag(FLAGS_max_streams_per_connection);
  b.grpc_max_threads = absl::GetFlag(FLAGS_grpc_max_threads);
  if (auto st =
          CheckRange("max_open_streams", b.max_open_streams, 1, 1'000'000);
      !st.ok()) {
    return st;
  }
  if (auto st = CheckRange("max_streams_per_connection",
                           b.max_streams_per_connection, 1, 65536);
      !st.ok()) {
    return st;
  }
  if (auto st = CheckRange("grpc_max_threads", b.grpc_max_threads, 4, 4096);
      !st.ok()) {
    return st;
  }
  return b;
}

}  // namespace moeserve::server
