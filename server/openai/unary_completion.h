// UnaryCompletion: one non-streamed generation, answered when it is done.
//
// A GenerateUnaryPump (server/generate_pump.h) collects the engine's
// messages; meanwhile the HTTP connection is parked (ConnectionParking), so
// a long generation holds no thread, and the pump's Finish wakes it to send
// the answer.
//
// A parked connection does not notice its client leaving (libmicrohttpd
// stops reading it): the server's HangupWatch (hangup_watch.h) watches its
// socket and calls ClientGone(), which cancels the engine request at its
// next step and wakes the connection to be closed. (A streamed request
// notices at its next event: sse_stream.h.)
//
// Lock order: the pump's lock, then mu_. Thread-safe.
#ifndef MOESERVE_SERVER_OPENAI_UNARY_COMPLETION_H_
#define MOESERVE_SERVER_OPENAI_UNARY_COMPLETION_H_

#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "base/mutex.h"
#include "proto/moeserve.pb.h"
#include "server/generate_pump.h"
#include "server/model_host.h"
#include "server/openai/connection_parking.h"

namespace moeserve::server::openai {

class UnaryCompletion final : private UnaryTransport {
 public:
  // `parking` must outlive this.
  explicit UnaryCompletion(ConnectionParking* parking);
  UnaryCompletion(const UnaryCompletion&) = delete;
  UnaryCompletion& operator=(const UnaryCompletion&) = delete;
  ~UnaryCompletion() override;  // Close(false)s

  void Start(std::unique_ptr<GenerateCall> call) ABSL_LOCKS_EXCLUDED(mu_);

  // From the connection's request handler: true when the generation is
  // over (`*status`: how it ended; response() is complete), or the server
  // is stopping (UNAVAILABLE); else parks the connection and returns false
  // (the handler runs again once woken).
  bool DoneOrPark(absl::Status* status) ABSL_LOCKS_EXCLUDED(mu_);

  // REQUIRES: DoneOrPark() returned true with an OK status.
  const v1::GenerateUnaryResponse& response() const { return response_; }

  // The client hung up while waiting: cancels the engine request unless
  // it is over or the connection closed; Finish then wakes the connection
  // (its answer, CANCELLED, goes nowhere). Any thread.
  void ClientGone() ABSL_LOCKS_EXCLUDED(mu_);

  // The server is stopping: wakes a parked connection.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  // The connection is done: cancels the engine request unless it is over;
  // then no engine callback runs any more. Idempotent.
  void Close() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // UnaryTransport: called by the pump with its lock held.
  void Finish(const absl::Status& status) override ABSL_LOCKS_EXCLUDED(mu_);

  ConnectionParking* const parking_;
  base::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  bool parked_ ABSL_GUARDED_BY(mu_) = false;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  // Filled by the pump before its Finish; read after done_.
  v1::GenerateUnaryResponse response_;
  GenerateUnaryPump pump_;  // last: destroyed first, after Close
};

}  // namespace moeserve::server::openai

#endif  // MOESERVE_SERVER_OPENAI_UNARY_COMPLETION_H_
