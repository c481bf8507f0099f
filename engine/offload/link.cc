#include "engine/offload/link.h"

#include <chrono>
#include <utility>

namespace moeserve::engine {

using Clock = std::chrono::steady_clock;

Link::Link(SlowTier* slow, size_t bytes_per_transfer,
           const LinkOptions& options, LinkCounters counters)
    : Link(NewHostTransport(slow), bytes_per_transfer, options, counters) {}

Link::Link(std::unique_ptr<LinkTransport> transport, size_t bytes_per_transfer,
           const LinkOptions& options, LinkCounters counters)
    : transport_(std::move(transport)),
      bytes_per_transfer_(bytes_per_transfer),
      options_(options),
      counters_(counters) {
  const int n = options.num_workers < 1 ? 1 : options.num_workers;
  for (int i = 0; i < n; ++i) {
    workers_.emplace_back([this, i] { WorkerLoop(i); });
  }
}

Link::~Link() {
  {
    base::MutexLock lock(&mu_);
    stop_ = true;
  }
  queued_.SignalAll();
  for (std::thread& t : workers_) t.join();
}

void Link::Submit(ExpertId id, std::byte* dst, Done done,
                  kernels::Event* after) {
  {
    base::MutexLock lock(&mu_);
    queue_.push_back({id, dst, std::move(done), after});
  }
  queued_.Signal();
}

double Link::busy_seconds() const {
  return static_cast<double>(busy_ns_.load(std::memory_order_acquire)) * 1e-9;
}

void Link::WorkerLoop(int worker) {
  for (;;) {
    Transfer t;
    {
      base::MutexLock lock(&mu_);
      while (!stop_ && queue_.empty()) queued_.Wait(&mu_);
      if (queue_.empty()) return;  // Stopping, and drained.
      t = std::move(queue_.front());
      queue_.pop_front();
    }
    Run(worker, t);
  }
}

void Link::Run(int worker, Transfer& t) {
  const Clock::time_point start = Clock::now();
  absl::StatusOr<double> moved = transport_->Move(worker, t.id, t.dst, t.after);
  absl::Status status = moved.status();
  double busy = moved.ok() ? *moved : 0;
  if (status.ok() && options_.emulated()) {
    const double s =
        options_.latency_us * 1e-6 +
        static_cast<double>(bytes_per_transfer_) / (options_.gbps * 1e9);
    std::this_thread::sleep_until(
        start +
        std::chrono::ceil<Clock::duration>(std::chrono::duration<double>(s)));
    // Emulated: the link was busy until the emulated transfer ended.
    busy = std::chrono::duration<double>(Clock::now() - start).count();
  }
  if (status.ok()) {
    Account(busy);
  } else {
    failed_.fetch_add(1, std::memory_order_acq_rel);
  }
  t.done(std::move(status));
}

void Link::Account(double seconds) {
  bytes_.fetch_add(bytes_per_transfer_, std::memory_order_acq_rel);
  transfers_.fetch_add(1, std::memory_order_acq_rel);
  busy_ns_.fetch_add(static_cast<uint64_t>(seconds * 1e9),
                     std::memory_order_acq_rel);
  if (counters_.bytes != nullptr) {
    counters_.bytes->Inc(static_cast<double>(bytes_per_transfer_));
  }
  if (counters_.busy_seconds != nullptr) counters_.busy_seconds->Inc(seconds);
}

}  // namespace moeserve::engine
