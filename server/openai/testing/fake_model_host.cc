#include "server/openai/testing/fake_model_host.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"

namespace moeserve::server::openai::testing {

class FakeCall final : public GenerateCall {
 public:
  explicit FakeCall(std::shared_ptr<FakeCallState> state)
      : state_(std::move(state)) {}
  ~FakeCall() override {
    SetListener(nullptr);
    base::MutexLock lock(&state_->mu_);
    state_->released_ = true;
  }

  void SetListener(std::function<void()> on_ready) override {
    base::MutexLock listener_lock(&state_->listener_mu_);
    state_->listener_ = std::move(on_ready);
    bool waiting;
    {
      base::MutexLock lock(&state_->mu_);
      waiting = !state_->queue_.empty();
    }
    if (waiting && state_->listener_) state_->listener_();
  }

  bool Next(v1::GenerateResponse* response,
            absl::Status* final_status) override {
    base::MutexLock lock(&state_->mu_);
    if (state_->queue_.empty()) return false;
    *response = std::move(state_->queue_.front());
    state_->queue_.pop_front();
    *final_status = absl::OkStatus();
    return true;
  }

  absl::Status Cancel() override {
    base::MutexLock lock(&state_->mu_);
    state_->cancelled_ = true;
    return absl::CancelledError("client went away");
  }

 private:
  const std::shared_ptr<FakeCallState> state_;
};

void FakeCallState::Push(const v1::GenerateResponse& response) {
  base::MutexLock listener_lock(&listener_mu_);
  {
    base::MutexLock lock(&mu_);
    queue_.push_back(response);
  }
  if (listener_) listener_();
}

void FakeCallState::PushText(const std::string& text, v1::FinishReason finish) {
  v1::GenerateResponse r;
  r.set_request_id("req-0123456789abcdef");
  r.set_index(index_++);
  r.set_text(text);
  if (!text.empty()) {
    r.add_token_ids(7);
    ++completion_tokens_;
  }
  if (finish != v1::FINISH_REASON_UNSPECIFIED) {
    r.set_finish_reason(finish);
    r.mutable_usage()->set_prompt_tokens(3);
    r.mutable_usage()->set_completion_tokens(completion_tokens_);
    r.set_policy("lru");
    r.set_seed(42);
  }
  Push(r);
}

bool FakeCallState::cancelled() const {
  base::MutexLock lock(&mu_);
  return cancelled_;
}

bool FakeCallState::released() const {
  base::MutexLock lock(&mu_);
  return released_;
}

void FakeModelHost::SetReady(absl::Status status) {
  base::MutexLock lock(&mu_);
  ready_ = std::move(status);
}

void FakeModelHost::SetStartStatus(absl::Status status, size_t after_calls) {
  base::MutexLock lock(&mu_);
  start_status_ = std::move(status);
  start_status_after_ = after_calls;
}

std::vector<std::shared_ptr<FakeCallState>> FakeModelHost::calls() const {
  base::MutexLock lock(&mu_);
  return calls_;
}

std::shared_ptr<FakeCallState> FakeModelHost::WaitForCall(size_t n) {
  base::MutexLock lock(&mu_);
  call_started_.WaitFor(
      &mu_, std::chrono::seconds(10),
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return calls_.size() >= n; });
  return calls_.size() >= n ? calls_[n - 1] : nullptr;
}

absl::Status FakeModelHost::CheckReady() const {
  base::MutexLock lock(&mu_);
  return ready_;
}

absl::StatusOr<std::unique_ptr<GenerateCall>> FakeModelHost::StartGenerate(
    const v1::GenerateRequest& request, absl::Time /*deadline*/,
    std::string_view caller) {
  base::MutexLock lock(&mu_);
  if (!start_status_.ok()) {
    if (start_status_after_ == 0) return start_status_;
    --start_status_after_;
  }
  auto state = std::make_shared<FakeCallState>();
  state->request_ = request;
  state->caller_ = std::string(caller);
  calls_.push_back(state);
  call_started_.SignalAll();
  return std::unique_ptr<GenerateCall>(new FakeCall(std::move(state)));
}

v1::ListModelsResponse FakeModelHost::ListModels() const {
  v1::ListModelsResponse response;
  v1::ModelInfo* model = response.add_models();
  model->set_name("demo");
  model->set_max_position_embeddings(4096);
  return response;
}

absl::StatusOr<v1::TokenizeResponse> FakeModelHost::Tokenize(
    const v1::TokenizeRequest& request) {
  constexpr uint32_t kBos = 1;
  v1::TokenizeResponse response;
  if (!request.text().empty()) {
    if (request.add_bos()) response.add_token_ids(kBos);
    for (unsigned char c : request.text()) response.add_token_ids(c);
  } else {
    *response.mutable_token_ids() = request.token_ids();
  }
  for (int i = 0; i < response.token_ids_size(); ++i) {
    const uint32_t id = response.token_ids(i);
    if (id > 255) {
      // As the engine's tokenizer says it (server/engine_host.cc).
      return absl::InvalidArgumentError(absl::StrCat(
          "token_ids[", i, "]: ", id, " is outside the vocabulary of 256"));
    }
    const std::string piece =
        id == kBos ? "<s>" : std::string(1, static_cast<char>(id));
    response.add_pieces(piece);
    if (id != kBos || !request.skip_special_tokens()) {
      response.mutable_text()->append(piece);
    }
  }
  return response;
}

}  // namespace moeserve::server::openai::testing
