#include "server/generate_pump.h"

#include <utility>

namespace moeserve::server {
namespace {

bool IsLast(const v1::GenerateResponse& r) {
  return r.finish_reason() != v1::FINISH_REASON_UNSPECIFIED;
}

}  // namespace

void PumpBase::StartPump(absl::StatusOr<std::unique_ptr<GenerateCall>> call) {
  GenerateCall* raw;
  {
    base::MutexLock lock(&mu_);
    if (!call.ok()) {  // nothing was queued: the call ends here
      finished_ = true;
      FinishTransport(call.status());
      return;
    }
    call_ = *std::move(call);
    raw = call_.get();
  }
  // Not under mu_ (lock order). `raw` stays valid: only the pump's
  // destruction frees it, after Detach.
  raw->SetListener([this] { OnReady(); });
}

void PumpBase::ClientGoneLocked() {
  if (client_gone_) return;
  client_gone_ = true;
  gone_status_ = call_ != nullptr ? call_->Cancel()
                                  : absl::CancelledError("client went away");
}

void PumpBase::Detach() {
  GenerateCall* raw;
  {
    base::MutexLock lock(&mu_);
    raw = call_.get();
  }
  if (raw != nullptr) raw->SetListener(nullptr);  // not under mu_: lock order
  // An empty critical section: every reaction's happens before our return
  // (TSan cannot see the transport's own ordering when it is gRPC's).
  base::MutexLock lock(&mu_);
}

void GenerateStreamPump::OnWriteDone(bool ok) {
  Action action;
  {
    base::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) ClientGoneLocked();  // the client is gone: stop the engine work
    action = NextActionLocked();
  }
  Perform(action);
}

void GenerateStreamPump::OnCancel() {
  Action action;
  {
    base::MutexLock lock(&mu_);
    ClientGoneLocked();
    action = NextActionLocked();
  }
  Perform(action);
}

void GenerateStreamPump::OnReady() {
  Action action;
  {
    base::MutexLock lock(&mu_);
    action = NextActionLocked();
  }
  Perform(action);
}

GenerateStreamPump::Action GenerateStreamPump::NextActionLocked() {
  if (writing_ || finished_) return {};
  // Gone: nobody reads what the engine still sends (the call owns it and
  // frees it with the pump).
  if (client_gone_) return FinishLocked(gone_status_);
  if (last_written_) return FinishLocked(absl::OkStatus());
  absl::Status final_status;
  while (call_->Next(&response_, &final_status)) {
    const bool last = IsLast(response_);
    if (last && !final_status.ok()) {  // past the deadline: nobody reads it
      return FinishLocked(final_status);
    }
    last_written_ = last;
    // response_ is not touched again until OnWriteDone clears writing_.
    writing_ = true;
    return {Action::kWrite, &response_, {}};
  }
  return {};
}

GenerateStreamPump::Action GenerateStreamPump::FinishLocked(
    const absl::Status& status) {
  finished_ = true;
  return {Action::kFinish, nullptr, status};
}

void GenerateStreamPump::Perform(const Action& action) {
  switch (action.kind) {
    case Action::kNone:
      return;
    case Action::kWrite:
      transport_->StartWrite(action.response);
      return;
    case Action::kFinish:
      transport_->Finish(action.status);  // the pump may be gone now
      return;
  }
}

void GenerateUnaryPump::OnCancel() {
  absl::Status status;
  {
    base::MutexLock lock(&mu_);
    ClientGoneLocked();
    if (finished_) return;
    finished_ = true;
    status = gone_status_;
  }
  // After mu_: the transport may free the pump once it has finished.
  transport_->Finish(status);
}

void GenerateUnaryPump::OnReady() {
  base::MutexLock lock(&mu_);
  if (finished_) return;
  v1::GenerateResponse r;
  absl::Status final_status;
  while (call_->Next(&r, &final_status)) {
    AppendLocked(r);
    if (!IsLast(r)) continue;
    finished_ = true;
    FinishTransport(final_status);
    return;
  }
}

void GenerateUnaryPump::AppendLocked(const v1::GenerateResponse& r) {
  out_->set_request_id(r.request_id());
  out_->mutable_token_ids()->Add(r.token_ids().begin(), r.token_ids().end());
  out_->mutable_text()->append(r.text());
  for (const auto& lp : r.logprobs()) *out_->add_logprobs() = lp;
  if (!IsLast(r)) return;
  out_->set_finish_reason(r.finish_reason());
  *out_->mutable_usage() = r.usage();
  out_->set_seed(r.seed());
  out_->set_policy(r.policy());
  out_->set_error_message(r.error_message());
}

}  // namespace moeserve::server
