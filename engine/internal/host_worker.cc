#include "engine/internal/host_worker.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace moeserve::engine {

using base::MutexLock;

HostWorker::HostWorker() : thread_([this] { Loop(); }) {}

HostWorker::~HostWorker() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  thread_.join();
}

void HostWorker::Post(Job job) {
  {
    MutexLock lock(&mu_);
    queued_.push_back(std::move(job));
    ++in_flight_;
  }
  cv_.SignalAll();
}

absl::Status HostWorker::Wait() {
  MutexLock lock(&mu_);
  if (in_flight_ == 0) {
    return absl::FailedPreconditionError("host worker: Wait without a job");
  }
  cv_.Wait(&mu_,
           [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !done_.empty(); });
  absl::Status status = std::move(done_.front());
  done_.pop_front();
  --in_flight_;
  return status;
}

int HostWorker::in_flight() const {
  MutexLock lock(&mu_);
  return in_flight_;
}

void HostWorker::Loop() {
  for (;;) {
    Job job;
    {
      MutexLock lock(&mu_);
      cv_.Wait(&mu_, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !queued_.empty() || stop_;
      });
      if (queued_.empty()) return;  // stop_
      job = std::move(queued_.front());
      queued_.pop_front();
    }
    absl::Status status = job();
    {
      MutexLock lock(&mu_);
      done_.push_back(std::move(status));
    }
    cv_.SignalAll();
  }
}

absl::StatusOr<std::unique_ptr<kernels::Stream>> HostStream(
    kernels::Backend* host, kernels::Backend* device, std::string_view what) {
  if (host == nullptr || device == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(what), ": needs a host and a device backend"));
  }
  if (host->device() != kernels::Device::kCpu) {
    return absl::InvalidArgumentError(absl::StrCat(
        std::string(what), ": the host backend must compute on the CPU, not ",
        kernels::DeviceName(host->device())));
  }
  return host->CreateStream();
}

}  // namespace moeserve::engine
