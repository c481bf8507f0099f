// The three metric kinds a family holds one of per label set: Counter, Gauge
// and Histogram. Their update methods are the hot path: lock-free (relaxed
// atomics), allocation-free and safe to call from any number of threads.
// Instances are created and owned by their family (see family.h); callers
// keep the raw pointer the family hands out, which stays valid for the
// family's lifetime.
#ifndef MOESERVE_METRICS_METRIC_H_
#define MOESERVE_METRICS_METRIC_H_

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

namespace moeserve::metrics {

namespace internal {

// A double updated with compare-and-swap on its bit pattern, so concurrent
// Add()s never lose an update.
class AtomicDouble {
 public:
  double Load() const {
    return std::bit_cast<double>(bits_.load(std::memory_order_relaxed));
  }
  void Store(double v) {
    bits_.store(std::bit_cast<uint64_t>(v), std::memory_order_relaxed);
  }
  void Add(double delta) {
    uint64_t old = bits_.load(std::memory_order_relaxed);
    while (!bits_.compare_exchange_weak(
        old, std::bit_cast<uint64_t>(std::bit_cast<double>(old) + delta),
        std::memory_order_relaxed)) {
    }
  }

 private:
  std::atomic<uint64_t> bits_{0};  // bit pattern of +0.0
};

}  // namespace internal

// A value that only goes up (requests, bytes, seconds busy).
class Counter {
 public:
  // Adds `v`. Returns false and leaves the counter unchanged when `v` is
  // negative or NaN: a counter that went down would read as a reset.
  bool Inc(double v = 1) {
    if (!(v >= 0)) return false;
    value_.Add(v);
    return true;
  }
  double Value() const { return value_.Load(); }

 private:
  internal::AtomicDouble value_;
};

// A value that goes up and down (queue length, bytes resident).
class Gauge {
 public:
  void Set(double v) { value_.Store(v); }
  void Inc(double v = 1) { value_.Add(v); }
  void Dec(double v = 1) { value_.Add(-v); }
  double Value() const { return value_.Load(); }

 private:
  internal::AtomicDouble value_;
};

// Counts observations into fixed buckets (upper bounds inclusive, "le") plus
// an implicit +Inf bucket, and keeps their sum.
class Histogram {
 public:
  // Cumulative view taken at scrape time. Buckets are read one by one, so a
  // snapshot racing with Observe() may be off by in-flight observations, but
  // `count` always equals the +Inf bucket.
  struct Snapshot {
    std::vector<uint64_t> cumulative;  // bounds().size() + 1 entries
    double sum = 0;
    uint64_t count = 0;
  };

  // REQUIRES: `bounds` finite and strictly increasing (the registry checks).
  explicit Histogram(std::shared_ptr<const std::vector<double>> bounds);

  // NaN lands in the +Inf bucket only (and makes the sum NaN).
  void Observe(double v) {
    const std::vector<double>& b = *bounds_;
    const size_t i = std::isnan(v)
                         ? b.size()
                         : std::lower_bound(b.begin(), b.end(), v) - b.begin();
    counts_[i].fetch_add(1, std::memory_order_relaxed);
    sum_.Add(v);
  }

  Snapshot Collect() const;
  const std::vector<double>& bounds() const { return *bounds_; }

 private:
  std::shared_ptr<const std::vector<double>> bounds_;  // shared by the family
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;    // per bucket, not cum.
  internal::AtomicDouble sum_;
};

// Bucket bounds in seconds for request and token latencies: 1 ms to 60 s,
// roughly 1-2.5-5 per decade.
std::vector<double> DefaultLatencyBuckets();

}  // namespace moeserve::metrics

#endif  // MOESERVE_METRICS_METRIC_H_
