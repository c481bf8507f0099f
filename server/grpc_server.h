// Owns the running grpc::Server: the Inference service, the standard
// grpc.health.v1.Health service and server reflection, with the message-size
// and keepalive options of ServerOptions.
//
// Health starts NOT_SERVING for both "" and "moeserve.v1.Inference"; the
// owner calls SetServing(true) once the model is loaded and warmed up.
// Thread-safe.
#ifndef MOESERVE_SERVER_GRPC_SERVER_H_
#define MOESERVE_SERVER_GRPC_SERVER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/server.h"
#include "server/inference_service.h"
#include "server/server_options.h"

namespace moeserve::server {

inline constexpr char kInferenceServiceName[] = "moeserve.v1.Inference";

class GrpcServer {
 public:
  // Binds options.host:options.port; an address in use is an error.
  // `service` must outlive the server.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(
      const ServerOptions& options, InferenceService* service);

  // The bound port (useful with --port=0).
  int port() const { return port_; }

  void SetServing(bool serving);

  // Graceful shutdown: health goes NOT_SERVING for good, the service refuses
  // new work, new RPCs are refused, and in-flight RPCs may finish until
  // `drain` has passed; then the rest are cancelled. Blocks until done.
  void Shutdown(absl::Duration drain);

  // Blocks until Shutdown() has completed.
  void Wait() { server_->Wait(); }

 private:
  GrpcServer(std::unique_ptr<grpc::Server> server, InferenceService* service,
             int port)
      : server_(std::move(server)), service_(service), port_(port) {}

  std::unique_ptr<grpc::Server> server_;
  InferenceService* const service_;
  const int port_;
};

}  // namespace moeserve::server

#endif  // MOESERVE_SERVER_GRPC_SERVER_H_
