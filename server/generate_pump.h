// GenerateStreamPump and GenerateUnaryPump: what a Generate / GenerateUnary
// call does between the engine and the transport, without gRPC types, so
// that the same code runs under the gRPC reactors (inference_service.cc)
// and under a test transport that ThreadSanitizer can see whole (Debian's
// gRPC is not TSan-instrumented).
//
// A pump owns the call's GenerateCall, registers a listener on it (run on
// the engine's thread each time a message is ready) and turns messages into
// transport writes: at most one write in flight (gRPC's rule), the last
// message followed by exactly one Finish. The transport reports completed
// writes (OnWriteDone) and cancellation (OnCancel) from its own threads.
// Before the transport frees the pump it calls Detach(); after that the
// listener never runs again. When the client goes (OnCancel, a failed
// write) the pump finishes the transport as soon as no write is in flight,
// without waiting for the engine's last message: a server shutting down
// cancels every call and must not wait for an engine step (seconds on a
// slow link) to end them.
//
// Lock order: the stream's listener lock (held while the listener runs),
// then the pump's mu_, then the stream's own lock (inside Next). The stream
// pump decides under mu_ what the transport does next (marking the write in
// flight, or the call finished, so no other reaction decides it too) and
// calls the transport after releasing mu_: gRPC completes a loopback write
// before StartWrite returns and runs OnWriteDone on another thread at once,
// which, with mu_ still held, blocked on it and had to be woken a second
// time for every token. The unary pump calls Finish with mu_ held. Either
// way a transport method must not call back into the pump before it
// returns.
#ifndef MOESERVE_SERVER_GENERATE_PUMP_H_
#define MOESERVE_SERVER_GENERATE_PUMP_H_

#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "proto/moeserve.pb.h"
#include "server/model_host.h"

namespace moeserve::server {

// The transport side of a streaming call.
class StreamTransport {
 public:
  virtual ~StreamTransport() = default;
  // Sends `*response` (valid until the pump's OnWriteDone).
  virtual void StartWrite(const v1::GenerateResponse* response) = 0;
  // Ends the call; called once.
  virtual void Finish(const absl::Status& status) = 0;
};

// The transport side of a unary call.
class UnaryTransport {
 public:
  virtual ~UnaryTransport() = default;
  // Ends the call; the response given to the pump is complete. Called once.
  virtual void Finish(const absl::Status& status) = 0;
};

// Shared by both pumps: the call, its lock and whether the client left.
class PumpBase {
 public:
  virtual ~PumpBase() = default;
  // Transport: the client cancelled, or its deadline passed (or the server
  // is shutting down). The engine drops the request (finish reason
  // CANCELLED, or DEADLINE near the deadline); the call ends at once with
  // CANCELLED / DEADLINE_EXCEEDED (after the write in flight, if any).
  virtual void OnCancel() ABSL_LOCKS_EXCLUDED(mu_) = 0;
  // Transport, before freeing the pump: no listener call runs afterwards,
  // and every earlier reaction happens before this returns.
  void Detach() ABSL_LOCKS_EXCLUDED(mu_);

 protected:
  // Owns `call` and registers OnReady as its listener (may run at once);
  // a call that could not start ends the transport with its status.
  void StartPump(absl::StatusOr<std::unique_ptr<GenerateCall>> call)
      ABSL_LOCKS_EXCLUDED(mu_);
  virtual void OnReady() ABSL_LOCKS_EXCLUDED(mu_) = 0;
  // The transport's one Finish.
  virtual void FinishTransport(const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;

  base::Mutex mu_;
  std::unique_ptr<GenerateCall> call_ ABSL_GUARDED_BY(mu_);
  bool client_gone_ ABSL_GUARDED_BY(mu_) = false;
  // With client_gone_: what GenerateCall::Cancel said the call ends with.
  absl::Status gone_status_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;

  // Marks the client gone and cancels the engine request (once).
  void ClientGoneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
};

class GenerateStreamPump final : public PumpBase {
 public:
  // `transport` must outlive the pump.
  explicit GenerateStreamPump(StreamTransport* transport)
      : transport_(transport) {}

  // `call`: ModelHost::StartGenerate's result; an error finishes at once.
  void Start(absl::StatusOr<std::unique_ptr<GenerateCall>> call) {
    StartPump(std::move(call));
  }
  // Transport: the write started last completed (`ok`: it reached the
  // client; false: the client is gone).
  void OnWriteDone(bool ok) ABSL_LOCKS_EXCLUDED(mu_);
  void OnCancel() override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // The transport call a reaction decided on, made after mu_ is released.
  struct Action {
    enum Kind { kNone, kWrite, kFinish } kind = kNone;
    const v1::GenerateResponse* response = nullptr;  // kWrite
    absl::Status status;                             // kFinish
  };

  void OnReady() override ABSL_LOCKS_EXCLUDED(mu_);
  // Only for StartPump's refusal; every other Finish goes through Perform.
  void FinishTransport(const absl::Status& status) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    transport_->Finish(status);
  }
  Action NextActionLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Action FinishLocked(const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a kFinish the transport may free the pump: nothing follows it.
  void Perform(const Action& action) ABSL_LOCKS_EXCLUDED(mu_);

  StreamTransport* const transport_;
  v1::GenerateResponse response_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool last_written_ ABSL_GUARDED_BY(mu_) = false;
};

class GenerateUnaryPump final : public PumpBase {
 public:
  // `transport` and `response` must outlive the pump; `response` is filled
  // before transport->Finish.
  GenerateUnaryPump(UnaryTransport* transport,
                    v1::GenerateUnaryResponse* response)
      : transport_(transport), out_(response) {}

  // `call`: ModelHost::StartGenerate's result; an error finishes at once.
  void Start(absl::StatusOr<std::unique_ptr<GenerateCall>> call) {
    StartPump(std::move(call));
  }
  void OnCancel() override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void OnReady() override ABSL_LOCKS_EXCLUDED(mu_);
  void FinishTransport(const absl::Status& status) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    transport_->Finish(status);
  }
  void AppendLocked(const v1::GenerateResponse& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  UnaryTransport* const transport_;
  v1::GenerateUnaryResponse* const out_;
};

}  // namespace moeserve::server

#endif  // MOESERVE_SERVER_GENERATE_PUMP_H_
