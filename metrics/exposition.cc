#include "metrics/exposition.h"

#include <charconv>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"

namespace moeserve::metrics::internal {
namespace {

bool IsAlpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Shared by metric and label names; only metric names may contain ':'.
bool IsValidName(absl::string_view name, bool allow_colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = IsAlpha(c) || c == '_' || (allow_colon && c == ':') ||
                    (i > 0 && IsDigit(c));
    if (!ok) return false;
  }
  return true;
}

bool IsReserved(absl::string_view name) {
  return name.size() >= 2 && name[0] == '_' && name[1] == '_';
}

}  // namespace

absl::Status ValidateMetricName(absl::string_view name) {
  if (!IsValidName(name, /*allow_colon=*/true) || IsReserved(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid metric name \"", name, "\""));
  }
  return absl::OkStatus();
}

absl::Status ValidateLabelNames(const std::vector<std::string>& names) {
  std::set<absl::string_view> seen;
  for (const std::string& name : names) {
    if (!IsValidName(name, /*allow_colon=*/false) || IsReserved(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid label name \"", name, "\""));
    }
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("duplicate label name \"", name, "\""));
    }
  }
  return absl::OkStatus();
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  // Integral values below 2^53 are exact; print them plainly rather than as
  // "1e+06", which the shortest form would pick.
  const bool integral = value == std::trunc(value) && std::fabs(value) < 9e15;
  const auto result = integral ? std::to_chars(buf, buf + sizeof(buf), value,
                                               std::chars_format::fixed)
                               : std::to_chars(buf, buf + sizeof(buf), value);
  return std::string(buf, result.ptr);
}

void AppendEscapedLabelValue(absl::string_view value, std::string* out) {
  for (const char c : value) {
    switch (c) {
      case '\\':
        out->append("\\\\");
        break;
      case '"':
        out->append("\\\"");
        break;
      case '\n':
        out->append("\\n");
        break;
      default:
        out->push_back(c);
    }
  }
}

void AppendEscapedHelp(absl::string_view help, std::string* out) {
  for (const char c : help) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '\n') {
      out->append("\\n");
    } else {
      out->push_back(c);
    }
  }
}

std::string RenderLabels(const std::vector<std::string>& names,
                         const std::vector<std::string>& values) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out.push_back(',');
    absl::StrAppend(&out, names[i], "=\"");
    AppendEscapedLabelValue(values[i], &out);
    out.push_back('"');
  }
  return out;
}

void AppendSample(absl::string_view name, absl::string_view labels,
                  double value, std::string* out) {
  out->append(name.data(), name.size());
  if (!labels.empty()) absl::StrAppend(out, "{", labels, "}");
  absl::StrAppend(out, " ", FormatValue(value), "\n");
}

}  // namespace moeserve::metrics::internal
