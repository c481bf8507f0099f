// SseStream: one streamed request of n choices as server-sent events,
// pulled by the HTTP layer as the connection can take them.
//
// A GenerateStreamPump (server/generate_pump.h) per choice drives it as
// that choice's transport: each engine message becomes events
// (response_json.h, carrying the choice's index) in one buffer, and a
// pump's write completes once the HTTP layer has taken the whole buffer,
// so the engine's messages wait in the calls, not here. When nothing is
// buffered, Read parks the connection (ConnectionParking) and the next
// message wakes it. The end, once every choice finished: the final
// chunk(s), then "data: [DONE]"; a stream whose choice fails after it
// started sends an error event before [DONE] (the other choices run on).
//
// A client that goes away (Close(false): libmicrohttpd's request-completed
// notification with any code but COMPLETED_OK, after a failed write; or
// ClientGone(): the hangup seen on the parked socket) cancels the engine
// requests, so their sequences and KV blocks are freed at the engine's
// next step.
//
// Lock order: the call's listener lock, then its pump's, then mu_ (the
// pumps' transport calls take mu_); Read and Close call into the pumps
// without mu_, one at a time. Thread-safe.
#ifndef MOESERVE_SERVER_OPENAI_SSE_STREAM_H_
#define MOESERVE_SERVER_OPENAI_SSE_STREAM_H_

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "base/mutex.h"
#include "server/generate_pump.h"
#include "server/model_host.h"
#include "server/openai/connection_parking.h"
#include "server/openai/response_json.h"

namespace moeserve::server::openai {

class SseStream final {
 public:
  // Read's answers besides a byte count.
  static constexpr ssize_t kEnd = -1;    // the stream is complete
  static constexpr ssize_t kAbort = -2;  // cut short (closed before its end)

  // `encoder.n()` choices. `parking` must outlive the stream. `on_finish`
  // runs once, when every choice ended, with OK or the first failure
  // (CANCELLED when the client left).
  SseStream(StreamEncoder encoder, ConnectionParking* parking,
            std::function<void(const absl::Status&)> on_finish);
  SseStream(const SseStream&) = delete;
  SseStream& operator=(const SseStream&) = delete;
  ~SseStream();  // Close(false)s

  // Takes the started calls of the n choices, in order, and listens to
  // them. A stream closed before it started never calls `on_finish`.
  // REQUIRES: calls.size() == n.
  void Start(std::vector<std::unique_ptr<GenerateCall>> calls)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Start(std::unique_ptr<GenerateCall> call) ABSL_LOCKS_EXCLUDED(mu_);

  // From the connection's reader: copies up to `max` bytes of events into
  // `buf` and returns how many; 0 after parking the connection (nothing
  // to send yet); kEnd once everything was sent (also after Shutdown());
  // kAbort once closed.
  ssize_t Read(char* buf, size_t max) ABSL_LOCKS_EXCLUDED(mu_);

  // The server is stopping (the drain is over): a stream not yet complete
  // gets an error event (UNAVAILABLE, "server is shutting down") and
  // "data: [DONE]", its engine requests are cancelled, and a parked
  // connection is woken; Read sends those last events, then kEnd, so the
  // client sees a stream that ended, not a cut connection. `on_finish`
  // gets UNAVAILABLE.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  // The client hung up while the connection was parked (HangupWatch): a
  // request still waiting in the queue sends nothing that could fail, so
  // this is how it is noticed. Cancels the engine requests; the pumps'
  // Finish then wakes the connection, whose next Read ends the stream.
  // Any thread; nothing once closed or before Start.
  void ClientGone() ABSL_LOCKS_EXCLUDED(mu_);

  // The connection is done with the stream: `completed` when the whole
  // stream was sent. Otherwise the engine requests are cancelled. Then no
  // engine callback runs any more. Idempotent.
  void Close(bool completed) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // One choice's transport, called by its pump.
  class Choice final : public StreamTransport {
   public:
    Choice(SseStream* owner, int index)
        : owner_(owner), index_(index), pump(this) {}
    void StartWrite(const v1::GenerateResponse* response) override {
      owner_->StartWrite(index_, response);
    }
    void Finish(const absl::Status& status) override { owner_->Finish(status); }

   private:
    SseStream* const owner_;
    const int index_;

   public:
    GenerateStreamPump pump;  // after owner_ and index_, which it uses
  };

  void StartWrite(int index, const v1::GenerateResponse* response)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Finish(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  void WakeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static absl::Status ShutdownStatus();

  ConnectionParking* const parking_;
  const std::function<void(const absl::Status&)> on_finish_;
  base::Mutex mu_;
  StreamEncoder encoder_ ABSL_GUARDED_BY(mu_);
  std::string pending_ ABSL_GUARDED_BY(mu_);  // events not yet read
  size_t sent_ ABSL_GUARDED_BY(mu_) = 0;      // of pending_
  // Per choice: its pump's write is not done yet.
  std::vector<bool> write_open_ ABSL_GUARDED_BY(mu_);
  int choices_finished_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status first_failure_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // every choice
  bool parked_ ABSL_GUARDED_BY(mu_) = false;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  // Shutdown() ended the stream (error event and [DONE] queued).
  bool cut_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  // Last: destroyed first, after Close detached them.
  std::vector<std::unique_ptr<Choice>> choices_;
};

}  // namespace moeserve::server::openai

#endif  // MOESERVE_SERVER_OPENAI_SSE_STREAM_H_
