#include "server/openai/sse_stream.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace moeserve::server::openai {

SseStream::SseStream(StreamEncoder encoder, ConnectionParking* parking,
                     std::function<void(const absl::Status&)> on_finish)
    : parking_(parking),
      on_finish_(std::move(on_finish)),
      encoder_(std::move(encoder)) {
  const int n = encoder_.n();
  for (int i = 0; i < n; ++i) {
    choices_.push_back(std::make_unique<Choice>(this, i));
  }
  base::MutexLock lock(&mu_);
  write_open_.assign(static_cast<size_t>(n), false);
  encoder_.Start(&pending_);  // chat: the role chunks, sent at once
}

SseStream::~SseStream() { Close(false); }

void SseStream::Start(std::vector<std::unique_ptr<GenerateCall>> calls) {
  {
    base::MutexLock lock(&mu_);
    started_ = true;
  }
  for (size_t i = 0; i < choices_.size(); ++i) {
    choices_[i]->pump.Start(std::move(calls[i]));
  }
}

void SseStream::Start(std::unique_ptr<GenerateCall> call) {
  std::vector<std::unique_ptr<GenerateCall>> calls;
  calls.push_back(std::move(call));
  Start(std::move(calls));
}

void SseStream::WakeLocked() {
  if (!parked_) return;
  parked_ = false;
  parking_->Wake();
}

void SseStream::StartWrite(int index, const v1::GenerateResponse* response) {
  base::MutexLock lock(&mu_);
  // Nothing goes after the [DONE] of a stream cut by Shutdown().
  if (!cut_) encoder_.Append(*response, &pending_, index);
  write_open_[index] = true;
  WakeLocked();
}

void SseStream::Finish(const absl::Status& status) {
  absl::Status ended;
  {
    base::MutexLock lock(&mu_);
    if (!status.ok() && first_failure_.ok()) first_failure_ = status;
    if (++choices_finished_ < static_cast<int>(choices_.size())) return;
    if (cut_) {
      ended = ShutdownStatus();  // its end was sent by Shutdown()
    } else {
      if (!first_failure_.ok()) {
        StreamEncoder::AppendError(
            ApiErrorFromStatus(first_failure_, Endpoint::kCompletions),
            &pending_);
      }
      StreamEncoder::AppendDone(&pending_);
      finished_ = true;
      ended = first_failure_;
      WakeLocked();
    }
  }
  if (on_finish_) on_finish_(ended);
}

ssize_t SseStream::Read(char* buf, size_t max) {
  std::vector<Choice*> written;
  for (;;) {
    ssize_t n = 0;
    written.clear();
    {
      base::MutexLock lock(&mu_);
      if (sent_ < pending_.size()) {
        n = static_cast<ssize_t>(std::min(max, pending_.size() - sent_));
        std::memcpy(buf, pending_.data() + sent_, static_cast<size_t>(n));
        sent_ += static_cast<size_t>(n);
        if (sent_ < pending_.size()) return n;
        pending_.clear();
        sent_ = 0;
      }
      for (size_t i = 0; i < choices_.size(); ++i) {
        if (!write_open_[i]) continue;
        write_open_[i] = false;
        written.push_back(choices_[i].get());
      }
      if (written.empty()) {
        if (n > 0) return n;
        if (finished_) return kEnd;
        if (shutdown_ || closed_) return kAbort;
        parked_ = true;
        parking_->Park();
        return 0;
      }
    }
    // Everything of those pumps' writes was taken: their next messages (or
    // ends) may come at once, on this thread, into pending_.
    for (Choice* c : written) c->pump.OnWriteDone(true);
    if (n > 0) return n;
  }
}

absl::Status SseStream::ShutdownStatus() {
  return absl::UnavailableError(
      "server is shutting down: the stream was cut before its end");
}

void SseStream::Shutdown() {
  {
    base::MutexLock lock(&mu_);
    if (shutdown_) return;
    shutdown_ = true;
    if (!finished_ && !closed_) {
      // The client is told why its stream ends, and sees the usual end.
      StreamEncoder::AppendError(
          ApiErrorFromStatus(ShutdownStatus(), Endpoint::kCompletions),
          &pending_);
      StreamEncoder::AppendDone(&pending_);
      finished_ = true;
      cut_ = true;
    }
    WakeLocked();
    if (!cut_ || !started_) return;
  }
  // The engine requests end at their next step (a pump's OnCancel is
  // idempotent and safe beside Read's and Close's calls).
  for (const std::unique_ptr<Choice>& c : choices_) c->pump.OnCancel();
}

void SseStream::ClientGone() {
  {
    base::MutexLock lock(&mu_);
    if (!started_ || closed_) return;
  }
  // A pump's OnCancel is idempotent and safe beside Close's.
  for (const std::unique_ptr<Choice>& c : choices_) c->pump.OnCancel();
}

void SseStream::Close(bool completed) {
  {
    base::MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    parked_ = false;  // the connection is gone: nothing to wake
    if (!started_) return;
  }
  for (const std::unique_ptr<Choice>& c : choices_) {
    if (!completed) c->pump.OnCancel();
    c->pump.Detach();
  }
}

}  // namespace moeserve::server::openai
