#include "server/grpc_server.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "server/protobuf_log.h"

namespace moeserve::server {

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(
    const ServerOptions& options, InferenceService* service,
    const ServingBounds& bounds,
    std::shared_ptr<grpc::ServerCredentials> credentials) {
  // Before any thread parses a message: a client can make libprotobuf log
  // at will (a string field that is not UTF-8), so its lines are bounded.
  RouteProtobufLogs();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  grpc::ServerBuilder builder;
  const std::string address = absl::StrCat(options.host, ":", options.port);
  int bound_port = 0;
  if (credentials == nullptr) credentials = grpc::InsecureServerCredentials();
  builder.AddListeningPort(address, credentials, &bound_port);
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
  // A client that opens calls and never reads them: at most this many per
  // connection (HTTP/2 flow control holds the rest back in the client).
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             bounds.max_streams_per_connection);
  // Server reflection is the one synchronous service left: its
  // bidirectional stream holds a thread of gRPC's thread manager for as
  // long as the client keeps it open, and the manager adds threads without
  // limit (issue 16: 250 unread streams, 250 threads). With the quota
  // spent, gRPC answers a new reflection stream RESOURCE_EXHAUSTED itself.
  grpc::ResourceQuota quota("moeserve");
  quota.SetMaxThreads(bounds.grpc_max_threads);
  builder.SetResourceQuota(quota);

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

void GrpcServer::Shutdown(absl::Time deadline) {
  server_->GetHealthCheckService()->Shutdown();  // NOT_SERVING from now on
  service_->StartDraining();
  // Only generations are work worth waiting for. grpc::Server::Shutdown
  // would wait for every open call, a health Watch included, until the
  // deadline.
  service_->WaitForOpenCalls(deadline);
  server_->Shutdown(absl::ToChronoTime(absl::Now()));
}

}  // namespace moeserve::server
