#include "tools/client/client_channel.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace moeserve::client {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& flag,
                                     const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": cannot read ", path));
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

}  // namespace

absl::StatusOr<ClientChannel> ClientChannel::Create(
    const ChannelOptions& options) {
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert_file and --tls_key_file: give both (mutual TLS) or "
        "neither");
  }
  if (!options.tls_cert_file.empty() && options.tls_ca_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_ca_file: required with a client certificate");
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      grpc::InsecureChannelCredentials();
  if (!options.tls_ca_file.empty()) {
    grpc::SslCredentialsOptions ssl;
    absl::StatusOr<std::string> ca =
        ReadFile("tls_ca_file", options.tls_ca_file);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *std::move(ca);
    if (!options.tls_cert_file.empty()) {
      absl::StatusOr<std::string> cert =
          ReadFile("tls_cert_file", options.tls_cert_file);
      if (!cert.ok()) return cert.status();
      absl::StatusOr<std::string> key =
          ReadFile("tls_key_file", options.tls_key_file);
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = *std::move(cert);
      ssl.pem_private_key = *std::move(key);
    }
    credentials = grpc::SslCredentials(ssl);
  }
  std::string token;
  if (!options.auth_token_file.empty()) {
    absl::StatusOr<std::string> contents =
        ReadFile("auth_token_file", options.auth_token_file);
    if (!contents.ok()) return contents.status();
    // The server's token-file format: one token per line, blank lines and
    // '#' comments skipped; the client sends the first token.
    for (absl::string_view line : absl::StrSplit(*contents, '\n')) {
      line = absl::StripAsciiWhitespace(line);
      if (line.empty() || line[0] == '#') continue;
      token = std::string(line);
      break;
    }
    if (token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--auth_token_file: ", options.auth_token_file,
                       " holds no token (only blank or '#' lines)"));
    }
  }
  return ClientChannel(grpc::CreateChannel(options.target, credentials),
                       std::move(token));
}

void ClientChannel::Prepare(grpc::ClientContext* context) const {
  if (!token_.empty()) {
    context->AddMetadata("authorization", absl::StrCat("Bearer ", token_));
  }
}

}  // namespace moeserve::client
