// The engine's request/response vocabulary, independent of gRPC: what a
// client asks the engine to generate, and the events it streams back.
#ifndef MOESERVE_ENGINE_GENERATION_H_
#define MOESERVE_ENGINE_GENERATION_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "base/mutex.h"
#include "engine/sampling/sampler.h"

namespace moeserve::engine {

enum class FinishReason {
  kNone,  // still running
  kEos,
  kStopSequence,
  kLength,
  kCancelled,
  kTimeLimit,
  kError,
  kDeadline,  // the client's RPC deadline passed (not the time limit)
};

struct GenerationRequest {
  std::string request_id;
  std::vector<int32_t> prompt;  // token ids, BOS included when wanted
  SamplingConfig sampling;      // seed already resolved
  uint32_t max_new_tokens = 16;
  uint32_t min_new_tokens = 0;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;  // EOS masked: never sampled (proto comment)
  int logprobs = 0;         // top-n alternatives per token; 0: none
  // The request's own time limit: past it the stream ends kTimeLimit with
  // what was generated (a normal finish).
  absl::Time deadline = absl::InfiniteFuture();
  // The client's deadline (gRPC): past it nobody waits for the result, so
  // the scheduler drops the request at its next step (kDeadline), queued or
  // running, and frees its resources.
  absl::Time rpc_deadline = absl::InfiniteFuture();
  // False for the engine's own warm-up, which serving metrics must not see.
  bool count_in_metrics = true;
  // Who asked (server/caller_identity.h): the unit of the per-caller
  // limits (SchedulerOptions::max_*_per_caller). Empty: no caller, not
  // limited (the warm-up, offline batches).
  std::string caller;
};

// Log-probabilities of one generated token.
struct TokenLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;
};

// What one engine step produced for one request.
struct GenerationEvent {
  std::vector<int32_t> tokens;
  std::string text;  // UTF-8 complete; stop strings never included
  std::vector<TokenLogprobs> logprobs;  // one per token when asked
  FinishReason finish = FinishReason::kNone;
  std::string error;  // with kError
  uint32_t prompt_tokens = 0;
  uint32_t completion_tokens = 0;
};

// The channel between the engine (producer, its step thread) and whoever
// serves the request (consumer). The consumer either blocks in Pop or
// registers a listener and drains with TryPop when told (no polling).
// Thread-safe.
//
// Lock order: listener_mu_ before mu_. A listener may call TryPop and
// cancelled(), never SetListener.
class RequestStream {
 public:
  void Push(GenerationEvent event) ABSL_LOCKS_EXCLUDED(mu_, listener_mu_) {
    {
      base::MutexLock lock(&mu_);
      events_.push_back(std::move(event));
    }
    pushed_.Signal();
    Notify();
  }

  // Waits up to `timeout` for the next event; false if none came.
  bool Pop(GenerationEvent* event, absl::Duration timeout)
      ABSL_LOCKS_EXCLUDED(mu_) {
    // Bounded so an infinite timeout cannot overflow the clock arithmetic.
    const auto wait =
        absl::ToChronoNanoseconds(std::min(timeout, absl::Hours(24 * 365)));
    base::MutexLock lock(&mu_);
    if (!pushed_.WaitFor(&mu_, wait,
                         [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                           return !events_.empty();
                         })) {
      return false;
    }
    *event = std::move(events_.front());
    events_.pop_front();
    return true;
  }

  // The next event if one is queued; false otherwise. Never blocks.
  bool TryPop(GenerationEvent* event) ABSL_LOCKS_EXCLUDED(mu_) {
    base::MutexLock lock(&mu_);
    if (events_.empty()) return false;
    *event = std::move(events_.front());
    events_.pop_front();
    return true;
  }

  // `on_event` runs after every Push (on the pushing thread), and once now
  // if events are already queued; calls never overlap. After
  // SetListener(nullptr) returns, no listener call is running or will run.
  void SetListener(std::function<void()> on_event)
      ABSL_LOCKS_EXCLUDED(mu_, listener_mu_) {
    base::MutexLock listener_lock(&listener_mu_);
    listener_ = std::move(on_event);
    bool pending;
    {
      base::MutexLock lock(&mu_);
      pending = !events_.empty();
    }
    if (listener_ && pending) listener_();
  }

  // The consumer is gone (client cancelled, deadline, Abort): the engine
  // stops work on the request at its next step and frees its resources.
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_) {
    base::MutexLock lock(&mu_);
    cancelled_ = true;
  }
  bool cancelled() const ABSL_LOCKS_EXCLUDED(mu_) {
    base::MutexLock lock(&mu_);
    return cancelled_;
  }

  // As Cancel, because the client's deadline ran out: the request finishes
  // kDeadline. (gRPC's client-side timer usually fires before the server's,
  // so the server first hears of a deadline as a cancellation.)
  void Expire() ABSL_LOCKS_EXCLUDED(mu_) {
    base::MutexLock lock(&mu_);
    cancelled_ = expired_ = true;
  }
  bool expired() const ABSL_LOCKS_EXCLUDED(mu_) {
    base::MutexLock lock(&mu_);
    return expired_;
  }

 private:
  void Notify() ABSL_LOCKS_EXCLUDED(listener_mu_) {
    base::MutexLock listener_lock(&listener_mu_);
    if (listener_) listener_();
  }

  // base::Mutex, not absl::Mutex: this is the hand-off between the engine
  // and gRPC threads, and Debian's Abseil is not TSan-instrumented (TSan
  // cannot see an absl::Mutex; it sees std::mutex).
  base::Mutex listener_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::function<void()> listener_ ABSL_GUARDED_BY(listener_mu_);
  mutable base::Mutex mu_;
  base::CondVar pushed_;
  std::deque<GenerationEvent> events_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool expired_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_GENERATION_H_
