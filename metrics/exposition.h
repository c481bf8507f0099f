// Text helpers for the Prometheus text exposition format 0.0.4: name
// validation, escaping and number formatting. Internal to metrics/; the
// registry and its families are the only callers. All functions are pure and
// thread-safe.
#ifndef MOESERVE_METRICS_EXPOSITION_H_
#define MOESERVE_METRICS_EXPOSITION_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace moeserve::metrics::internal {

// OK when `name` matches [a-zA-Z_:][a-zA-Z0-9_:]* and does not start with
// "__" (reserved for Prometheus itself).
absl::Status ValidateMetricName(absl::string_view name);

// OK when every name matches [a-zA-Z_][a-zA-Z0-9_]*, does not start with "__"
// and appears once.
absl::Status ValidateLabelNames(const std::vector<std::string>& names);

// Formats a sample value or bucket bound so that Prometheus parses it back to
// the same double: integral values without exponent ("1000000"), others in
// the shortest round-trip form ("0.25", "1e-09"), and "+Inf", "-Inf", "NaN".
std::string FormatValue(double value);

// Appends `value` with `\`, `"` and newline escaped, as label values need.
void AppendEscapedLabelValue(absl::string_view value, std::string* out);

// Appends `help` with `\` and newline escaped, as # HELP lines need.
void AppendEscapedHelp(absl::string_view help, std::string* out);

// Renders `a="x",b="y"` (no braces) in the order of `names`.
// REQUIRES: names.size() == values.size().
std::string RenderLabels(const std::vector<std::string>& names,
                         const std::vector<std::string>& values);

// Appends one sample line: `name{labels} value\n`, or `name value\n` when
// `labels` (already rendered) is empty.
void AppendSample(absl::string_view name, absl::string_view labels,
                  double value, std::string* out);

}  // namespace moeserve::metrics::internal

#endif  // MOESERVE_METRICS_EXPOSITION_H_
