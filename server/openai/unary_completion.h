// UnaryCompletion: one non-streamed request of n choices, answered when
// all are done.
//
// A GenerateUnaryPump (server/generate_pump.h) per choice collects the
// engine's messages of that choice's call; meanwhile the HTTP connection is
// parked (ConnectionParking), so a long generation holds no thread, and the
// last choice's Finish wakes it to send the answer. A choice that fails does
// not stop the others (the request fails once all are done).
//
// A parked connection does not notice its client leaving (libmicrohttpd
// stops reading it): the server's HangupWatch (hangup_watch.h) watches its
// socket and calls ClientGone(), which cancels the engine request at its
// next step and wakes the connection to be closed. (A streamed request
// notices at its next event: sse_stream.h.)
//
// Lock order: a pump's lock, then mu_; never two pumps' locks. Thread-safe.
#ifndef MOESERVE_SERVER_OPENAI_UNARY_COMPLETION_H_
#define MOESERVE_SERVER_OPENAI_UNARY_COMPLETION_H_

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "base/mutex.h"
#include "proto/moeserve.pb.h"
#include "server/generate_pump.h"
#include "server/model_host.h"
#include "server/openai/connection_parking.h"

namespace moeserve::server::openai {

class UnaryCompletion final {
 public:
  // `parking` must outlive this; `n` >= 1 choices.
  explicit UnaryCompletion(ConnectionParking* parking, int n = 1);
  UnaryCompletion(const UnaryCompletion&) = delete;
  UnaryCompletion& operator=(const UnaryCompletion&) = delete;
  ~UnaryCompletion();  // Close()s

  // The calls of the n choices, in order. REQUIRES: calls.size() == n.
  void Start(std::vector<std::unique_ptr<GenerateCall>> calls)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Start(std::unique_ptr<GenerateCall> call) ABSL_LOCKS_EXCLUDED(mu_);

  // From the connection's request handler: true when every choice is over
  // (`*status`: OK, or the first failure; responses() complete), or the
  // server is stopping (UNAVAILABLE); else parks the connection and returns
  // false (the handler runs again once woken).
  bool DoneOrPark(absl::Status* status) ABSL_LOCKS_EXCLUDED(mu_);

  // REQUIRES: DoneOrPark() returned true with an OK status.
  absl::Span<const v1::GenerateUnaryResponse> responses() const {
    return responses_;
  }
  const v1::GenerateUnaryResponse& response() const { return responses_[0]; }

  // The client hung up while waiting: cancels the engine requests unless
  // they are over or the connection closed; the last Finish then wakes the
  // connection (its answer, CANCELLED, goes nowhere). Any thread.
  void ClientGone() ABSL_LOCKS_EXCLUDED(mu_);

  // The server is stopping: wakes a parked connection.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  // The connection is done: cancels the engine requests unless they are
  // over; then no engine callback runs any more. Idempotent.
  void Close() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // One choice's transport: its pump's Finish reaches FinishChoice.
  class Choice final : public UnaryTransport {
   public:
    Choice(UnaryCompletion* owner, v1::GenerateUnaryResponse* response)
        : owner_(owner), pump(this, response) {}
    // Called by the pump with its lock held.
    void Finish(const absl::Status& status) override {
      owner_->FinishChoice(status);
    }

   private:
    UnaryCompletion* const owner_;

   public:
    GenerateUnaryPump pump;  // after owner_, which its Finish uses
  };

  void FinishChoice(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);

  ConnectionParking* const parking_;
  base::Mutex mu_;
  int finished_ ABSL_GUARDED_BY(mu_) = 0;  // choices
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  bool parked_ ABSL_GUARDED_BY(mu_) = false;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  // Filled by the pumps before their Finish; read after done_.
  std::vector<v1::GenerateUnaryResponse> responses_;
  // Last: destroyed first, after Close.
  std::vector<std::unique_ptr<Choice>> choices_;
};

}  // namespace moeserve::server::openai

#endif  // MOESERVE_SERVER_OPENAI_UNARY_COMPLETION_H_
