// The one place where an absl::Status becomes a grpc::Status.
//
// Every handler in inference_service.cc returns ToGrpcStatus(...) of whatever
// the core answered, so status codes map the same way everywhere and error
// messages sent to clients stay bounded in length.
#ifndef MOESERVE_SERVER_GRPC_STATUS_H_
#define MOESERVE_SERVER_GRPC_STATUS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace moeserve::server {

// Longest error message sent to a client; longer ones are cut with "...".
inline constexpr size_t kMaxErrorMessageBytes = 1024;

// Maps the canonical code one-to-one and copies the message, bounded and
// without absolute paths or source locations (client_message.h).
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace moeserve::server

#endif  // MOESERVE_SERVER_GRPC_STATUS_H_
