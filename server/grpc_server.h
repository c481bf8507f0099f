// Owns the running grpc::Server: the Inference service, the standard
// grpc.health.v1.Health service and server reflection, with the message-size
// and keepalive options of ServerOptions and the bounds of ServingBounds
// (streams per connection; a ResourceQuota capping the threads of the
// synchronous handlers: server reflection's, the only ones left that hold a
// thread per call).
//
// Health starts NOT_SERVING for both "" and "moeserve.v1.Inference"; the
// owner calls SetServing(true) once the model is loaded and warmed up.
// Thread-safe.
#ifndef MOESERVE_SERVER_GRPC_SERVER_H_
#define MOESERVE_SERVER_GRPC_SERVER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "server/inference_service.h"
#include "server/server_options.h"
#include "server/serving_bounds.h"

namespace moeserve::server {

inline constexpr char kInferenceServiceName[] = "moeserve.v1.Inference";

class GrpcServer {
 public:
  // Binds options.host:options.port; an address in use is an error.
  // `service` must outlive the server.
  // `credentials`: the listening port's (null: plaintext).
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(
      const ServerOptions& options, InferenceService* service,
      const ServingBounds& bounds = {},
      std::shared_ptr<grpc::ServerCredentials> credentials = nullptr);

  // The bound port (useful with --port=0).
  int port() const { return port_; }

  void SetServing(bool serving);

  // Graceful shutdown: health goes NOT_SERVING for good, the service refuses
  // new work (UNAVAILABLE), and the Generate calls in flight may finish
  // until `deadline`; then the gRPC server shuts down and cancels whatever
  // is still open (Generate calls left, health Watch streams, which would
  // otherwise hold an idle server for the whole drain). Returns once every
  // call has ended.
  void Shutdown(absl::Time deadline);

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
