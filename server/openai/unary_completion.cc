#include "server/openai/unary_completion.h"

#include <utility>

namespace moeserve::server::openai {

UnaryCompletion::UnaryCompletion(ConnectionParking* parking, int n)
    : parking_(parking), responses_(static_cast<size_t>(n)) {
  for (int i = 0; i < n; ++i) {
    choices_.push_back(std::make_unique<Choice>(this, &responses_[i]));
  }
}

UnaryCompletion::~UnaryCompletion() { Close(); }

void UnaryCompletion::Start(std::vector<std::unique_ptr<GenerateCall>> calls) {
  {
    base::MutexLock lock(&mu_);
    started_ = true;
  }
  for (size_t i = 0; i < choices_.size(); ++i) {
    choices_[i]->pump.Start(std::move(calls[i]));
  }
}

void UnaryCompletion::Start(std::unique_ptr<GenerateCall> call) {
  std::vector<std::unique_ptr<GenerateCall>> calls;
  calls.push_back(std::move(call));
  Start(std::move(calls));
}

void UnaryCompletion::FinishChoice(const absl::Status& status) {
  base::MutexLock lock(&mu_);
  if (!status.ok() && status_.ok()) status_ = status;
  if (++finished_ < static_cast<int>(choices_.size())) return;
  done_ = true;
  if (parked_) {
    parked_ = false;
    parking_->Wake();
  }
}

bool UnaryCompletion::DoneOrPark(absl::Status* status) {
  base::MutexLock lock(&mu_);
  if (done_) {
    *status = status_;
    return true;
  }
  if (shutdown_ || closed_) {
    *status = absl::UnavailableError("server is shutting down");
    return true;
  }
  parked_ = true;
  parking_->Park();
  return false;
}

void UnaryCompletion::ClientGone() {
  {
    base::MutexLock lock(&mu_);
    if (!started_ || done_ || closed_) return;
  }
  // A pump's OnCancel is idempotent and safe beside Close's; its Finish
  // takes mu_.
  for (const std::unique_ptr<Choice>& c : choices_) c->pump.OnCancel();
}

void UnaryCompletion::Shutdown() {
  base::MutexLock lock(&mu_);
  shutdown_ = true;
  if (parked_) {
    parked_ = false;
    parking_->Wake();
  }
}

void UnaryCompletion::Close() {
  bool done;
  {
    base::MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    parked_ = false;
    if (!started_) return;
    done = done_;
  }
  for (const std::unique_ptr<Choice>& c : choices_) {
    if (!done) c->pump.OnCancel();
    c->pump.Detach();
  }
}

}  // namespace moeserve::server::openai
