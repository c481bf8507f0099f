// The client tools' connection to a server: plaintext, TLS (with the
// server's CA) or mutual TLS (with a client certificate), and an optional
// bearer token attached to every call. Shared by moeserve_client and its
// tests.
#ifndef MOESERVE_TOOLS_CLIENT_CLIENT_CHANNEL_H_
#define MOESERVE_TOOLS_CLIENT_CLIENT_CHANNEL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"

namespace moeserve::client {

struct ChannelOptions {
  std::string target;         // "host:port"
  std::string tls_ca_file;    // set: TLS, verifying the server with it
  std::string tls_cert_file;  // with tls_key_file: mutual TLS
  std::string tls_key_file;
  std::string auth_token_file;  // first line sent as a bearer token
};

// A connection to a server plus what every call needs.
class ClientChannel {
 public:
  // INVALID_ARGUMENT naming the flag when a file cannot be read or the
  // combination is incomplete (a client certificate without its key).
  static absl::StatusOr<ClientChannel> Create(const ChannelOptions& options);

  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  // Adds the bearer token, if any, to a call.
  void Prepare(grpc::ClientContext* context) const;

 private:
  ClientChannel(std::shared_ptr<grpc::Channel> channel, std::string token)
      : channel_(std::move(channel)), token_(std::move(token)) {}

  std::shared_ptr<grpc::Channel> channel_;
  std::string token_;  // never printed
};

}  // namespace moeserve::client

#endif  // MOESERVE_TOOLS_CLIENT_CLIENT_CHANNEL_H_
