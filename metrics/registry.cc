#include "metrics/registry.h"

#include <cmath>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "metrics/exposition.h"

namespace moeserve::metrics {
namespace {

constexpr absl::string_view kHistogramSuffixes[] = {"_bucket", "_sum",
                                                    "_count"};

absl::Status ValidateNames(absl::string_view name,
                           const std::vector<std::string>& label_names) {
  MOESERVE_RETURN_IF_ERROR(internal::ValidateMetricName(name));
  absl::Status s = internal::ValidateLabelNames(label_names);
  if (!s.ok())
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", s.message()));
  return absl::OkStatus();
}

absl::Status ValidateHistogram(absl::string_view name,
                               const std::vector<std::string>& label_names,
                               const std::vector<double>& bounds) {
  for (const std::string& label : label_names) {
    if (label == "le") {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": label \"le\" is reserved for buckets"));
    }
  }
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i]) || (i > 0 && !(bounds[i - 1] < bounds[i]))) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": bucket bounds must be finite and strictly increasing"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CounterFamily*> Registry::AddCounter(
    absl::string_view name, absl::string_view help,
    std::vector<std::string> label_names) {
  MOESERVE_RETURN_IF_ERROR(ValidateNames(name, label_names));
  if (!absl::EndsWith(name, "_total")) {
    return absl::InvalidArgumentError(
        absl::StrCat("counter name \"", name, "\" must end in _total"));
  }
  return Insert(std::make_unique<CounterFamily>(
      std::string(name), std::string(help), std::move(label_names)));
}

absl::StatusOr<GaugeFamily*> Registry::AddGauge(
    absl::string_view name, absl::string_view help,
    std::vector<std::string> label_names) {
  MOESERVE_RETURN_IF_ERROR(ValidateNames(name, label_names));
  return Insert(std::make_unique<GaugeFamily>(
      std::string(name), std::string(help), std::move(label_names)));
}

absl::StatusOr<CallbackGaugeFamily*> Registry::AddCallbackGauge(
    absl::string_view name, absl::string_view help,
    std::vector<std::string> label_names) {
  MOESERVE_RETURN_IF_ERROR(ValidateNames(name, label_names));
  return Insert(std::make_unique<CallbackGaugeFamily>(
      std::string(name), std::string(help), std::move(label_names)));
}

absl::StatusOr<HistogramFamily*> Registry::AddHistogram(
    absl::string_view name, absl::string_view help,
    std::vector<std::string> label_names, std::vector<double> bounds) {
  MOESERVE_RETURN_IF_ERROR(ValidateNames(name, label_names));
  MOESERVE_RETURN_IF_ERROR(ValidateHistogram(name, label_names, bounds));
  return Insert(std::make_unique<HistogramFamily>(
      std::string(name), std::string(help), std::move(label_names),
      std::move(bounds)));
}

std::string Registry::Serialize() const {
  std::string out;
  base::MutexLock lock(&mu_);
  for (const auto& [name, family] : families_) family->AppendTo(&out);
  return out;
}

template <typename F>
absl::StatusOr<F*> Registry::Insert(std::unique_ptr<F> family) {
  MOESERVE_ASSIGN_OR_RETURN(Family * inserted, InsertBase(std::move(family)));
  // InsertBase only returns a family of the same concrete type (SameShape).
  return static_cast<F*>(inserted);
}

absl::StatusOr<Family*> Registry::InsertBase(std::unique_ptr<Family> family) {
  base::MutexLock lock(&mu_);
  auto it = families_.find(family->name());
  if (it != families_.end()) {
    if (it->second->SameShape(*family)) return it->second.get();
    return absl::AlreadyExistsError(absl::StrCat(
        "metric \"", family->name(), "\" already registered differently"));
  }
  MOESERVE_RETURN_IF_ERROR(CheckNoSuffixClash(*family));
  Family* raw = family.get();
  families_.emplace(raw->name(), std::move(family));
  return raw;
}

bool Registry::IsHistogram(absl::string_view name) const {
  auto it = families_.find(name);
  return it != families_.end() && it->second->type() == MetricType::kHistogram;
}

// A histogram "h" owns the series h_bucket, h_sum and h_count; no other
// family may use those names, in either registration order.
absl::Status Registry::CheckNoSuffixClash(const Family& family) const {
  const absl::string_view name = family.name();
  for (const absl::string_view suffix : kHistogramSuffixes) {
    const bool owned_by_histogram =
        absl::EndsWith(name, suffix) &&
        IsHistogram(name.substr(0, name.size() - suffix.size()));
    const bool owns_existing = family.type() == MetricType::kHistogram &&
                               families_.contains(absl::StrCat(name, suffix));
    if (owned_by_histogram || owns_existing) {
      return absl::AlreadyExistsError(absl::StrCat(
          "metric \"", name, "\" clashes with a histogram's series"));
    }
  }
  return absl::OkStatus();
}

}  // namespace moeserve::metrics
