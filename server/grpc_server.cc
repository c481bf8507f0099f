#include "server/grpc_server.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace moeserve::server {

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(
    const ServerOptions& options, InferenceService* service) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  grpc::ServerBuilder builder;
  const std::string address = absl::StrCat(options.host, ":", options.port);
  int bound_port = 0;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(),
                           &bound_port);
  builder.RegisterService(service);
  builder.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                             options.keepalive_time_ms);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             options.keepalive_timeout_ms);
  // Let well-behaved clients ping as often as we do without a GOAWAY.
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
      std::min(options.keepalive_time_ms, 10'000));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // SO_REUSEPORT would let two servers share a port silently; a port in use
  // must be an error.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);

  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound_port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address,
                     " for gRPC (address in use or not local?)"));
  }
  auto result = std::unique_ptr<GrpcServer>(
      new GrpcServer(std::move(server), service, bound_port));
  result->SetServing(false);
  return result;
}

void GrpcServer::SetServing(bool serving) {
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  health->SetServingStatus(serving);  // every registered name, "" included
  health->SetServingStatus(kInferenceServiceName, serving);
}

void GrpcServer::Shutdown(absl::Duration drain) {
  server_->GetHealthCheckService()->Shutdown();  // NOT_SERVING from now on
  service_->StartDraining();
  server_->Shutdown(absl::ToChronoTime(absl::Now() + drain));
}

}  // namespace moeserve::server
