#include "server/grpc_message.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "server/protobuf_log.h"

namespace moeserve::server {
namespace {

// libprotobuf's reason ("String field 'moeserve.v1.X.prompt' contains
// invalid UTF-8 data when parsing a protocol buffer. Use the 'bytes' type
// if you intend to send raw bytes. "), else what is left to suppose.
std::string Reason(const std::string& protobuf_log, size_t size) {
  const size_t field = protobuf_log.find("String field '");
  if (field != std::string::npos &&
      protobuf_log.find("invalid UTF-8") != std::string::npos) {
    const size_t start = field + 14;
    const size_t end = protobuf_log.find('\'', start);
    if (end != std::string::npos) {
      return absl::StrCat("string field ",
                          protobuf_log.substr(start, end - start),
                          " is not valid UTF-8");
    }
  }
  if (!protobuf_log.empty()) return protobuf_log;
  return absl::StrCat("the ", size,
                      " bytes are not a complete protobuf message (truncated "
                      "or not protobuf)");
}

}  // namespace

absl::Status ParseRequest(const grpc::ByteBuffer& raw,
                          google::protobuf::MessageLite* message) {
  RouteProtobufLogs();
  grpc::ByteBuffer copy(raw);  // shares the slices
  bool parsed = false;
  std::string protobuf_log;
  {
    ProtobufLogCapture capture;
    grpc::ProtoBufferReader reader(&copy);
    parsed = reader.status().ok() && message->ParseFromZeroCopyStream(&reader);
    protobuf_log = capture.text();
  }
  if (parsed) return absl::OkStatus();
  const std::string reason = Reason(protobuf_log, raw.Length());
  LogClientCausedProblem(absl::StrCat("gRPC request does not parse as ",
                                      message->GetTypeName(), ": ", reason));
  return absl::InvalidArgumentError(absl::StrCat(
      "request: not a valid ", message->GetTypeName(), ": ", reason));
}

grpc::ByteBuffer SerializeResponse(
    const google::protobuf::MessageLite& message) {
  grpc::ByteBuffer buffer;
  bool own_buffer = false;
  // Fails only for a message over 2 GiB, which no response comes near.
  grpc::SerializationTraits<google::protobuf::MessageLite>::Serialize(
      message, &buffer, &own_buffer)
      .IgnoreError();
  return buffer;
}

}  // namespace moeserve::server
