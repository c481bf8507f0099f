// Metric families: one name, one help text, one type, a fixed list of label
// names, and one child metric per distinct list of label values.
//
// Families are created and owned by a Registry (registry.h) and live as long
// as it does. Children are created on first use by WithLabels() and never
// removed, so the pointers it returns stay valid for the registry's lifetime;
// look them up once, outside hot loops, and update them lock-free.
//
// Thread safety: every method may be called from any thread. Child lookup and
// scraping take the family's mutex; updating a child takes none.
#ifndef MOESERVE_METRICS_FAMILY_H_
#define MOESERVE_METRICS_FAMILY_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "base/status_macros.h"
#include "metrics/exposition.h"
#include "metrics/metric.h"

namespace moeserve::metrics {

enum class MetricType { kCounter, kGauge, kHistogram };

// What every family shares; the registry sees families only through this.
class Family {
 public:
  Family(const Family&) = delete;
  Family& operator=(const Family&) = delete;
  virtual ~Family() = default;

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  MetricType type() const { return type_; }
  const std::vector<std::string>& label_names() const { return label_names_; }

  // Appends # HELP, # TYPE and every sample in text format 0.0.4.
  void AppendTo(std::string* out) const;

  // True when a registration of `other` may return this family instead:
  // same concrete kind and label names (and bucket bounds for histograms).
  virtual bool SameShape(const Family& other) const;

 protected:
  Family(std::string name, std::string help, MetricType type,
         std::vector<std::string> label_names);

  // InvalidArgument unless there is one value per label name.
  absl::Status CheckArity(const std::vector<std::string>& values) const;

  virtual void AppendSamples(std::string* out) const = 0;

 private:
  const std::string name_;
  const std::string help_;
  const MetricType type_;
  const std::vector<std::string> label_names_;
};

// A family whose children are metric objects of type T, updated by callers.
template <typename T>
class LabeledFamily : public Family {
 public:
  // Returns the child for `label_values` (one per label name, in declared
  // order), creating it on first use. InvalidArgument on wrong arity.
  absl::StatusOr<T*> WithLabels(const std::vector<std::string>& label_values)
      ABSL_LOCKS_EXCLUDED(mu_) {
    MOESERVE_RETURN_IF_ERROR(CheckArity(label_values));
    base::MutexLock lock(&mu_);
    auto [it, inserted] = children_.try_emplace(label_values);
    if (inserted) {
      it->second.labels = internal::RenderLabels(label_names(), label_values);
      it->second.metric = NewChild();
    }
    return it->second.metric.get();
  }

 protected:
  using Family::Family;

  // A family without labels has exactly one child; create it up front so it
  // is exported (as 0) before its first update. Call from the final
  // constructor, where NewChild() is already overridden.
  void CreateUnlabeledChild() {
    if (label_names().empty()) (void)WithLabels({});
  }

  virtual std::unique_ptr<T> NewChild() const = 0;
  // `labels` is the rendered label list without braces, maybe empty.
  virtual void AppendChild(const std::string& labels, const T& metric,
                           std::string* out) const = 0;

  void AppendSamples(std::string* out) const override ABSL_LOCKS_EXCLUDED(mu_) {
    base::MutexLock lock(&mu_);
    for (const auto& [values, child] : children_) {
      AppendChild(child.labels, *child.metric, out);
    }
  }

 private:
  struct Child {
    std::string labels;  // rendered once: scrapes should not re-escape
    std::unique_ptr<T> metric;
  };

  mutable base::Mutex mu_;
  // Ordered by label values so the exposition is deterministic.
  std::map<std::vector<std::string>, Child> children_ ABSL_GUARDED_BY(mu_);
};

class CounterFamily final : public LabeledFamily<Counter> {
 public:
  CounterFamily(std::string name, std::string help,
                std::vector<std::string> label_names);

 private:
  std::unique_ptr<Counter> NewChild() const override;
  void AppendChild(const std::string& labels, const Counter& metric,
                   std::string* out) const override;
};

class GaugeFamily final : public LabeledFamily<Gauge> {
 public:
  GaugeFamily(std::string name, std::string help,
              std::vector<std::string> label_names);

 private:
  std::unique_ptr<Gauge> NewChild() const override;
  void AppendChild(const std::string& labels, const Gauge& metric,
                   std::string* out) const override;
};

class HistogramFamily final : public LabeledFamily<Histogram> {
 public:
  // REQUIRES: `bounds` finite and strictly increasing; no label named "le".
  HistogramFamily(std::string name, std::string help,
                  std::vector<std::string> label_names,
                  std::vector<double> bounds);

  const std::vector<double>& bounds() const { return *bounds_; }
  bool SameShape(const Family& other) const override;

 private:
  std::unique_ptr<Histogram> NewChild() const override;
  void AppendChild(const std::string& labels, const Histogram& metric,
                   std::string* out) const override;

  std::shared_ptr<const std::vector<double>> bounds_;
  std::vector<std::string> le_labels_;  // `le="0.5"`, ..., `le="+Inf"`
};

// A gauge family whose values are computed at scrape time (queue lengths,
// cache occupancy read from their owner).
class CallbackGaugeFamily final : public Family {
 public:
  CallbackGaugeFamily(std::string name, std::string help,
                      std::vector<std::string> label_names);

  // Installs (or replaces) the callback for `label_values`. `fn` runs on the
  // scraping thread while the family's mutex is held: it must be thread-safe
  // and must not call into this registry. InvalidArgument on wrong arity or
  // an empty `fn`.
  absl::Status SetCallback(const std::vector<std::string>& label_values,
                           std::function<double()> fn) ABSL_LOCKS_EXCLUDED(mu_);

  // Removes the callback for `label_values`, if any. Once this returns the
  // callback is not running and will not run again, so its captures may be
  // destroyed. Do not call it while holding a lock the callback takes.
  void RemoveCallback(const std::vector<std::string>& label_values)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    std::string labels;
    std::function<double()> fn;
  };

  void AppendSamples(std::string* out) const override ABSL_LOCKS_EXCLUDED(mu_);

  mutable base::Mutex mu_;
  std::map<std::vector<std::string>, Entry> callbacks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moeserve::metrics

#endif  // MOESERVE_METRICS_FAMILY_H_
