// The gRPC edge of moeserve: implements moeserve.v1.Inference.
//
// Each handler is thin (TF Serving's style): validate, check the server is
// accepting work, hand to the ModelHost, convert the one absl::Status to a
// grpc::Status. Order of checks, so that answers do not depend on load
// state: INVALID_ARGUMENT (bad fields) -> NOT_FOUND (unknown engine) ->
// UNAVAILABLE (draining, or no model ready).
//
// Generate and GenerateUnary use gRPC's callback API: a reactor per call
// registers a listener on the engine's stream and writes each message when
// the engine pushes it; gRPC's OnCancel (client gone, or its deadline
// passed) cancels the engine request. No thread waits or polls for a
// client. The other methods are synchronous.
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

using InferenceServiceBase = v1::Inference::WithCallbackMethod_Generate<
    v1::Inference::WithCallbackMethod_GenerateUnary<v1::Inference::Service>>;

class InferenceService final : public InferenceServiceBase {
 public:
  // `host` and `metrics` must outlive the service.
  InferenceService(ModelHost* host, RequestLimits limits,
                   ServerMetrics* metrics);

  // After this, new Generate/Tokenize calls get UNAVAILABLE; calls already
  // running go on (the server's Shutdown deadline bounds them).
  void StartDraining() { draining_.store(true); }

  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context,
      const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* GenerateUnary(
      grpc::CallbackServerContext* context, const v1::GenerateRequest* request,
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
  friend class GenerateStreamReactor;
  friend class GenerateUnaryReactor;

  // The checks every generation runs, then the host's StartGenerate.
  absl::StatusOr<std::unique_ptr<GenerateCall>> StartCall(
      const grpc::CallbackServerContext& context,
      const v1::GenerateRequest& request);
  absl::Status Admit(const v1::GenerateRequest& request) const;
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
