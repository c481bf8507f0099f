// Registry: the set of metric families one process exports, and their
// rendering in the Prometheus text exposition format 0.0.4.
//
// Usage:
//   Registry registry;
//   auto requests = registry.AddCounter("moeserve_expert_requests_total",
//                                       "Expert lookups.", {"policy",
//                                       "result"});
//   if (!requests.ok()) return requests.status();
//   absl::StatusOr<Counter*> hits = (*requests)->WithLabels({"lru", "hit"});
//   ...
//   (*hits)->Inc();                  // hot path: lock-free
//   std::string text = registry.Serialize();
//
// Ownership: the registry owns its families, and they own their children;
// every pointer handed out stays valid until the registry is destroyed.
// Families are never removed.
//
// Thread safety: all methods may be called concurrently. Lock order is
// registry, then family; callbacks run under their family's lock.
#ifndef MOESERVE_METRICS_REGISTRY_H_
#define MOESERVE_METRICS_REGISTRY_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/mutex.h"
#include "metrics/family.h"
#include "metrics/metric.h"

namespace moeserve::metrics {

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Each Add* validates the name ([a-zA-Z_:][a-zA-Z0-9_:]*) and label names
  // ([a-zA-Z_][a-zA-Z0-9_]*, unique), neither starting with "__", and returns
  // InvalidArgument when they are bad. Registering a name again with the same
  // kind and labels (and buckets) returns the existing family, whose help
  // text is kept; any other reuse of a name, including one that would clash
  // with a histogram's _bucket/_sum/_count series, is AlreadyExists.

  // REQUIRES of `name`: ends in "_total".
  absl::StatusOr<CounterFamily*> AddCounter(
      absl::string_view name, absl::string_view help,
      std::vector<std::string> label_names);

  absl::StatusOr<GaugeFamily*> AddGauge(absl::string_view name,
                                        absl::string_view help,
                                        std::vector<std::string> label_names);

  // A gauge whose values come from callbacks run at scrape time.
  absl::StatusOr<CallbackGaugeFamily*> AddCallbackGauge(
      absl::string_view name, absl::string_view help,
      std::vector<std::string> label_names);

  // REQUIRES: `bounds` finite and strictly increasing (may be empty: then
  // only the +Inf bucket); no label named "le".
  absl::StatusOr<HistogramFamily*> AddHistogram(
      absl::string_view name, absl::string_view help,
      std::vector<std::string> label_names, std::vector<double> bounds);

  // The whole registry in text format 0.0.4, families sorted by name and
  // children by label values. Families without children print only their
  // HELP and TYPE lines.
  std::string Serialize() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Inserts `family`, or returns the registered one of the same shape.
  template <typename F>
  absl::StatusOr<F*> Insert(std::unique_ptr<F> family);
  absl::StatusOr<Family*> InsertBase(std::unique_ptr<Family> family)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status CheckNoSuffixClash(const Family& family) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool IsHistogram(absl::string_view name) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable base::Mutex mu_;
  std::map<std::string, std::unique_ptr<Family>, std::less<>> families_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace moeserve::metrics

#endif  // MOESERVE_METRICS_REGISTRY_H_
