#include "engine/offload/link.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace moeserve::engine {

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

// ---------------------------------------------------------------- queueing

TransferId Link::Submit(ExpertId id, std::byte* dst, Done done,
                        kernels::Event* after, LinkLane lane, int priority) {
  TransferId tid;
  {
    base::MutexLock lock(&mu_);
    tid = Enqueue({id, dst, std::move(done), after, lane, priority});
  }
  queued_.Signal();
  return tid;
}

std::vector<TransferId> Link::SubmitBatch(std::vector<Request> requests) {
  std::vector<TransferId> ids;
  ids.reserve(requests.size());
  if (requests.empty()) return ids;
  {
    base::MutexLock lock(&mu_);
    for (Request& r : requests) ids.push_back(Enqueue(std::move(r)));
  }
  if (ids.size() == 1) {
    queued_.Signal();
  } else {
    queued_.SignalAll();
  }
  return ids;
}

TransferId Link::Enqueue(Request r) {
  const TransferId tid = next_id_++;
  Transfer& t = pending_[tid];
  t.id = r.id;
  t.dst = r.dst;
  t.done = std::move(r.done);
  t.after = r.after;
  t.lane = r.lane;
  t.priority = r.lane == LinkLane::kPrefetch ? r.priority : 0;
  EnqueueInLane(tid, t);
  return tid;
}

void Link::EnqueueInLane(TransferId tid, Transfer& t) {
  t.seq = next_seq_++;
  if (t.lane == LinkLane::kDemand) {
    demand_.insert({t.seq, tid});
  } else {
    prefetch_.insert({-t.priority, t.seq, tid});
  }
}

bool Link::PopNext(Transfer* out) {
  TransferId tid;
  if (!demand_.empty()) {
    tid = demand_.begin()->second;
    demand_.erase(demand_.begin());
  } else if (!prefetch_.empty()) {
    tid = std::get<2>(*prefetch_.begin());
    prefetch_.erase(prefetch_.begin());
  } else {
    return false;
  }
  auto it = pending_.find(tid);
  *out = std::move(it->second);
  pending_.erase(it);
  return true;
}

bool Link::Cancel(TransferId tid) {
  Done done;
  {
    base::MutexLock lock(&mu_);
    auto it = pending_.find(tid);
    if (it == pending_.end()) return false;
    Transfer& t = it->second;
    if (t.lane == LinkLane::kDemand) {
      demand_.erase({t.seq, tid});
    } else {
      prefetch_.erase({-t.priority, t.seq, tid});
    }
    done = std::move(t.done);
    pending_.erase(it);
    cancelled_.fetch_add(1, std::memory_order_acq_rel);
  }
  done(absl::CancelledError("link transfer cancelled before it started"));
  return true;
}

bool Link::Promote(TransferId tid) {
  base::MutexLock lock(&mu_);
  auto it = pending_.find(tid);
  if (it == pending_.end() || it->second.lane != LinkLane::kPrefetch) {
    return false;
  }
  Transfer& t = it->second;
  prefetch_.erase({-t.priority, t.seq, tid});
  t.lane = LinkLane::kDemand;
  t.priority = 0;
  EnqueueInLane(tid, t);
  return true;
}

int Link::queued_transfers() const {
  base::MutexLock lock(&mu_);
  return static_cast<int>(pending_.size());
}

double Link::busy_seconds() const {
  return static_cast<double>(busy_ns_.load(std::memory_order_acquire)) * 1e-9;
}

// ---------------------------------------------------------------- workers

void Link::WorkerLoop(int worker) {
  for (;;) {
    Transfer t;
    {
      base::MutexLock lock(&mu_);
      while (!stop_ && pending_.empty()) queued_.Wait(&mu_);
      if (!PopNext(&t)) return;  // Stopping, and drained.
      if (options_.emulated()) {
        // Take the shared wire from when it is free.
        const double s =
            options_.latency_us * 1e-6 +
            static_cast<double>(bytes_per_transfer_) / (options_.gbps * 1e9);
        t.wire_begin = std::max(Clock::now(), wire_free_);
        t.wire_end = t.wire_begin + std::chrono::ceil<Clock::duration>(
                                        std::chrono::duration<double>(s));
        wire_free_ = t.wire_end;
      }
    }
    Run(worker, t);
  }
}

void Link::Run(int worker, Transfer& t) {
  absl::StatusOr<double> moved = transport_->Move(worker, t.id, t.dst, t.after);
  absl::Status status = moved.status();
  if (absl::IsCancelled(status)) {  // CANCELLED means Cancel() only.
    status = absl::InternalError(
        absl::StrCat("link transport cancelled: ", status.message()));
  }
  double busy = moved.ok() ? *moved : 0;
  if (status.ok() && options_.emulated()) {
    std::this_thread::sleep_until(t.wire_end);
    Clock::time_point end = Clock::now();
    if (end > t.wire_end) {  // The real copy overran the emulated time.
      base::MutexLock lock(&mu_);
      wire_free_ = std::max(wire_free_, end);
    } else {
      end = t.wire_end;
    }
    // Emulated: the link was busy while this transfer held the wire.
    busy = std::chrono::duration<double>(end - t.wire_begin).count();
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
