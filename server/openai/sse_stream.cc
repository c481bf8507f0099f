#include "server/openai/sse_stream.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace moeserve::server::openai {

SseStream::SseStream(StreamEncoder encoder, ConnectionParking* parking,
                     std::function<void(const absl::Status&)> on_finish)
    : parking_(parking),
      on_finish_(std::move(on_finish)),
      encoder_(std::move(encoder)),
      pump_(this) {
  encoder_.Start(&pending_);  // chat: the role chunk, sent at once
}

SseStream::~SseStream() { Close(false); }

void SseStream::Start(std::unique_ptr<GenerateCall> call) {
  {
    base::MutexLock lock(&mu_);
    started_ = true;
  }
  pump_.Start(std::move(call));
}

void SseStream::WakeLocked() {
  if (!parked_) return;
  parked_ = false;
  parking_->Wake();
}

void SseStream::StartWrite(const v1::GenerateResponse* response) {
  base::MutexLock lock(&mu_);
  encoder_.Append(*response, &pending_);
  write_open_ = true;
  WakeLocked();
}

void SseStream::Finish(const absl::Status& status) {
  {
    base::MutexLock lock(&mu_);
    if (!status.ok()) {
      StreamEncoder::AppendError(
          ApiErrorFromStatus(status, Endpoint::kCompletions), &pending_);
    }
    StreamEncoder::AppendDone(&pending_);
    finished_ = true;
    WakeLocked();
  }
  if (on_finish_) on_finish_(status);
}

ssize_t SseStream::Read(char* buf, size_t max) {
  for (;;) {
    ssize_t n = 0;
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
      if (!write_open_) {
        if (n > 0) return n;
        if (finished_) return kEnd;
        if (shutdown_ || closed_) return kAbort;
        parked_ = true;
        parking_->Park();
        return 0;
      }
      write_open_ = false;
    }
    // Everything of the pump's write was taken: the next message (or the
    // end) may come at once, on this thread, into pending_.
    pump_.OnWriteDone(true);
    if (n > 0) return n;
  }
}

void SseStream::Shutdown() {
  base::MutexLock lock(&mu_);
  shutdown_ = true;
  WakeLocked();
}

void SseStream::ClientGone() {
  {
    base::MutexLock lock(&mu_);
    if (!started_ || closed_) return;
  }
  pump_.OnCancel();  // idempotent; safe beside Close's
}

void SseStream::Close(bool completed) {
  {
    base::MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    parked_ = false;  // the connection is gone: nothing to wake
    if (!started_) return;
  }
  if (!completed) pump_.OnCancel();
  pump_.Detach();
}

}  // namespace moeserve::server::openai
