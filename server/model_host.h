// The contract between the gRPC edge (inference_service.cc) and whatever
// serves the model: the engine instances, the tokenizer, the scheduler.
//
// The service validates a request, checks the server is accepting work, and
// hands the request to the ModelHost; it never generates anything itself.
// Implementations must be thread-safe: every gRPC worker thread calls in.
#ifndef MOESERVE_SERVER_MODEL_HOST_H_
#define MOESERVE_SERVER_MODEL_HOST_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/moeserve.pb.h"

namespace moeserve::server {

// Where the generated messages of one request go. Owned by the caller of
// ModelHost::Generate and valid for the duration of that call.
class GenerateSink {
 public:
  virtual ~GenerateSink() = default;
  // Sends one message in order. Returns false once the client has gone away;
  // the host must then stop work on this request (finish CANCELLED).
  virtual bool Send(const v1::GenerateResponse& response) = 0;
  // True once the client cancelled or its deadline passed.
  virtual bool IsCancelled() const = 0;
};

class ModelHost {
 public:
  virtual ~ModelHost() = default;

  // OK once a model is loaded and warmed up; otherwise UNAVAILABLE saying why
  // (loading, failed to load, none configured).
  virtual absl::Status CheckReady() const = 0;

  // Names of the engine instances a request may pick with `policy`.
  virtual std::vector<std::string> EngineNames() const = 0;

  virtual v1::ListModelsResponse ListModels() const = 0;

  // REQUIRES: ValidateTokenizeRequest(request).ok() and CheckReady().ok().
  virtual absl::StatusOr<v1::TokenizeResponse> Tokenize(
      const v1::TokenizeRequest& request) = 0;

  // Runs `request` to completion, streaming into `sink`; blocks until the
  // last message (the one with finish_reason) is sent or the client is gone.
  // A non-OK status means nothing was sent (e.g. a prompt over the token
  // limit, INVALID_ARGUMENT). `deadline` is the client's gRPC deadline or
  // absl::InfiniteFuture().
  // REQUIRES: ValidateGenerateRequest(request).ok(), the engine named by
  // request.policy() exists, and CheckReady().ok().
  virtual absl::Status Generate(const v1::GenerateRequest& request,
                                absl::Time deadline, GenerateSink* sink) = 0;

  // Cancels the in-flight request with this id; false if there is none.
  virtual bool Abort(std::string_view request_id) = 0;
};

}  // namespace moeserve::server

#endif  // MOESERVE_SERVER_MODEL_HOST_H_
