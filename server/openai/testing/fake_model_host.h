// FakeModelHost: a ModelHost whose generations a test drives by hand
// (Push messages, see Cancel), for the OpenAI API's tests.
//
// Thread-safe: the HTTP server's threads call in while the test pushes.
#ifndef MOESERVE_SERVER_OPENAI_TESTING_FAKE_MODEL_HOST_H_
#define MOESERVE_SERVER_OPENAI_TESTING_FAKE_MODEL_HOST_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "base/mutex.h"
#include "proto/moeserve.pb.h"
#include "server/model_host.h"

namespace moeserve::server::openai::testing {

// One generation's state, shared by its GenerateCall and the test.
class FakeCallState {
 public:
  // Queues a message and runs the listener (on this thread).
  void Push(const v1::GenerateResponse& response) ABSL_LOCKS_EXCLUDED(mu_);
  // Pushes a message with `text` (and finish_reason, usage on the last).
  void PushText(const std::string& text,
                v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED);

  bool cancelled() const ABSL_LOCKS_EXCLUDED(mu_);
  // The GenerateCall was destroyed (its owner let go of it).
  bool released() const ABSL_LOCKS_EXCLUDED(mu_);
  const v1::GenerateRequest& request() const { return request_; }
  const std::string& caller() const { return caller_; }

 private:
  friend class FakeCall;
  friend class FakeModelHost;

  v1::GenerateRequest request_;
  std::string caller_;
  uint32_t index_ = 0;  // only the test pushes, from one thread
  uint32_t completion_tokens_ = 0;
  base::Mutex listener_mu_;  // held while the listener runs
  std::function<void()> listener_ ABSL_GUARDED_BY(listener_mu_);
  mutable base::Mutex mu_;
  std::deque<v1::GenerateResponse> queue_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
};

class FakeModelHost final : public ModelHost {
 public:
  explicit FakeModelHost(std::vector<std::string> engines = {"lru"})
      : engines_(std::move(engines)) {}

  // What CheckReady answers (OK by default).
  void SetReady(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  // What StartGenerate answers instead of a call (OK: a call), once
  // `after_calls` more calls have been started.
  void SetStartStatus(absl::Status status, size_t after_calls = 0)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The calls started so far, oldest first.
  std::vector<std::shared_ptr<FakeCallState>> calls() const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Waits (up to 10 s) until `n` calls have started; the n-th, or null.
  std::shared_ptr<FakeCallState> WaitForCall(size_t n) ABSL_LOCKS_EXCLUDED(mu_);

  absl::Status CheckReady() const override ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<std::string> EngineNames() const override { return engines_; }
  // One model, "demo", with max_position_embeddings 4096.
  v1::ListModelsResponse ListModels() const override;
  // A byte tokenizer: each byte of the text is its own id, BOS is id 1
  // ("<s>"); ids decode back to their bytes (BOS to nothing).
  absl::StatusOr<v1::TokenizeResponse> Tokenize(
      const v1::TokenizeRequest& request) override;
  absl::StatusOr<std::unique_ptr<GenerateCall>> StartGenerate(
      const v1::GenerateRequest& request, absl::Time deadline,
      std::string_view caller) override ABSL_LOCKS_EXCLUDED(mu_);
  bool Abort(std::string_view /*caller*/,
             std::string_view /*request_id*/) override {
    return false;
  }

 private:
  const std::vector<std::string> engines_;
  mutable base::Mutex mu_;
  base::CondVar call_started_;
  absl::Status ready_ ABSL_GUARDED_BY(mu_);
  absl::Status start_status_ ABSL_GUARDED_BY(mu_);
  size_t start_status_after_ ABSL_GUARDED_BY(mu_) = 0;  // calls to go
  std::vector<std::shared_ptr<FakeCallState>> calls_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moeserve::server::openai::testing

#endif  // MOESERVE_SERVER_OPENAI_TESTING_FAKE_MODEL_HOST_H_
