#include "server/openai/unary_completion.h"

#include <utility>

namespace moeserve::server::openai {

UnaryCompletion::UnaryCompletion(ConnectionParking* parking)
    : parking_(parking), pump_(this, &response_) {}

UnaryCompletion::~UnaryCompletion() { Close(); }

void UnaryCompletion::Start(std::unique_ptr<GenerateCall> call) {
  {
    base::MutexLock lock(&mu_);
    started_ = true;
  }
  pump_.Start(std::move(call));
}

void UnaryCompletion::Finish(const absl::Status& status) {
  base::MutexLock lock(&mu_);
  done_ = true;
  status_ = status;
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
  // The pump's OnCancel is idempotent and safe beside Close's; its
  // Finish takes mu_.
  pump_.OnCancel();
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
  if (!done) pump_.OnCancel();
  pump_.Detach();
}

}  // namespace moeserve::server::openai
