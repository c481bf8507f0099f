// The contract between the gRPC edge (inference_service.cc) and whatever
// serves the model: the engine instances, the tokenizer, the scheduler.
//
// The service validates a request, checks the server is accepting work, and
// hands the request to the ModelHost; it never generates anything itself.
// Implementations must be thread-safe: every gRPC worker thread calls in.
#ifndef MOESERVE_SERVER_MODEL_HOST_H_
#define MOESERVE_SERVER_MODEL_HOST_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/moeserve.pb.h"

namespace moeserve::server {

// One generation in flight, as API messages. Created by
// ModelHost::StartGenerate; the gRPC reactor that owns it drains it when
// told to, so no thread waits or polls for a client. Thread-safe.
class GenerateCall {
 public:
  virtual ~GenerateCall() = default;

  // `on_ready` runs (on the engine's thread, or at once when messages are
  // already waiting) each time Next may have a message; calls never
  // overlap. After SetListener(nullptr) returns no call is running or will
  // run: the owner must clear it before it goes away.
  virtual void SetListener(std::function<void()> on_ready) = 0;

  // The next message if one is ready, else false. The last one carries the
  // finish reason; `*final_status` is then the RPC's status: OK, or
  // DEADLINE_EXCEEDED when the client's deadline passed (nobody reads it).
  virtual bool Next(v1::GenerateResponse* response,
                    absl::Status* final_status) = 0;

  // The client went away (or its deadline passed): a queued request leaves
  // the queue at once, a running one at the engine's next step (a last
  // message follows either way, which nobody needs to read). Returns the
  // status the RPC ends with: DEADLINE_EXCEEDED when this is the client's
  // deadline, else CANCELLED.
  virtual absl::Status Cancel() = 0;
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

  // Queues `request` on its engine. `deadline` is the client's gRPC
  // deadline (or absl::InfiniteFuture()): past it the engine drops the
  // request (finish reason DEADLINE). `caller` (server/caller_identity.h)
  // scopes the request id: a client-given id must be unique among the
  // caller's requests in flight (ALREADY_EXISTS otherwise), and only the
  // same caller can Abort it. A non-OK status means nothing was queued
  // (e.g. a prompt over the token limit, INVALID_ARGUMENT; a full queue,
  // RESOURCE_EXHAUSTED).
  // REQUIRES: ValidateGenerateRequest(request).ok(), the engine named by
  // request.policy() exists, and CheckReady().ok().
  virtual absl::StatusOr<std::unique_ptr<GenerateCall>> StartGenerate(
      const v1::GenerateRequest& request, absl::Time deadline,
      std::string_view caller) = 0;

  // Cancels `caller`'s in-flight request with this id; false if it has
  // none (another caller's request of that id is never touched).
  virtual bool Abort(std::string_view caller, std::string_view request_id) = 0;
};

}  // namespace moeserve::server

#endif  // MOESERVE_SERVER_MODEL_HOST_H_
