#include "server/async_model_host.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace moeserve::server {

AsyncModelHost::AsyncModelHost(std::vector<std::string> engine_names,
                               Loader load)
    : engine_names_(std::move(engine_names)) {
  thread_ = std::thread([this, load = std::move(load)] {
    absl::StatusOr<std::unique_ptr<ModelHost>> host = load();
    {
      base::MutexLock lock(&mu_);
      done_ = true;
      if (host.ok()) {
        host_ = *std::move(host);
      } else {
        load_status_ = host.status();
      }
    }
    loaded_.SignalAll();
  });
}

AsyncModelHost::~AsyncModelHost() { thread_.join(); }

absl::Status AsyncModelHost::WaitUntilLoaded() {
  base::MutexLock lock(&mu_);
  loaded_.Wait(&mu_, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return done_ || stop_waiting_;
  });
  if (!done_) return absl::CancelledError("stopped while the model loaded");
  return load_status_;
}

void AsyncModelHost::StopWaiting() {
  {
    base::MutexLock lock(&mu_);
    stop_waiting_ = true;
  }
  loaded_.SignalAll();
}

bool AsyncModelHost::LoadFinished() const {
  base::MutexLock lock(&mu_);
  return done_;
}

ModelHost* AsyncModelHost::Loaded(absl::Status* why) const {
  base::MutexLock lock(&mu_);
  if (host_ != nullptr) return host_.get();
  *why = done_ ? absl::UnavailableError(absl::StrCat("no model is loaded: ",
                                                     load_status_.ToString()))
               : absl::UnavailableError("model is loading");
  return nullptr;
}

absl::Status AsyncModelHost::CheckReady() const {
  absl::Status why;
  ModelHost* host = Loaded(&why);
  return host == nullptr ? why : host->CheckReady();
}

v1::ListModelsResponse AsyncModelHost::ListModels() const {
  absl::Status why;
  ModelHost* host = Loaded(&why);
  return host == nullptr ? v1::ListModelsResponse() : host->ListModels();
}

absl::StatusOr<v1::TokenizeResponse> AsyncModelHost::Tokenize(
    const v1::TokenizeRequest& request) {
  absl::Status why;
  ModelHost* host = Loaded(&why);
  if (host == nullptr) return why;
  return host->Tokenize(request);
}

absl::StatusOr<std::unique_ptr<GenerateCall>> AsyncModelHost::StartGenerate(
    const v1::GenerateRequest& request, absl::Time deadline,
    std::string_view caller) {
  absl::Status why;
  ModelHost* host = Loaded(&why);
  if (host == nullptr) return why;
  return host->StartGenerate(request, deadline, caller);
}

bool AsyncModelHost::Abort(std::string_view caller,
                           std::string_view request_id) {
  absl::Status why;
  ModelHost* host = Loaded(&why);
  return host != nullptr && host->Abort(caller, request_id);
}

}  // namespace moeserve::server
