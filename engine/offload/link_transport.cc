#include "engine/offload/link_transport.h"

#include <chrono>
#include <map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "base/mutex.h"
#include "spdlog/spdlog.h"

namespace moeserve::engine {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Page-locks host ranges once per (backend, address) however many transports
// share them: several engines (A/B arms) copy from the same expert arena, and
// CUDA refuses to register a range twice.
class HostRegistrations {
 public:
  static HostRegistrations& Get() {
    static auto* r = new HostRegistrations();
    return *r;
  }
  absl::Status Acquire(kernels::Backend* backend, void* p, int64_t bytes)
      ABSL_LOCKS_EXCLUDED(mu_) {
    base::MutexLock lock(&mu_);
    int& count = counts_[{backend, p}];
    if (count == 0) {
      absl::Status s = backend->RegisterHost(p, bytes);
      if (!s.ok()) {
        counts_.erase({backend, p});
        return s;
      }
    }
    ++count;
    return absl::OkStatus();
  }
  void Release(kernels::Backend* backend, void* p) ABSL_LOCKS_EXCLUDED(mu_) {
    base::MutexLock lock(&mu_);
    auto it = counts_.find({backend, p});
    if (it == counts_.end()) return;
    if (--it->second == 0) {
      backend->UnregisterHost(p);
      counts_.erase(it);
    }
  }

 private:
  base::Mutex mu_;
  std::map<std::pair<kernels::Backend*, void*>, int> counts_
      ABSL_GUARDED_BY(mu_);
};

class HostTransport final : public LinkTransport {
 public:
  explicit HostTransport(SlowTier* slow) : slow_(slow) {}

  absl::StatusOr<double> Move(int, ExpertId id, std::byte* dst,
                              kernels::Event*) override {
    const Clock::time_point start = Clock::now();
    absl::Status s = slow_->Read(id, dst);
    if (!s.ok()) return s;
    return SecondsSince(start);
  }

 private:
  SlowTier* const slow_;
};

class DeviceTransport final : public LinkTransport {
 public:
  struct Worker {
    std::unique_ptr<kernels::Stream> copy;
    std::unique_ptr<kernels::Buffer> staging;
    std::unique_ptr<kernels::Event> start, stop;
  };

  DeviceTransport(kernels::Backend* backend, SlowTier* slow, size_t bytes)
      : backend_(backend), slow_(slow), bytes_(bytes) {}

  ~DeviceTransport() override {
    if (registered_ != nullptr) {
      HostRegistrations::Get().Release(backend_, registered_);
    }
  }

  absl::Status Init(int num_workers) {
    for (int i = 0; i < num_workers; ++i) {
      Worker w;
      absl::StatusOr<std::unique_ptr<kernels::Stream>> copy =
          backend_->CreateCopyStream();
      if (!copy.ok()) return copy.status();
      w.copy = *std::move(copy);
      absl::StatusOr<std::unique_ptr<kernels::Buffer>> staging =
          backend_->AllocateHost(static_cast<int64_t>(bytes_));
      if (!staging.ok()) return staging.status();
      w.staging = *std::move(staging);
      for (std::unique_ptr<kernels::Event>* e : {&w.start, &w.stop}) {
        absl::StatusOr<std::unique_ptr<kernels::Event>> ev =
            backend_->CreateEvent();
        if (!ev.ok()) return ev.status();
        *e = *std::move(ev);
      }
      workers_.push_back(std::move(w));
    }
    const std::span<const std::byte> arena = slow_->HostArena();
    if (!arena.empty()) {
      void* p = const_cast<std::byte*>(arena.data());
      absl::Status s = HostRegistrations::Get().Acquire(
          backend_, p, static_cast<int64_t>(arena.size()));
      if (s.ok()) {
        registered_ = p;
      } else {
        // Still correct, one host copy more per transfer.
        spdlog::warn(
            "link: cannot page-lock the {} expert bytes in host RAM ({}); "
            "transfers go through a staging buffer",
            arena.size(), s.ToString());
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<double> Move(int worker, ExpertId id, std::byte* dst,
                              kernels::Event* after) override {
    Worker& w = workers_[worker];
    double host_seconds = 0;
    const void* src = nullptr;
    if (registered_ != nullptr) {
      src = slow_->HostBlob(id);
    } else {
      const Clock::time_point start = Clock::now();
      std::byte* staging = static_cast<std::byte*>(w.staging->data());
      absl::Status s = slow_->Read(id, staging);
      if (!s.ok()) return s;
      host_seconds = SecondsSince(start);
      src = staging;
    }
    kernels::Stream& copy = *w.copy;
    absl::Status s = absl::OkStatus();
    if (after != nullptr) s = backend_->WaitEvent(copy, *after);
    if (s.ok()) s = backend_->RecordEvent(copy, *w.start);
    if (s.ok()) {
      s = backend_->CopyToDevice(copy, dst, src, static_cast<int64_t>(bytes_));
    }
    if (s.ok()) s = backend_->RecordEvent(copy, *w.stop);
    if (s.ok()) s = w.stop->Synchronize();
    if (!s.ok()) {
      return absl::InternalError(
          absl::StrCat("copy of expert (", id.layer, ", ", id.expert,
                       ") to the device: ", s.message()));
    }
    absl::StatusOr<double> copy_seconds = w.stop->SecondsSince(*w.start);
    if (!copy_seconds.ok()) return copy_seconds.status();
    return host_seconds + *copy_seconds;
  }

 private:
  kernels::Backend* const backend_;
  SlowTier* const slow_;
  const size_t bytes_;
  std::vector<Worker> workers_;
  void* registered_ = nullptr;
};

}  // namespace

std::unique_ptr<LinkTransport> NewHostTransport(SlowTier* slow) {
  return std::make_unique<HostTransport>(slow);
}

absl::StatusOr<std::unique_ptr<LinkTransport>> NewDeviceTransport(
    kernels::Backend* backend, SlowTier* slow, size_t bytes, int num_workers) {
  auto t = std::make_unique<DeviceTransport>(backend, slow, bytes);
  if (absl::Status s = t->Init(num_workers < 1 ? 1 : num_workers); !s.ok()) {
    return s;
  }
  return std::unique_ptr<LinkTransport>(std::move(t));
}

}  // namespace moeserve::engine
