// The gRPC edge of moeserve: implements moeserve.v1.Inference.
//
// Each handler is thin (TF Serving's style): validate, check the server is
// accepting work, hand to the ModelHost, convert the one absl::Status to a
// grpc::Status. Order of checks, so that answers do not depend on load
// state: INVALID_ARGUMENT (bad fields) -> NOT_FOUND (unknown engine) ->
// UNAVAILABLE (draining, or no model ready).
//
// Thread-safe; does not own the host.
#ifndef MOESERVE_SERVER_INFERENCE_SERVICE_H_
#define MOESERVE_SERVER_INFERENCE_SERVICE_H_

#include <atomic>

#include "absl/status/status.h"
#include "proto/moeserve.grpc.pb.h"
#include "server/model_host.h"
#include "server/request_validator.h"
#include "server/server_metrics.h"

namespace moeserve::server {

class InferenceService final : public v1::Inference::Service {
 public:
  // `host` and `metrics` must outlive the service.
  InferenceService(ModelHost* host, RequestLimits limits,
                   ServerMetrics* metrics);

  // After this, new Generate/Tokenize calls get UNAVAILABLE; calls already
  // running go on (the server's Shutdown deadline bounds them).
  void StartDraining() { draining_.store(true); }

  grpc::Status Generate(
      grpc::ServerContext* context, const v1::GenerateRequest* request,
      grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status GenerateUnary(grpc::ServerContext* context,
                             const v1::GenerateRequest* request,
                             v1::GenerateUnaryResponse* response) override;
  grpc::Status Abort(grpc::ServerContext* context,
                     const v1::AbortRequest* request,
                     v1::AbortResponse* response) override;
  grpc::Status Tokenize(grpc::ServerContext* context,
                        const v1::TokenizeRequest* request,
                        v1::TokenizeResponse* response) override;
  grpc::Status ListModels(grpc::ServerContext* context,
                          const v1::ListModelsRequest* request,
                          v1::ListModelsResponse* response) override;

 private:
  // The checks every generation runs before it reaches the host.
  absl::Status Admit(const v1::GenerateRequest& request) const;
  absl::Status RunGenerate(grpc::ServerContext* context,
                           const v1::GenerateRequest& request,
                           GenerateSink* sink);
  absl::Status CheckAccepting() const;
  // Converts, counts and returns the RPC's final status.
  grpc::Status Finish(const std::string& method, const absl::Status& status);

  ModelHost* const host_;
  const RequestLimits limits_;
  ServerMetrics* const metrics_;
  std::atomic<bool> draining_{false};
};

}  // namespace moeserve::server

#endif  // MOESERVE_SERVER_INFERENCE_SERVICE_H_
