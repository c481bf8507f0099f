#include "server/grpc_status.h"

#include <string>

#include "server/client_message.h"

namespace moeserve::server {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // Operators' paths and library source locations stay in the server log.
  std::string message = ForClient(status.message());
  if (message.size() > kMaxErrorMessageBytes) {
    // Cut on a UTF-8 boundary so the client never sees a broken character.
    size_t cut = kMaxErrorMessageBytes - 3;
    while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80)
      --cut;
    message.resize(cut);
    message += "...";
  }
  // absl and gRPC share the canonical code numbering (0..16).
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), message);
}

}  // namespace moeserve::server
