// HostWorker: one thread of its own that runs a driver's host jobs one at a
// time, in the order they were posted, so that host CPU work overlaps the
// device work the driver issues meanwhile: HostExperts' in-place experts
// (issue 32) and HostAttention's micro-batches (seed 002 §4). Post returns
// at once; Wait blocks for the oldest job not yet waited for and returns its
// status, so a job's writes are visible to the driver after its Wait.
//
// Also HostStream: the checks of a (host, device) backend pair the two share
// and the host stream their jobs run on.
//
// Owns its thread. Thread safety: one driver thread calls Post and Wait.
#ifndef MOESERVE_ENGINE_INTERNAL_HOST_WORKER_H_
#define MOESERVE_ENGINE_INTERNAL_HOST_WORKER_H_

#include <deque>
#include <functional>
#include <memory>
#include <string_view>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "kernels/backend.h"

namespace moeserve::engine {

class HostWorker {
 public:
  using Job = std::function<absl::Status()>;

  HostWorker();
  ~HostWorker();  // REQUIRES: every Post waited for.
  HostWorker(const HostWorker&) = delete;
  HostWorker& operator=(const HostWorker&) = delete;

  // Queues `job` for the thread; returns at once.
  void Post(Job job);
  // Blocks until the oldest job not yet waited for has run; its status.
  // FAILED_PRECONDITION when every Post has been waited for.
  absl::Status Wait();
  // Posts not yet waited for.
  int in_flight() const;

 private:
  void Loop();

  mutable base::Mutex mu_;
  base::CondVar cv_;
  std::deque<Job> queued_ ABSL_GUARDED_BY(mu_);  // posted, not yet run
  // Statuses of the jobs run and not yet waited for, in Post order.
  std::deque<absl::Status> done_ ABSL_GUARDED_BY(mu_);
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// A stream on `host` for `what`'s jobs ("host experts", "host attention"
// name it in errors): INVALID_ARGUMENT when either backend is null or
// `host` does not compute on the CPU.
absl::StatusOr<std::unique_ptr<kernels::Stream>> HostStream(
    kernels::Backend* host, kernels::Backend* device, std::string_view what);

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_INTERNAL_HOST_WORKER_H_
