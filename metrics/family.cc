#include "metrics/family.h"

#include <typeinfo>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace moeserve::metrics {
namespace {

const char* TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

// Joins the child's labels with the bucket's `le` label.
std::string WithLe(const std::string& labels, const std::string& le) {
  return labels.empty() ? le : absl::StrCat(labels, ",", le);
}

}  // namespace

Family::Family(std::string name, std::string help, MetricType type,
               std::vector<std::string> label_names)
    : name_(std::move(name)),
      help_(std::move(help)),
      type_(type),
      label_names_(std::move(label_names)) {}

void Family::AppendTo(std::string* out) const {
  absl::StrAppend(out, "# HELP ", name_, " ");
  internal::AppendEscapedHelp(help_, out);
  absl::StrAppend(out, "\n# TYPE ", name_, " ", TypeName(type_), "\n");
  AppendSamples(out);
}

bool Family::SameShape(const Family& other) const {
  return typeid(*this) == typeid(other) && label_names_ == other.label_names_;
}

absl::Status Family::CheckArity(const std::vector<std::string>& values) const {
  if (values.size() == label_names_.size()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(name_, ": got ", values.size(),
                                                 " label values, expected ",
                                                 label_names_.size()));
}

CounterFamily::CounterFamily(std::string name, std::string help,
                             std::vector<std::string> label_names)
    : LabeledFamily(std::move(name), std::move(help), MetricType::kCounter,
                    std::move(label_names)) {
  CreateUnlabeledChild();
}

std::unique_ptr<Counter> CounterFamily::NewChild() const {
  return std::make_unique<Counter>();
}

void CounterFamily::AppendChild(const std::string& labels,
                                const Counter& metric, std::string* out) const {
  internal::AppendSample(name(), labels, metric.Value(), out);
}

GaugeFamily::GaugeFamily(std::string name, std::string help,
                         std::vector<std::string> label_names)
    : LabeledFamily(std::move(name), std::move(help), MetricType::kGauge,
                    std::move(label_names)) {
  CreateUnlabeledChild();
}

std::unique_ptr<Gauge> GaugeFamily::NewChild() const {
  return std::make_unique<Gauge>();
}

void GaugeFamily::AppendChild(const std::string& labels, const Gauge& metric,
                              std::string* out) const {
  internal::AppendSample(name(), labels, metric.Value(), out);
}

HistogramFamily::HistogramFamily(std::string name, std::string help,
                                 std::vector<std::string> label_names,
                                 std::vector<double> bounds)
    : LabeledFamily(std::move(name), std::move(help), MetricType::kHistogram,
                    std::move(label_names)),
      bounds_(std::make_shared<const std::vector<double>>(std::move(bounds))) {
  for (const double b : *bounds_) {
    le_labels_.push_back(absl::StrCat("le=\"", internal::FormatValue(b), "\""));
  }
  le_labels_.push_back("le=\"+Inf\"");
  CreateUnlabeledChild();
}

bool HistogramFamily::SameShape(const Family& other) const {
  return Family::SameShape(other) &&
         static_cast<const HistogramFamily&>(other).bounds() == bounds();
}

std::unique_ptr<Histogram> HistogramFamily::NewChild() const {
  return std::make_unique<Histogram>(bounds_);
}

void HistogramFamily::AppendChild(const std::string& labels,
                                  const Histogram& metric,
                                  std::string* out) const {
  const Histogram::Snapshot snap = metric.Collect();
  const std::string bucket = absl::StrCat(name(), "_bucket");
  for (size_t i = 0; i < snap.cumulative.size(); ++i) {
    internal::AppendSample(bucket, WithLe(labels, le_labels_[i]),
                           static_cast<double>(snap.cumulative[i]), out);
  }
  internal::AppendSample(absl::StrCat(name(), "_sum"), labels, snap.sum, out);
  internal::AppendSample(absl::StrCat(name(), "_count"), labels,
                         static_cast<double>(snap.count), out);
}

CallbackGaugeFamily::CallbackGaugeFamily(std::string name, std::string help,
                                         std::vector<std::string> label_names)
    : Family(std::move(name), std::move(help), MetricType::kGauge,
             std::move(label_names)) {}

absl::Status CallbackGaugeFamily::SetCallback(
    const std::vector<std::string>& label_values, std::function<double()> fn) {
  MOESERVE_RETURN_IF_ERROR(CheckArity(label_values));
  if (!fn) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": empty callback"));
  }
  std::string labels = internal::RenderLabels(label_names(), label_values);
  base::MutexLock lock(&mu_);
  callbacks_[label_values] = Entry{std::move(labels), std::move(fn)};
  return absl::OkStatus();
}

void CallbackGaugeFamily::RemoveCallback(
    const std::vector<std::string>& label_values) {
  base::MutexLock lock(&mu_);
  callbacks_.erase(label_values);
}

void CallbackGaugeFamily::AppendSamples(std::string* out) const {
  // Held while the callbacks run: that is what lets RemoveCallback()
  // guarantee no call is in flight once it returns.
  base::MutexLock lock(&mu_);
  for (const auto& [values, entry] : callbacks_) {
    internal::AppendSample(name(), entry.labels, entry.fn(), out);
  }
}

}  // namespace moeserve::metrics
