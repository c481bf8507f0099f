// Requests and responses of moeserve.v1.Inference as raw bytes. The service
// takes every request as a grpc::ByteBuffer and parses it here, so a
// message that does not parse (invalid UTF-8 in a string field, a
// truncated or garbled message) is answered INVALID_ARGUMENT saying what
// is wrong, and counted, instead of gRPC's bare UNIMPLEMENTED (what its
// generated handlers answer to any parse failure, the same as for a method
// that does not exist).
#ifndef MOESERVE_SERVER_GRPC_MESSAGE_H_
#define MOESERVE_SERVER_GRPC_MESSAGE_H_

#include "absl/status/status.h"
#include "google/protobuf/message_lite.h"
#include "grpcpp/support/byte_buffer.h"

namespace moeserve::server {

// Parses `raw` into `message`. On failure INVALID_ARGUMENT starting with
// "request: ", naming the message type and the problem (libprotobuf's
// reason when it gives one, e.g. the string field that is not UTF-8), and
// one rate-limited log line (protobuf_log.h); `message` is then
// unspecified.
absl::Status ParseRequest(const grpc::ByteBuffer& raw,
                          google::protobuf::MessageLite* message);

// `message` as gRPC would send it.
grpc::ByteBuffer SerializeResponse(
    const google::protobuf::MessageLite& message);

}  // namespace moeserve::server

#endif  // MOESERVE_SERVER_GRPC_MESSAGE_H_
