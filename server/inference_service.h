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
// client. Abort, Tokenize and ListModels are callback-API unary methods
// answered inline: no method of this service takes a thread of gRPC's
// synchronous thread manager, which only server reflection uses (bounded by
// the server's ResourceQuota: grpc_server.h), so reflection streams held
// open by a client cannot starve them.
//
// Bounds: at most `max_open_calls` Generate + GenerateUnary calls are open
// at once, server-wide; more are RESOURCE_EXHAUSTED at once. A call is open
// from its reactor's creation to OnDone, so a finished call whose client
// does not read its last messages still counts (its buffered responses are
// memory the client holds on the server). Request ids and Abort are scoped
// to the caller (caller_identity.h).
//
// Every method takes its request as raw bytes and parses it itself
// (grpc_message.h): gRPC's generated handlers answer a request that does
// not parse UNIMPLEMENTED with no message, uncounted; here it is
// INVALID_ARGUMENT naming the problem ("request: not a valid
// moeserve.v1.GenerateRequest: string field ... is not valid UTF-8"),
// counted like any other answer, with a rate-limited log line.
//
// Thread-safe; does not own the host.
#ifndef MOESERVE_SERVER_INFERENCE_SERVICE_H_
#define MOESERVE_SERVER_INFERENCE_SERVICE_H_

#include <atomic>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "base/mutex.h"
#include "proto/moeserve.grpc.pb.h"
#include "server/model_host.h"
#include "server/request_validator.h"
#include "server/server_metrics.h"

namespace moeserve::server {

// Every method on the callback API, requests and responses as raw bytes.
using InferenceServiceBase = v1::Inference::WithRawCallbackMethod_Generate<
    v1::Inference::WithRawCallbackMethod_GenerateUnary<
        v1::Inference::WithRawCallbackMethod_Abort<
            v1::Inference::WithRawCallbackMethod_Tokenize<
                v1::Inference::WithRawCallbackMethod_ListModels<
                    v1::Inference::Service>>>>>;

class InferenceService final : public InferenceServiceBase {
 public:
  // Default of --max_open_streams.
  static constexpr int kDefaultMaxOpenCalls = 1024;

  // `host` and `metrics` must outlive the service. `max_open_calls` >= 1.
  InferenceService(ModelHost* host, RequestLimits limits,
                   ServerMetrics* metrics,
                   int max_open_calls = kDefaultMaxOpenCalls);

  // After this, new Generate/Tokenize calls get UNAVAILABLE; calls already
  // running go on (the server's Shutdown deadline bounds them).
  void StartDraining() { draining_.store(true); }

  // Waits until no Generate / GenerateUnary call is open, or `deadline`;
  // true when none is. What a drain waits for: an open health Watch or an
  // idle connection is not work in flight.
  bool WaitForOpenCalls(absl::Time deadline) ABSL_LOCKS_EXCLUDED(calls_mu_);
  int open_calls() const ABSL_LOCKS_EXCLUDED(calls_mu_);

  // The methods of moeserve.v1.Inference; each request is parsed first.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* GenerateUnary(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;

 private:
  friend class GenerateStreamReactor;
  friend class GenerateUnaryReactor;

  // Parses the request, runs the checks every generation runs, then the
  // host's StartGenerate. Counts the call open (CloseCall undoes it, from
  // the reactor's OnDone).
  absl::StatusOr<std::unique_ptr<GenerateCall>> StartCall(
      const grpc::CallbackServerContext& context, const grpc::ByteBuffer& raw)
      ABSL_LOCKS_EXCLUDED(calls_mu_);
  void CloseCall() ABSL_LOCKS_EXCLUDED(calls_mu_);
  absl::Status Admit(const v1::GenerateRequest& request) const;
  // The unary methods' work; their reactors only Finish with it.
  grpc::Status DoAbort(const grpc::CallbackServerContext& context,
                       const grpc::ByteBuffer& raw, grpc::ByteBuffer* response);
  grpc::Status DoTokenize(const grpc::ByteBuffer& raw,
                          grpc::ByteBuffer* response);
  grpc::Status DoListModels(const grpc::ByteBuffer& raw,
                            grpc::ByteBuffer* response);
  absl::Status CheckAccepting() const;
  // Converts, counts and returns the RPC's final status.
  grpc::Status Finish(const std::string& method, const absl::Status& status);

  ModelHost* const host_;
  const RequestLimits limits_;
  ServerMetrics* const metrics_;
  const int max_open_calls_;
  std::atomic<bool> draining_{false};
  mutable base::Mutex calls_mu_;
  base::CondVar no_calls_;  // signalled when open_calls_ drops to 0
  int open_calls_ ABSL_GUARDED_BY(calls_mu_) = 0;
};

}  // namespace moeserve::server

#endif  // MOESERVE_SERVER_INFERENCE_SERVICE_H_
