// The engine's request/response vocabulary, independent of gRPC: what a
// client asks the engine to generate, and the events it streams back.
#ifndef MOESERVE_ENGINE_GENERATION_H_
#define MOESERVE_ENGINE_GENERATION_H_

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
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
};

struct GenerationRequest {
  std::string request_id;
  std::vector<int32_t> prompt;  // token ids, BOS included when wanted
  SamplingConfig sampling;      // seed already resolved
  uint32_t max_new_tokens = 16;
  uint32_t min_new_tokens = 0;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int logprobs = 0;  // top-n alternatives per token; 0: none
  absl::Time deadline = absl::InfiniteFuture();  // -> kTimeLimit
  // False for the engine's own warm-up, which serving metrics must not see.
  bool count_in_metrics = true;
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
// serves the request (consumer). Thread-safe.
class RequestStream {
 public:
  void Push(GenerationEvent event) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    events_.push_back(std::move(event));
  }

  // Waits up to `timeout` for the next event; false if none came.
  bool Pop(GenerationEvent* event, absl::Duration timeout)
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return !events_.empty();
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout)) return false;
    *event = std::move(events_.front());
    events_.pop_front();
    return true;
  }

  // The consumer is gone (client cancelled, deadline, Abort): the engine
  // stops work on the request at its next step and frees its resources.
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
  }
  bool cancelled() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return cancelled_;
  }

 private:
  mutable absl::Mutex mu_;
  std::deque<GenerationEvent> events_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_GENERATION_H_
